"""``transformer tm``: import, export, list, stats and review on the command line.

A mistake is one line on standard error and exit status 2, with the memory as it was; a review
killed with SIGKILL leaves the file consistent, each decision made before it kept whole.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from memory_helpers import assert_counts_true

from transformer.memory import STATUSES, TranslationMemory
from transformer.memory import cli as tm_cli
from transformer.memory.cli_args import STATUS_CHOICES

ROOT = Path(__file__).resolve().parents[1]
PAIRS = [("Je suis étudiant.", "I am a student."), ("Le chat dort.", "The cat sleeps."),
         ("Nous allons manger.", "We are going to eat.")]


def tm(*argv: str) -> list[str]:
    return ["tm", *argv]


@pytest.fixture
def pairs(tmp_path) -> Path:
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    return path


@pytest.fixture
def memory(tmp_path, pairs, cli) -> Path:
    """A memory of PAIRS, imported pending (entries 1 to 3)."""
    path = tmp_path / "memory.db"
    assert cli(*tm("import", str(pairs), "--tm", str(path), "--src-lang", "fr", "--tgt-lang", "en")).returncode == 0
    return path


def snapshot(path: Path) -> list[tuple]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT id, source, target, status, updated FROM entries ORDER BY id").fetchall()


def test_the_parser_knows_the_memory_statuses():
    assert STATUS_CHOICES == STATUSES


def test_import_list_review_export_round_trip(memory, tmp_path, cli):
    status, out, _ = cli(*tm("list", "--tm", str(memory)))
    assert status == 0 and out.splitlines() == [f"{i}\tpending\tfr-en\timport\t{s}\t{t}"
                                                 for i, (s, t) in enumerate(PAIRS, 1)]
    assert cli(*tm("review", "--tm", str(memory), "--accept", "1", "3", "--reject", "2"))[0] == 0
    status, out, _ = cli(*tm("list", "--tm", str(memory), "--status", "accepted", "--pair", "fr-en", "--json"))
    assert [json.loads(line)["id"] for line in out.splitlines()] == [1, 3]
    assert cli(*tm("list", "--tm", str(memory), "--pair", "en-fr"))[1] == ""
    assert cli(*tm("list", "--tm", str(memory), "--limit", "1", "--offset", "1"))[1].startswith("2\trejected")

    status, out, _ = cli(*tm("export", "--tm", str(memory), str(tmp_path / "out.tsv"), "--pair", "fr-en"))
    assert status == 0 and "exported 2 entries" in out
    assert (tmp_path / "out.tsv").read_text(encoding="utf-8") == "".join(f"{s}\t{t}\n" for s, t in (PAIRS[0], PAIRS[2]))
    assert cli(*tm("export", "--tm", str(memory), str(tmp_path / "all.tmx"), "--status", "all"))[0] == 0
    again = tmp_path / "again.db"
    status, out, _ = cli(*tm("import", str(tmp_path / "all.tmx"), "--tm", str(again), "--src-lang", "fr",
                                     "--tgt-lang", "en", "--accept"))
    assert status == 0 and "3 entries added as accepted" in out
    with TranslationMemory(again) as copy:
        assert [(e.source, e.target, e.status) for e in copy.entries()] == [(s, t, "accepted") for s, t in PAIRS]


def test_an_import_twice_adds_nothing_and_the_stats_count_by_pair_status_and_origin(memory, pairs, cli):
    status, out, _ = cli(*tm("import", str(pairs), "--tm", str(memory), "--src-lang", "fr", "--tgt-lang",
                                     "en", "--accept"))
    assert status == 0 and "0 entries added" in out and "3 duplicates" in out
    with TranslationMemory(memory) as store:
        store.add("Bonjour.", "Hello.", "fr", "en", origin="suggestion", status="pending")
    status, out, _ = cli(*tm("stats", "--tm", str(memory), "--json"))
    found = json.loads(out)
    assert found["entries"] == 4 and found["size_bytes"] > 0
    assert found["pairs"] == [{"source_lang": "fr", "target_lang": "en", "pending": 4}]
    assert found["origins"] == {"import": {"pending": 3}, "suggestion": {"pending": 1}}
    assert [(i["added"], i["duplicates"]) for i in found["imports"]] == [(3, 0), (0, 3)]
    status, out, _ = cli(*tm("stats", "--tm", str(memory)))
    assert status == 0 and "4 entries" in out and "by origin:" in out and "suggestion" in out


def test_a_big_import_says_its_progress(tmp_path, cli, monkeypatch):
    monkeypatch.setattr(tm_cli, "PROGRESS_EVERY", 0.0)
    big = tmp_path / "big.tsv"
    big.write_text("".join(f"Phrase numéro {i}.\tSentence number {i}.\n" for i in range(2500)), encoding="utf-8")
    status, out, err = cli(*tm("import", str(big), "--tm", str(tmp_path / "m.db"), "--src-lang", "fr",
                                       "--tgt-lang", "en"))
    assert status == 0 and "2,500 entries added as pending" in out
    assert [line.split(": ")[2].split(" units")[0] for line in err.splitlines()] == ["1,000", "2,000", "2,500"]
    assert cli(*tm("import", str(big), "--tm", str(tmp_path / "n.db"), "--src-lang", "fr", "--tgt-lang", "en",
                           "--no-progress"))[2] == ""


@pytest.mark.parametrize("argv, message", [
    (["list", "--tm", "{missing}"], "no translation memory at"),
    (["stats", "--tm", "{corrupt}"], "is not a translation memory"),
    (["review", "--tm", "{memory}", "--accept", "1", "99"], "no entry 99"),
    (["review", "--tm", "{memory}", "--accept", "1", "--reject", "1"], "both in --accept and --reject"),
    (["review", "--tm", "{memory}"], "needs a terminal"),
    (["list", "--tm", "{memory}", "--pair", "fr-e_n"], "is not a language code"),
    (["list", "--tm", "{memory}", "--pair", "pt-br-en"], "--pair takes two language codes"),
    (["list", "--tm", "{memory}", "--limit", "-1"], "--limit and --offset must be >= 0"),
    (["list", "--tm", "{memory}", "--status", "maybe"], "unknown status 'maybe'; one of pending, accepted, rejected"),
    (["export", "--tm", "{memory}", "{tmp}/out.tmx", "--status", "done"], "unknown status 'done'"),
    (["export", "--tm", "{memory}", "{tmp}/out.csv"], "suffix says its format"),
    (["export", "--tm", "{memory}", "{tmp}/out.tsv"], "one language pair"),
    (["export", "--tm", "{memory}", "{tmp}/existing.tmx"], "exists: give --overwrite"),
    (["import", "{broken}", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en"], "broken.tmx:3: not well-formed"),
    (["import", "{entities}", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en"], "entit"),
    (["import", "{badline}", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en"], "bad.tsv:2: 3 columns"),
    (["import", "{pairs}", "--tm", "{memory}", "--src-lang", "f r", "--tgt-lang", "en"], "is not a language code"),
    (["import", "{tmp}/none.tmx", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en"], "no such file"),
    (["import", "{tmp}/pairs.csv", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en"], "--format"),
    (["import", "{huge}", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en"], "huge.tsv:1: a line longer"),
    (["import", "{huge}", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en", "--format", "tmx"],
     "huge.tsv:1: not well-formed"),
    (["import", "{pairs}", "--tm", "{memory}", "--src-lang", "fr", "--tgt-lang", "en", "--timeout", "nan"],
     "--timeout must be"),
])
def test_a_mistake_is_one_line_and_leaves_the_memory_as_it_was(argv, message, memory, pairs, tmp_path, cli):
    (tmp_path / "corrupt.db").write_bytes(b"not a database at all" * 100)
    (tmp_path / "existing.tmx").write_text("keep me")
    (tmp_path / "pairs.csv").write_text("a,b\n")
    (tmp_path / "broken.tmx").write_text('<tmx version="1.4"><header srclang="fr"/><body>\n<tu><tuv xml:lang="fr">'
                                         '<seg>Un.</seg></tuv><tuv xml:lang="en"><seg>One.</seg></tuv></tu>\n'
                                         '<tu><tuv xml:lang="fr"><seg>Deux.</tuv></tu></body></tmx>\n')
    (tmp_path / "entities.tmx").write_text('<?xml version="1.0"?><!DOCTYPE tmx [<!ENTITY a "aaaaaaaaaa">]>'
                                           '<tmx><body><tu><tuv xml:lang="fr"><seg>&a;</seg></tuv></tu></body></tmx>')
    (tmp_path / "bad.tsv").write_text("Un.\tOne.\nDeux.\tTwo.\tThree.\n")
    with open(tmp_path / "huge.tsv", "wb") as file:  # 10 GB of zero bytes, sparse: refused at its first line
        file.truncate(10 * 1024**3)
    names = {"missing": tmp_path / "missing.db", "corrupt": tmp_path / "corrupt.db", "memory": memory,
             "pairs": pairs, "tmp": tmp_path, **{n: tmp_path / f"{n}.{'tsv' if n in ('badline', 'huge') else 'tmx'}"
                                                 for n in ("broken", "entities", "huge")}, "badline": tmp_path / "bad.tsv"}
    before = snapshot(memory)
    status, out, err = cli(*tm(*(a.format(**names) for a in argv)))
    assert status == 2 and out == "" and err.count("\n") == 1 and err.startswith("transformer tm: error: "), err
    assert message in err, err
    assert snapshot(memory) == before
    assert not (tmp_path / "missing.db").exists()
    assert (tmp_path / "existing.tmx").read_text() == "keep me"


def test_a_failed_import_into_a_new_memory_leaves_no_file(tmp_path, cli):
    broken = tmp_path / "broken.tmx"
    broken.write_text('<tmx><body><tu><tuv xml:lang="fr"><seg>Un.</seg></tuv>')
    status, _, err = cli(*tm("import", str(broken), "--tm", str(tmp_path / "new.db"), "--src-lang", "fr",
                                     "--tgt-lang", "en"))
    assert status == 2 and "not well-formed" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["broken.tmx"]


def test_a_locked_memory_is_refused_after_the_timeout(memory, cli):
    before = snapshot(memory)
    holder = sqlite3.connect(memory, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process's write under way
    try:
        start = time.monotonic()
        status, _, err = cli(*tm("review", "--tm", str(memory), "--accept", "1", "--timeout", "0.2"))
        # It waited its --timeout 0.2, not the default 5 s: that wait would take at least 5 s, so the
        # bound leaves a slow machine the whole difference.
        assert 0.15 < time.monotonic() - start < 5
    finally:
        holder.rollback()
        holder.close()
    assert status == 2 and err.count("\n") == 1 and "is busy" in err, err
    assert snapshot(memory) == before


def test_accept_all_pending_takes_the_pair_given(memory, cli):
    with TranslationMemory(memory) as store:
        other = store.add("Hello.", "Bonjour.", "en", "fr")
    status, out, _ = cli(*tm("review", "--tm", str(memory), "--accept-all-pending", "--pair", "fr-en"))
    assert status == 0 and "accepted 3 pending entries" in out
    with TranslationMemory(memory) as store:
        assert [e.status for e in store.entries()] == ["accepted"] * 3 + ["pending"]
        assert store.get(other.id).status == "pending"


def _tm_process(argv: list[str], **kwargs) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "transformer.cli", "tm", *argv], cwd=ROOT, **kwargs)


def test_an_interactive_review_takes_a_key_per_entry(memory):
    master, slave = pty.openpty()
    review = _tm_process(["review", "--tm", str(memory)], stdin=slave, stdout=slave, stderr=slave)
    os.close(slave)
    shown = b""

    def read_until(text: bytes) -> None:
        nonlocal shown
        deadline = time.monotonic() + 60
        while text not in shown and time.monotonic() < deadline:
            if select.select([master], [], [], 1)[0]:
                shown += os.read(master, 4096)
        assert text in shown, shown.decode(errors="replace")

    for number, key in ((1, b"r"), (2, b"s"), (3, b"a")):
        read_until(f"[{number} of 3]".encode())
        read_until(b"q quit: ")
        shown = shown[shown.index(b"q quit: ") + 1:]
        os.write(master, key)
    read_until(b"accepted 1, rejected 1, skipped 1")
    assert review.wait(timeout=60) == 0
    os.close(master)
    with TranslationMemory(memory) as store:
        assert [e.status for e in store.entries()] == ["rejected", "pending", "accepted"]


def test_a_killed_review_leaves_the_memory_consistent(tmp_path):
    path = tmp_path / "memory.db"
    count = 3000
    with TranslationMemory(path) as store:
        store.import_pairs(((f"Phrase {i} du texte.", f"Sentence {i} of the text.") for i in range(count)), "fr", "en",
                           status="pending")
    review = _tm_process(["review", "--tm", str(path), "--accept-all-pending"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    with TranslationMemory(path) as watcher:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and watcher.stats().counts.get(("fr", "en"), {}).get("accepted", 0) < 50:
            time.sleep(0.01)
    os.kill(review.pid, signal.SIGKILL)
    out, err = review.communicate(timeout=30)
    assert review.returncode == -signal.SIGKILL and "accepted" not in out, err
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with TranslationMemory(path) as store:
        assert_counts_true(store)
        statuses = [e.status for e in store.entries(limit=count)]
        accepted = statuses.count("accepted")
        assert 50 <= accepted < count and statuses == ["accepted"] * accepted + ["pending"] * (count - accepted)
        probe = store.entries(status="accepted", limit=1)[0]
        assert store.lookup(probe.source, "fr", "en") == probe

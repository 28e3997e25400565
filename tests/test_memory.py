"""The translation memory's store (transformer/memory/store.py): entries' round trips, exact and
fuzzy lookup, statuses, imports, refusals, and several processes sharing one file (writing at
once; killed in the middle of an import). The files' formats: tests/test_memory_files.py."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from memory_helpers import assert_counts_true

from transformer.errors import UserError
from transformer.memory import (Match, TMBusyError, TMError, TMFormatError, TranslationMemory, identity,
                                normalise)
from transformer.memory.database import APPLICATION_ID, SCHEMA_VERSION
from transformer.memory.store import DEFAULT_TIMEOUT

ROOT = Path(__file__).resolve().parents[1]

SENTENCES = [
    ("Save the file before closing the window.", "Enregistrez le fichier avant de fermer la fenêtre."),
    ("The printer on the second floor is out of paper.", "L'imprimante du deuxième étage n'a plus de papier."),
    ("Please restart the computer after the update.", "Veuillez redémarrer l'ordinateur après la mise à jour."),
    ("My grandmother grows tomatoes in her garden.", "Ma grand-mère cultive des tomates dans son jardin."),
    ("Click the blue button to send the message.", "Cliquez sur le bouton bleu pour envoyer le message."),
]


class Clock:
    """A clock the test moves: each call one second later."""

    def __init__(self) -> None:
        self.now = 1_780_000_000.0

    def __call__(self) -> float:
        self.now += 1
        return self.now


@pytest.fixture
def tm(tmp_path):
    with TranslationMemory(tmp_path / "memory.db", clock=Clock()) as memory:
        yield memory


def filled(tm: TranslationMemory, status: str = "accepted") -> list:
    return [tm.add(source, target, "en", "fr", origin="reviewer", status=status) for source, target in SENTENCES]


# ------------------------------------------------------------------------------------ the entries
def test_an_entry_round_trips_through_the_file(tmp_path):
    path = tmp_path / "memory.db"
    with TranslationMemory(path, clock=lambda: 1_780_000_000.25) as tm:
        added = tm.add("  Hello,\n world! ", "Bonjour, le monde !", "EN", "fr_FR", origin="reviewer",
                       status="accepted", who=identity(api_key="secret-key"))
    assert added.source == "  Hello,\n world! " and added.target == "Bonjour, le monde !"
    assert (added.source_lang, added.target_lang, added.origin, added.status) == ("en", "fr-fr", "reviewer", "accepted")
    assert added.created == added.updated == "2026-05-28T20:26:40.250Z"
    assert added.who.startswith("key:") and "secret" not in added.who and len(added.who) == 20
    with TranslationMemory(path) as again:
        assert again.get(added.id) == added
        assert again.entries() == [added]
        assert again.lookup("Hello, world!", "en", "fr-FR") == added


def test_identity_hashes_a_key_and_names_a_client():
    assert identity(api_key="k1") == identity(api_key="k1") != identity(api_key="k2")
    assert identity(client="203.0.113.9") == "client:203.0.113.9"
    assert identity(api_key="k1", client="203.0.113.9").startswith("key:")
    assert identity() is None


def test_normalise_folds_whitespace_and_unicode_forms():
    assert normalise(" a\t\u00a0b\n\nc ") == "a b c"
    assert normalise("Cafe\u0301") == normalise("Café") == "Café"


def test_bad_input_is_refused_in_one_line(tm):
    cases = [
        (dict(source="a\x00b"), "control character"),
        (dict(source="   "), "empty"),
        (dict(target="x" * 10_001), "10001 characters long"),
        (dict(source="\ud800"), "not valid Unicode"),
        (dict(source_lang="english"), "not a language code"),
        (dict(status="maybe"), "unknown status"),
        (dict(origin="robot"), "unknown origin"),
        (dict(who="a\nb"), "who must be printable"),
    ]
    for change, message in cases:
        arguments = dict(source="Hello.", target="Bonjour.", source_lang="en", target_lang="fr") | change
        with pytest.raises(TMError, match=message) as caught:
            tm.add(**arguments)
        assert isinstance(caught.value, UserError) and "\n" not in str(caught.value)
    assert tm.stats().total == 0
    with pytest.raises(TMError, match="no entry 42"):
        tm.accept(42)


def test_statuses_decide_what_is_found(tm):
    entry = tm.add("Save the file.", "Enregistrez le fichier.", "en", "fr")
    assert entry.status == "pending" and entry.origin == "suggestion"
    assert tm.lookup("Save the file.", "en", "fr") is None
    assert tm.search("Save the file.", "en", "fr") == []
    accepted = tm.accept(entry.id, target="Enregistrez le fichier !")
    assert accepted.status == "accepted" and accepted.target == "Enregistrez le fichier !"
    assert accepted.updated > accepted.created
    assert tm.lookup("Save the file.", "en", "fr") == accepted
    rejected = tm.reject(entry.id)
    assert rejected.status == "rejected" and tm.lookup("Save the file.", "en", "fr") is None
    assert tm.search("Save the files.", "en", "fr", min_similarity=0.5) == []
    assert_counts_true(tm)
    tm.delete(entry.id)
    assert_counts_true(tm)
    with pytest.raises(TMError, match=f"no entry {entry.id}"):
        tm.get(entry.id)


def test_lists_filter_and_page(tm):
    accepted = filled(tm)
    pending = tm.add("Where is the station?", "Où est la gare ?", "en", "fr")
    german = tm.add("Where is the station?", "Wo ist der Bahnhof?", "en", "de", origin="reviewer")
    assert tm.entries(status="pending") == [pending, german]
    assert tm.entries(status="pending", target_lang="de") == [german]
    assert tm.entries(origin="reviewer", status="accepted") == accepted
    assert tm.entries(limit=2, offset=1) == accepted[1:3]
    assert tm.entries(status="rejected") == []
    stats = tm.stats()
    assert stats.counts == {("en", "de"): {"pending": 1}, ("en", "fr"): {"accepted": 5, "pending": 1}}
    assert stats.total == 7 and stats.size_bytes > 0
    with pytest.raises(TMError, match="unknown status"):
        tm.entries(status="done")


# ------------------------------------------------------------------------------------ lookups
def test_exact_lookup_ignores_whitespace_and_unicode_form_only(tm):
    entry = tm.add("Le café est prêt.", "The coffee is ready.", "fr", "en", status="accepted")
    assert tm.lookup("  Le  cafe\u0301\nest prêt. ", "fr", "en") == entry
    assert tm.lookup("le café est prêt.", "fr", "en") is None  # case counts
    assert tm.lookup("Le café est prêt", "fr", "en") is None
    assert tm.lookup("Le café est prêt.", "fr", "de") is None  # another pair
    newer = tm.add("Le café est prêt.", "Coffee is ready.", "fr", "en", status="accepted")
    assert tm.lookup("Le café est prêt.", "fr", "en") == newer  # the most recent of two


def test_fuzzy_search_finds_a_one_word_edit_and_not_an_unrelated_sentence(tm):
    entries = filled(tm)
    found = tm.search("Save the file before closing the program.", "en", "fr")
    assert [m.entry for m in found] == [entries[0]]
    assert 0.75 <= found[0].similarity < 1
    typo = tm.search("The printer on the second flor is out of paper.", "en", "fr")
    assert [m.entry for m in typo] == [entries[1]] and typo[0].similarity > 0.95
    assert tm.search("Dolphins sleep with one eye open.", "en", "fr") == []
    assert tm.search("Save the file before closing the program.", "en", "de") == []
    # A lower threshold lets weaker matches in, best first.
    weak = tm.search("Click the red button to delete the message.", "en", "fr", min_similarity=0.5)
    assert weak[0].entry == entries[4] and all(a.similarity >= b.similarity for a, b in zip(weak, weak[1:]))


def test_search_puts_exact_matches_first_and_drops_repeats(tm):
    base = tm.add("Open the file.", "Ouvrez le fichier.", "en", "fr", status="accepted")
    tm.add("Open  the file.", "Ouvrez le fichier.", "en", "fr", status="accepted")  # the same, spaced
    other = tm.add("Open the file.", "Ouvre le fichier.", "en", "fr", status="accepted")
    near = tm.add("Open the files.", "Ouvrez les fichiers.", "en", "fr", status="accepted")
    found = tm.search("Open the file.", "en", "fr", min_similarity=0.5)
    assert [m.similarity for m in found[:2]] == [1.0, 1.0]
    assert {m.entry.target for m in found[:2]} == {base.target, other.target}
    assert found[2].entry == near and len(found) == 3
    assert tm.search("Open the file.", "en", "fr", limit=1)[0].entry == other  # newest of the exact ones
    assert isinstance(found[0], Match)


def test_near_duplicates_compare_the_targets_of_the_same_source(tm):
    pending = tm.add("Close the door.", "Fermez la porte.", "en", "fr")
    tm.add("Close the door.", "Ferme la fenêtre.", "en", "fr")
    accepted = tm.add("Close the door.", "Fermez la porte !", "en", "fr", status="accepted")
    found = tm.near_duplicates("Close  the door.", "Fermez la porte", "en", "fr")
    assert [m.entry for m in found] == [pending] and found[0].similarity > 0.9
    everywhere = tm.near_duplicates("Close the door.", "Fermez la porte", "en", "fr", status=None)
    assert [m.entry for m in everywhere] == [pending, accepted]
    assert tm.near_duplicates("Close the window.", "Fermez la porte.", "en", "fr") == []


# ------------------------------------------------------------------------------------ imports
def write_tsv(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")
    return path


def test_an_import_skips_duplicates_and_can_be_removed(tm, tmp_path):
    existing = tm.add("One.", "Un.", "en", "fr", status="pending")
    tsv = write_tsv(tmp_path / "pairs.tsv", ["One.\tUn.", "Two.\tDeux.", "Two.\t Deux. ", "Three.\t ", "Four.\tQuatre."])
    report = tm.import_tsv(tsv, "en", "fr", batch=2, who="anna")
    assert (report.state, report.units, report.added, report.duplicates, report.skipped) == ("complete", 5, 2, 2, 1)
    assert report.name == str(tsv) and report.format == "tsv" and report.who == "anna" and report.finished
    imported = tm.entries(origin="import")
    assert [(e.source, e.status, e.import_id, e.who) for e in imported] == [
        ("Two.", "accepted", report.id, "anna"), ("Four.", "accepted", report.id, "anna")]
    assert tm.import_tsv(tsv, "en", "fr").added == 0  # all there already
    assert_counts_true(tm)
    assert tm.remove_import(report.id) == 2
    assert tm.entries() == [existing] and tm.imports()[0].state == "removed"
    assert_counts_true(tm)
    with pytest.raises(TMError, match="no import 99"):
        tm.remove_import(99)


def test_a_failed_import_takes_its_entries_out_again(tm, tmp_path):
    lines = [f"Sentence number {i}.\tPhrase numéro {i}." for i in range(25)] + ["a\tb\tc"]
    with pytest.raises(TMFormatError, match=r"pairs.tsv:26: 3 columns; a line is source<TAB>target"):
        tm.import_tsv(write_tsv(tmp_path / "pairs.tsv", lines), "en", "fr", batch=10)
    assert tm.stats().total == 0
    assert [(r.state, r.units) for r in tm.imports()] == [("failed", 20)]
    with pytest.raises(TMFormatError, match=r"^pair 2: the source holds a control character$"):
        tm.import_pairs([("Good.", "Bon."), ("Bad\x07.", "Mauvais.")], "en", "fr")
    assert tm.stats().total == 0


def test_a_large_import_merges_the_index_in_steps(tm, monkeypatch):
    from transformer.memory import index, store

    steps = []
    merge_step = index.merge_step
    monkeypatch.setattr(store, "MERGE_AFTER", 200)
    monkeypatch.setattr(index, "MERGE_PAGES", 2)
    monkeypatch.setattr(index, "merge_step", lambda conn, first: steps.append(first) or merge_step(conn, first))
    pairs = [(f"Sentence {i} about the {i % 7}th topic of the day.", f"Phrase {i}.") for i in range(300)]
    assert tm.import_pairs(pairs, "en", "fr", batch=20).added == 300
    assert steps[0] is True and len(steps) > 2 and not any(steps[1:])  # several short steps
    with sqlite3.connect(tm.path) as conn:
        conn.execute("INSERT INTO fuzzy (fuzzy, rank) VALUES ('integrity-check', 0)")
    assert tm.search("Sentence 123 about the 4th topic of the week.", "en", "fr")[0].entry.source == pairs[123][0]
    steps.clear()
    tm.import_pairs(pairs[:10], "en", "fr")
    assert steps == []  # a small import leaves the merging to FTS5's own


def test_rebuilding_the_index_keeps_the_search(tm):
    entries = filled(tm)
    tm.delete(entries[1].id)
    tm.rebuild_index()
    assert tm.search("Save the file before closing the program.", "en", "fr")[0].entry == entries[0]
    assert tm.search("The printer on the second floor is out of paper.", "en", "fr") == []


# ------------------------------------------------------------------------------------ refusals
def test_a_file_that_is_not_a_memory_is_refused(tmp_path):
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not SQLite at all\n" * 200)
    with pytest.raises(TMError, match=r"junk.db is not a translation memory \(the file is not a database\)"):
        TranslationMemory(junk)
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE notes (text TEXT)")
    with pytest.raises(TMError, match="an SQLite database of another application"):
        TranslationMemory(other)
    with pytest.raises(TMError, match="is a folder"):
        TranslationMemory(tmp_path)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(TMError, match="not a regular file"):
        TranslationMemory(tmp_path / "fifo")
    with pytest.raises(TMError, match="the folder .*missing.* does not exist"):
        TranslationMemory(tmp_path / "missing" / "memory.db")
    with pytest.raises(TMError, match="/proc/self/memory.db is in a read-only folder"):  # even for root
        TranslationMemory("/proc/self/memory.db")


def test_a_newer_schema_is_refused(tmp_path):
    path = tmp_path / "memory.db"
    TranslationMemory(path).close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(TMError, match=f"schema version {SCHEMA_VERSION + 1}, written by a newer transformer"):
        TranslationMemory(path)


def test_a_memory_locked_past_the_timeout_is_busy(tmp_path):
    path = tmp_path / "memory.db"
    tm = TranslationMemory(path, timeout=0.3)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        start = time.monotonic()
        with pytest.raises(TMBusyError, match="busy: another process kept it locked for more than 0.3 s"):
            tm.add("Hello.", "Bonjour.", "en", "fr")
        # It waited for its 0.3 s, not the default 5 s (that wait would take at least DEFAULT_TIMEOUT,
        # so a slow machine has the whole difference to spare).
        assert 0.25 < time.monotonic() - start < DEFAULT_TIMEOUT
        assert tm.lookup("Hello.", "en", "fr") is None  # reading goes on under WAL
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    assert tm.add("Hello.", "Bonjour.", "en", "fr").id == 1
    tm.close()
    with pytest.raises(TMError, match="is closed"):
        tm.lookup("Hello.", "en", "fr")


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write where the permissions say no")
def test_a_read_only_file_is_refused(tmp_path):
    path = tmp_path / "memory.db"
    TranslationMemory(path).close()
    path.chmod(0o444)
    with pytest.raises(TMError, match="is read-only"):
        TranslationMemory(path)


def unshare_works() -> bool:
    import shutil

    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /mnt"], capture_output=True)
    return probe.returncode == 0


@pytest.mark.skipif(not unshare_works(), reason="needs unshare and mount (user and mount namespaces)")
def test_a_read_only_folder_is_refused(tmp_path):
    """A read-only mount (which refuses root too): a new memory and an existing one in it."""
    source, target = tmp_path / "source", tmp_path / "ro"
    source.mkdir()
    target.mkdir()
    TranslationMemory(source / "old.db").close()
    code = ("import sys\nfrom transformer.memory import TranslationMemory, TMError\n"
            "for name in sys.argv[1:]:\n"
            "    try:\n        TranslationMemory(name)\n    except TMError as err:\n        print(err)\n")
    command = f"{sys.executable} -c '{code}' {target / 'new.db'} {target / 'old.db'}"
    script = f"mount --bind {source} {target} && mount -o remount,bind,ro {target} && cd {ROOT} && {command}"
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 2, done.stdout
    assert all("is in a read-only folder: SQLite writes its -wal and -shm files beside it" in line
               or "is read-only" in line for line in lines), lines


# ------------------------------------------------------------------------------------ processes
def run_python(code: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


WRITER = """
    import os, sys, time
    from transformer.memory import TranslationMemory
    path, name, go = sys.argv[1:]
    with TranslationMemory(path, timeout=30) as tm:
        while not os.path.exists(go):
            time.sleep(0.005)
        for i in range(150):
            tm.add(f"Sentence {i} from {name}.", f"Phrase {i} de {name}.", "en", "fr", who=name)
"""


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path, go = tmp_path / "memory.db", tmp_path / "go"
    TranslationMemory(path).close()
    writers = [run_python(WRITER, str(path), name, str(go)) for name in ("first", "second")]
    time.sleep(0.2)
    go.touch()
    for writer in writers:
        _, err = writer.communicate(timeout=120)
        assert writer.returncode == 0, err
    with TranslationMemory(path) as tm:
        entries = tm.entries(limit=1000)
        assert len(entries) == 300 and len({e.id for e in entries}) == 300
        for name in ("first", "second"):
            assert sorted(e.source for e in entries if e.who == name) == sorted(
                f"Sentence {i} from {name}." for i in range(150))
        assert tm.stats().counts == {("en", "fr"): {"pending": 300}}


def test_threads_sharing_one_memory_take_turns(tm):
    def add(name: str) -> None:
        for i in range(40):
            tm.add(f"Line {i} of {name}.", f"Ligne {i} de {name}.", "en", "fr", status="accepted")
            tm.search(f"Line {i} of {name}", "en", "fr")

    threads = [threading.Thread(target=add, args=(name,)) for name in "abc"]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert tm.stats().total == 120


IMPORTER = """
    import sys
    from transformer.memory import TranslationMemory
    with TranslationMemory(sys.argv[1], timeout=30) as tm:
        tm.import_tsv(sys.argv[2], "en", "fr", batch=100)
    print("finished")
"""


def test_a_killed_import_leaves_a_consistent_prefix_marked_incomplete(tmp_path):
    path, tsv = tmp_path / "memory.db", tmp_path / "big.tsv"
    lines = [f"Sentence {i} of the big file about topic {i % 97}.\tPhrase {i} du gros fichier." for i in range(100_000)]
    write_tsv(tsv, lines)
    TranslationMemory(path).close()
    importer = run_python(IMPORTER, str(path), str(tsv))
    with TranslationMemory(path) as watcher:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (watcher.imports() and watcher.imports()[0].units >= 500):
            time.sleep(0.01)
        os.kill(importer.pid, signal.SIGKILL)
    out, err = importer.communicate(timeout=30)
    assert importer.returncode == -signal.SIGKILL and "finished" not in out, err
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        conn.execute("INSERT INTO fuzzy (fuzzy, rank) VALUES ('integrity-check', 0)")
    with TranslationMemory(path) as tm:
        [report] = tm.imports()
        assert report.state == "incomplete" and report.finished is None
        assert 500 <= report.units < len(lines) and report.added == report.units and report.units % 100 == 0
        entries = tm.entries(limit=len(lines))
        assert [f"{e.source}\t{e.target}" for e in entries] == lines[:report.units]  # the file's first units
        probe = entries[-1]
        assert tm.search(probe.source.replace("big", "large"), "en", "fr")[0].entry == probe
        assert_counts_true(tm)
        assert tm.remove_import(report.id) == report.units
        assert tm.stats().total == 0

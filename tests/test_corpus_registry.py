"""The corpus registry: entries match SOURCE.md, local copies verify, downloads are verified.

Downloads are tested against an HTTP server on 127.0.0.1 serving small files made in tmp_path;
nothing here touches the internet. The real corpora are read from ../shared/data (skipped with
a reason when that directory is missing).
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import io
import re
import socket
import zipfile
from pathlib import Path

import pytest
from file_server import server  # noqa: F401 (a fixture)

from transformer.corpus import registry
from transformer.corpus.cli_args import register_data_command
from transformer.corpus.files import CorpusError
from transformer.corpus.registry import (
    DATA_ENV,
    REGISTRY,
    CorpusInfo,
    RemoteFile,
    corpus_pairs,
    data_command,
    default_cache_dir,
    fetch,
    get_corpus,
    tatoeba_splits,
)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
needs_data = pytest.mark.skipif(
    not (SHARED_DATA / "multi30k").is_dir() or not (SHARED_DATA / "tatoeba").is_dir(),
    reason=f"the real corpora are not at {SHARED_DATA} (../shared/data beside the project root)",
)


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- registry contents ------------------------------------------------------------------------


def test_registry_names_and_fields():
    assert set(REGISTRY) == {"multi30k", "tatoeba", "wmt14-en-de", "wmt14-en-fr"}
    m, t = REGISTRY["multi30k"], REGISTRY["tatoeba"]
    assert m.languages == ("en", "de", "fr") and m.splits == ("train", "val", "test_2016_flickr")
    assert {f.name for f in m.files} == {f"{s}.{l}.gz" for s in m.splits for l in m.languages}
    for f in m.files:
        assert re.fullmatch(
            r"https://raw\.githubusercontent\.com/multi30k/dataset/[0-9a-f]{40}/data/task1/raw/" + re.escape(f.name), f.url
        )
        assert f.member is None
    assert "Elliott" in m.citation and "research" in m.license
    assert t.languages == ("en", "fr") and t.splits == ("all",)
    (tf,) = t.files
    assert tf.name == "eng-fra.txt" and tf.member == "fra-eng/fra.txt"
    assert re.fullmatch(r"https://raw\.githubusercontent\.com/modelexlab/data/[0-9a-f]{40}/fra-eng\.zip", tf.url)
    assert t.license == "CC BY 2.0 FR"
    assert t.attribution == (
        "Tatoeba sentence pairs (manythings.org/anki export, 2019-04-07), CC BY 2.0 FR. "
        "Attribution: www.manythings.org/anki and tatoeba.org"
    )


@needs_data
def test_registry_hashes_and_commits_match_source_md():
    text = (SHARED_DATA / "multi30k" / "SOURCE.md").read_text()
    listed = dict((name, digest) for digest, name in re.findall(r"^([0-9a-f]{64})\s+(\S+)$", text, re.M))
    assert len(listed) == 9
    assert {f.name: f.sha256 for f in REGISTRY["multi30k"].files} == listed
    commit = re.search(r"\*\*Commit:\*\* `([0-9a-f]{40})`", text).group(1)
    assert all(f"/{commit}/" in f.url for f in REGISTRY["multi30k"].files)

    text = (SHARED_DATA / "tatoeba" / "SOURCE.md").read_text()
    (tf,) = REGISTRY["tatoeba"].files
    assert tf.sha256 == re.search(r"zip sha256 `([0-9a-f]{64})`", text).group(1)
    assert tf.member_sha256 == re.search(r"sha256 `eng-fra.txt` = `([0-9a-f]{64})`", text).group(1)
    commit = re.search(r"\*\*Commit:\*\* `([0-9a-f]{40})`", text).group(1)
    assert f"/{commit}/" in tf.url


def test_get_corpus_unknown_lists_names():
    assert get_corpus("tatoeba") is REGISTRY["tatoeba"]
    with pytest.raises(CorpusError, match=r"unknown corpus 'wmt14'.*multi30k, tatoeba"):
        get_corpus("wmt14")


def test_remote_file_validates_hashes():
    with pytest.raises(ValueError, match="sha256"):
        RemoteFile("a.txt", "http://x/a.txt", "abc")
    with pytest.raises(ValueError, match="go together"):
        RemoteFile("a.txt", "http://x/a.zip", "0" * 64, member="a.txt")


def test_default_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TRANSFORMER_CACHE")
    assert default_cache_dir() == Path.home() / ".cache" / "transformer"


# --- the real corpora, from ../shared/data ----------------------------------------------------


@needs_data
def test_fetch_local_multi30k_verifies_and_returns_directory(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    assert fetch("multi30k", local_dir=SHARED_DATA) == SHARED_DATA / "multi30k"
    assert fetch("multi30k", local_dir=SHARED_DATA / "multi30k") == SHARED_DATA / "multi30k"  # DIR itself


@needs_data
def test_fetch_uses_transformer_data_env(monkeypatch, tmp_path):
    monkeypatch.setenv(DATA_ENV, str(SHARED_DATA))
    assert fetch("tatoeba", cache_dir=tmp_path) == SHARED_DATA / "tatoeba"
    assert not any(tmp_path.iterdir())  # nothing downloaded or copied


@needs_data
def test_corpus_pairs_multi30k():
    directory = SHARED_DATA / "multi30k"
    train = corpus_pairs("multi30k", src="de", tgt="en", split="train", directory=directory)
    test = corpus_pairs("multi30k", src="de", tgt="en", split="test_2016_flickr", directory=directory)
    assert len(train) == 29000 and len(test) == 1000
    with gzip.open(directory / "train.en.gz", "rt", encoding="utf-8") as f:
        assert train[0][1] == f.readline().strip()
    with pytest.raises(CorpusError, match="no split 'test'.*test_2016_flickr"):
        corpus_pairs("multi30k", src="de", tgt="en", split="test", directory=directory)
    with pytest.raises(CorpusError, match="no language 'cs'"):
        corpus_pairs("multi30k", src="cs", tgt="en", split="train", directory=directory)


@needs_data
def test_tatoeba_pairs_and_splits_disjoint_by_source():
    pairs = corpus_pairs("tatoeba", src="en", tgt="fr", split="all", directory=SHARED_DATA / "tatoeba")
    assert len(pairs) == 167130 and pairs[0] == ("Go.", "Va !")
    splits = tatoeba_splits(pairs, seed=0)
    assert sum(map(len, splits.values())) == len(pairs)
    assert 1000 <= len(splits["valid"]) < 1020 and 2000 <= len(splits["test"]) < 2020
    sources = {name: {s for s, _ in split} for name, split in splits.items()}
    assert not sources["test"] & sources["train"]
    assert not sources["valid"] & sources["train"]
    assert not sources["test"] & sources["valid"]
    assert tatoeba_splits(pairs, seed=0) == splits  # deterministic
    assert tatoeba_splits(pairs, seed=1)["test"] != splits["test"]
    fr_en = corpus_pairs("tatoeba", src="fr", tgt="en", split="all", directory=SHARED_DATA / "tatoeba")
    assert fr_en[0] == ("Va !", "Go.")


def test_tatoeba_splits_groups_small():
    pairs = [(f"s{i % 7}", f"t{i}") for i in range(40)]  # 7 sources, 5-6 translations each
    splits = tatoeba_splits(pairs, seed=3, valid=6, test=6)
    for name in ("valid", "test"):
        assert len(splits[name]) >= 6
        sources = {s for s, _ in splits[name]}
        assert all(s not in sources for s, _ in splits["train"])
        assert sorted(splits[name]) == sorted(p for p in pairs if p[0] in sources)  # whole groups
    with pytest.raises(ValueError, match="no pairs left for train"):
        tatoeba_splits(pairs, valid=20, test=20)


# --- local copies -----------------------------------------------------------------------------


def make_info(files: dict[str, bytes], url_base: str = "https://example.invalid/corpus") -> CorpusInfo:
    return CorpusInfo(
        name="toy", description="test corpus", citation="-", license="-", attribution="-",
        languages=("en", "fr"), splits=("all",),
        files=tuple(RemoteFile(name, f"{url_base}/{name}", sha(data)) for name, data in files.items()),
    )


def test_local_dir_mismatch_names_file_and_both_hashes(tmp_path, monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    info = make_info({"a.txt": b"hello\n"})
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "a.txt").write_bytes(b"hellO\n")
    good, bad = sha(b"hello\n"), sha(b"hellO\n")
    with pytest.raises(CorpusError, match=rf"a\.txt: sha256 mismatch: expected {good}, got {bad}"):
        fetch(info, local_dir=tmp_path)


def test_local_dir_missing_files_and_env(tmp_path, monkeypatch):
    info = make_info({"a.txt": b"a\n", "b.txt": b"b\n"})
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "a.txt").write_bytes(b"a\n")
    monkeypatch.setenv(DATA_ENV, str(tmp_path))
    with pytest.raises(CorpusError, match=r"\$TRANSFORMER_DATA: .*toy lacks b\.txt"):
        fetch(info, cache_dir=tmp_path / "cache")
    (tmp_path / "toy" / "b.txt").write_bytes(b"b\n")
    assert fetch(info, cache_dir=tmp_path / "cache") == tmp_path / "toy"
    with pytest.raises(CorpusError, match="is not a directory"):
        fetch(info, local_dir=tmp_path / "nowhere")


# --- downloads from a local HTTP server -------------------------------------------------------


@pytest.fixture(autouse=True)
def _no_data_env(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)


def listing(path: Path) -> list[str]:
    return sorted(p.name for p in path.iterdir()) if path.exists() else []


def test_download_verified_and_placed(server, tmp_path, capsys):
    handler, url = server
    handler.files.update({"a.txt": b"one\ttwo\n", "b.txt.gz": gzip.compress(b"x\n")})
    info = make_info(dict(handler.files))
    directory = fetch(info, cache_dir=tmp_path, base_url=url + "/mirror/")
    assert directory == tmp_path / "toy"
    assert listing(directory) == ["a.txt", "b.txt.gz"]
    assert (directory / "a.txt").read_bytes() == b"one\ttwo\n"
    assert "sha256 verified" in capsys.readouterr().err  # one line per file off a terminal
    handler.files.clear()  # already there and verified: no download needed
    assert fetch(info, cache_dir=tmp_path, base_url=url, progress=False) == directory


def test_download_from_entry_url_without_base_url(server, tmp_path):
    handler, url = server
    handler.files["a.txt"] = b"direct\n"
    info = make_info(dict(handler.files), url_base=url + "/some/path")
    assert (fetch(info, cache_dir=tmp_path, progress=False) / "a.txt").read_bytes() == b"direct\n"


def test_cached_file_that_fails_verification_is_downloaded_again(server, tmp_path):
    handler, url = server
    handler.files["a.txt"] = b"good\n"
    info = make_info(dict(handler.files))
    (tmp_path / "toy").mkdir()
    (tmp_path / "toy" / "a.txt").write_bytes(b"bad\n")
    fetch(info, cache_dir=tmp_path, base_url=url, progress=False)
    assert (tmp_path / "toy" / "a.txt").read_bytes() == b"good\n"


def test_corrupted_download_leaves_nothing(server, tmp_path):
    handler, url = server
    info = make_info({"a.txt": b"the right bytes\n"})
    handler.files["a.txt"] = b"the wrong bytes\n"
    good, bad = sha(b"the right bytes\n"), sha(b"the wrong bytes\n")
    with pytest.raises(CorpusError, match=rf"sha256 mismatch: expected {good}, got {bad}"):
        fetch(info, cache_dir=tmp_path, base_url=url, progress=False)
    assert listing(tmp_path / "toy") == []


def test_truncated_download_leaves_nothing(server, tmp_path):
    handler, url = server
    data = b"0123456789" * 50
    handler.files["a.txt"] = data
    handler.truncate.add("a.txt")
    with pytest.raises(CorpusError, match=r"download of http://127\.0\.0\.1:\d+/a\.txt was cut short: got 500 of 1500 bytes"):
        fetch(make_info({"a.txt": data}), cache_dir=tmp_path, base_url=url, progress=False)
    assert listing(tmp_path / "toy") == []


def test_http_error_names_url(server, tmp_path):
    _, url = server
    with pytest.raises(CorpusError, match=r"could not download http://127\.0\.0\.1:\d+/a\.txt: HTTP 404"):
        fetch(make_info({"a.txt": b"x"}), cache_dir=tmp_path, base_url=url, progress=False)
    assert listing(tmp_path / "toy") == []


def _zip(members: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    return buf.getvalue()


def _zip_info(archive: bytes, member_sha256: str, url: str) -> CorpusInfo:
    return CorpusInfo(
        name="toyzip", description="-", citation="-", license="-", attribution="-", languages=("en", "fr"),
        splits=("all",),
        files=(RemoteFile("eng-fra.txt", f"{url}/fra-eng.zip", sha(archive), "fra-eng/fra.txt", member_sha256),),
    )


def test_zip_member_extracted_and_verified(server, tmp_path):
    handler, url = server
    text = b"Go.\tVa !\nHi.\tSalut !\n"
    archive = _zip({"fra-eng/fra.txt": text, "fra-eng/_about.txt": b"about\n"})
    handler.files["fra-eng.zip"] = archive
    directory = fetch(_zip_info(archive, sha(text), url), cache_dir=tmp_path, progress=False)
    assert listing(directory) == ["eng-fra.txt"]  # the member under its local name; the zip is not kept
    assert (directory / "eng-fra.txt").read_bytes() == text


def test_zip_member_mismatch_leaves_nothing(server, tmp_path):
    handler, url = server
    archive = _zip({"fra-eng/fra.txt": b"Go.\tVa !\n"})
    handler.files["fra-eng.zip"] = archive
    with pytest.raises(CorpusError, match=r"member 'fra-eng/fra.txt': sha256 mismatch: expected 0{64}, got [0-9a-f]{64}"):
        fetch(_zip_info(archive, "0" * 64, url), cache_dir=tmp_path, progress=False)
    assert listing(tmp_path / "toyzip") == []
    archive = _zip({"other.txt": b"x"})
    handler.files["fra-eng.zip"] = archive
    with pytest.raises(CorpusError, match=r"no member 'fra-eng/fra.txt' \(it has: other.txt\)"):
        fetch(_zip_info(archive, "0" * 64, url), cache_dir=tmp_path, progress=False)
    assert listing(tmp_path / "toyzip") == []


def test_unreachable_url_names_it_and_suggests_local_copy(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed when the block ends: nothing listens there
    url = f"http://127.0.0.1:{port}/corpus"
    with pytest.raises(CorpusError, match=rf"could not download {re.escape(url)}/a\.txt: .*--from DIR .*TRANSFORMER_DATA"):
        fetch(make_info({"a.txt": b"x"}, url_base=url), cache_dir=tmp_path, progress=False, timeout=5)
    assert listing(tmp_path / "toy") == []


# --- the `data` subcommand --------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="transformer")
    register_data_command(parser.add_subparsers(dest="command"))
    return parser


def test_data_list(capsys):
    args = _parser().parse_args(["data", "list"])
    assert data_command(args) == 0
    out = capsys.readouterr().out
    assert "multi30k" in out and "en/de/fr" in out and "CC BY 2.0 FR" in out


@needs_data
def test_data_download_from_local_copy(capsys):
    args = _parser().parse_args(["data", "download", "tatoeba", "--from", str(SHARED_DATA)])
    assert data_command(args) == 0
    captured = capsys.readouterr()
    assert captured.out.strip() == str(SHARED_DATA / "tatoeba")
    assert "Attribution: www.manythings.org/anki and tatoeba.org" in captured.err


def test_data_download_unknown_name(tmp_path):
    args = _parser().parse_args(["data", "download", "nope", "--cache-dir", str(tmp_path)])
    with pytest.raises(CorpusError, match="unknown corpus 'nope'"):
        data_command(args)


def test_registry_module_exports():
    assert registry.DATA_ENV == "TRANSFORMER_DATA"

"""The suggestions file of LibreTranslate's /suggest (transformer/serve/libretranslate/suggestions.py): one JSON line
each, synced, whole under concurrent writers; refusals and write errors named."""

from __future__ import annotations

import errno
import json
import os
import threading

import pytest

from transformer.serve.libretranslate import suggestions as module
from transformer.serve.libretranslate.suggestions import BadSuggestion, SuggestionStore, SuggestionStoreError


def lines(path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_one_json_line_per_suggestion(tmp_path):
    path = tmp_path / "suggestions.jsonl"
    with SuggestionStore(path, clock=lambda: 1_795_000_000.0) as store:
        record = store.add("Ein Mann fährt Fahrrad.", "A man rides a bicycle.", "de", "en")
        store.add("Zwei Hunde\nim Schnee.", "Two dogs\nin the snow.", "de", "en-GB")
    assert record == {"time": "2026-11-18T11:06:40Z", "source": "de", "target": "en",
                      "q": "Ein Mann fährt Fahrrad.", "s": "A man rides a bicycle."}
    assert lines(path) == [record, {"time": "2026-11-18T11:06:40Z", "source": "de", "target": "en-GB",
                                    "q": "Zwei Hunde\nim Schnee.", "s": "Two dogs\nin the snow."}]
    assert "fährt" in path.read_text(encoding="utf-8")  # written as UTF-8, not escaped


def test_the_source_may_be_auto_as_libretranslates_page_sends_it(tmp_path):
    with SuggestionStore(tmp_path / "s.jsonl") as store:
        assert store.add("Le chat.", "The cat.", "auto", "en")["source"] == "auto"


def test_appends_to_an_existing_file(tmp_path):
    path = tmp_path / "suggestions.jsonl"
    with SuggestionStore(path) as store:
        store.add("a", "b", "de", "en")
    with SuggestionStore(path) as store:
        store.add("c", "d", "de", "en")
    assert [r["q"] for r in lines(path)] == ["a", "c"]


def test_each_line_is_synced(tmp_path, monkeypatch):
    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(module.os, "fsync", lambda fd: (synced.append(fd), real_fsync(fd)))
    with SuggestionStore(tmp_path / "s.jsonl") as store:
        store.add("a", "b", "de", "en")
        store.add("c", "d", "de", "en")
    assert len(synced) == 2


def test_concurrent_writers_never_interleave(tmp_path):
    path = tmp_path / "suggestions.jsonl"
    # two stores on one file stand for two server processes; each is shared by four threads
    stores = [SuggestionStore(path, max_chars=20_000), SuggestionStore(path, max_chars=20_000)]
    long_text = "Wort " * 2000

    def write(worker: int):
        store = stores[worker % 2]
        for i in range(50):
            store.add(f"{worker}-{i} {long_text}", f"{worker}-{i}", "de", "en")

    threads = [threading.Thread(target=write, args=(w,)) for w in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for store in stores:
        store.close()
    records = lines(path)
    assert len(records) == 400
    assert sorted(r["s"] for r in records) == sorted(f"{w}-{i}" for w in range(8) for i in range(50))
    assert all(r["q"] == f"{r['s']} {long_text}" for r in records)


@pytest.mark.parametrize("fields, message", [
    (("", "b", "de", "en"), "Invalid request: missing q parameter"),
    ((None, None, None, None), "Invalid request: missing q parameter"),
    (("a", "", "de", "en"), "Invalid request: missing s parameter"),
    (("a", "b", None, "en"), "Invalid request: missing source parameter"),
    (("a", "b", "de", ""), "Invalid request: missing target parameter"),
    ((["a"], "b", "de", "en"), "Invalid request: q must be a string"),
    (("a", 5, "de", "en"), "Invalid request: s must be a string"),
    (("x" * 11, "b", "de", "en"), "Invalid request: q is 11 characters long; at most 10 are taken"),
    (("a", "y" * 11, "de", "en"), "Invalid request: s is 11 characters long; at most 10 are taken"),
    (("a\x00", "b", "de", "en"), "Invalid request: q holds a control character"),
    (("a", "b\ud800", "de", "en"), "Invalid request: s is not valid Unicode text"),
    (("a", "b", "german", "en"), "Invalid request: source 'german' is not a language code"),
    (("a", "b", "de", "en\n"), "Invalid request: target 'en\\n' is not a language code"),
    (("a", "b", "de", "auto"), "Invalid request: target 'auto' is not a language code"),
])
def test_bad_suggestions_are_refused_and_not_written(tmp_path, fields, message):
    path = tmp_path / "s.jsonl"
    with SuggestionStore(path, max_chars=10) as store:
        with pytest.raises(BadSuggestion) as caught:
            store.add(*fields)
    assert str(caught.value) == message
    assert path.read_bytes() == b""


def test_unopenable_files_are_named(tmp_path):
    with pytest.raises(SuggestionStoreError, match=r"cannot open the suggestions file .*missing/s.jsonl: "
                                                   r"No such file or directory"):
        SuggestionStore(tmp_path / "missing" / "s.jsonl")
    with pytest.raises(SuggestionStoreError, match="is not a regular file"):
        SuggestionStore(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(SuggestionStoreError, match="is not a regular file"):
        SuggestionStore(fifo)  # refused at once, not waiting for a reader


def test_write_errors_are_named(tmp_path, monkeypatch):
    path = tmp_path / "s.jsonl"
    store = SuggestionStore(path)

    def full(fd, data):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(module.os, "write", full)
    with pytest.raises(SuggestionStoreError, match=r"cannot write to the suggestions file .*s.jsonl: "
                                                   r"No space left on device"):
        store.add("a", "b", "de", "en")
    monkeypatch.undo()
    store.close()
    with pytest.raises(SuggestionStoreError, match="is closed"):
        store.add("a", "b", "de", "en")

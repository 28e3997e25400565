"""The memory-mapped tokenized corpus (transformer.data.indexed), its parallel builder
(transformer.data.binary) and the cache that runs share (transformer.training.data_cache).

Independent references: the pairs written are compared with the token lists they came from and with
the tokenizer's own encode_batch; the length filter with the original per-pair loop (copied here);
the batches with TokenBudgetBatches over the same pairs held as Python lists."""

from __future__ import annotations

import contextlib
import functools
import io
import json
import os
import sys
import threading
import time

import numpy as np
import pytest
import torch

from transformer.corpus.builtin import generate_pairs
from transformer.data import TokenBudgetBatches, filter_examples, filter_lengths, make_batch
from transformer.data import binary
from transformer.data.binary import build_lock, encode_to_indexed, file_fingerprint
from transformer.data.indexed import IndexedFormatError, IndexedWriter, open_indexed, smallest_dtype
from transformer.text import Vocabularies
from transformer.training import data_cache
from transformer.run.config import DataConfig
from transformer.training.data_setup import load_text_splits


@pytest.fixture(scope="module")
def corpus():
    pairs = generate_pairs(1200, seed=3)
    vocab = Vocabularies.train(pairs, vocab_size=500)
    return pairs, vocab


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(data_cache.DATA_CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _write(directory, pairs, dtype=np.uint16, chunk=7):
    writer = IndexedWriter(directory, n_pairs=len(pairs), dtypes={"src": dtype, "tgt": dtype})
    for a in range(0, len(pairs), chunk):
        part = pairs[a:a + chunk]
        ids = {side: np.array([i for p in part for i in p[k]], dtype=np.int64) for k, side in enumerate(("src", "tgt"))}
        lengths = {side: np.array([len(p[k]) for p in part]) for k, side in enumerate(("src", "tgt"))}
        writer.append(ids, lengths)
    return writer.close()


def _random_pairs(n, seed=0, high=60000, low=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(low, high, rng.integers(0, 12)).tolist(), rng.integers(low, high, rng.integers(0, 12)).tolist())
            for _ in range(n)]


def test_smallest_dtype_holds_every_id():
    assert [smallest_dtype(n).name for n in (256, 257, 8000, 65536, 65537)] == \
        ["uint8", "uint16", "uint16", "uint16", "uint32"]


def test_written_pairs_read_back_with_lengths_and_views(tmp_path):
    pairs = _random_pairs(100)
    header = _write(tmp_path / "d", pairs)
    data = open_indexed(tmp_path / "d")
    assert list(data) == pairs and len(data) == 100 and data[-1] == pairs[-1]
    tokens = sum(len(s) for s, _ in pairs)
    assert header["tokens"]["src"] == tokens and (tmp_path / "d" / "src.bin").stat().st_size == 2 * tokens
    src, tgt = data.lengths()
    assert src.tolist() == [len(s) for s, _ in pairs] and tgt.tolist() == [len(t) for _, t in pairs]
    view = data.select([5, 2, 99]).select([2, 0])
    assert list(view) == [pairs[99], pairs[5]] and view.lengths()[0].tolist() == [len(pairs[99][0]), len(pairs[5][0])]
    with pytest.raises(IndexError):
        data.select([100])


def test_writer_refuses_ids_its_type_cannot_hold(tmp_path):
    writer = IndexedWriter(tmp_path / "d", n_pairs=1, dtypes={"src": np.uint8, "tgt": np.uint8})
    with pytest.raises(ValueError, match="outside 0..255"):
        writer.append({"src": np.array([300]), "tgt": np.array([1])}, {"src": np.array([1]), "tgt": np.array([1])})


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "src.bin").write_bytes((d / "src.bin").read_bytes()[:-2]), "src.bin: .* bytes, the header"),
    (lambda d: (d / "header.json").unlink(), "no header.json"),
    (lambda d: (d / "header.json").write_text(json.dumps({"format": 99})), "format 99"),
    (lambda d: (d / "tgt.idx").unlink(), "tgt.idx: missing"),
    (lambda d: (d / "header.json").write_text(json.dumps({**json.loads((d / "header.json").read_text()), "pairs": "ten"})),
     "incomplete header"),
])
def test_a_damaged_directory_is_refused_by_name(tmp_path, damage, message):
    _write(tmp_path / "d", _random_pairs(10))
    damage(tmp_path / "d")
    with pytest.raises(IndexedFormatError, match=message):
        open_indexed(tmp_path / "d")


@pytest.mark.parametrize("workers", [1, 2])
def test_encoding_matches_the_tokenizer_and_not_the_number_of_workers(tmp_path, corpus, workers, monkeypatch):
    pairs, vocab = corpus
    src, tgt = [s for s, _ in pairs], [t for _, t in pairs]
    lines = io.StringIO()
    contexts = []
    get_context = binary.mp.get_context
    monkeypatch.setattr(binary.mp, "get_context", lambda method: contexts.append(method) or get_context(method))
    data = encode_to_indexed(src, tgt, vocab, tmp_path / "ids", workers=workers, chunk_size=100, progress=lines,
                             progress_every=0)
    assert list(data) == list(zip(vocab.src.encode_batch(src), vocab.tgt.encode_batch(tgt)))
    assert data.header["dtype"] == {"src": "uint16", "tgt": "uint16"}
    assert "1,200 / 1,200 pairs (100%)" in lines.getvalue() and "/ 1,200 pairs (8%)" in lines.getvalue()
    assert [p.name for p in tmp_path.iterdir()] == ["ids"]  # the temporary directory was renamed
    assert contexts == (["fork"] if workers > 1 and sys.platform.startswith("linux") else [])  # a pool of processes


def test_vectorised_filter_equals_the_per_pair_rule():
    def reference(examples, max_len, max_ratio):  # the loop filter_examples ran before it was vectorised
        kept, counts = [], {"too_long": 0, "bad_ratio": 0, "empty": 0}
        for i, (s, t) in enumerate(examples):
            ls, lt = len(s), len(t)
            if ls == 0 or lt == 0:
                counts["empty"] += 1
            elif ls > max_len or lt > max_len:
                counts["too_long"] += 1
            elif max_ratio is not None and max(ls, lt) > max_ratio * min(ls, lt):
                counts["bad_ratio"] += 1
            else:
                kept.append(i)
        return kept, counts

    examples = _random_pairs(3000, seed=1)
    for max_len, max_ratio in ((8, 1.5), (11, None), (5, 3), (20, 1.0)):
        kept, stats = filter_examples(examples, max_len=max_len, max_ratio=max_ratio)
        ref_kept, ref_counts = reference(examples, max_len, max_ratio)
        assert kept == ref_kept and {k: getattr(stats, k) for k in ref_counts} == ref_counts
        src, tgt = np.array([len(s) for s, _ in examples]), np.array([len(t) for _, t in examples])
        assert filter_lengths(src, tgt, max_len=max_len, max_ratio=max_ratio)[0].tolist() == ref_kept


def test_batches_from_the_memmap_equal_batches_from_lists(tmp_path):
    pairs = [(s, t) for s, t in _random_pairs(2000, seed=2, high=500, low=3) if s and t]
    _write(tmp_path / "d", pairs, chunk=333)
    kept, _ = filter_examples(pairs, max_len=10, max_ratio=3.0)
    view = open_indexed(tmp_path / "d").select(filter_lengths(*open_indexed(tmp_path / "d").lengths(), max_len=10,
                                                              max_ratio=3.0)[0])
    in_memory = [pairs[i] for i in kept]
    for rank in (0, 1):
        args = dict(max_tokens=120, pad_id=0, bos_id=1, eos_id=2, seed=7, rank=rank, world_size=2)
        old, new = TokenBudgetBatches(in_memory, **args), TokenBudgetBatches(view, **args)
        for epoch in (0, 3):
            assert new.batch_indices(epoch) == old.batch_indices(epoch)
            for a, b in zip(old.iter_from(epoch, 2), new.iter_from(epoch, 2)):
                assert all((getattr(a, k) == getattr(b, k)).all() for k in ("src", "src_mask", "tgt_in", "tgt_out"))
    batch = make_batch([view[0], view[1]], pad_id=0, bos_id=1, eos_id=2)
    assert batch.src.dtype == torch.int64 and batch.n_src_tokens == len(in_memory[0][0]) + len(in_memory[1][0])


# ------------------------------------------------------------------------------------------------ the cache

def _files_cfg(tmp_path, lines=400, **kw):
    pairs = generate_pairs(lines, seed=5)
    (tmp_path / "a.fr").write_text("".join(s + "\n" for s, _ in pairs), encoding="utf-8")
    (tmp_path / "a.en").write_text("".join(t + "\n" for _, t in pairs), encoding="utf-8")
    return DataConfig(corpus="files", train_src=str(tmp_path / "a.fr"), train_tgt=str(tmp_path / "a.en"),
                      vocab_size=400, **kw)


def _counting_reader(calls):
    @functools.wraps(load_text_splits)  # the cache key hashes the (unwrapped) reader's source
    def read(cfg):
        calls.append(cfg.corpus)
        return load_text_splits(cfg)

    return read


def test_cache_is_built_once_then_reused(tmp_path, cache):
    cfg = _files_cfg(tmp_path)
    calls = []
    vocab, (first,) = data_cache.open_cache([cfg], _counting_reader(calls))
    assert calls == ["files"]  # read once, for the tokenizer and the ids alike
    splits, stats = load_text_splits(cfg)
    src, tgt = vocab.src.encode_batch([s for s, _ in splits["train"]]), vocab.tgt.encode_batch([t for _, t in splits["train"]])
    assert list(first.train) == list(zip(src, tgt)) and first.valid_text == splits["valid"]
    assert first.stats == json.loads(json.dumps(stats))  # tuples come back as lists
    again_vocab, (again,) = data_cache.open_cache([cfg], _counting_reader(calls))
    assert calls == ["files"]  # nothing read again
    assert again.directory == first.directory and list(again.train) == list(first.train)
    assert data_cache.vocab_fingerprint(again_vocab) == data_cache.vocab_fingerprint(vocab)


def test_changed_data_or_tokenizer_gets_a_new_entry(tmp_path, cache):
    cfg = _files_cfg(tmp_path)
    _, (first,) = data_cache.open_cache([cfg], load_text_splits)
    path = tmp_path / "a.fr"
    text = path.read_text(encoding="utf-8")
    stat = path.stat()
    path.write_text(text.replace("a", "e", 1), encoding="utf-8")  # same size, and the old modification time
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert file_fingerprint(path)["mtime_ns"] == stat.st_mtime_ns
    _, (edited,) = data_cache.open_cache([cfg], load_text_splits)
    assert edited.directory != first.directory and list(edited.train) != list(first.train)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))  # touched: rebuilt too
    _, (touched,) = data_cache.open_cache([cfg], load_text_splits)
    assert touched.directory not in (first.directory, edited.directory)
    other = Vocabularies.train(generate_pairs(300, seed=9), vocab_size=300)
    vocab, (with_other,) = data_cache.open_cache([cfg], load_text_splits, vocab=other)
    assert vocab is other and with_other.train.header["vocab"] != touched.train.header["vocab"]
    assert with_other.train[0] == tuple(tok.encode(x) for tok, x in zip((other.src, other.tgt),
                                                                        load_text_splits(cfg)[0]["train"][0]))


def test_a_damaged_entry_is_rebuilt(tmp_path, cache):
    cfg = _files_cfg(tmp_path)
    _, (first,) = data_cache.open_cache([cfg], load_text_splits)
    pairs = list(first.train)
    bin_file = next(first.directory.glob("ids-*")) / "tgt.bin"
    bin_file.write_bytes(bin_file.read_bytes()[:10])
    lines = io.StringIO()
    _, (again,) = data_cache.open_cache([cfg], load_text_splits, progress=lines)
    assert list(again.train) == pairs and "rebuilding a damaged cache entry" in lines.getvalue()


def test_a_damaged_text_record_is_a_corpus_error_naming_the_entry(tmp_path, cache):
    cfg = _files_cfg(tmp_path)
    _, (first,) = data_cache.open_cache([cfg], load_text_splits)
    (first.directory / "text.json").write_bytes(b"\xff not json")
    with pytest.raises(data_cache.CorpusError, match="a damaged data cache entry"):
        data_cache.open_cache([cfg], load_text_splits)


def test_bad_data_files_are_one_corpus_error_and_leave_no_entry(tmp_path, cache):
    cfg = _files_cfg(tmp_path)
    (tmp_path / "a.en").write_text("one line\n", encoding="utf-8")
    with pytest.raises(data_cache.CorpusError, match=r"line counts differ"):
        data_cache.open_cache([cfg], load_text_splits)
    assert not list(cache.glob("sources/*"))
    (tmp_path / "a.en").unlink()
    with pytest.raises(data_cache.CorpusError, match=r"a\.en: No such file"):
        data_cache.open_cache([cfg], load_text_splits)


def test_a_waiting_rank_uses_what_the_builder_publishes(tmp_path, cache):
    cfg = _files_cfg(tmp_path)
    lines = io.StringIO()
    result = {}
    waiter = threading.Thread(target=lambda: result.update(
        got=data_cache.open_cache([cfg], load_text_splits, build=False, progress=lines, poll=0.05)))
    waiter.start()
    time.sleep(0.3)
    assert waiter.is_alive() and "waiting for the first process" in lines.getvalue()
    _, (built,) = data_cache.open_cache([cfg], load_text_splits)
    waiter.join(timeout=30)
    assert list(result["got"][1][0].train) == list(built.train)


def test_a_second_builder_waits_for_the_lock(tmp_path):
    lines = io.StringIO()
    order = []
    with build_lock(tmp_path / ".lock"):
        second = threading.Thread(target=lambda: build_lock_and_record(tmp_path / ".lock", lines, order))
        second.start()
        time.sleep(0.3)
        order.append("first done")
    second.join(timeout=10)
    assert order == ["first done", "second"] and "waiting for" in lines.getvalue()


def build_lock_and_record(path, lines, order):
    with build_lock(path, stream=lines):
        order.append("second")


def _reference_batches(src_lens, tgt_lens, *, max_tokens, max_sentences, seed, shuffle):
    """Grouping as TokenBudgetBatches did with np.lexsort and a per-example loop (copied from before)."""
    n = len(src_lens)
    tie = np.random.default_rng([seed, 0, 0]).permutation(n) if shuffle else np.arange(n)
    order = np.lexsort((tie, np.where(src_lens % 2 == 1, -tgt_lens, tgt_lens), src_lens))
    cap, bounds, start, ms, mt = max_sentences or n, [0], 0, 0, 0
    for i, (s, t) in enumerate(zip(src_lens[order].tolist(), (tgt_lens[order] + 1).tolist())):
        if s + t > max_tokens:
            if i > start:
                bounds.append(i)
            bounds.append(i + 1)
            start, ms, mt = i + 1, 0, 0
            continue
        ms2, mt2 = max(ms, s), max(mt, t)
        if i - start + 1 > cap or (i - start + 1) * (ms2 + mt2) > max_tokens:
            bounds.append(i)
            start, ms2, mt2 = i, s, t
        ms, mt = ms2, mt2
    if bounds[-1] != n:
        bounds.append(n)
    return [order[a:b].tolist() for a, b in zip(bounds[:-1], bounds[1:])]


class _Lengths:
    def __init__(self, src, tgt):
        self.src, self.tgt = src, tgt

    def __len__(self):
        return len(self.src)

    def lengths(self):
        return self.src, self.tgt


@pytest.mark.parametrize("max_tokens, max_sentences, shuffle", [(64, None, True), (300, 7, True), (40, None, False),
                                                                  (5000, None, True)])
def test_grouping_equals_the_per_example_loop(max_tokens, max_sentences, shuffle):
    rng = np.random.default_rng(4)
    src = rng.integers(1, 50, 5000)
    tgt = np.clip(src + rng.integers(-8, 9, 5000), 0, None)
    src[:3] = 60  # alone over max_tokens=64 and 40: batches of their own
    with pytest.warns(UserWarning) if max_tokens < 100 else contextlib.nullcontext():
        batches = TokenBudgetBatches(_Lengths(src, tgt), max_tokens=max_tokens, max_sentences=max_sentences, pad_id=0,
                                     bos_id=1, eos_id=2, seed=3, shuffle=shuffle)
    expected = _reference_batches(src, tgt, max_tokens=max_tokens, max_sentences=max_sentences, seed=3, shuffle=shuffle)
    assert [b.tolist() for b in batches._batches] == expected

"""data.binarize: training from the memory-mapped cache gives what tokenizing in memory gave, for one
corpus and for a mix, in prepare_data, in the batches and in a training run; a second run reads no text.
(The format, the builder and the cache's invalidation: tests/test_binary_dataset.py.)"""

from __future__ import annotations

import dataclasses
import functools
import io
import json

import pytest

from transformer.corpus.builtin import generate_pairs
from transformer.data.indexed import IndexedPairs
from transformer.text import Vocabularies
from transformer.training import data_setup
from transformer.run.config import DataConfig, RunConfig, TrainConfig
from transformer.training.data_cache import DATA_CACHE_ENV
from transformer.training.data_setup import (
    TokenizerCoverageError, fallback_share, load_text_splits, make_batches, prepare_data)
from transformer.training.trainer import Trainer

TINY = ["data.builtin_train=600", "data.builtin_valid=30", "data.builtin_test=20", "data.vocab_size=400",
        "data.max_tokens=300", "model.preset=tiny", "train.warmup=20", "train.precision=fp32", "train.threads=1",
        "train.log_every=1", "train.eval_sentences=0"]
# no TensorBoard images of attention (most of a tiny run's time), where this version has them
QUIET = [f"train.{k}={v}" for k, v in (("tensorboard", "false"), ("alignment_sentences", "0"))
         if k in {f.name for f in dataclasses.fields(TrainConfig)}]


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv(DATA_CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache"


def _tsv(path, n, seed):
    path.write_text("".join(f"{s}\t{t}\n" for s, t in generate_pairs(n, seed=seed)), encoding="utf-8")
    return str(path)


def _same(a, b, *, epochs=(0, 2)):
    """Two PreparedData hold the same pairs, validation, statistics and batches."""
    assert list(a.train) == list(b.train) and a.valid == b.valid and a.valid_text == b.valid_text
    assert a.test_text == b.test_text and json.loads(json.dumps(a.stats)) == json.loads(json.dumps(b.stats))
    x, y = (make_batches(d, max_tokens=200, seed=5) for d in (a, b))
    for epoch in epochs:
        for p, q in zip(x.iter_from(epoch, 0), y.iter_from(epoch, 0)):
            assert all((getattr(p, k) == getattr(q, k)).all() for k in ("src", "tgt_in", "tgt_out"))
        assert sum(1 for _ in x.iter_from(epoch, 0)) == sum(1 for _ in y.iter_from(epoch, 0))


@pytest.mark.parametrize("corpus", ["builtin", "tsv"])
def test_cached_data_equals_data_tokenized_in_memory(tmp_path, corpus):
    extra = {"tsv": _tsv(tmp_path / "a.tsv", 500, 1), "valid_fraction": 0.1} if corpus == "tsv" else {}
    cfg = DataConfig(corpus=corpus, builtin_train=500, builtin_valid=20, vocab_size=400, max_len=12, max_ratio=1.5,
                     **extra)
    lines = io.StringIO()
    cached = prepare_data(cfg, progress=lines)
    assert isinstance(cached.train, IndexedPairs) and "tokenized training data made" in lines.getvalue()
    assert cached.stats["train_filter"]["too_long"] + cached.stats["train_filter"]["bad_ratio"] > 0  # filtering mattered
    in_memory = prepare_data(DataConfig(**{**vars(cfg), "binarize": False}), vocab=cached.vocab)
    _same(cached, in_memory)
    again = io.StringIO()
    _same(prepare_data(cfg, progress=again), in_memory)
    assert "tokenized training data reused" in again.getvalue() and "tokenizing" not in again.getvalue()


def test_a_mix_from_the_cache_equals_the_mix_in_memory(tmp_path):
    cfg = DataConfig(mix=f"builtin:0.7,{_tsv(tmp_path / 'b.tsv', 900, 2)}:0.3", builtin_train=300, builtin_valid=20,
                     vocab_size=400)
    cached = prepare_data(cfg)
    assert all(isinstance(p, IndexedPairs) for p in cached.parts) and len(cached.train) == sum(map(len, cached.parts))
    in_memory = prepare_data(DataConfig(**{**vars(cfg), "binarize": False}))
    assert cached.stats["mix"] == in_memory.stats["mix"]
    _same(cached, in_memory, epochs=(0, 1, 4))  # the second corpus is drawn anew each epoch, alike


def test_the_coverage_check_counts_memmapped_ids_as_it_counts_lists(tmp_path):
    cfg = DataConfig(corpus="tsv", tsv=_tsv(tmp_path / "a.tsv", 300, 3), vocab_size=400)
    foreign = Vocabularies.train([("xyz qvw", "zzq wvx")] * 50, vocab_size=280)  # knows almost none of French
    pairs = load_text_splits(cfg)[0]["train"]
    lists = [foreign.src.encode(s) for s, _ in pairs]
    share = fallback_share(foreign.src, lists)
    assert share > 0.5
    messages = []
    for binarize in (True, False):
        with pytest.raises(TokenizerCoverageError) as err:
            prepare_data(DataConfig(**{**vars(cfg), "binarize": binarize}), vocab=foreign, max_unknown=0.05)
        messages.append(str(err.value))
    assert messages[0] == messages[1] and f"{share:.1%}" in messages[0]


def _losses(run):
    return [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["kind"] == "train"]


def test_training_from_the_cache_is_training_from_memory_and_a_resume_reads_no_text(tmp_path, monkeypatch):
    cfg = RunConfig().with_overrides(TINY + ["train.max_steps=3"] + QUIET)
    Trainer(cfg.with_overrides(["data.binarize=false"]), tmp_path / "memory", show_progress=False).train()
    Trainer(cfg, tmp_path / "cached", show_progress=False).train()
    assert _losses(tmp_path / "cached") == _losses(tmp_path / "memory")

    @functools.wraps(load_text_splits)  # the cache key hashes the reader's source, not the wrapper's
    def no_reading(c):
        raise AssertionError("the corpus was read again")

    monkeypatch.setattr(data_setup, "load_text_splits", no_reading)
    # a resume tokenizes with the tokenizer saved in the run: the same fingerprint, the same ids
    Trainer(cfg, tmp_path / "cached", show_progress=False).close()
    assert len(list((tmp_path / "cache").glob("sources/*/ids-*"))) == 1

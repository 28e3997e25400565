"""BPE-dropout: plain BPE at p = 0 (against the tokenizers library), the paper's sampling at p > 0,
the same text whatever the split, batches segmented the same way when served again, and the
setting wired through the trainer with exact resume."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from trainer_helpers import Clock, records, train

from transformer.corpus.builtin import builtin_splits
from transformer.data import TokenBudgetBatches
from transformer.text import Vocabularies
from transformer.text.bpe_dropout import BPEDropout, dropout_segment, merge_ranks
from transformer.text.sentencepiece import SentencePieceTokenizer
from transformer.run.config import RunConfig
from transformer.training.data_setup import PreparedData, make_batches


@pytest.fixture(scope="module")
def corpus():
    pairs = builtin_splits(n_train=800, n_valid=0, n_test=0, seed=3, written_share=0)["train"]
    vocab = Vocabularies.train(pairs, vocab_size=400)
    examples = list(zip(vocab.src.encode_batch([s for s, _ in pairs]), vocab.tgt.encode_batch([t for _, t in pairs])))
    return vocab, examples


def test_no_dropout_is_the_tokenizers_bpe(corpus):
    vocab, examples = corpus
    plain = BPEDropout(examples, vocab.src, vocab.tgt, p=0.0, seed=0)
    assert plain.sample(range(len(examples)), np.random.default_rng(0)) == examples
    ranks, pieces = merge_ranks(vocab.src), vocab.src._hf.get_vocab()
    for word in ("▁voitures", "▁mangeaient", "▁the", "▁zzq"):
        expected = vocab.src.pieces(vocab.src.encode(word[1:]))
        assert dropout_segment(word, ranks, 0.0, random.Random(0)) == expected
        assert all(piece in pieces for piece in expected)


def test_dropout_spells_the_same_text_in_more_pieces(corpus):
    vocab, examples = corpus
    sampler = BPEDropout(examples, vocab.src, vocab.tgt, p=0.1, seed=0)
    out = sampler.sample(range(len(examples)), np.random.default_rng(1))
    assert len(out) == len(examples)
    changed = 0
    for (src, tgt), (src0, tgt0) in zip(out, examples):
        assert vocab.src.decode(src) == vocab.src.decode(src0) and vocab.tgt.decode(tgt) == vocab.tgt.decode(tgt0)
        assert max(src + tgt) < vocab.src.vocab_size and min(src + tgt) > 3  # no specials, no out-of-range ids
        changed += (src, tgt) != (src0, tgt0)
    assert 0.2 * len(examples) < changed < len(examples)
    # longer on the whole; a sentence may come out shorter (a skipped merge can let later merges join more)
    assert sum(len(s) + len(t) for s, t in out) > 1.02 * sum(len(s) + len(t) for s, t in examples)
    assert sampler.sample([5, 1], np.random.default_rng(7)) == sampler.sample([5, 1], np.random.default_rng(7))
    again = BPEDropout(examples, vocab.src, vocab.tgt, p=0.1, seed=0)  # the same seed draws the same segmentations
    assert again.sample(range(len(examples)), np.random.default_rng(1)) == out
    other = BPEDropout(examples, vocab.src, vocab.tgt, p=0.1, seed=1)
    assert other.sample(range(len(examples)), np.random.default_rng(1)) != out


def test_a_step_with_every_merge_skipped_ends_the_word():
    # "▁a" has one merge: it is skipped with probability p, and then the word stays in two pieces
    ranks, rng, p = {("▁", "a"): 0}, random.Random(0), 0.1
    split = sum(dropout_segment("▁a", ranks, p, rng) == ["▁", "a"] for _ in range(20000)) / 20000
    assert abs(split - p) < 0.01
    # a high probability leaves most words in characters
    ranks = {("a", "b"): 0, ("ab", "c"): 1, ("c", "d"): 2, ("abc", "d"): 3}
    assert dropout_segment("abcd", ranks, 0.0, rng) == ["abcd"]
    chars = sum(dropout_segment("abcd", ranks, 0.95, rng) == list("abcd") for _ in range(2000)) / 2000
    assert chars > 0.8


def test_batches_are_segmented_by_seed_epoch_and_batch(corpus):
    vocab, examples = corpus
    sampler = BPEDropout(examples, vocab.src, vocab.tgt, p=0.1, seed=0)
    ids = dict(pad_id=vocab.src.pad_id, bos_id=vocab.tgt.bos_id, eos_id=vocab.tgt.eos_id)
    batches = TokenBudgetBatches(examples, max_tokens=800, seed=4, segment=sampler.sample, **ids)
    plain = TokenBudgetBatches(examples, max_tokens=800, seed=4, **ids)
    epoch0 = list(batches.iter_from(0, 0))
    assert [b.src.shape[0] for b in epoch0] == [b.src.shape[0] for b in plain.iter_from(0, 0)]  # same grouping
    assert sum(not b.src.equal(p.src) if b.src.shape == p.src.shape else True
               for b, p in zip(epoch0, plain.iter_from(0, 0))) > len(epoch0) // 2
    resumed = list(batches.iter_from(0, 3))  # served again from the fourth batch: the same segmentations
    assert all(a.src.equal(b.src) and a.tgt_in.equal(b.tgt_in) for a, b in zip(epoch0[3:], resumed))
    assert len(resumed) == len(epoch0) - 3
    # another epoch segments the same sentences anew
    again = TokenBudgetBatches(examples, max_tokens=800, seed=4, segment=sampler.sample, **ids)
    by_batch = {tuple(i): n for n, i in enumerate(again.batch_indices(1))}
    epoch1 = list(again.iter_from(1, 0))
    differ = 0
    for n, indices in enumerate(batches.batch_indices(0)):
        b0, b1 = epoch0[n], epoch1[by_batch[tuple(indices)]]
        differ += b0.src.shape != b1.src.shape or not b0.src.equal(b1.src)
    assert differ > len(epoch0) // 2
    # the ranks of a sharded run see the segmentations a single process sees at the same positions
    ranks = [TokenBudgetBatches(examples, max_tokens=800, seed=4, segment=sampler.sample, rank=r, world_size=2,
                                **ids) for r in (0, 1)]
    for r, shard in enumerate(ranks):
        for a, b in zip(shard.iter_from(0, 0), epoch0[r::2]):
            assert a.src.equal(b.src) and a.tgt_out.equal(b.tgt_out)


def test_segmented_batches_are_budgeted_by_their_expected_lengths(corpus):
    vocab, examples = corpus
    plain_src = np.array([len(s) for s, _ in examples])
    plain_tgt = np.array([len(t) for _, t in examples])
    src, tgt = BPEDropout(examples, vocab.src, vocab.tgt, p=0.0, seed=0).expected_lengths()
    assert src.tolist() == plain_src.tolist() and tgt.tolist() == plain_tgt.tolist()
    sampler = BPEDropout(examples, vocab.src, vocab.tgt, p=0.1, seed=0)
    src, tgt = sampler.expected_lengths()
    assert (src >= plain_src).all() and (tgt >= plain_tgt).all()
    assert src.sum() > 1.05 * plain_src.sum()  # the dropped merges lengthen the sentences
    drawn = sampler.sample(range(len(examples)), np.random.default_rng(1))
    assert abs(sum(len(s) for s, _ in drawn) - src.sum()) < 0.02 * src.sum()  # as long as expected

    ids = dict(pad_id=vocab.src.pad_id, bos_id=vocab.tgt.bos_id, eos_id=vocab.tgt.eos_id)

    def mean_cost(**kw):
        batches = TokenBudgetBatches(examples, max_tokens=800, seed=4, segment=sampler.sample, **ids, **kw)
        costs = [b.src.numel() + b.tgt_in.numel() for e in range(3) for b in batches.iter_from(e, 0)]
        return sum(costs) / len(costs)

    assert mean_cost() > 1.1 * 800  # budgeted by the plain lengths, the segmented batches run over
    # a batch is padded to its longest drawn sentence, so a few percent over on average
    assert mean_cost(lengths=(src, tgt)) <= 1.05 * 800
    with pytest.raises(ValueError, match="the target lengths must be 800 non-negative integers"):
        TokenBudgetBatches(examples, max_tokens=800, lengths=(src, tgt[:-1]), **ids)
    # the trainer's batches (make_batches) are budgeted by those lengths
    data = PreparedData(vocab=vocab, train=examples, valid=[], valid_text=[])
    budgeted = make_batches(data, max_tokens=800, seed=0, bpe_dropout=0.1).batch_costs()
    assert budgeted == TokenBudgetBatches(examples, max_tokens=800, seed=0, lengths=(src, tgt), **ids).batch_costs()


def test_bad_settings_are_refused(corpus):
    vocab, examples = corpus
    for p in (1.0, -0.1):
        with pytest.raises(ValueError, match=r"probability must be in \[0, 1\)"):
            BPEDropout(examples, vocab.src, vocab.tgt, p=p)
    spm = SentencePieceTokenizer.__new__(SentencePieceTokenizer)
    with pytest.raises(ValueError, match="BPE-dropout needs the project's BPE tokenizer, not SentencePieceTokenizer"):
        BPEDropout(examples, spm, spm, p=0.1)
    for value in ("1", "-0.5"):
        with pytest.raises(ValueError, match="data.bpe_dropout"):
            RunConfig().with_overrides([f"data.bpe_dropout={value}"])
    with pytest.raises(ValueError, match="data.bpe_dropout does not work with data.mix"):
        RunConfig().with_overrides(["data.bpe_dropout=0.1", "data.mix=builtin:0.5,builtin:0.5"])


def test_trainer_with_bpe_dropout_resumes_exactly(tmp_path):
    # the plain corpus: its alphabet leaves the tiny vocabulary merges for dropout to drop
    settings = ("data.builtin_written=0", "data.bpe_dropout=0.1", "train.max_steps=8", "train.save_every=3")
    plain = records(train(tmp_path / "plain", "data.builtin_written=0", "train.max_steps=8").run_dir)
    straight = train(tmp_path / "straight", *settings)
    with pytest.raises(KeyboardInterrupt):  # stopped after step 5, past the checkpoint of step 3
        train(tmp_path / "stopped", *settings, clock=Clock(fail_at=5.0))
    resumed = train(tmp_path / "stopped", *settings)
    assert resumed.resumed_from == 3
    a, b = records(straight.run_dir), records(tmp_path / "stopped")
    assert sorted(a) == sorted(b) == list(range(1, 9))
    for step in a:
        assert b[step]["loss"] == a[step]["loss"] and not math.isnan(a[step]["loss"]), step
    assert a[1]["loss"] != plain[1]["loss"]  # the batches were segmented with dropout

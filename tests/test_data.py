"""Filtering, padding and token-budget batching (reading is tested in test_corpus_files.py)."""

from __future__ import annotations

import gzip
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from work_helpers import python_lines

from transformer import data
from transformer.data import Batch, FilterStats, TokenBudgetBatches, filter_examples, make_batch
from transformer.model.masks import padding_mask

PAD, BOS, EOS = 0, 1, 2


def realistic_examples(n: int, seed: int = 0) -> list[tuple[list[int], list[int]]]:
    """Sentence-like lengths: log-normal source (median 12), target ~ source * noise; ids unique per example."""
    rng = np.random.default_rng(seed)
    s = np.clip(np.round(rng.lognormal(np.log(12), 0.35, n)), 1, 60).astype(int)
    t = np.clip(np.round(s * rng.lognormal(0.05, 0.2, n)), 1, 80).astype(int)
    # first source token encodes the example index, so a batch row identifies its example
    return [([3 + i] + [5] * (a - 1), [4] * b) for i, (a, b) in enumerate(zip(s.tolist(), t.tolist()))]


def example_ids(batch: Batch) -> list[int]:
    return (batch.src[:, 0] - 3).tolist()


def make_batches(examples, **kw) -> TokenBudgetBatches:
    kw = {"max_tokens": 600, "pad_id": PAD, "bos_id": BOS, "eos_id": EOS, **kw}
    return TokenBudgetBatches(examples, **kw)


# ----------------------------------------------------------------------------- reading re-exports


def test_reading_reexported_from_data(tmp_path: Path) -> None:
    (tmp_path / "s.gz").write_bytes(gzip.compress(b"a b\n"))
    (tmp_path / "t").write_text("c d\n", encoding="utf-8")
    pairs, stats = data.read_parallel(tmp_path / "s.gz", tmp_path / "t")
    assert pairs == [("a b", "c d")] and stats.n_kept == 1
    assert issubclass(data.CorpusError, ValueError)


# ----------------------------------------------------------------------------- filtering


def test_filter_examples_counts_each_reason_once() -> None:
    examples = [
        ([5, 6], [7, 8, 9]),  # 0 kept
        ([], [7]),  # 1 empty
        ([5], []),  # 2 empty
        ([5] * 6, [7]),  # 3 too long (and bad ratio: counted as too long only)
        ([5], [7] * 4),  # 4 bad ratio 4 > 3
        ([5], [7] * 3),  # 5 ratio exactly 3: kept
        ([5] * 5, [7] * 5),  # 6 exactly max_len: kept
    ]
    kept, stats = filter_examples(examples, max_len=5, max_ratio=3.0)
    assert kept == [0, 5, 6]
    assert stats == FilterStats(kept=3, too_long=1, bad_ratio=1, empty=2)
    assert (stats.dropped, stats.total) == (4, 7)
    kept, stats = filter_examples(examples, max_len=5)
    assert kept == [0, 4, 5, 6] and stats.bad_ratio == 0
    with pytest.raises(ValueError):
        filter_examples(examples, max_len=5, max_ratio=0.5)


# ----------------------------------------------------------------------------- make_batch


def test_make_batch_teacher_forcing_hand_example() -> None:
    batch = make_batch([([10, 11, 12], [20, 21]), ([13], [22, 23, 24, 25])], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert batch.src.tolist() == [[10, 11, 12], [13, 0, 0]]
    assert batch.src_mask.tolist() == [[True, True, True], [True, False, False]]
    assert batch.tgt_in.tolist() == [[1, 20, 21, 0, 0], [1, 22, 23, 24, 25]]
    assert batch.tgt_out.tolist() == [[20, 21, 2, 0, 0], [22, 23, 24, 25, 2]]
    assert batch.src.dtype == batch.tgt_in.dtype == batch.tgt_out.dtype == torch.long
    assert batch.src_mask.dtype == torch.bool
    assert torch.equal(batch.src_mask, padding_mask(batch.src, PAD))
    assert (batch.n_src_tokens, batch.n_tgt_tokens, len(batch)) == (4, 8, 2)
    # decoder-input padding coincides with target-output padding
    assert torch.equal(batch.tgt_in != PAD, batch.tgt_out != PAD)
    moved = batch.to("cpu")
    assert torch.equal(moved.tgt_out, batch.tgt_out) and moved.n_tgt_tokens == 8


def test_make_batch_empty_target_and_rejections() -> None:
    batch = make_batch([([7], [])], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    assert batch.tgt_in.tolist() == [[BOS]] and batch.tgt_out.tolist() == [[EOS]]
    with pytest.raises(ValueError, match="empty source"):
        make_batch([([7], [8]), ([], [8])], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError, match="pad_id"):
        make_batch([([7, PAD], [8])], pad_id=PAD, bos_id=BOS, eos_id=EOS)
    with pytest.raises(ValueError):
        make_batch([], pad_id=PAD, bos_id=BOS, eos_id=EOS)


# ----------------------------------------------------------------------------- TokenBudgetBatches


def test_every_batch_within_budget_except_oversize_singletons() -> None:
    examples = realistic_examples(3000)
    examples[17] = ([3 + 17] + [5] * 400, [4] * 300)  # alone costs 701 > 600
    with pytest.warns(UserWarning, match="1 example"):
        tb = make_batches(examples, max_sentences=40)
    assert tb.n_oversize == 1
    n_over = 0
    for batch in tb:
        cost = batch.src.numel() + batch.tgt_out.numel()
        assert cost == batch.src.shape[0] * (batch.src.shape[1] + batch.tgt_out.shape[1])
        assert len(batch) <= 40
        if cost > 600:
            n_over += 1
            assert len(batch) == 1 and example_ids(batch) == [17]
    assert n_over == 1
    assert max(c for c in tb.batch_costs() if c <= 600) > 500  # batches are actually filled


def test_every_example_exactly_once_per_epoch_and_batches_match_plan() -> None:
    examples = realistic_examples(2000)
    tb = make_batches(examples)
    for epoch in (0, 1):
        tb.set_epoch(epoch)
        seen = [i for batch in tb for i in example_ids(batch)]
        assert sorted(seen) == list(range(len(examples)))
        plan = tb.batch_indices(epoch)
        assert [i for b in plan for i in b] == seen
    assert len(tb) == tb.num_batches_total == len(plan)


def test_batch_contents_match_examples() -> None:
    examples = realistic_examples(500)
    tb = make_batches(examples)
    for batch, idx in zip(tb, tb.batch_indices(0)):
        for row, i in enumerate(idx):
            src, tgt = examples[i]
            assert batch.src[row, : len(src)].tolist() == src and not batch.src_mask[row, len(src) :].any()
            assert batch.tgt_out[row, : len(tgt) + 1].tolist() == tgt + [EOS]


def test_determinism_epoch_and_seed() -> None:
    examples = realistic_examples(2000)
    a, b = make_batches(examples, seed=3), make_batches(examples, seed=3)
    assert a.batch_indices(0) == b.batch_indices(0)
    assert [x.src.tolist() for x in a] == [x.src.tolist() for x in b]
    assert a.batch_indices(0) != a.batch_indices(1)  # different epoch: different order ...
    assert sorted(map(tuple, a.batch_indices(0))) == sorted(map(tuple, a.batch_indices(1)))  # ... same batches
    assert make_batches(examples, seed=4).batch_indices(0) != a.batch_indices(0)
    # global RNG state plays no part
    torch.manual_seed(123)
    np.random.seed(123)
    assert make_batches(examples, seed=3).batch_indices(1) == a.batch_indices(1)


def test_no_shuffle_is_length_sorted() -> None:
    examples = realistic_examples(1000)
    tb = make_batches(examples, shuffle=False)
    firsts = [len(examples[b[0]][0]) for b in tb.batch_indices(0)]
    assert firsts == sorted(firsts) and tb.batch_indices(0) == tb.batch_indices(5)


def test_iter_from_is_the_tail_of_the_epoch() -> None:
    examples = realistic_examples(1500)
    tb = make_batches(examples, seed=7)
    full = [example_ids(b) for b in tb.iter_from(2, 0)]
    assert len(full) == len(tb)
    for k in (0, 1, 5, len(tb) - 1, len(tb)):
        assert [example_ids(b) for b in tb.iter_from(2, k)] == full[k:]
    tb.set_epoch(2)
    assert [example_ids(b) for b in tb] == full
    with pytest.raises(ValueError):
        tb.iter_from(2, len(tb) + 1)


def test_two_rank_sharding() -> None:
    examples = realistic_examples(2000)
    single = make_batches(examples, seed=5)
    ranks = [make_batches(examples, seed=5, rank=r, world_size=2) for r in (0, 1)]
    for epoch in (0, 1, 2):
        order = single.batch_indices(epoch)
        kept = order[: len(order) // 2 * 2]
        shares = [r.batch_indices(epoch) for r in ranks]
        assert len(shares[0]) == len(shares[1]) == len(ranks[0]) == len(order) // 2
        assert shares[0] == kept[0::2] and shares[1] == kept[1::2]
        ids = [[i for b in share for i in b] for share in shares]
        assert not set(ids[0]) & set(ids[1])
        dropped = {i for b in order[len(kept) :] for i in b}
        assert set(ids[0]) | set(ids[1]) | dropped == set(range(len(examples)))
        # the tensors served match the plan
        assert [i for b in ranks[1].iter_from(epoch, 0) for i in example_ids(b)] == ids[1]


def test_sharding_with_odd_batch_count_drops_tail() -> None:
    examples = realistic_examples(2000)
    for max_tokens in range(600, 700, 7):
        tb = make_batches(examples, max_tokens=max_tokens)
        if tb.num_batches_total % 2 == 1:
            break
    else:
        raise AssertionError("no budget in 600..699 gives an odd batch count; pick another range")
    r0 = make_batches(examples, max_tokens=max_tokens, rank=0, world_size=2)
    r1 = make_batches(examples, max_tokens=max_tokens, rank=1, world_size=2)
    assert len(r0) == len(r1) == tb.num_batches_total // 2
    covered = {i for r in (r0, r1) for b in r.batch_indices(0) for i in b}
    assert covered | set(tb.batch_indices(0)[-1]) == set(range(len(examples)))
    assert not covered & set(tb.batch_indices(0)[-1])


def test_bad_arguments() -> None:
    examples = realistic_examples(50)
    with pytest.raises(ValueError):
        make_batches(examples, rank=2, world_size=2)
    with pytest.raises(ValueError, match="empty source"):
        make_batches(examples + [([], [4])])
    with pytest.raises(ValueError, match="world_size"):
        make_batches(examples[:1], world_size=2)


def test_padding_fraction_small_on_realistic_lengths() -> None:
    examples = realistic_examples(29_000)
    tb = make_batches(examples, max_tokens=4096)
    # the pad positions of the tensors built (source and one target tensor)
    pads = sum(int((b.src == PAD).sum() + (b.tgt_out == PAD).sum()) for b in tb)
    frac = pads / sum(b.src.numel() + b.tgt_out.numel() for b in tb)
    assert frac < 0.10
    # unsorted batches of the same sizes would pad far more: the grouping is doing the work
    assert frac < 0.5 * _random_grouping_padding(examples, tb)


def _random_grouping_padding(examples, tb: TokenBudgetBatches) -> float:
    perm = np.random.default_rng(0).permutation(len(examples))
    padded = real = 0
    start = 0
    for idx in tb.batch_indices(0):
        group = perm[start : start + len(idx)]
        start += len(idx)
        s = [len(examples[i][0]) for i in group]
        t = [len(examples[i][1]) + 1 for i in group]
        padded += len(group) * (max(s) + max(t))
        real += sum(s) + sum(t)
    return 1 - real / padded


def test_batching_takes_a_few_python_steps_per_example() -> None:
    """Grouping, cutting and padding are array operations per batch; what runs example by example in
    Python is only reading its two lengths and gathering its ids into its batch. Counted in executed
    Python lines, not seconds, so a loaded machine cannot fail it; a cut or a padding that loops over
    the examples in Python runs more."""
    examples = realistic_examples(29_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        lines, batches = python_lines(lambda: list(make_batches(examples, max_tokens=4096)))
    assert sum(len(b) for b in batches) == 29_000
    assert lines <= 8 * 29_000, f"grouping + building {len(batches)} batches ran {lines / 29_000:.1f} lines per example"

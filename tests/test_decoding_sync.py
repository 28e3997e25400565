"""Checking for finished sentences every few steps (``sync_every``, the GPU's way: a check makes the
host wait for the device) gives exactly the results of checking at every step: greedy, beam (exact
and k-finished stopping, n-best), sampling, on a batch whose sentences end at many different steps.
"""

import pytest
import torch
from decoding_helpers import BOS, EOS, make_batch, make_model
from dispatch_helpers import OperatorLog

from transformer.decoding import DecodeConfig, beam_search, decode, greedy_search, sample

LENGTHS = (8, 3, 6, 1, 7, 2, 5, 4, 8, 3)


def same(a, b):
    """Hypotheses equal: tokens exactly, scores to float64 rounding."""
    assert [h.tokens for h in a] == [h.tokens for h in b]
    assert [h.score for h in a] == pytest.approx([h.score for h in b], abs=1e-12)
    assert [h.log_prob for h in a] == pytest.approx([h.log_prob for h in b], abs=1e-12)


@pytest.mark.parametrize("seed", [0, 1, 3])
@pytest.mark.parametrize("every", [2, 3, 8, 1000])
def test_greedy_checking_every_few_steps_equals_every_step(seed, every):
    model = make_model(seed, eos_bias=0.3)
    src, mask = make_batch(seed, lengths=LENGTHS)
    want = greedy_search(model, src, mask, bos_id=BOS, eos_id=EOS, max_len_b=6)
    got = greedy_search(model, src, mask, bos_id=BOS, eos_id=EOS, max_len_b=6, sync_every=every)
    assert len({len(h.tokens) for h in want}) > 2  # sentences end at different steps
    same(got, want)


@pytest.mark.parametrize("seed", [0, 1, 3])
@pytest.mark.parametrize("every", [2, 5, 1000])
@pytest.mark.parametrize("stopping,n_best", [("exact", 1), ("exact", 3), ("k_finished", 2)])
def test_beam_checking_every_few_steps_equals_every_step(seed, every, stopping, n_best):
    model = make_model(seed, eos_bias=0.3)
    src, mask = make_batch(seed, lengths=LENGTHS)
    kwargs = dict(bos_id=BOS, eos_id=EOS, beam_size=3, n_best=n_best, max_len_b=7, stopping=stopping)
    want = beam_search(model, src, mask, **kwargs)
    got = beam_search(model, src, mask, sync_every=every, **kwargs)
    for g, w in zip(got, want):
        same(g, w)


@pytest.mark.parametrize("every", [3, 1000])
def test_sampling_checking_every_few_steps_equals_every_step(every):
    model = make_model(4, eos_bias=0.6)
    src, mask = make_batch(4, lengths=LENGTHS)
    kwargs = dict(bos_id=BOS, eos_id=EOS, n=3, seed=11, top_p=0.9, max_len_b=6)
    for g, w in zip(sample(model, src, mask, sync_every=every, **kwargs), sample(model, src, mask, **kwargs)):
        same(g, w)


def test_decode_passes_it_on_and_bad_values_are_refused():
    model = make_model(1)
    src, mask = make_batch(1, lengths=LENGTHS)
    cfg = DecodeConfig(strategy="beam", beam_size=2)
    want = decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS)
    got = decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS, sync_every=4)
    for g, w in zip(got, want):
        same(g, w)
    for bad in (0, -1, 2.5):
        with pytest.raises(ValueError, match="sync_every"):
            decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS, sync_every=bad)
        with pytest.raises(ValueError, match="sync_every"):
            decode(model, src, mask, DecodeConfig(strategy="greedy"), bos_id=BOS, eos_id=EOS, sync_every=bad)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_checking_every_eight_steps_reads_back_far_less(strategy, monkeypatch):
    """The point of it: reads back from the device once per check, not once per step. (On CPU tensors
    the beam search also reads whether any hypothesis finished, to skip bookkeeping; a GPU does not.)"""
    from transformer.model.transformer import Transformer

    check_ids = Transformer._check_ids  # its range check reads ids back on CPU tensors only: shapes, as on CUDA
    monkeypatch.setattr(Transformer, "_check_ids", staticmethod(lambda ids, *a: check_ids(ids.to("meta"), *a)))
    model = make_model(2, eos_bias=-3.0)  # long outputs: many steps
    src, mask = make_batch(2, lengths=LENGTHS)
    cfg = DecodeConfig(strategy=strategy, beam_size=3, max_len_b=30)
    counts = {}
    for every in (1, 8):
        with OperatorLog() as log:
            decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS, sync_every=every)
        counts[every] = len(log.syncs())
    # greedy: one read per step against one per 8; beam on CPU tensors: two against about one
    assert counts[8] < counts[1] * (0.25 if strategy == "greedy" else 0.6), counts
    assert counts[8] > 0

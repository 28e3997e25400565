"""The decoders' static paths give the tokens of the model's own growing cache, on the CPU.

* ``static_cache=True`` (the default): ``DecoderSteps`` with keys and values allocated once per
  batch, a reorder copying only the positions stored (``transformer/decoding/steps.py``);
* the CUDA engine's ``StaticSteps`` run eagerly (``transformer/cuda/decoding_steps.py``: fixed
  shapes, the position a tensor, the memory's padding a bias made once, grouped cross-attention
  on views);
* the same with every shape's step function kept and called again, as a CUDA graph replays what
  it captured: a step that read anything but its fixed buffers would go wrong here.

Each against ``static_cache=False`` on a small float64 model with random weights, on batches of
sentences of mixed lengths whose outputs end at many steps and run past the first position
bucket: greedy, beam, n-best, k-finished stopping, constraints, sampling; token for token,
scores to float64 rounding. The CUDA graphs themselves: tests/test_cuda.py, on a GPU.
"""

import pytest
import torch
from decoding_helpers import BOS, EOS, make_batch, make_model

from transformer.cpu import build, prepare_for_decoding
from transformer.cuda import decoding_steps
from transformer.cuda.decoding_steps import StaticSteps, accelerate_decoding
from transformer.decoding import DecodeConfig, beam_search, decode
from transformer.decoding.steps import DecoderSteps, StaticKVCache

LENGTHS = (8, 3, 6, 1, 7, 2, 5, 4, 8, 3)
CONSTRAINTS = [[[5, 6]], [], [[7]], [[9, 3], [4]], [], [[11]], [], [[12, 13, 14]], [[8]], []]
CONFIGS = {
    "greedy": DecodeConfig(strategy="greedy", max_len_b=40),
    "beam": DecodeConfig(strategy="beam", beam_size=4, max_len_b=40),
    "n-best": DecodeConfig(strategy="beam", beam_size=4, n_best=3, max_len_b=40),
    "k-finished": DecodeConfig(strategy="beam", beam_size=3, n_best=2, stopping="k_finished", max_len_b=40),
    "sample": DecodeConfig(strategy="sample", n_best=2, seed=5, top_p=0.9, max_len_b=40),
}


class Replayed(StaticSteps):
    """``StaticSteps`` whose "graphs" run on the CPU: each shape's step function is warmed up once,
    then "captured" (kept) and called again for every later step of that shape, as a replay."""

    GRAPH_DEVICES = ("cpu",)
    shapes: set = set()

    def _warm_up(self, step):
        return step()

    def _capture(self, step):
        Replayed.shapes.add(next(key for key, f in self._functions.items() if f is step))
        return step


def decode_all(model, sync_every=1, names=(*CONFIGS, "constraints"), **options):
    """The configurations ``names`` (of ``CONFIGS``, and "constraints": constrained beam search,
    n-best 2) on one mixed-length batch."""
    src, mask = make_batch(3, lengths=LENGTHS)
    found = {name: decode(model, src, mask, CONFIGS[name], bos_id=BOS, eos_id=EOS, sync_every=sync_every, **options)
             for name in names if name in CONFIGS}
    if "constraints" in names:
        found["constraints"] = beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=4, n_best=2,
                                           max_len_b=40, constraints=CONSTRAINTS, sync_every=sync_every, **options)
    return found


def assert_same(got, want):
    for name in want:
        for g, w in zip(got[name], want[name], strict=True):
            assert [h.tokens for h in g] == [h.tokens for h in w], name
            assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-9), name
            assert [h.log_prob for h in g] == pytest.approx([h.log_prob for h in w], abs=1e-9), name
            assert [h.unmet for h in g] == [h.unmet for h in w], name


@pytest.fixture(scope="module")
def model():
    return make_model(7, eos_bias=-0.4)


@pytest.fixture(scope="module")
def reference(model):
    """The model's own cache; and the batch is what the tests need."""
    found = decode_all(model, static_cache=False)
    lengths = [len(h[0].tokens) for h in found["beam"]]
    assert len(set(lengths)) > 4 and max(lengths) > 32, lengths  # endings at many steps, past 32 positions
    assert any(h[0].unmet == () for h, c in zip(found["constraints"], CONSTRAINTS) if c)
    return found


def test_the_static_cache_gives_the_models_tokens(model, reference):
    assert_same(decode_all(model), reference)


def test_the_static_steps_give_the_models_tokens(model, reference):
    swaps = accelerate_decoding(model, graphs=False)
    try:
        assert_same(decode_all(model), reference)
    finally:
        swaps.undo()


@pytest.mark.parametrize("sync_every", [1, 4], ids=["check every step", "check every 4 steps"])
def test_the_static_steps_replayed_as_graphs_give_the_models_tokens(model, reference, monkeypatch, sync_every):
    """As on a GPU: the steps' "graphs", and finished sentences leaving every few steps (the same
    results as at every step: tests/test_decoding_sync.py)."""
    want = reference
    monkeypatch.setattr(decoding_steps, "StaticSteps", Replayed)
    Replayed.shapes = set()
    swaps = accelerate_decoding(model)
    try:
        assert_same(decode_all(model, sync_every=sync_every), want)
    finally:
        swaps.undo()
    positions = {key[2] for key in Replayed.shapes}
    key_sets = {key[3] for key in Replayed.shapes}
    assert len(positions) > 1 and key_sets == {0, 1}, Replayed.shapes  # replays across buckets and both sets
    assert len({key[0] for key in Replayed.shapes}) > 2  # and for fewer rows as sentences left


def test_the_engine_is_asked_only_for_static_steps_and_undone(model):
    src, mask = make_batch(1, lengths=(3, 2))
    memory = model.encode(src, mask)
    swaps = accelerate_decoding(model)
    try:
        with torch.inference_mode():
            steps = model.decoder_steps(memory, mask, steps=5, rows=8)
        assert isinstance(steps, StaticSteps) and not steps.graphs  # graphs on CUDA only
        with torch.no_grad(), torch.autocast("cpu"):
            assert model.decoder_steps(memory, mask, steps=5, rows=8) is None  # autocast: the decoders' own steps
        assert model.decoder_steps(memory.detach(), mask, steps=5, rows=8) is None  # autograd on
    finally:
        swaps.undo()
    assert not hasattr(model, "decoder_steps")


def test_static_steps_round_memory_rows_up_to_the_batch_halved():
    steps = StaticSteps.__new__(StaticSteps)
    steps.first_memory_rows = 100
    assert [steps._memory_rows_run(m) for m in (100, 51, 50, 26, 25, 13, 7, 4, 2, 1)] == \
        [100, 100, 50, 50, 25, 13, 7, 4, 2, 1]


def test_a_reorder_copies_only_the_stored_positions():
    cache = StaticKVCache(10)
    k = torch.randn(3, 2, 4, 5)
    cache.append(k, k + 1)
    first = cache.key_buffer  # (3, 2, 10, 5)
    first[:, :, 4:] = 7.0  # not stored yet: a reorder into this buffer leaves it so
    cache.reorder(torch.tensor([2, 0, 0]))  # into a new buffer
    cache.append(torch.zeros(3, 2, 1, 5), torch.zeros(3, 2, 1, 5))  # 5 positions stored
    cache.reorder(torch.tensor([1, 2]))  # back into the first buffer
    keys = cache.key_buffer
    assert keys.shape == (2, 2, 10, 5) and keys.data_ptr() == first.data_ptr()
    assert torch.equal(keys[:, :, :4], k[[0, 0]]) and torch.equal(keys[:, :, 4], torch.zeros(2, 2, 5))
    assert torch.equal(keys[:, :, 5:], torch.full((2, 2, 5, 5), 7.0))
    with pytest.raises(ValueError, match="static cache holds 10 positions"):
        cache.append(torch.zeros(2, 2, 6, 5), torch.zeros(2, 2, 6, 5))


def test_the_static_cache_never_grows(model, monkeypatch):
    src, mask = make_batch(2, lengths=LENGTHS)
    capacities = []
    reserve = StaticKVCache.reserve

    def watch(self, k, value_size):
        keys, values = reserve(self, k, value_size)
        capacities.append(keys.shape[2])
        return keys, values

    monkeypatch.setattr(StaticKVCache, "reserve", watch)
    found = decode(model, src, mask, DecodeConfig(strategy="beam", max_len_b=40), bos_id=BOS, eos_id=EOS)
    assert set(capacities) == {max(LENGTHS) + 40} and max(len(h[0].tokens) for h in found) > 8


@pytest.mark.skipif(not build.available(), reason="the CPU engine's kernels are not built here")
@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_with_the_cpu_engines_kernels_the_static_cache_gives_the_same_tokens(precision):
    """What the Translator runs on a CPU: the engine's decoder-layer step writes into the static cache."""
    model = make_model(7, eos_bias=-0.4).float()
    swaps = prepare_for_decoding(model, precision=precision)
    names = ("greedy", "beam", "constraints")
    try:
        want = decode_all(model, names=names, static_cache=False)
        got = decode_all(model, names=names)
    finally:
        swaps.undo()
    for name in want:
        for g, w in zip(got[name], want[name], strict=True):
            assert [h.tokens for h in g] == [h.tokens for h in w], name
            assert [h.score for h in g] == pytest.approx([h.score for h in w], abs=1e-4), name


def test_decoder_steps_refuse_a_bad_number_of_rows(model):
    src, mask = make_batch(1, lengths=(3, 2))
    with torch.inference_mode():
        steps = StaticSteps(model, model.encode(src, mask), mask, steps=3, rows=4, graphs=False)
        with pytest.raises(ValueError, match="cannot share 2 memory rows"):
            steps.logits(torch.tensor([BOS, BOS, BOS]))
        for _ in range(3):
            steps.logits(torch.tensor([BOS, BOS]))
        with pytest.raises(ValueError, match="hold 3 positions, all written"):
            steps.logits(torch.tensor([BOS, BOS]))
    assert isinstance(DecoderSteps(model, src, mask, steps=3).cache.self_attn[0], StaticKVCache)

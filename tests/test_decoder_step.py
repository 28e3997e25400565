"""A decoder layer's step in one compiled call (packed_linear.decoder_layer_step) against the
layer's PyTorch forward pass, step by step with the cache, and where it steps aside."""

import pytest
import torch
from torch import nn

from transformer.config import ModelConfig
from transformer.decoding import beam_search, greedy_search, sample
from transformer.model.masks import key_mask_for_attention
from transformer.model import Transformer, packed_linear
from transformer.model.cache import KVCache
from transformer.model.layers import DecoderLayer

pytestmark = pytest.mark.skipif(not packed_linear.enabled(), reason="compiled CPU kernels unavailable (no C compiler)")


def _layer(norm_first: bool, d_model: int = 32, d_ff: int = 48, activation: str = "relu") -> DecoderLayer:
    torch.manual_seed(0)
    layer = DecoderLayer(d_model=d_model, n_heads=4, d_ff=d_ff, norm_first=norm_first, activation=activation).eval()
    for name, p in layer.named_parameters():  # non-trivial biases and LayerNorm parameters
        if "norm" in name or name.endswith("bias"):
            nn.init.normal_(p, mean=1.0 if name.endswith("norm.weight") else 0.0, std=0.3)
    return layer


def _run(layer: DecoderLayer, xs: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, *, fused: bool):
    """Feeds xs (B, T, E) one position at a time; returns the outputs (B, T, E) and the cache."""
    B, T, _ = xs.shape
    cache = KVCache(initial_capacity=2)  # grows during the run
    memory_kv = layer.cross_attn.memory_kv(memory)
    memory_mask = key_mask_for_attention(src_mask)
    outputs = []
    for t in range(T):
        x = xs[:, t:t + 1].contiguous()
        if fused:
            assert packed_linear.can_step(layer, x, cache, memory_kv, memory_mask)
            outputs.append(packed_linear.decoder_layer_step(layer, x, cache, memory_kv, memory_mask))
        else:
            outputs.append(layer(x, memory, memory_mask=memory_mask, self_cache=cache, memory_kv=memory_kv)[0])
    return torch.cat(outputs, dim=1), cache


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("d_ff", [48, 16])  # d_ff < d_model too
def test_step_equals_the_layer(norm_first, beams, d_ff):
    layer = _layer(norm_first, d_ff=d_ff)
    torch.manual_seed(1)
    M, S, T = 2, 9, 6
    memory = torch.randn(M, S, 32)
    src_mask = torch.ones(M, S, dtype=torch.bool)
    src_mask[1, 5:] = False
    xs = torch.randn(M * beams, T, 32)
    with torch.no_grad(), packed_linear.packing():
        fused, fused_cache = _run(layer, xs, memory, src_mask, fused=True)
    with torch.no_grad():
        expected, cache = _run(layer, xs, memory, src_mask, fused=False)
    torch.testing.assert_close(fused, expected, rtol=1e-4, atol=1e-5)
    assert fused_cache.length == cache.length == T
    for a, b in zip(fused_cache.reserve(xs.new_empty(M * beams, 4, 0, 8), 8), cache.reserve(xs.new_empty(M * beams, 4, 0, 8), 8)):
        torch.testing.assert_close(a[:, :, :T], b[:, :, :T], rtol=1e-5, atol=1e-5)  # the same keys and values cached


@pytest.mark.parametrize("norm_first", [False, True])
def test_step_with_int8_weights_equals_the_layer_with_those_weights(norm_first):
    import copy

    from tests.test_packed_linear import dequantized

    layer = _layer(norm_first)
    reference = copy.deepcopy(layer)
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(dequantized(module.weight))
    torch.manual_seed(2)
    M, beams, S, T = 2, 2, 7, 5
    memory = torch.randn(M, S, 32)
    src_mask = torch.ones(M, S, dtype=torch.bool)
    src_mask[0, 4:] = False
    xs = torch.randn(M * beams, T, 32)
    with torch.no_grad(), packed_linear.packing(int8=True):
        fused, _ = _run(layer, xs, memory, src_mask, fused=True)
    with torch.no_grad():
        expected, _ = _run(reference, xs, memory, src_mask, fused=False)
        float32, _ = _run(layer, xs, memory, src_mask, fused=False)
    torch.testing.assert_close(fused, expected, rtol=1e-4, atol=1e-4)
    assert (fused - float32).abs().max() > 1e-6  # the int8 weights were used


def test_where_it_steps_aside():
    x = torch.randn(2, 1, 32)
    memory = torch.randn(2, 5, 32)
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    layer = _layer(False)
    kv = layer.cross_attn.memory_kv(memory)
    with torch.no_grad():
        assert not packed_linear.can_step(layer, x, KVCache(), kv, mask)  # outside a packing scope
        with packed_linear.packing():
            assert packed_linear.can_step(layer, x, KVCache(), kv, mask)
            assert not packed_linear.can_step(layer, torch.randn(2, 2, 32), KVCache(), kv, mask)  # two positions
            assert not packed_linear.can_step(layer, x, None, kv, mask)  # no cache
            assert not packed_linear.can_step(_layer(False, activation="gelu"), x, KVCache(), kv, mask)
            assert not packed_linear.can_step(layer, x.double(), KVCache(), kv, mask)
            assert not packed_linear.can_step(layer, x, KVCache(), kv, torch.ones(2, 4, 1, 5, dtype=torch.bool))
            layer.train()
            assert not packed_linear.can_step(layer, x, KVCache(), kv, mask)  # training mode (dropout)
    with packed_linear.packing():
        assert not packed_linear.can_step(layer.eval(), x, KVCache(), kv, mask)  # autograd on


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoding_with_and_without_the_step(norm_first, monkeypatch):
    cfg = ModelConfig(src_vocab_size=70, tgt_vocab_size=70, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
                      n_decoder_layers=2, norm_first=norm_first)
    torch.manual_seed(2)
    model = Transformer(cfg).eval()
    src = torch.randint(4, 70, (5, 10))
    mask = torch.ones_like(src, dtype=torch.bool)
    mask[2, 4:] = False
    calls = []
    original = packed_linear.decoder_layer_step
    monkeypatch.setattr(packed_linear, "decoder_layer_step", lambda *a: calls.append(1) or original(*a))
    results = []
    for fused in (True, False):
        if not fused:
            monkeypatch.setattr(packed_linear, "can_step", lambda *a: False)
        greedy = greedy_search(model, src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=9)
        beam = beam_search(model, src, mask, bos_id=1, eos_id=2, beam_size=3, max_len_a=0, max_len_b=9)
        sampled = sample(model, src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=9, seed=4, top_k=5)
        results.append(([h.tokens for h in greedy], [[h.tokens for h in hs] for hs in beam],
                        [[h.tokens for h in hs] for hs in sampled]))
        if fused:
            assert calls, "decoding did not take the one-call step"
    assert results[0] == results[1]


@pytest.mark.parametrize("k", [1, 3, 8, 50])
def test_best_tokens_equal_log_softmax_and_topk(k):
    from transformer.model import fused_cpu

    torch.manual_seed(k)
    logits = torch.randn(70, 50) * 4
    logits[3, 10] = logits[3, 20] = 30.0  # a tie at the top: the smaller id first, as argmax
    with torch.no_grad():
        values, ids = fused_cpu.best_tokens(logits, k)
        expected = logits.double().log_softmax(-1)
    top = expected.topk(k, dim=-1)
    torch.testing.assert_close(values.double(), top.values, rtol=2e-7, atol=2e-6)
    assert ids[3, 0] == 10 and (k == 1 or ids[3, 1] == 20)
    assert torch.equal(expected.gather(1, ids), top.values)  # ids give the values (ties aside)
    if k == 1:
        assert torch.equal(ids[:, 0], logits.argmax(-1))


def test_best_tokens_rows_at_a_stride_and_where_not_used():
    from transformer.model import fused_cpu

    logits = torch.randn(4, 3, 30)[:, -1]  # the decoder's last position: rows at a stride
    with torch.no_grad():
        assert fused_cpu.can_best_tokens(logits, 2)
        values, ids = fused_cpu.best_tokens(logits, 2)
        assert fused_cpu.best_tokens(torch.empty(0, 30), 2)[0].shape == (0, 2)
        assert not fused_cpu.can_best_tokens(logits.double(), 2)
        assert not fused_cpu.can_best_tokens(logits, 31)
    assert not fused_cpu.can_best_tokens(logits, 2)  # autograd on
    torch.testing.assert_close(values, logits.log_softmax(-1).topk(2).values, rtol=0, atol=2e-6)


def test_step_aside_for_autocast_and_caches_of_another_dtype():
    layer = _layer(False)
    x = torch.randn(2, 1, 32)
    kv = layer.cross_attn.memory_kv(torch.randn(2, 5, 32))
    bf16_cache = KVCache()
    bf16_cache.append(torch.randn(2, 4, 1, 8, dtype=torch.bfloat16), torch.randn(2, 4, 1, 8, dtype=torch.bfloat16))
    with torch.no_grad(), packed_linear.packing():
        assert not packed_linear.can_step(layer, x, bf16_cache, kv, None)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not packed_linear.can_step(layer, x, KVCache(), kv, None)

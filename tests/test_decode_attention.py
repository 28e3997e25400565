"""The compiled attention for decoding steps (fused_cpu.decode_attention) against float64
attention, and where the model takes it."""

import math

import pytest
import torch

from transformer.model import fused_cpu
from transformer.model.attention import CrossAttention, SelfAttention
from transformer.model.cache import KVCache

pytestmark = pytest.mark.skipif(not fused_cpu.available(), reason="compiled CPU kernels unavailable (no C compiler)")


def _reference(q, k, v, mask, causal):
    """float64 attention with heads merged; query row b uses key row b // G; no allowed key -> 0."""
    B, H, T, D = q.shape
    M, S = k.shape[0], k.shape[2]
    G = B // M
    kk, vv = k.double().repeat_interleave(G, 0), v.double().repeat_interleave(G, 0)
    scores = q.double() @ kk.transpose(-2, -1) / math.sqrt(D)  # (B, H, T, S)
    allowed = torch.ones(B, 1, T, S, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask.expand(M, 1, 1, S).repeat_interleave(G, 0)
    if causal:
        allowed = allowed & (torch.arange(S)[None, :] <= torch.arange(T)[:, None] + S - T)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), dim=-1).nan_to_num(0.0)
    return (weights @ vv).transpose(1, 2).reshape(B, T, H * D).float()


@pytest.mark.parametrize("B,M,H,T,S,D", [(1, 1, 1, 1, 1, 8), (3, 3, 4, 1, 9, 16), (8, 2, 2, 1, 13, 5),
                                         (6, 3, 4, 3, 20, 64), (2, 2, 2, 16, 16, 12), (4, 1, 3, 2, 70, 33),
                                         (2, 2, 2, 3, 2, 8)])  # last: more queries than keys
@pytest.mark.parametrize("masked,causal", [(False, False), (True, False), (False, True), (True, True)])
def test_equals_float64_attention(B, M, H, T, S, D, masked, causal):
    torch.manual_seed(B * 100 + S)
    q = torch.randn(B, H, T, D)
    k, v = torch.randn(M, H, S, D), torch.randn(M, H, S, D)
    mask = None
    if masked:
        mask = torch.rand(M, 1, 1, S) > 0.3
        mask[0, ..., 0] = True
    with torch.no_grad():
        assert fused_cpu.can_decode_attention(q, k, v, mask)
        got = fused_cpu.decode_attention(q, k, v, mask, causal=causal)
    assert got.shape == (B, T, H * D)
    torch.testing.assert_close(got, _reference(q, k, v, mask, causal), rtol=1e-5, atol=1e-5)


def test_strided_views_broadcast_mask_and_rows_without_keys():
    torch.manual_seed(7)
    qkv = torch.randn(4, 1, 3 * 32)  # (B, T, 3E), heads read in place as the model's views do
    q, k, v = (x.view(4, 1, 2, 16).transpose(1, 2) for x in qkv.chunk(3, dim=-1))
    cache_k = torch.randn(2, 2, 40, 16)[:, :, :25]  # a cache buffer with spare capacity
    cache_v = torch.randn(2, 2, 40, 16)[:, :, :25]
    mask = torch.ones(1, 1, 1, 25, dtype=torch.bool)
    mask[..., 20:] = False
    with torch.no_grad():
        got = fused_cpu.decode_attention(q, cache_k, cache_v, mask)
        torch.testing.assert_close(got, _reference(q, cache_k, cache_v, mask, False), rtol=1e-5, atol=1e-5)
        none = torch.zeros(2, 1, 1, 25, dtype=torch.bool)
        assert fused_cpu.decode_attention(q, cache_k, cache_v, none).eq(0).all()  # no allowed key: zeros
        assert fused_cpu.decode_attention(q, k[:, :, :0], v[:, :, :0], None).eq(0).all()  # no keys at all


def test_where_it_does_not_apply():
    q, k = torch.randn(2, 2, 1, 8), torch.randn(2, 2, 5, 8)
    with torch.no_grad():
        assert not fused_cpu.can_decode_attention(q, k, k, torch.ones(2, 2, 1, 5, dtype=torch.bool))  # per head
        assert not fused_cpu.can_decode_attention(q, k, k, torch.ones(2, 1, 1, 5))  # not bool
        assert not fused_cpu.can_decode_attention(q.double(), k.double(), k.double(), None)
        assert not fused_cpu.can_decode_attention(torch.randn(2, 2, 17, 8), k, k, None)  # too many queries
        assert not fused_cpu.can_decode_attention(torch.randn(3, 2, 1, 8), k, k, None)  # 3 rows, 2 key rows
        assert not fused_cpu.can_decode_attention(q, k.transpose(-2, -1).transpose(-2, -1).contiguous()[..., ::2], k[..., ::2], None)
    assert not fused_cpu.can_decode_attention(q, k, k, None)  # autograd on


def test_model_decoding_steps_equal_the_pytorch_path(monkeypatch):
    torch.manual_seed(3)
    self_attn = SelfAttention(d_model=32, n_heads=4).eval()
    cross = CrossAttention(d_model=32, n_heads=4).eval()
    memory = torch.randn(2, 11, 32)
    memory_mask = torch.ones(2, 1, 1, 11, dtype=torch.bool)
    memory_mask[1, ..., 7:] = False
    x = torch.randn(6, 5, 32)  # 3 beams for each of 2 sentences, 5 steps
    outputs, calls = [], []
    original = fused_cpu.decode_attention
    monkeypatch.setattr(fused_cpu, "decode_attention", lambda *a, **k: calls.append(1) or original(*a, **k))
    for kernel in (True, False):
        if not kernel:
            assert len(calls) == 10  # self- and cross-attention of each step
            monkeypatch.setattr(fused_cpu, "can_decode_attention", lambda *a, **k: False)
        cache = KVCache()
        kv = cross.memory_kv(memory)
        steps = []
        with torch.no_grad():
            for t in range(5):
                h, _ = self_attn(x[:, t:t + 1], causal=True, cache=cache)
                c, _ = cross(h, mask=memory_mask, memory_kv=kv)
                steps.append(c)
        outputs.append(torch.cat(steps, dim=1))
    assert len(calls) == 10
    torch.testing.assert_close(outputs[0], outputs[1], rtol=1e-5, atol=1e-5)

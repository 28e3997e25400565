"""The CPU engine's decoding kernels (transformer/cpu/decoding_ops.py) and its decoder layer
step (transformer/cpu/decoding.py), each against float64.

* ``decoding_ops.packed_linear``: float32 panels against a float64 product, for row counts 0 to
  301 and K, N that are not multiples of the panel width; int8 panels against the dequantised
  weights (scale max |w| / 127 per output feature) in float64; what ``pack`` stores.
* ``decoding_ops.decode_attention`` against float64 attention (key masks, causal, beams sharing
  their sentence's keys, rows with no allowed key); ``decoding_ops.best_tokens`` against
  log_softmax + topk.
* ``DecodingDecoderLayer`` against the model's ``DecoderLayer`` in float64, step by step with a
  ``KVCache``, post-LN and pre-LN, float32 and int8 weights.
* ``torch.library.opcheck`` of the decoding operators.

A whole model prepared for decoding: tests/test_cpu_decoding.py.
"""

import copy
import math

import pytest
import torch
from cpu_engine_helpers import dequantized, requires_kernels
from cpu_engine_helpers import calls  # noqa: F401 (calls: the shared fixture)
from torch import nn
from torch.library import opcheck

from transformer.cpu import build, decoding_ops, prepare_for_decoding
from transformer.cpu import decoding as engine
from transformer.model.cache import KVCache
from transformer.model.layers import DecoderLayer
from transformer.model.masks import key_mask_for_attention

pytestmark = requires_kernels

PANEL = decoding_ops.panel_width() if build.available() else 16  # 32 where the kernels use AVX-512


# ------------------------------------------------------------------------------ packed products
def _weights(K: int, N: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(N, K, generator=g), torch.randn(N, generator=g)


def _product_bound(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
    """The float32 rounding bound of a sum of K products in any order (Higham's gamma_K):
    K u sum_k |x_k w_k| (+ |b|), u = 2^-24, with a little room for the bias and the ReLU."""
    K = x.shape[-1]
    magnitude = x.double().abs() @ w.double().abs().t() + (b.double().abs() if b is not None else 0.0)
    return (K + 2) * 2.0**-24 * magnitude + 1e-30


def _check_product(got, x, w, b, relu, what):
    expected = x.double() @ w.double().t() + (b.double() if b is not None else 0.0)
    if relu:
        expected = expected.clamp_min(0.0)
    assert got.dtype == torch.float32 and got.shape == (*x.shape[:-1], w.shape[0]), what
    error = (got.double() - expected).abs()
    assert (error <= _product_bound(x, w, b)).all(), f"{what}: max error {error.max():.3g}"


# K and N not multiples of the panel width (16, or 32 with AVX-512): partial last panels, N below
# one panel, and half an AVX-512 panel; rows cover the kernel's blocks of 6, 4, 2 and 1 rows.
SHAPES = [(1, 1), (3, 15), (33, 17), (24, PANEL), (17, PANEL // 2), (64, PANEL + 8), (40, 2 * PANEL + 1),
          (256, 100)]
ROWS = [0, 1, 2, 3, 5, 6, 7, 13, 64, 301]


@pytest.mark.parametrize("K,N", SHAPES)
def test_packed_linear_float32_equals_float64(K, N):
    w, b = _weights(K, N)
    packed, scales = decoding_ops.pack(w, False)
    assert scales.numel() == 0
    for rows in ROWS:
        x = torch.randn(rows, K)
        for bias in (b, None):
            for relu in (False, True):
                got = decoding_ops.packed_linear(x, packed, scales, bias, N, relu)
                _check_product(got, x, w, bias, relu, f"rows {rows}, bias {bias is not None}, relu {relu}")


def test_pack_lays_weights_out_in_panels():
    """Panel p holds output features p * W .. p * W + W - 1, feature-fastest for each k; the int8
    panels hold round(w * 127 / max |w|) with scale max |w| / 127 per feature."""
    K, N = 7, 2 * PANEL + 3
    w, _ = _weights(K, N)
    packed, _ = decoding_ops.pack(w, False)
    panels = -(-N // PANEL)
    as_rows = packed.view(panels, K, PANEL).transpose(1, 2).reshape(panels * PANEL, K)
    assert torch.equal(as_rows[:N], w) and as_rows[N:].eq(0).all()
    packed8, scales = decoding_ops.pack(w, True)
    assert packed8.dtype == torch.int8 and scales.shape == (N,)
    most = w.abs().amax(dim=1)
    torch.testing.assert_close(scales, most / 127.0, rtol=0, atol=0)
    q = packed8.view(panels, K, PANEL).transpose(1, 2).reshape(panels * PANEL, K)
    assert torch.equal(q[:N], torch.round(w * (127.0 / most)[:, None]).to(torch.int8)) and q[N:].eq(0).all()
    assert q[:N].abs().amax(dim=1).eq(127).all()  # each feature's largest weight is +-127


def test_packed_linear_strided_inputs_weights_and_leading_dims():
    K, N = 32, PANEL + 5
    w = torch.randn(K, N).t()  # (N, K) at stride (1, N): packed from a copy
    b = torch.randn(N)
    packed, scales = decoding_ops.pack(w, False)
    base = torch.randn(5, 3, 48)
    for x in (base[..., :K],                   # rows at a stride of 48
              base.transpose(0, 1)[..., 8:40],  # a permuted view
              torch.randn(2, 3, 4, K),          # more leading dims
              torch.randn(0, K)):               # no rows
        got = decoding_ops.packed_linear(x, packed, scales, b, N, False)
        _check_product(got, x, w, b, False, f"{tuple(x.stride())}")


def test_packed_linear_many_rows_one_and_all_threads_and_wide_rows():
    w, b = _weights(300, 70)  # 300 floats a row: several row blocks
    packed, scales = decoding_ops.pack(w, False)
    x = torch.randn(1000, 300)
    threads = torch.get_num_threads()
    try:
        for n in {1, threads}:
            torch.set_num_threads(n)
            _check_product(decoding_ops.packed_linear(x, packed, scales, b, 70, False), x, w, b, False, f"{n} threads")
    finally:
        torch.set_num_threads(threads)
    w, b = _weights(40000, 3)  # 160 KB a row: more than a row block
    packed, scales = decoding_ops.pack(w, False)
    for rows in (1, 2):
        x = torch.randn(rows, 40000)
        got = decoding_ops.packed_linear(x, packed, scales, b, 3, False)
        _check_product(got, x, w, b, False, f"K 40000, {rows} rows")


@pytest.mark.parametrize("K,N", SHAPES)
def test_packed_linear_int8_equals_the_dequantised_weights_in_float64(K, N):
    w, b = _weights(K, N)
    w[0] = 0.0  # a feature without weights: scale 0
    packed, scales = decoding_ops.pack(w, True)
    w8 = dequantized(w)
    step = w.abs().amax(dim=1) / 127.0
    for rows in ROWS:
        x = torch.randn(rows, K)
        for bias in (b, None):
            for relu in (False, True):
                got = decoding_ops.packed_linear(x, packed, scales, bias, N, relu)
                _check_product(got, x, w8, bias, relu, f"int8: rows {rows}, bias {bias is not None}, relu {relu}")
        # and within half a quantisation step per weight of the float32 weights
        got = decoding_ops.packed_linear(x, packed, scales, b, N, False)
        exact = x.double() @ w.double().t() + b.double()
        bound = 0.5 * x.double().abs().sum(dim=1, keepdim=True) * step.double() + _product_bound(x, w, b)
        assert ((got.double() - exact).abs() <= bound).all()


def test_int8_packing_of_odd_weights():
    w = torch.randn(3, 20)
    w[0] = 1e-39  # too small for 127 / max |w|: quantised to 0 (no undefined conversion)
    w[1, 5] = float("nan")  # a NaN weight gives NaN outputs, as in float32
    packed, scales = decoding_ops.pack(w, True)
    x = torch.randn(2, 20)
    got = decoding_ops.packed_linear(x, packed, scales, None, 3, False)
    assert (got[:, 0] == 0).all() and got[:, 1].isnan().all()
    _check_product(got[:, 2:], x, dequantized(w[2:]), None, False, "third feature")


# ------------------------------------------------------------------------------ decode attention
def _attention64(q, k, v, mask, causal):
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
    return (weights @ vv).transpose(1, 2).reshape(B, T, H * D)


@pytest.mark.parametrize("B,M,H,T,S,D", [(1, 1, 1, 1, 1, 8), (3, 3, 4, 1, 9, 16), (8, 2, 2, 1, 13, 5),
                                         (6, 3, 4, 3, 20, 64), (2, 2, 2, 16, 16, 12), (4, 1, 3, 2, 70, 33),
                                         (2, 2, 2, 3, 2, 8)])  # last: more queries than keys
@pytest.mark.parametrize("masked,causal", [(False, False), (True, False), (False, True), (True, True)])
def test_decode_attention_equals_float64(B, M, H, T, S, D, masked, causal):
    torch.manual_seed(B * 100 + S)
    q = torch.randn(B, H, T, D)
    k, v = torch.randn(M, H, S, D), torch.randn(M, H, S, D)
    mask = None
    if masked:
        mask = torch.rand(M, 1, 1, S) > 0.3
        mask[0, ..., 0] = True
        mask[-1, ..., -1] = False
    assert decoding_ops.fits_decode_attention(q, k, v, mask)
    got = decoding_ops.decode_attention(q, k, v, mask, causal)
    assert got.shape == (B, T, H * D) and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), _attention64(q, k, v, mask, causal), rtol=1e-5, atol=1e-5)


def test_decode_attention_on_strided_views_broadcast_masks_and_rows_without_keys():
    torch.manual_seed(7)
    qkv = torch.randn(4, 1, 3 * 32)  # (B, T, 3E): heads read in place, as the model's views are
    q = qkv[..., :32].view(4, 1, 2, 16).transpose(1, 2)
    cache_k = torch.randn(2, 2, 40, 16)[:, :, :25]  # a cache buffer with spare capacity, 2 beams a row
    cache_v = torch.randn(2, 2, 40, 16)[:, :, :25]
    mask = torch.ones(1, 1, 1, 25, dtype=torch.bool)
    mask[..., 20:] = False
    torch.testing.assert_close(decoding_ops.decode_attention(q, cache_k, cache_v, mask, False).double(),
                               _attention64(q, cache_k, cache_v, mask, False), rtol=1e-5, atol=1e-5)
    none = torch.zeros(2, 1, 1, 25, dtype=torch.bool)
    none[0] = True
    got = decoding_ops.decode_attention(q, cache_k, cache_v, none, False)
    assert got[2:].eq(0).all() and got[:2].ne(0).any()  # no allowed key: zeros
    assert decoding_ops.decode_attention(q, cache_k[:, :, :0], cache_v[:, :, :0], None, False).eq(0).all()  # no keys


def test_which_keys_and_masks_the_decode_attention_takes():
    q, k = torch.randn(2, 2, 1, 8), torch.randn(2, 2, 5, 8)
    assert decoding_ops.fits_decode_attention(q, k, k, torch.ones(1, 1, 1, 5, dtype=torch.bool))
    assert not decoding_ops.fits_decode_attention(q, k, k, torch.ones(2, 2, 1, 5, dtype=torch.bool))  # a mask per head
    assert not decoding_ops.fits_decode_attention(q, k, k, torch.ones(2, 1, 1, 5))  # not bool
    assert not decoding_ops.fits_decode_attention(q.double(), k.double(), k.double(), None)
    assert not decoding_ops.fits_decode_attention(torch.randn(3, 2, 1, 8), k, k, None)  # 3 rows cannot share 2 key rows
    assert not decoding_ops.fits_decode_attention(q, k[..., ::2], k[..., ::2], None)  # keys not unit-stride along D
    assert not decoding_ops.fits_decode_attention(q, k, torch.randn(2, 2, 6, 8), None)


# ------------------------------------------------------------------------------------ best tokens
@pytest.mark.parametrize("k", [1, 3, 8, 50])
def test_best_tokens_equal_log_softmax_and_topk(k):
    torch.manual_seed(k)
    logits = torch.randn(70, 50) * 4
    logits[3, 10] = logits[3, 20] = logits[3, 40] = 30.0  # a tie at the top: the smaller id first, as argmax
    logits[5] = 0.0  # all tied
    values, ids = decoding_ops.best_tokens(logits, k)
    expected = logits.double().log_softmax(-1)
    top = expected.topk(k, dim=-1)
    torch.testing.assert_close(values.double(), top.values, rtol=1e-6, atol=2e-6)
    assert ids[3, : min(k, 3)].tolist() == [10, 20, 40][:k]
    assert ids[5].tolist() == list(range(k))
    assert (ids.sort(dim=1).values[:, 1:] != ids.sort(dim=1).values[:, :-1]).all()  # distinct ids
    torch.testing.assert_close(expected.gather(1, ids), top.values, rtol=0, atol=0)  # the ids give the values
    if k == 1:
        assert torch.equal(ids[:, 0], logits.argmax(-1))


def test_best_tokens_of_rows_at_a_stride_and_where_they_do_not_apply():
    logits = torch.randn(4, 3, 30)[:, -1]  # the decoder's last position: rows at a stride
    assert decoding_ops.fits_best_tokens(logits, 2)
    values, ids = decoding_ops.best_tokens(logits, 2)
    top = logits.double().log_softmax(-1).topk(2)
    torch.testing.assert_close(values.double(), top.values, rtol=0, atol=2e-6)
    assert torch.equal(ids, top.indices)
    assert decoding_ops.best_tokens(torch.empty(0, 30), 2)[0].shape == (0, 2)
    assert not decoding_ops.fits_best_tokens(logits.double(), 2) and not decoding_ops.fits_best_tokens(logits, 31)
    assert not decoding_ops.fits_best_tokens(logits, 0)
    with torch.enable_grad():
        assert engine.DecodingTransformer.best_tokens(logits, 2) is None  # autograd on: PyTorch's operators


# -------------------------------------------------------------------------- a decoder layer's step
def _layer(norm_first: bool, d_model: int = 32, d_ff: int = 48) -> DecoderLayer:
    torch.manual_seed(0)
    layer = DecoderLayer(d_model=d_model, n_heads=4, d_ff=d_ff, norm_first=norm_first).eval()
    for name, p in layer.named_parameters():  # biases and LayerNorm parameters that are not 0 and 1
        if "norm" in name or name.endswith("bias"):
            nn.init.normal_(p, mean=1.0 if name.endswith("norm.weight") else 0.0, std=0.3)
    return layer


def _steps(layer: DecoderLayer, xs: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor,
           need_weights=lambda t: False) -> tuple[torch.Tensor, KVCache]:
    """Feeds xs (B, T, E) one position at a time, as decoding does; memory has B / G rows."""
    cache = KVCache(initial_capacity=2)  # grows during the run
    memory_kv = layer.cross_attn.memory_kv(memory)
    memory_mask = key_mask_for_attention(src_mask)
    outputs = []
    for t in range(xs.shape[1]):
        x = xs[:, t:t + 1].contiguous()
        outputs.append(layer(x, memory, memory_mask=memory_mask, self_cache=cache, memory_kv=memory_kv,
                             need_weights=need_weights(t))[0])
    return torch.cat(outputs, dim=1), cache


def _cached(cache: KVCache) -> tuple[torch.Tensor, torch.Tensor]:
    k, v = cache.reserve(cache.key_buffer[:, :, :0], cache.key_buffer.shape[-1])
    return k[:, :, :cache.length], v[:, :, :cache.length]


def _step_inputs(beams: int, seed: int = 1):
    torch.manual_seed(seed)
    M, S, T = 2, 9, 6
    memory = torch.randn(M, S, 32)
    src_mask = torch.ones(M, S, dtype=torch.bool)
    src_mask[1, 5:] = False
    return torch.randn(M * beams, T, 32), memory, src_mask


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("beams", [1, 3])
@pytest.mark.parametrize("d_ff", [48, 16])  # d_ff < d_model too
def test_decoder_layer_step_equals_the_layer_in_float64(norm_first, beams, d_ff, calls):
    layer = _layer(norm_first, d_ff=d_ff)
    reference = copy.deepcopy(layer).double()
    swaps = prepare_for_decoding(layer)
    assert type(layer) is engine.DecodingDecoderLayer and swaps.changed
    xs, memory, src_mask = _step_inputs(beams)
    with torch.inference_mode():
        got, cache = _steps(layer, xs, memory, src_mask)
        assert calls["decoder_layer_step"] == xs.shape[1] and calls["F.linear"] == 0  # every product packed
        expected, expected_cache = _steps(reference, xs.double(), memory.double(), src_mask)
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=2e-5)
    assert cache.length == expected_cache.length == xs.shape[1]
    for a, b in zip(_cached(cache), _cached(expected_cache)):  # the keys and values the step wrote
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_step_shares_its_cache_with_the_models_code(norm_first, calls):
    """Steps that ask for attention weights run the model's code on the same cache."""
    layer = _layer(norm_first)
    reference = copy.deepcopy(layer).double()
    prepare_for_decoding(layer)
    xs, memory, src_mask = _step_inputs(beams=2, seed=3)
    with torch.inference_mode():
        got, _ = _steps(layer, xs, memory, src_mask, need_weights=lambda t: t % 2 == 1)
        expected, _ = _steps(reference, xs.double(), memory.double(), src_mask)
    assert calls["decoder_layer_step"] == 3
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=2e-5)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_layer_step_with_int8_weights_equals_the_layer_with_those_weights(norm_first, calls):
    layer = _layer(norm_first)
    reference = copy.deepcopy(layer).double()
    float32 = copy.deepcopy(layer)
    with torch.no_grad():
        for module in reference.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(dequantized(module.weight.float()))
    prepare_for_decoding(layer, precision="int8")
    xs, memory, src_mask = _step_inputs(beams=2, seed=2)
    with torch.inference_mode():
        got, _ = _steps(layer, xs, memory, src_mask)
        expected, _ = _steps(reference, xs.double(), memory.double(), src_mask)
        plain, _ = _steps(float32, xs, memory, src_mask)
    assert calls["decoder_layer_step"] == xs.shape[1]
    torch.testing.assert_close(got.double(), expected, rtol=1e-5, atol=2e-5)
    assert (got - plain).abs().max() > 1e-4  # the int8 weights were used


def test_where_the_decoder_layer_step_does_not_apply(calls):
    layer = _layer(False)
    prepare_for_decoding(layer)
    x = torch.randn(2, 1, 32)
    kv = layer.cross_attn.memory_kv(torch.randn(2, 5, 32))
    mask = torch.ones(2, 1, 1, 5, dtype=torch.bool)
    with torch.inference_mode():
        assert layer._step_applies(x, KVCache(), kv, mask)
        assert not layer._step_applies(torch.randn(2, 2, 32), KVCache(), kv, mask)  # two positions
        assert not layer._step_applies(x, None, kv, mask)  # no cache
        assert not layer._step_applies(x, KVCache(), kv, torch.ones(2, 4, 1, 5, dtype=torch.bool))  # mask per head
        bf16_cache = KVCache()
        bf16_cache.append(torch.randn(2, 4, 1, 8, dtype=torch.bfloat16), torch.randn(2, 4, 1, 8, dtype=torch.bfloat16))
        assert not layer._step_applies(x, bf16_cache, kv, mask)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert not layer._step_applies(x, KVCache(), kv, mask)
        layer.train()
        assert not layer._step_applies(x, KVCache(), kv, mask)  # training mode (dropout)
        layer.eval()
        gelu = DecoderLayer(d_model=32, n_heads=4, d_ff=48, activation="gelu").eval()
        prepare_for_decoding(gelu)
        assert not gelu._step_applies(x, KVCache(), kv, mask)
    assert not layer._step_applies(x, KVCache(), kv, mask)  # autograd on
    assert calls["decoder_layer_step"] == 0


# ---------------------------------------------------------------------------------------- opcheck
def _opcheck(op, args):
    """Schema (no undeclared mutation or aliasing), autograd registration, the fake implementation
    against the real one, and the op under AOT dispatch with dynamic shapes."""
    result = opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("int8", [False, True])
def test_opcheck_pack_and_packed_linear(int8):
    w = torch.randn(PANEL + 3, 33)
    _opcheck(decoding_ops.pack, (w, int8))
    packed, scales = decoding_ops.pack(w, int8)
    _opcheck(decoding_ops.packed_linear, (torch.randn(5, 33), packed, scales, torch.randn(PANEL + 3), PANEL + 3, True))
    _opcheck(decoding_ops.packed_linear, (torch.randn(2, 3, 33), packed, scales, None, PANEL + 3, False))


def test_opcheck_decode_attention_and_best_tokens():
    q, k, v = torch.randn(6, 2, 1, 8), torch.randn(3, 2, 7, 8), torch.randn(3, 2, 7, 8)
    _opcheck(decoding_ops.decode_attention, (q, k, v, torch.rand(3, 1, 1, 7) > 0.3, False))
    _opcheck(decoding_ops.decode_attention, (torch.randn(3, 2, 3, 8), k, v, None, True))
    _opcheck(decoding_ops.best_tokens, (torch.randn(7, 30), 3))


@pytest.mark.parametrize("int8", [False, True])
def test_opcheck_decoder_layer_step(int8):
    layer = _layer(norm_first=int8)
    prepare_for_decoding(layer, precision="int8" if int8 else "fp32")
    weights = [w.detach() if w is not None else None for w in layer.step_weights]
    B, H, D = 4, 4, 8
    kv = layer.cross_attn.memory_kv(torch.randn(2, 5, 32))
    args = (torch.randn(B, 1, 32), weights, torch.zeros(B, H, 3, D), torch.zeros(B, H, 3, D), 1,
            kv.k.detach(), kv.v.detach(), torch.rand(2, 1, 1, 5) > 0.2, H, 48, int8, 1e-5)
    _opcheck(decoding_ops.decoder_layer_step, args)

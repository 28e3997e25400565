"""The fused CPU training kernels (transformer/model/fused_cpu.c) against PyTorch compositions.

The oracle's mask is computed here independently, with Python integers: element i is kept when
the 15 low bits of lane i % 4 of SplitMix64's output number i / 4 are >= round(p * 32768).
"""

import os
import warnings

import pytest
import torch
import torch.nn.functional as F

from transformer.model import fused_cpu
from transformer.model.dropout import dropout
from transformer.model.layers import EncoderLayer

# Under CI (which has gcc) these run and fail if the kernels cannot be built.
pytestmark = pytest.mark.skipif(not fused_cpu.available() and not os.environ.get("CI"),
                                reason="no C compiler: the fused CPU kernels are not built")

SEED = 0x1234567890ABCDEF
M64 = (1 << 64) - 1


def splitmix64_keep(seed: int, n: int, p: float) -> torch.Tensor:
    threshold = round(p * 32768)
    keep = []
    for w in range((n + 3) // 4):
        z = (seed + (w + 1) * 0x9E3779B97F4A7C15) & M64
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        z ^= z >> 31
        keep += [float(((z >> (16 * lane)) & 0x7FFF) >= threshold) for lane in range(4)]
    return torch.tensor(keep[:n])


@pytest.fixture
def fixed_seed(monkeypatch):
    monkeypatch.setattr(fused_cpu, "_seed", lambda: SEED)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_dropout_is_the_splitmix64_mask_forward_and_backward(fixed_seed, dtype):
    p, shape = 0.1, (3, 5, 67)  # 1,005 elements: not a multiple of 4, nor of a vector
    x = torch.randn(shape).to(dtype).requires_grad_(True)
    grad = torch.randn(shape).to(dtype)
    y = fused_cpu.fused_dropout(x, p)
    y.backward(grad)
    keep = splitmix64_keep(SEED, x.numel(), p).view(shape)
    scale = torch.tensor(1 / (1 - p), dtype=torch.float32)
    assert y.dtype == dtype and x.grad.dtype == dtype
    torch.testing.assert_close(y, (x.detach().float() * keep * scale).to(dtype), rtol=0, atol=0)
    torch.testing.assert_close(x.grad, (grad.float() * keep * scale).to(dtype), rtol=0, atol=0)


@pytest.mark.parametrize("sub_dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("E", [32, 260])
def test_dropout_add_layer_norm_equals_the_composition(fixed_seed, sub_dtype, E):
    """Output and all four gradients equal LayerNorm(x + sub * keep / (1 - p)) through autograd."""
    p, B, T = 0.1, 5, 7  # 35 rows: uneven across threads
    g = torch.Generator().manual_seed(0)
    x = torch.randn(B, T, E, generator=g, requires_grad=True)
    sub = torch.randn(B, T, E, generator=g).to(sub_dtype).requires_grad_(True)
    norm = torch.nn.LayerNorm(E)
    with torch.no_grad():
        norm.weight.uniform_(0.5, 1.5, generator=g)
        norm.bias.uniform_(-0.5, 0.5, generator=g)
    upstream = torch.randn(B, T, E, generator=g)

    y = fused_cpu.dropout_add_layer_norm(x, sub, norm, p)
    y.backward(upstream)
    fused = [t.grad.clone() for t in (x, sub, norm.weight, norm.bias)]
    for t in (x, sub, norm.weight, norm.bias):
        t.grad = None
    keep = splitmix64_keep(SEED, x.numel(), p).view(x.shape)
    ref = F.layer_norm(x + sub.float() * keep / (1 - p), (E,), norm.weight, norm.bias, norm.eps)
    ref.backward(upstream)

    assert y.dtype == torch.float32 and fused[1].dtype == sub_dtype
    torch.testing.assert_close(y, ref, atol=2e-6, rtol=1e-5)
    for got, want in zip(fused, (x.grad, sub.grad, norm.weight.grad, norm.bias.grad)):
        tol = dict(atol=2e-6, rtol=1e-5) if got.dtype == torch.float32 else dict(atol=1e-2, rtol=1e-2)
        torch.testing.assert_close(got, want, **tol)


def test_masks_drop_p_and_are_reproducible_and_fresh():
    x = torch.ones(1 << 20)
    torch.manual_seed(5)
    a = dropout(x, 0.1)
    b = dropout(x, 0.1)
    torch.manual_seed(5)
    again = dropout(x, 0.1)
    assert abs((a == 0).float().mean().item() - 3277 / 32768) < 0.002
    assert torch.equal(a, again)  # torch.manual_seed fixes the seeds the kernels draw
    assert not torch.equal(a, b)  # each call draws a new seed
    assert set(a.unique().tolist()) == {0.0, torch.tensor(1 / 0.9).item()}
    dropped = (a == 0).float()[: 4 * 262_000].view(-1, 4)  # rows: the four lanes of one 64-bit word
    p = 3277 / 32768
    assert (dropped.mean(0) - p).abs().max().item() < 0.004  # each lane alike
    assert abs((dropped[:, 0] * dropped[:, 3]).mean().item() - p * p) < 0.003  # lanes of a word independent
    assert abs((dropped[:-1, 3] * dropped[1:, 0]).mean().item() - p * p) < 0.003  # and neighbouring words


def test_post_ln_residual_takes_the_fused_path_in_training_only():
    layer = EncoderLayer(d_model=32, n_heads=4, d_ff=64, dropout=0.1)
    x = torch.randn(2, 5, 32)
    outputs = {}
    for enabled in (True, False):
        fused_cpu.set_enabled(enabled)
        try:
            layer.train()
            torch.manual_seed(0)
            train_out = layer(x)[0]
            layer.eval()
            outputs[enabled] = train_out, layer(x)[0]
        finally:
            fused_cpu.set_enabled(True)
    assert not torch.equal(outputs[True][0], outputs[False][0])  # other masks in training
    torch.testing.assert_close(outputs[True][1], outputs[False][1], rtol=0, atol=0)  # evaluation untouched


def test_which_inputs_the_fused_residual_accepts():
    norm = torch.nn.LayerNorm(32)
    x, sub = torch.randn(2, 3, 32), torch.randn(2, 3, 32, dtype=torch.bfloat16)
    assert fused_cpu.can_dropout_add_layer_norm(x, sub, norm)
    assert not fused_cpu.can_dropout_add_layer_norm(x.bfloat16(), sub, norm)  # residual stream not float32
    assert not fused_cpu.can_dropout_add_layer_norm(x, sub.double(), norm)
    odd = torch.nn.LayerNorm(30)
    assert not fused_cpu.can_dropout_add_layer_norm(torch.randn(2, 30), torch.randn(2, 30), odd)  # width % 4
    fused_cpu.set_enabled(False)
    try:
        assert not fused_cpu.can_dropout_add_layer_norm(x, sub, norm) and not fused_cpu.can_dropout(x)
    finally:
        fused_cpu.set_enabled(True)


def test_without_a_compiler_dropout_falls_back_to_pytorch(monkeypatch, tmp_path):
    monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
    monkeypatch.setenv("TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(fused_cpu, "_tried", False)
    monkeypatch.setattr(fused_cpu, "_library", None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert not fused_cpu.available()
    assert any("fused CPU kernels unavailable" in str(w.message) for w in caught)
    y = dropout(torch.ones(4096), 0.5)  # PyTorch's path
    assert 0.4 < (y == 0).float().mean().item() < 0.6


# ------------------------------------------------------------------------------- attention
def attention_reference(q, k, v, n_heads, mask, causal, keep):
    """float64 softmax(Q K^T / sqrt(D) + mask) * keep V, heads merged to (B, T, E); rows with no
    allowed key give zeros."""
    B, T, E = q.shape
    S, D = k.shape[1], E // n_heads
    heads = [t.double().view(B, -1, n_heads, D).transpose(1, 2) for t in (q, k, v)]
    scores = heads[0] @ heads[1].transpose(-1, -2) / D**0.5
    allowed = torch.ones(B, n_heads, T, S, dtype=torch.bool)
    if mask is not None:
        allowed = allowed & mask
    if causal:
        allowed = allowed & torch.ones(T, S, dtype=torch.bool).tril(S - T)
    weights = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    return ((weights * keep.double()) @ heads[2]).transpose(1, 2).reshape(B, T, E)


ATTENTION_CASES = {  # B, T, S, heads, head size, causal, padding mask, p
    "self causal": (3, 7, 7, 2, 16, True, False, 0.1),
    "self padded, odd head size": (4, 9, 9, 3, 20, False, True, 0.2),
    "self, no dropout": (2, 24, 24, 4, 32, False, True, 0.0),
    "cross, more queries than keys": (2, 33, 18, 4, 16, False, True, 0.1),
    "cross, one key": (3, 5, 1, 2, 8, False, False, 0.1),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(ATTENTION_CASES))
def test_attention_kernel_equals_the_composition(fixed_seed, dtype, case):
    """Output and gradients against float64 autograd with the SplitMix64 mask of the weights."""
    B, T, S, H, D, causal, padded, p = ATTENTION_CASES[case]
    E = H * D
    g = torch.Generator().manual_seed(1)
    mask = None
    if padded:
        mask = (torch.rand(B, 1, 1, S, generator=g) > 0.3)
        mask[0] = False  # a batch row whose queries see no key: zeros, not NaN
    if T == S and not case.startswith("cross"):  # self-attention: one (B, T, 3E) projection
        inputs = [torch.randn(B, T, 3 * E, generator=g).to(dtype).requires_grad_(True)]
        out = fused_cpu.attention(inputs[0], None, None, H, mask, causal, p)
    else:
        inputs = [torch.randn(B, T, E, generator=g).to(dtype).requires_grad_(True),
                  torch.randn(B, S, 2 * E, generator=g).to(dtype).requires_grad_(True)]
        out = fused_cpu.attention(None, *inputs, H, mask, causal, p)
    ref_inputs = [t.detach().double().requires_grad_(True) for t in inputs]
    q, k, v = ref_inputs[0].split(E, -1) if len(inputs) == 1 else (ref_inputs[0], *ref_inputs[1].split(E, -1))
    keep = splitmix64_keep(SEED, B * H * T * S, p).view(B, H, T, S) / (1 - p) if p else torch.ones(B, H, T, S)
    ref = attention_reference(q, k, v, H, mask, causal, keep)
    upstream = torch.randn(B, T, E, generator=g).to(dtype)
    out.backward(upstream)
    ref.backward(upstream.double())
    ref_grads = [t.grad for t in ref_inputs]
    tol = dict(atol=1e-5, rtol=1e-5) if dtype == torch.float32 else dict(atol=2e-2, rtol=2e-2)
    assert out.dtype == dtype and not out.isnan().any()
    torch.testing.assert_close(out.double(), ref, **tol)
    for got, want in zip(inputs, ref_grads):
        assert got.grad.dtype == dtype
        torch.testing.assert_close(got.grad.double(), want, **tol)
    if padded:  # the fully masked batch row: zero output, zero gradient for its queries
        assert out[0].abs().max() == 0 and inputs[0].grad[0, :, :E].abs().max() == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_attention_layers_take_the_kernel_in_training_with_the_explicit_paths_result(monkeypatch, dtype):
    """Under the same torch.manual_seed the kernel draws the weights' dropout mask that the explicit
    path's dropout kernel draws, so a decoder layer's output and gradients agree with it (bf16;
    float32 training otherwise takes PyTorch's fused kernel, whose dropout is its own: no dropout)."""
    from transformer.model.layers import DecoderLayer

    calls = []
    real = fused_cpu.attention
    monkeypatch.setattr(fused_cpu, "attention", lambda *a: calls.append(a[0] is None) or real(*a))
    torch.manual_seed(0)
    p = 0.1 if dtype == torch.bfloat16 else 0.0
    layer = DecoderLayer(d_model=48, n_heads=3, d_ff=64, dropout=0.0, attention_dropout=p).to(dtype).train()
    x = torch.randn(4, 9, 48, dtype=dtype)
    memory = torch.randn(4, 6, 48, dtype=dtype)
    memory_mask = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [True] * 6, [True] + [False] * 5])[:, None, None]
    results = {}
    for limit in (MAX := fused_cpu.MAX_ATTENTION_LENGTH, {}):  # the kernel, then the PyTorch path
        monkeypatch.setattr(fused_cpu, "MAX_ATTENTION_LENGTH", limit)
        torch.manual_seed(1)
        out = layer(x, memory, memory_mask=memory_mask)[0]
        out.sum().backward()
        results[bool(limit)] = out, [p.grad.clone() for p in layer.parameters()]
        layer.zero_grad()
    assert calls == [False, True]  # self-attention (fused Q/K/V projection), then cross-attention
    tol = dict(atol=1e-5, rtol=1e-4) if dtype == torch.float32 else dict(atol=5e-2, rtol=5e-2)
    torch.testing.assert_close(results[True][0], results[False][0], **tol)
    for got, want in zip(results[True][1], results[False][1]):
        torch.testing.assert_close(got, want, **tol)
    assert MAX[dtype] >= 64


def test_attention_kernel_is_for_training_steps_on_short_rows_only(monkeypatch):
    from transformer.model.attention import SelfAttention

    calls = []
    real = fused_cpu.attention
    monkeypatch.setattr(fused_cpu, "attention", lambda *a: calls.append(1) or real(*a))
    attn = SelfAttention(d_model=32, n_heads=4, dropout=0.1)
    x = torch.randn(2, 5, 32)
    attn.train()
    assert attn(x, causal=True)[1] is None and len(calls) == 1
    assert attn(x, need_weights=True)[1].shape == (2, 4, 5, 5) and len(calls) == 1  # weights: explicit path
    with torch.no_grad():
        attn(x)
    attn.eval()
    attn(x)
    assert len(calls) == 1
    attn.train()
    monkeypatch.setattr(fused_cpu, "MAX_ATTENTION_LENGTH", {torch.float32: 4})
    attn(x)  # 5 > 4 positions: PyTorch's kernels
    assert len(calls) == 1
    with pytest.raises(ValueError, match="torch.bool"):
        SelfAttention(d_model=32, n_heads=4).train()(x, mask=torch.ones(2, 1, 1, 5))
    with pytest.raises(ValueError, match="does not broadcast"):
        SelfAttention(d_model=32, n_heads=4).train()(x, mask=torch.ones(2, 1, 1, 6, dtype=torch.bool))

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

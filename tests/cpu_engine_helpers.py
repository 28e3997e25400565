"""What the CPU engine's test files share (test_cpu_decoding.py, test_cpu_decoding_kernels.py,
test_cpu_ops.py, test_cpu_ops_opcheck.py): the skip marker for a machine that cannot build the
kernels, the ``calls`` fixture counting the decoding kernels' calls, the int8 weights' float32
values, and the operator tests' dropout seed and dtypes."""

import collections
import os

import pytest
import torch
import torch.nn.functional as F

from transformer.cpu import build
from transformer.cpu import decoding as engine

# Under CI (which has gcc) these run and fail if the kernels cannot be built.
requires_kernels = pytest.mark.skipif(
    not build.available() and not os.environ.get("CI"),
    reason="no C compiler (or TRANSFORMER_FUSED_CPU=0): the CPU kernels are not built")

# ---------------------------------------------------------------- decoding (test_cpu_decoding*.py)
KERNELS = ("pack", "packed_linear", "decode_attention", "decoder_layer_step", "best_tokens")


@pytest.fixture
def calls(monkeypatch):
    """Counts the kernel calls the engine's modules make (the ops as ``transformer.cpu.decoding``
    calls them: ``decoding_ops.pack``, and ``_packed_linear`` etc., see ``decoding_ops.eager``),
    and ``F.linear`` calls (PyTorch's products)."""
    counts = collections.Counter()
    for name in KERNELS:
        owner, attribute = (engine.decoding_ops, name) if name == "pack" else (engine, f"_{name}")
        original = getattr(owner, attribute)

        def counting(*args, _name=name, _original=original, **kwargs):
            counts[_name] += 1
            if _name == "packed_linear" and args[5]:
                counts["packed_linear with ReLU"] += 1
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, attribute, counting)
    linear = F.linear
    monkeypatch.setattr(F, "linear", lambda *a, **k: counts.update(["F.linear"]) or linear(*a, **k))
    return counts


def dequantized(weight: torch.Tensor) -> torch.Tensor:
    """The float32 weights an int8 copy stands for: per output feature n, scale = max_k |w| / 127
    and w ~ round(w * (127 / max |w|)) * scale, in pack_s8's float32 arithmetic (127 / most, not
    most.reciprocal() * 127: 1 ulp apart, now and then another rounding)."""
    most = weight.abs().amax(dim=1, keepdim=True)
    inv = torch.where(most > 0, torch.full_like(most, 127.0) / most, torch.zeros_like(most))
    return torch.round(weight * inv).clamp(-127, 127) * (most / 127.0)


# ------------------------------------------------------------------ operators (test_cpu_ops*.py)
SEED = 0x1234567890ABCDEF
DTYPES = [torch.float32, torch.bfloat16]

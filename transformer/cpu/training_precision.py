"""The training precision (``train.precision``, the autocast a training runs under), and which
number format trains and translates fast on this machine.

bfloat16 halves memory traffic and, on hardware with bf16 matrix instructions, multiplies
matrices several times faster than float32: CUDA GPUs of compute capability 8.0 and newer,
x86 CPUs with AVX-512 bf16 or AMX. Elsewhere PyTorch emulates bf16 products, and they are
slower than float32 by orders of magnitude (docs/performance.md). ``train.precision=auto``
(the default) therefore picks bf16 only where ``fast_bf16`` says the device has the units.

``train.precision`` is the autocast a training runs under, its weights staying float32. The
number format a trained model translates in (``--precision``, ``Translator(precision=...)``:
fp32, bf16, int8 or fp16) is another value, resolved and checked in
:mod:`transformer.inference_precision`.
"""

from __future__ import annotations

import torch

from transformer.errors import UserError

# train.precision's values (those a model translates in: transformer.inference_precision.PRECISIONS)
TRAIN_PRECISIONS = ("auto", "fp32", "bf16", "fp16")
_NO_CPU_UNITS = "this CPU has no bf16 matrix units (AVX-512 bf16 or AMX)"


def cpu_bf16_units() -> bool:
    """Whether this CPU multiplies bf16 matrices in hardware (AVX-512 bf16 or AMX tiles)."""
    cpu = getattr(torch, "cpu", None)
    checks = (getattr(cpu, "_is_avx512_bf16_supported", None), getattr(cpu, "_is_amx_tile_supported", None))
    return any(check is not None and bool(check()) for check in checks)


def fast_bf16(device: torch.device | str) -> bool:
    """Whether bf16 matrix products on ``device`` run in hardware (faster than float32)."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    if device.type == "cpu":
        return cpu_bf16_units()
    return False


def resolve_precision(precision: str, device: torch.device | str) -> str:
    """``precision`` with ``auto`` replaced: ``bf16`` where ``fast_bf16(device)``, else ``fp32``."""
    if precision not in TRAIN_PRECISIONS:
        raise UserError(f"precision must be one of {TRAIN_PRECISIONS}, got {precision!r}")
    if precision == "auto":
        return "bf16" if fast_bf16(device) else "fp32"
    return precision


def slow_bf16_warning(device: torch.device | str) -> str | None:
    """A line for users who ask for bf16 where it is emulated (``None`` where bf16 is fast)."""
    device = torch.device(device)
    if fast_bf16(device):
        return None
    what = _NO_CPU_UNITS if device.type == "cpu" else f"{device} has no bf16 matrix units"
    return f"bf16 requested but {what}: PyTorch emulates bf16 products there, far slower than float32"


def bf16_left_out(hint: str, what: str = "bf16") -> str:
    """The line benchmarks print when they leave bf16 out by default on a CPU without bf16 units."""
    return f"{what} left out: {_NO_CPU_UNITS}, so PyTorch emulates bf16 products, far slower than fp32; {hint}"

"""Dropout (Srivastava et al., 2014; paper 5.4) with a cheap mask and a one-node backward.

Each element is zeroed with probability p and the rest are scaled by 1 / (1 - p) in training;
evaluation is the identity, as ``torch.nn.Dropout``. What differs is the cost on CPU, where a
training step has a few dozen dropout sites (see benchmarks/train_step.py):

* the mask comes from 16-bit random integers, four per 64-bit draw of the generator, compared
  with a threshold: 4x fewer generator calls than one float per element (``torch.rand``) and
  about 6x fewer than ``bernoulli_``. p is thereby rounded to a multiple of 1/65536 (0.1 becomes
  0.100006); ``torch.manual_seed`` still makes the masks reproducible.
* forward and backward are one ``masked_fill`` and one in-place scale each, in a single
  autograd node that keeps only the boolean mask.

Measured (torch 2.13, 2 threads, a 64 x 24 x 512 bf16 activation): forward + backward 2.6 ms
instead of 3.6 ms for the ``torch.rand`` mask and about 6 ms for ``torch.nn.functional.dropout``.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

_LEVELS = 1 << 16  # the mask's 16-bit random integers take this many values


def drop_mask(shape: torch.Size | tuple[int, ...], p: float, device: torch.device | str | None = None) -> Tensor:
    """A bool tensor of ``shape``, True (drop) with probability ``round(p * 65536) / 65536``."""
    n = math.prod(shape)
    bits = torch.empty((n + 3) // 4, dtype=torch.int64, device=device).random_(-(1 << 63), None)  # all 64 bits
    values = bits.view(torch.int16)[:n].view(shape)  # uniform on [-32768, 32767]
    return values < round(p * _LEVELS) - _LEVELS // 2


class _MaskedScale(torch.autograd.Function):
    """``x`` with the ``drop`` positions zeroed and the rest times ``scale``; the same for the gradient."""

    @staticmethod
    def forward(ctx, x: Tensor, drop: Tensor, scale: float) -> Tensor:
        ctx.save_for_backward(drop)
        ctx.scale = scale
        return x.masked_fill(drop, 0).mul_(scale)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        (drop,) = ctx.saved_tensors
        return grad.masked_fill(drop, 0).mul_(ctx.scale), None, None


def dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout of ``x`` with probability ``p`` (the caller decides when it applies)."""
    if p == 0.0:
        return x
    return _MaskedScale.apply(x, drop_mask(x.shape, p, x.device), 1.0 / (1.0 - p))


class Dropout(nn.Module):
    """Zero each element with probability ``p`` in training and scale the rest by ``1 / (1 - p)``."""

    def __init__(self, p: float = 0.1) -> None:
        super().__init__()
        if not 0.0 <= p < 1.0:
            raise ValueError(f"dropout probability must be in [0, 1), got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p) if self.training else x

    def extra_repr(self) -> str:
        return f"p={self.p}"

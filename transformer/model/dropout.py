"""Dropout (Srivastava et al., 2014; paper 5.4) with a mask drawn by ``torch.rand``.

Same distribution as ``torch.nn.Dropout`` (each element kept with probability 1 - p and scaled
by 1 / (1 - p) in training, identity in evaluation), but on CPU it is about twice as fast:
``nn.Dropout`` draws its mask with ``bernoulli_``, which generates one random number per
element serially, while ``torch.rand`` is vectorised. With a dozen dropout sites per layer
pass this is a visible share of a CPU training step (see benchmarks/train_step.py).
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout of ``x`` with probability ``p`` (the caller decides when it applies)."""
    if p == 0.0:
        return x
    keep = torch.rand(x.shape, device=x.device) >= p  # (same shape as x), True with probability 1 - p
    return x * torch.where(keep, 1.0 / (1.0 - p), 0.0).to(x.dtype)


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

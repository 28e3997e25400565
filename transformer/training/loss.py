"""Label-smoothed cross-entropy (paper 5.4: epsilon_ls = 0.1).

The target distribution puts 1 - eps on the reference token and spreads eps uniformly over
the vocabulary; padding positions are ignored. ``forward`` returns the SUM over target
tokens, so the trainer can normalise by the number of target tokens of a whole optimizer step
(across gradient accumulation and processes).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class LabelSmoothedCrossEntropy(nn.Module):
    """Summed label-smoothed cross-entropy over non-padding targets."""

    def __init__(self, *, smoothing: float = 0.1, ignore_index: int) -> None:
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise ValueError(f"label smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self.ignore_index = ignore_index

    def forward(self, logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """logits ``(B, T, V)``, target ``(B, T)`` -> (smoothed loss sum, plain NLL sum), both scalars.

        The NLL sum (no smoothing) is what perplexity is computed from.
        """
        log_probs = F.log_softmax(logits.float(), dim=-1).flatten(0, 1)  # (B*T, V)
        target = target.flatten()
        keep = target != self.ignore_index
        nll = -log_probs.gather(1, target.clamp(min=0).unsqueeze(1)).squeeze(1)  # (B*T,)
        nll = nll.masked_fill(~keep, 0.0)
        if self.smoothing == 0.0:
            return nll.sum(), nll.sum()
        uniform = -log_probs.mean(dim=-1).masked_fill(~keep, 0.0)  # cross-entropy with the uniform distribution
        loss = (1.0 - self.smoothing) * nll + self.smoothing * uniform
        return loss.sum(), nll.sum()

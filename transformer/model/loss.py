"""Label-smoothed cross-entropy (paper 5.4: epsilon_ls = 0.1).

The target distribution puts 1 - eps on the reference token and spreads eps uniformly over
the vocabulary; padding positions are ignored. ``forward`` returns the SUM over target
tokens, so the trainer can normalise by the number of target tokens of a whole optimizer step
(across gradient accumulation and processes).

For a row of logits z with log-probabilities log p = log_softmax(z), reference y and V classes:

    nll    = -log p_y
    smooth = -mean_j log p_j                    (cross-entropy with the uniform distribution)
    loss   = (1 - eps) * nll + eps * smooth

This is written here as those few whole-tensor operations (one log-softmax, one gather, one
mean), in float32 whatever the logits' dtype: on a GPU each is one kernel, so the number of
operations a step launches does not grow with the batch. The CPU engine swaps in a subclass
that computes the same numbers a cache-sized chunk of rows at a time, with the closed-form
gradient (``transformer.cpu.loss``).

``symmetric_kl`` is R-Drop's consistency term (``train.rdrop``): the divergence between the
predictions of two dropout passes over the same batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.errors import UserError


class LabelSmoothedCrossEntropy(nn.Module):
    """Summed label-smoothed cross-entropy over non-padding targets."""

    def __init__(self, *, smoothing: float = 0.1, ignore_index: int) -> None:
        super().__init__()
        if not 0.0 <= smoothing < 1.0:
            raise UserError(f"label smoothing must be in [0, 1), got {smoothing}")
        self.smoothing = smoothing
        self.ignore_index = ignore_index

    def forward(self, logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """logits ``(..., V)``, target ``(...)`` -> (smoothed loss sum, plain NLL sum), both fp32 scalars.

        The NLL sum (no smoothing) is what perplexity is computed from; it carries no gradient.
        """
        logits, target = self.flatten(logits, target)
        log_probs = F.log_softmax(logits, dim=-1, dtype=torch.float32)  # (N, V)
        pad = target == self.ignore_index
        nll = -log_probs.gather(1, target.masked_fill(pad, 0).unsqueeze(1)).squeeze(1).masked_fill(pad, 0.0)
        smooth = -log_probs.mean(dim=-1).masked_fill(pad, 0.0)
        eps = self.smoothing
        return ((1.0 - eps) * nll + eps * smooth).sum(), nll.detach().sum()

    @staticmethod
    def flatten(logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        """``(N, V)`` logits and ``(N,)`` targets, after checking that their shapes match."""
        if logits.shape[:-1] != target.shape:
            raise ValueError(f"logits {tuple(logits.shape)} do not match targets {tuple(target.shape)}")
        return logits.reshape(-1, logits.shape[-1]), target.reshape(-1)


def symmetric_kl(logits_a: Tensor, logits_b: Tensor, *, keep: Tensor | None = None) -> Tensor:
    """(KL(p_a || p_b) + KL(p_b || p_a)) / 2 summed over rows, for logits ``(..., V)`` (fp32 arithmetic);
    with ``keep`` (bool ``(...)``) over the rows it marks only.

    Each direction's gradient flows into both sides, as in R-Drop's code (neither side is held fixed).
    """
    dtype = torch.promote_types(logits_a.dtype, torch.float32)
    log_a = F.log_softmax(logits_a.to(dtype), dim=-1)
    log_b = F.log_softmax(logits_b.to(dtype), dim=-1)
    # KL(p || q) = sum p (log p - log q); the two directions together: sum (p_a - p_b)(log p_a - log p_b)
    rows = 0.5 * ((log_a.exp() - log_b.exp()) * (log_a - log_b)).sum(dim=-1)
    return (rows if keep is None else rows.masked_fill(~keep, 0.0)).sum()

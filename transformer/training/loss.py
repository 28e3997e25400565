"""Label-smoothed cross-entropy (paper 5.4: epsilon_ls = 0.1).

The target distribution puts 1 - eps on the reference token and spreads eps uniformly over
the vocabulary; padding positions are ignored. ``forward`` returns the SUM over target
tokens, so the trainer can normalise by the number of target tokens of a whole optimizer step
(across gradient accumulation and processes).

For a row of logits z with log-normaliser lse = log sum_j exp(z_j), reference y and V classes:

    nll    = lse - z_y
    smooth = lse - mean_j z_j                   (cross-entropy with the uniform distribution)
    loss   = (1 - eps) * nll + eps * smooth
    d loss / d z = softmax(z) - (1 - eps) * onehot(y) - eps / V

The gradient has this closed form, so the loss is one autograd function (``_SmoothedNLL``)
that keeps only the logits (in their own dtype, e.g. bf16) between forward and backward,
instead of autograd's chain of float copy -> log_softmax -> gather -> mean, which materialises
and back-propagates several (tokens x vocabulary) fp32 tensors. All arithmetic is in fp32; the
backward recomputes softmax(z) with PyTorch's softmax kernel rather than exp(z - lse): faster
here (1,472 x 8,000 bf16 logits, forward + backward: 11.4 ms against 15.8 ms), and the CPU exp
kernel slows down ~30x where results underflow (z - lse < -87, possible without smoothing).
``reference_smoothed_nll`` is the plain composition, kept as the test oracle.
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
        """logits ``(..., V)``, target ``(...)`` -> (smoothed loss sum, plain NLL sum), both fp32 scalars.

        The NLL sum (no smoothing) is what perplexity is computed from; it carries no gradient.
        """
        if logits.shape[:-1] != target.shape:
            raise ValueError(f"logits {tuple(logits.shape)} do not match targets {tuple(target.shape)}")
        logits, target = logits.reshape(-1, logits.shape[-1]), target.reshape(-1)
        keep = target != self.ignore_index
        loss, nll = _SmoothedNLL.apply(logits, target.clamp(min=0), keep, self.smoothing)
        return loss, nll


class _SmoothedNLL(torch.autograd.Function):
    """Fused forward and closed-form backward of the summed label-smoothed NLL (see module doc).

    Rows are processed in chunks of about ``_CHUNK_ELEMENTS`` logits so that each chunk's fp32
    temporaries stay in the CPU's caches: the (tokens x vocabulary) tensor is read once in the
    forward pass and read once and written once (as the gradient, in the logits' dtype) in the
    backward pass.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, keep: Tensor, eps: float) -> tuple[Tensor, Tensor]:
        N, V = logits.shape
        nll = logits.new_empty(N, dtype=torch.float32)
        smooth = logits.new_empty(N, dtype=torch.float32)
        for rows in _row_chunks(N, V):
            log_probs = torch.log_softmax(logits[rows].float(), dim=-1)  # (n, V)
            nll[rows] = -log_probs.gather(1, target[rows].unsqueeze(1)).squeeze(1)
            smooth[rows] = -log_probs.mean(dim=-1)
        nll.masked_fill_(~keep, 0.0)
        loss = (1.0 - eps) * nll + eps * smooth.masked_fill_(~keep, 0.0)
        ctx.save_for_backward(logits, target, keep)
        ctx.eps = eps
        ctx.mark_non_differentiable(nll)
        return loss.sum(), nll.sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        logits, target, keep = ctx.saved_tensors
        eps = ctx.eps
        N, V = logits.shape
        grad = torch.empty_like(logits)
        row_scale = keep.to(torch.float32) * grad_loss  # (N,): 0 for padding
        for rows in _row_chunks(N, V):
            g = torch.softmax(logits[rows].float(), dim=-1)  # (n, V)
            if eps > 0.0:
                g.sub_(eps / V)
            scale = row_scale[rows].unsqueeze(1)  # (n, 1)
            g.scatter_add_(1, target[rows].unsqueeze(1), torch.full_like(scale, eps - 1.0))
            grad[rows] = g.mul_(scale)
        return grad, None, None, None


_CHUNK_ELEMENTS = 1 << 20  # 1M fp32 values = 4 MiB per temporary (measured: 256k-4M; 1M is fastest)


def _row_chunks(n_rows: int, vocab: int) -> list[slice]:
    step = max(1, _CHUNK_ELEMENTS // max(vocab, 1))
    return [slice(i, min(i + step, n_rows)) for i in range(0, n_rows, step)]


def reference_smoothed_nll(logits: Tensor, target: Tensor, *, smoothing: float, ignore_index: int) -> tuple[Tensor, Tensor]:
    """The same loss written as plain autograd operations (log_softmax, gather, mean): a test oracle."""
    log_probs = F.log_softmax(logits.float(), dim=-1).flatten(0, -2)  # (N, V)
    target = target.flatten()
    keep = target != ignore_index
    nll = (-log_probs.gather(1, target.clamp(min=0).unsqueeze(1)).squeeze(1)).masked_fill(~keep, 0.0)
    uniform = (-log_probs.mean(dim=-1)).masked_fill(~keep, 0.0)
    return ((1.0 - smoothing) * nll + smoothing * uniform).sum(), nll.sum()

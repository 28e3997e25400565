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

The gradient has this closed form and nothing comes after the loss, so the loss is one
autograd function (``_SmoothedNLL``) that computes the gradient in its forward pass, while each
chunk of logits is in the CPU's caches, and keeps only that (in the logits' dtype, e.g. bf16);
its backward multiplies it by the incoming scalar. Autograd's chain of float copy ->
log_softmax -> gather -> mean would materialise and back-propagate several (tokens x
vocabulary) fp32 tensors. All arithmetic is in fp32. One softmax per row gives both the
gradient and the log-normaliser (lse = z_max - log p_max, exact where p is largest), so the
logits are read once (and exp(z - lse) is avoided: the CPU exp kernel slows down where results
underflow). With ``cpu_kernel=True`` (the trainer sets it where it applies the CPU engine) the
per-row work on CPU is one compiled kernel (``transformer.cpu.ops.smoothed_nll``).
``reference_smoothed_nll`` is the plain composition, kept as the test oracle.

``symmetric_kl`` is R-Drop's consistency term (``train.rdrop``): the divergence between the
predictions of two dropout passes over the same batch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.cpu import ops


class LabelSmoothedCrossEntropy(nn.Module):
    """Summed label-smoothed cross-entropy over non-padding targets."""

    def __init__(self, *, smoothing: float = 0.1, ignore_index: int, cpu_kernel: bool = False) -> None:
        super().__init__()
        self.cpu_kernel = cpu_kernel  # the compiled per-row kernel for CPU logits it accepts
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
        with_grad = torch.is_grad_enabled() and logits.requires_grad  # else no gradient is computed
        kernel = self.cpu_kernel and ops.fits_smoothed_nll(logits)
        loss, nll = _SmoothedNLL.apply(logits, target.clamp(min=0), keep, self.smoothing, with_grad, kernel)
        return loss, nll


class _SmoothedNLL(torch.autograd.Function):
    """Summed label-smoothed NLL whose forward pass also computes the gradient (see module doc).

    The (tokens x vocabulary) logits are read once and the gradient is written once, in the
    logits' dtype; the backward pass scales it. With ``kernel`` that is a compiled kernel, one row
    at a time (``ops.smoothed_nll``); otherwise PyTorch operations on chunks of about
    ``_CHUNK_ELEMENTS`` logits, so that each chunk's fp32 temporaries stay in the CPU's caches.
    """

    @staticmethod
    def forward(ctx, logits: Tensor, target: Tensor, keep: Tensor, eps: float, with_grad: bool,
                kernel: bool) -> tuple[Tensor, Tensor]:
        keep_f = keep.to(torch.float32)
        if kernel:
            nll, smooth, grad = ops.smoothed_nll(logits, target, keep_f, eps, with_grad)
        else:
            nll, smooth, grad = _smoothed_nll(logits, target, keep_f, eps, with_grad)
        nll.masked_fill_(~keep, 0.0)
        loss = (1.0 - eps) * nll + eps * smooth.masked_fill_(~keep, 0.0)
        if grad is not None:
            ctx.save_for_backward(grad)
        ctx.mark_non_differentiable(nll)
        return loss.sum(), nll.sum()

    @staticmethod
    def backward(ctx, grad_loss: Tensor, _grad_nll: Tensor) -> tuple[Tensor | None, ...]:
        (grad,) = ctx.saved_tensors
        return grad * grad_loss, None, None, None, None, None  # (the scalar in fp32); not in place: backward may run twice


def _smoothed_nll(logits: Tensor, target: Tensor, keep_f: Tensor, eps: float,
                  with_grad: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """Per row: lse - z_target, lse - mean(z), and the gradient times keep_f (if ``with_grad``)."""
    N, V = logits.shape
    nll = logits.new_empty(N, dtype=torch.float32)
    smooth = logits.new_empty(N, dtype=torch.float32)
    grad = torch.empty_like(logits) if with_grad else None
    for rows in _row_chunks(N, V):
        z = logits[rows].float()  # (n, V)
        p = torch.softmax(z, dim=-1)
        lse = z.amax(dim=-1) - p.amax(dim=-1).log()  # log p = z - lse, exact where p is largest
        t = target[rows].unsqueeze(1)  # (n, 1)
        nll[rows] = lse - z.gather(1, t).squeeze(1)
        smooth[rows] = lse - z.mean(dim=-1)
        if grad is not None:  # softmax(z) - (1 - eps) * onehot(y) - eps / V, 0 for padding
            if eps > 0.0:
                p.sub_(eps / V)
            scale = keep_f[rows].unsqueeze(1)  # (n, 1)
            p.scatter_add_(1, t, torch.full_like(scale, eps - 1.0))
            grad[rows] = p.mul_(scale)
    return nll, smooth, grad


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


def symmetric_kl(logits_a: Tensor, logits_b: Tensor) -> Tensor:
    """(KL(p_a || p_b) + KL(p_b || p_a)) / 2 summed over rows, for logits ``(N, V)`` (fp32 arithmetic).

    Each direction's gradient flows into both sides, as in R-Drop's code (neither side is held fixed).
    """
    dtype = torch.promote_types(logits_a.dtype, torch.float32)
    log_a = F.log_softmax(logits_a.to(dtype), dim=-1)
    log_b = F.log_softmax(logits_b.to(dtype), dim=-1)
    # KL(p || q) = sum p (log p - log q); the two directions together: sum (p_a - p_b)(log p_a - log p_b)
    return 0.5 * ((log_a.exp() - log_b.exp()) * (log_a - log_b)).sum()

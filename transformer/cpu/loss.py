"""The label-smoothed cross-entropy for CPU training steps: the same numbers, a chunk of rows at a time.

``model.loss.LabelSmoothedCrossEntropy`` is the paper's loss as whole-tensor operations, which
on a CPU write and re-read several (tokens x vocabulary) float32 tensors (log-probabilities,
their gradient, autograd's copies). ``ChunkedLabelSmoothedCrossEntropy`` computes the loss and
its closed-form gradient in one pass over the logits instead:

    lse = log sum_j exp(z_j)
    nll    = lse - z_y
    smooth = lse - mean_j z_j
    d loss / d z = softmax(z) - (1 - eps) * onehot(y) - eps / V

Nothing comes after the loss, so the gradient can be computed in the forward pass while each
chunk of logits is in the CPU's caches, and kept (in the logits' dtype, e.g. bf16) for the
backward pass, which only scales it. All arithmetic is in fp32. One softmax per row gives both
the gradient and the log-normaliser (lse = z_max - log p_max, exact where p is largest), so the
logits are read once (and exp(z - lse) is avoided: the CPU exp kernel slows down where results
underflow). Where the compiled kernel takes the logits (``ops.fits_smoothed_nll``) each row is one
call of it (``ops.smoothed_nll``); otherwise PyTorch operations on chunks of about
``CHUNK_ELEMENTS`` logits, so that each chunk's fp32 temporaries stay in the caches.
"""

from __future__ import annotations

import torch
from torch import Tensor

from transformer.cpu import ops
from transformer.model.loss import LabelSmoothedCrossEntropy

CHUNK_ELEMENTS = 1 << 20  # 1M fp32 values = 4 MiB per temporary: the fastest of 256k-4M


class ChunkedLabelSmoothedCrossEntropy(LabelSmoothedCrossEntropy):
    """``LabelSmoothedCrossEntropy`` computed with its gradient in one pass over CPU logits."""

    model_class = LabelSmoothedCrossEntropy

    def forward(self, logits: Tensor, target: Tensor) -> tuple[Tensor, Tensor]:
        if logits.device.type != "cpu":
            return super().forward(logits, target)
        logits, target = self.flatten(logits, target)
        keep = target != self.ignore_index
        with_grad = torch.is_grad_enabled() and logits.requires_grad  # else no gradient is computed
        return _SmoothedNLL.apply(logits, target.clamp(min=0), keep, self.smoothing, with_grad,
                                  ops.fits_smoothed_nll(logits))


class _SmoothedNLL(torch.autograd.Function):
    """Summed label-smoothed NLL whose forward pass also computes the gradient (see module doc)."""

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
        nll_sum = nll.sum()
        ctx.mark_non_differentiable(nll_sum)
        return loss.sum(), nll_sum

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
    for rows in row_chunks(N, V):
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


def row_chunks(n_rows: int, vocab: int) -> list[slice]:
    """Slices of rows holding about ``CHUNK_ELEMENTS`` logits each."""
    step = max(1, CHUNK_ELEMENTS // max(vocab, 1))
    return [slice(i, min(i + step, n_rows)) for i in range(0, n_rows, step)]

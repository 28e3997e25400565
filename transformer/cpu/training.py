"""Training steps on CPU with the engine's kernels: ``accelerate_training(model)``.

Three things dominate a CPU training step besides the matrix products, and each has a kernel
(``ops``): dropout (PyTorch draws its random bits serially), the "Add & Norm" around every
sub-layer, which PyTorch runs as several passes over memory each way, and attention over short
rows, where PyTorch copies heads in and out of ``(B, H, T, D)`` order around batched products of
tiny matrices. ``accelerate_training`` swaps the model's ``nn.Dropout``, ``AddNorm``,
``SelfAttention`` and ``CrossAttention`` modules for subclasses that call those kernels in
training mode with autograd on, on CPU tensors the kernels accept, and run the model's own code
otherwise (evaluation, CUDA, attention weights asked for, rows longer than the kernels' limits).
Given the loss too (``accelerate_training(model, criterion)``), it swaps the label-smoothed
cross-entropy for its one-pass form (``transformer.cpu.loss``).

The results equal the model's up to floating-point rounding and the dropout masks, which come
from the kernels' SplitMix64 streams (seeded from PyTorch's generator) instead of PyTorch's:
the same distribution, not the same masks. ``tests/test_cpu_training.py`` compares losses and
gradients with the model's at dropout 0.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from transformer.cpu import build, ops
from transformer.cpu.loss import ChunkedLabelSmoothedCrossEntropy
from transformer.cpu.swap import Swaps, swap
from transformer.model.attention import CrossAttention, SelfAttention, check_mask
from transformer.model.layers import AddNorm
from transformer.model.loss import LabelSmoothedCrossEntropy

# Rows of up to this many queries and keys take the attention kernel in training; longer ones
# PyTorch's fused kernel, which works in blocks and wins there (see docs/performance.md).
MAX_ATTENTION_LENGTH = {torch.float32: 256, torch.bfloat16: 128}


def _training_step(module: nn.Module) -> bool:
    return module.training and torch.is_grad_enabled()


class FastDropout(nn.Dropout):
    """``nn.Dropout`` whose training-mode masks come from the dropout kernel."""

    model_class = nn.Dropout

    def forward(self, x: Tensor) -> Tensor:
        if self.training and 0.0 < self.p < 1.0 and ops.fits_dropout(x):
            return ops.dropout(x, self.p)
        return super().forward(x)


class FusedAddNorm(AddNorm):
    """Post-LN "Add & Norm", LayerNorm(x + Dropout(sub)), in one kernel pass each way in training."""

    model_class = AddNorm

    def post(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        if self.training and not self.norm_first and ops.fits_layer_norm(x, sublayer_out, self.norm):
            return ops.dropout_add_layer_norm(x, sublayer_out, self.norm, self.dropout.p)
        return super().post(x, sublayer_out)


def _short_rows(x: Tensor, n_keys: int, head_dim: int) -> bool:
    limit = MAX_ATTENTION_LENGTH.get(x.dtype, 0)
    return x.shape[1] <= limit and n_keys <= limit and ops.fits_attention(x, head_dim)


class TrainingSelfAttention(SelfAttention):
    """Self-attention whose training steps over short rows run the attention kernel, which reads
    the heads where the fused Q/K/V projection wrote them."""

    model_class = SelfAttention

    def forward(self, x: Tensor, *, mask: Tensor | None = None, causal: bool = False, cache=None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if cache is None and not need_weights and _training_step(self) and x.dim() == 3:
            qkv = self.qkv_proj(x)
            if _short_rows(qkv, x.shape[1], self.head_dim):
                self.check_input(x, "self-attention input")
                check_mask(mask, (x.shape[0], self.n_heads, x.shape[1], x.shape[1]))
                heads = ops.attention(qkv, None, self.n_heads, mask, causal, self.dropout)  # (B, T, E)
                return self.out_proj(heads), None
        return super().forward(x, mask=mask, causal=causal, cache=cache, need_weights=need_weights)


class TrainingCrossAttention(CrossAttention):
    """Encoder-decoder attention whose training steps over short rows run the attention kernel."""

    model_class = CrossAttention

    def forward(self, x: Tensor, memory: Tensor | None = None, *, mask: Tensor | None = None, memory_kv=None,
                need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        if (memory_kv is None and memory is not None and not need_weights and _training_step(self)
                and x.dim() == 3 and memory.dim() == 3 and memory.shape[0] == x.shape[0]):
            q = self.q_proj(x)
            if _short_rows(q, memory.shape[1], self.head_dim):
                self.check_input(x, "decoder input to cross-attention")
                self.check_input(memory, "encoder memory")
                check_mask(mask, (x.shape[0], self.n_heads, x.shape[1], memory.shape[1]))
                kv = self.kv_proj(memory).to(q.dtype)
                return self.out_proj(ops.attention(q, kv, self.n_heads, mask, False, self.dropout)), None
        return super().forward(x, memory, mask=mask, memory_kv=memory_kv, need_weights=need_weights)


TRAINING_CLASSES: dict[type, type] = {
    nn.Dropout: FastDropout,
    AddNorm: FusedAddNorm,
    SelfAttention: TrainingSelfAttention,
    CrossAttention: TrainingCrossAttention,
    LabelSmoothedCrossEntropy: ChunkedLabelSmoothedCrossEntropy,
}


def accelerate_training(*modules: nn.Module) -> Swaps:
    """Swap the modules of each of ``modules`` (a model, its loss) in place for the training kernels'
    subclasses; returns what was swapped (``.undo()`` restores the classes). Nothing is swapped where
    the kernels are unavailable (``build.available()`` False: no C compiler, or ``TRANSFORMER_FUSED_CPU=0``)."""
    swaps = Swaps()
    if build.available():
        for module in modules:
            swaps.changed += swap(module, TRAINING_CLASSES).changed
    return swaps

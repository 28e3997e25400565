"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2).

Letters used in shape comments: B batch, H heads, T query length, S key length,
D head size (d_k = d_v), E model size (d_model).

Masks are boolean, True = may attend (see ``transformer.model.masks``), and broadcast to the
score matrix ``(B, H, T, S)``. A query row whose keys are all masked gets an output of zeros and
zero attention weights (never NaN).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.model.cache import KVCache, StaticKV
from transformer.model.masks import causal_mask_with_offset
from transformer.errors import UserError


def scaled_dot_product_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    *,
    mask: Tensor | None = None,
    causal: bool = False,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V (paper 3.2.1, equation 1).

    Args:
        q: queries ``(B, H, T, D)``; k: keys ``(B, H, S, D)``; v: values ``(B, H, S, Dv)``.
        mask: optional bool mask broadcastable to ``(B, H, T, S)``, True = may attend.
        causal: also forbid attending to later positions (the last ``T`` of the ``S`` keys are
            the queries' own positions, so cached keys before them stay visible).
        dropout_p: dropout on the attention weights (pass 0.0 in evaluation).
        need_weights: compute the weights explicitly and return them too; otherwise PyTorch's
            fused kernel ``F.scaled_dot_product_attention`` computes the same output and the
            weights are None.

    Returns:
        ``(output (B, H, T, Dv), weights (B, H, T, S) or None)``.

    Raises:
        ValueError: wrong ranks, mismatched sizes, or a mask that is not bool or does not broadcast.
    """
    _check_qkv(q, k, v, mask)
    T, S = q.shape[-2], k.shape[-2]
    if causal and T > 1:  # a single query is the last position: it sees every key anyway
        if mask is None and T == S and not need_weights:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True), None
        tri = causal_mask_with_offset(T, S, device=q.device)  # (T, S)
        mask = tri if mask is None else (mask & tri)
    if not need_weights:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None
    weights = attention_weights(q, k, mask)  # (B, H, T, S)
    attended = F.dropout(weights, dropout_p) if dropout_p > 0 else weights
    return torch.matmul(attended, v), weights  # (B, H, T, Dv)


def attention_weights(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) ``(B, H, T, S)`` in ``q``'s dtype (half precisions normalised in float32).

    Masked keys get weight 0; a query row with no allowed key gets all zeros.
    """
    scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1])  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1, dtype=torch.float32 if scores.element_size() < 4 else None)
    if mask is not None:
        weights = weights.nan_to_num(0.0)  # a fully masked row is 0/0 after softmax
    return weights.to(q.dtype)


def _check_qkv(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> None:
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"attention expects q, k, v of rank 4 (B, H, L, D); got shapes {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if q.shape[-1] != k.shape[-1]:
        raise ValueError(f"query size {q.shape[-1]} != key size {k.shape[-1]}")
    if k.shape[-2] != v.shape[-2]:
        raise ValueError(f"{k.shape[-2]} keys but {v.shape[-2]} values")
    if not q.is_floating_point():
        raise ValueError(f"attention needs floating-point tensors, got {q.dtype}")
    check_mask(mask, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))


def check_mask(mask: Tensor | None, scores_shape: tuple[int, int, int, int]) -> None:
    """Raise ValueError unless ``mask`` is None or a bool mask that broadcasts to ``scores_shape``."""
    if mask is None:
        return
    if mask.dtype != torch.bool:
        raise ValueError(f"attention mask must be torch.bool (True = may attend), got {mask.dtype}")
    if mask.dim() > 4 or any(m not in (1, n) for m, n in zip(reversed(mask.shape), reversed(scores_shape))):
        raise ValueError(
            f"attention mask of shape {tuple(mask.shape)} does not broadcast to the scores "
            f"(B, H, T, S) = {scores_shape}"
        )


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O (paper 3.2.2).

    All heads are computed at once: the projections are single ``E -> E`` matrices whose
    outputs are viewed as ``(B, H, L, D)``. Subclasses decide where Q, K, V come from.
    """

    def __init__(self, *, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise UserError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.dropout = dropout  # on the attention weights, in training
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def split_heads(self, x: Tensor) -> Tensor:
        """``(B, L, E)`` -> ``(B, H, L, D)``."""
        B, L, _ = x.shape
        return x.view(B, L, self.n_heads, self.head_dim).transpose(1, 2)

    def merge_heads(self, heads: Tensor) -> Tensor:
        """``(B, H, T, D)`` -> ``(B, T, E)``: the concatenation of the heads."""
        B, _, T, _ = heads.shape
        return heads.transpose(1, 2).reshape(B, T, self.d_model)

    def check_input(self, x: Tensor, name: str) -> None:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"{name} must have shape (B, L, {self.d_model}), got {tuple(x.shape)}")


class SelfAttention(MultiHeadAttention):
    """Self-attention: Q, K and V all come from the same sequence; one fused Q/K/V projection."""

    def __init__(self, *, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, dropout=dropout, bias=bias)
        self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # [W^Q; W^K; W^V] for all heads

    def forward(
        self,
        x: Tensor,
        *,
        mask: Tensor | None = None,
        causal: bool = False,
        cache: KVCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x ``(B, T, E)`` -> ``(output (B, T, E), weights (B, H, T, S) or None)``.

        With a ``cache`` the new keys/values are appended to it and the queries attend to every
        cached position as well (S = cached + T).
        """
        self.check_input(x, "self-attention input")
        q, k, v = (self.split_heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))  # 3 x (B, H, T, D)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H, S, D)
        heads, weights = scaled_dot_product_attention(
            q, k, v, mask=mask, causal=causal, dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        return self.out_proj(self.merge_heads(heads)), weights


class CrossAttention(MultiHeadAttention):
    """Encoder-decoder attention: queries from the decoder, keys and values from the encoder output."""

    def __init__(self, *, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, dropout=dropout, bias=bias)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q
        self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)  # [W^K; W^V]

    def memory_kv(self, memory: Tensor) -> StaticKV:
        """Project the encoder output once into per-head keys and values ``(B, H, S, D)``."""
        self.check_input(memory, "encoder memory")
        k, v = self.kv_proj(memory).chunk(2, dim=-1)
        return StaticKV(self.split_heads(k), self.split_heads(v))

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        *,
        mask: Tensor | None = None,
        memory_kv: StaticKV | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """x ``(B, T, E)`` attends over ``memory`` ``(M, S, E)`` (or precomputed ``memory_kv``).

        Normally ``M == B``. With ``B = M * G`` (beam search: G beams per sentence), memory row
        ``m`` serves the G consecutive rows ``m * G .. m * G + G - 1``: their queries are stacked
        and attend over one copy of the memory's keys and values (mask ``(M, 1, 1, S)``), so
        the beams of a sentence share it instead of each holding a copy.
        """
        self.check_input(x, "decoder input to cross-attention")
        if memory_kv is None:
            if memory is None:
                raise ValueError("cross-attention needs the encoder memory or its cached keys/values")
            memory_kv = self.memory_kv(memory)
        q = self.split_heads(self.q_proj(x))  # (B, H, T, D)
        B, H, T, D = q.shape
        M = memory_kv.k.shape[0]
        if B % M != 0:
            raise ValueError(f"{B} query rows cannot share {M} memory rows (need a multiple)")
        G = B // M
        if G > 1:  # (M * G, H, T, D) -> (M, H, G * T, D)
            q = q.view(M, G, H, T, D).transpose(1, 2).reshape(M, H, G * T, D)
        heads, weights = scaled_dot_product_attention(
            q, memory_kv.k, memory_kv.v, mask=mask, dropout_p=self.dropout if self.training else 0.0,
            need_weights=need_weights,
        )
        if G > 1:  # back to one row per query sequence
            heads = heads.view(M, H, G, T, -1).transpose(1, 2).reshape(B, H, T, -1)
            if weights is not None:
                weights = weights.view(M, H, G, T, -1).transpose(1, 2).reshape(B, H, T, -1)
        return self.out_proj(self.merge_heads(heads)), weights

"""Scaled dot-product attention and multi-head attention (paper sections 3.2.1 and 3.2.2).

Letters used in shape comments: B batch, H heads, T query length, S key length,
D head size (d_k = d_v), E model size (d_model).

Masks are boolean, True = may attend (see ``transformer.masks``), and broadcast to the score
matrix ``(B, H, T, S)``. A query row whose keys are all masked gets an output of zeros and zero
attention weights (never NaN), in both paths and in their gradients.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.masks import causal_mask_with_offset
from transformer.model import fused_cpu
from transformer.model.cache import KVCache, StaticKV
from transformer.model.dropout import dropout
from transformer.model.packed_linear import linear


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
        need_weights: return the ``(B, H, T, S)`` weights too. When False the fused kernel
            ``torch.nn.functional.scaled_dot_product_attention`` is used and weights are None
            (except on CPU for short bf16/fp16 training steps and for decoding steps with a few
            queries per row, where the explicit path is faster; see ``_explicit_is_faster``).

    Returns:
        ``(output (B, H, T, Dv), weights or None)``.

    Raises:
        ValueError: wrong ranks, mismatched sizes, or a mask that is not bool or does not broadcast.
    """
    _check_qkv(q, k, v, mask)
    T, S = q.shape[-2], k.shape[-2]
    fused = not need_weights and not _explicit_is_faster(q, S)
    if causal and T == 1:
        causal = False  # one query after the cached keys: it is the last position and sees them all
    if causal:
        tri = causal_mask_with_offset(T, S, device=q.device)  # (T, S)
        if mask is None and T == S and fused:
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, is_causal=True), None
        mask = tri if mask is None else (mask & tri)
    if fused:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p), None

    weights = _attention_weights(q, k, mask)  # (B, H, T, S)
    if mask is not None and _has_fully_masked_rows(mask):
        # Rows with no allowed key would be uniform over masked keys; make them exactly zero.
        weights = weights * mask.any(dim=-1, keepdim=True)
    attended = dropout(weights, dropout_p)  # the caller passes 0.0 in evaluation
    return torch.matmul(attended, v), (weights.contiguous() if need_weights else None)  # (B, H, T, Dv)


def _attention_weights(q: Tensor, k: Tensor, mask: Tensor | None) -> Tensor:
    """softmax(Q K^T / sqrt(d_k)) in ``q``'s dtype, masked keys at weight 0 (the explicit path).

    A query row with no allowed key comes out uniform; the caller zeroes such rows.
    """
    S = k.shape[-2]
    scale = 1.0 / math.sqrt(q.shape[-1])
    # On CPU, bf16/fp16 scores go through float32: PyTorch's CPU softmax (and its backward) in
    # bf16 is ~3x slower than the float32 kernel plus the casts on short rows (64 x 4 x 24 x 24:
    # 521 us vs 148 us).
    through_fp32 = q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16)
    # PyTorch's CPU softmax over the last dim is slow on short rows (452 x 10 x 10: 330 us against
    # 94 us over dim -2; backward 124 against 21 us), so short key rows are computed transposed,
    # keys x queries, and normalised over dim -2.
    if q.device.type == "cpu" and S <= SHORT_SOFTMAX_ROWS:
        qk = torch.matmul(k, q.transpose(-2, -1)).transpose(-2, -1)  # (B, H, T, S), a view of (B, H, S, T)
        return _softmax_of_scores(qk, mask, scale, to_fp32=through_fp32, keys_first=True).to(q.dtype)
    qk = torch.matmul(q, k.transpose(-2, -1))  # (B, H, T, S)
    if qk.numel() > IN_PLACE_WEIGHTS_ELEMENTS and not (torch.is_grad_enabled() and qk.requires_grad):
        return _normalise_in_place(qk, mask, scale, to_fp32=through_fp32)
    return _softmax_of_scores(qk, mask, scale, to_fp32=through_fp32).to(q.dtype)


def _softmax_of_scores(qk: Tensor, mask: Tensor | None, scale: float, *, to_fp32: bool,
                       keys_first: bool = False) -> Tensor:
    """softmax(qk * scale + additive mask) over the keys, in float32 if ``to_fp32`` (else qk's dtype).

    Scaling and masking are in-place passes in one dtype (on ``qk`` itself unless it is converted):
    CPU kernels that mix dtypes or read bool tensors are ~15x slower than these. ``keys_first``:
    ``qk`` is a transposed view of a (B, H, S, T) tensor, normalised over its dim -2.
    """
    scores = (qk.float() if to_fp32 else qk).mul_(scale)  # keeps qk's layout
    if mask is not None:
        scores.add_(_additive_mask(mask, scores.dtype))
    if keys_first:
        return torch.softmax(scores.transpose(-2, -1), dim=-2).transpose(-2, -1)
    return torch.softmax(scores, dim=-1)


# Without autograd, score matrices larger than this are normalised in place, blocks of query rows
# of about IN_PLACE_BLOCK_ELEMENTS scores at a time (long inputs: see ``_normalise_in_place``).
IN_PLACE_WEIGHTS_ELEMENTS = 1 << 22
IN_PLACE_BLOCK_ELEMENTS = 1 << 20


def _normalise_in_place(qk: Tensor, mask: Tensor | None, scale: float, *, to_fp32: bool) -> Tensor:
    """Scale, mask and softmax ``qk`` ``(B, H, T, S)`` into itself, a block of query rows at a time.

    For inference on long inputs (``attention_maps`` of thousands of tokens): beside the weights
    themselves only one block's temporaries are alive, where the whole-matrix path holds float32
    scores and probabilities for every weight (``benchmarks/long_inputs.py``).
    """
    rows = max(1, IN_PLACE_BLOCK_ELEMENTS // max(1, qk[..., :1, :].numel()))
    for start in range(0, qk.shape[-2], rows):
        block = qk[..., start:start + rows, :]
        sliced = mask is not None and mask.dim() >= 2 and mask.shape[-2] > 1  # else it broadcasts over rows
        block_mask = mask[..., start:start + rows, :] if sliced else mask
        block.copy_(_softmax_of_scores(block, block_mask, scale, to_fp32=to_fp32))
    return qk


def _additive_mask(mask: Tensor, dtype: torch.dtype) -> Tensor:
    """0 where ``mask`` allows attending, a large negative number where it does not (same shape).

    Half the dtype's minimum: a score added to it keeps clear of -inf unless the score itself
    passes half the dtype's range (a fully masked row of -inf would give NaN), and after softmax
    subtracts the row maximum it still underflows to 0.
    """
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(~mask, torch.finfo(dtype).min / 2)


def _has_fully_masked_rows(mask: Tensor) -> bool:
    """Whether some query row of ``mask`` allows no key (assumed on devices where asking would sync)."""
    if mask.device.type != "cpu":
        return True
    return not bool(mask.any(dim=-1).all())


# Rows of up to this many keys are normalised transposed (see scaled_dot_product_attention).
# Measured with torch 2.13, bf16 training step of the attention (113 x 4 heads of 64, dropout
# 0.1): 10-14 keys 13-31% faster, 16 keys 11-14% slower than normalising along the rows.
SHORT_SOFTMAX_ROWS = 14


# Up to this many keys, a CPU training step in bf16/fp16 is faster on the explicit path: the fused
# CPU kernel's backward pass is 2-4x slower than the explicit one for short sequences (measured
# with torch 2.13 on an AVX-512 bf16 CPU: B*H = 560, T = S = 18: 27 ms vs 5 ms forward +
# backward; T = S = 128: 18 ms vs 10 ms; at 512 keys the fused kernel wins).
EXPLICIT_TRAINING_MAX_KEYS = 256


# Up to this many queries per row, CPU inference is faster on the explicit path: incremental
# decoding (one query per row; a beam search's cross-attention stacks the K beams of a sentence).
# Measured with torch 2.13, 4 heads of 64, 20 keys: 1,024 rows x 1 query: bf16 fused 6.5 ms vs
# explicit 3.2 ms, fp32 3.2 vs 1.5 ms; 256 rows x 4 queries: bf16 2.5 vs 0.8, fp32 1.0 vs 0.6;
# 256 x 16: bf16 3.9 vs 2.3, fp32 2.4 vs 1.6.
EXPLICIT_DECODING_MAX_QUERIES = 16


def _explicit_is_faster(q: Tensor, n_keys: int) -> bool:
    if q.device.type != "cpu":
        return False
    if q.requires_grad and torch.is_grad_enabled():
        return q.dtype in (torch.bfloat16, torch.float16) and n_keys <= EXPLICIT_TRAINING_MAX_KEYS
    return q.shape[-2] <= EXPLICIT_DECODING_MAX_QUERIES


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
    _check_mask(mask, (q.shape[0], q.shape[1], q.shape[2], k.shape[2]))


def _check_mask(mask: Tensor | None, scores_shape: tuple[int, int, int, int]) -> None:
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"attention mask must be torch.bool (True = may attend), got {mask.dtype}")
        # torch.broadcast_shapes costs ~25 us a call (a sixteenth of a small decoding step): compare by hand
        if mask.dim() > 4 or any(m not in (1, n) for m, n in zip(reversed(mask.shape), reversed(scores_shape))):
            raise ValueError(
                f"attention mask of shape {tuple(mask.shape)} does not broadcast to the scores "
                f"(B, H, T, S) = {scores_shape}"
            )


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O (paper 3.2.2).

    All heads are computed at once: the projections are single ``E -> E`` matrices whose
    outputs are viewed as ``(B, H, L, D)``. Subclasses decide where Q, K, V come from. A CPU
    training step on short rows (no cache, no weights asked for) hands the projections to the
    compiled kernel ``fused_cpu.attention`` instead, which reads the heads in place. The other
    paths run the projections through ``packed_linear.linear`` (the packed CPU kernel inside a
    decoding scope, otherwise the layer itself).
    """

    def __init__(self, *, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__()
        if d_model % n_heads != 0:
            raise ValueError(f"d_model ({d_model}) must be divisible by n_heads ({n_heads})")
        self.d_model, self.n_heads, self.head_dim = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)  # W^O

    def _split(self, x: Tensor) -> Tensor:
        B, L, _ = x.shape
        return x.view(B, L, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, L, D)

    def _merge_and_project(self, heads: Tensor) -> Tensor:
        B, _, T, _ = heads.shape
        return linear(self.out_proj, heads.transpose(1, 2).reshape(B, T, self.d_model))  # (B, T, E)

    def _check_input(self, x: Tensor, name: str) -> None:
        if x.dim() != 3 or x.shape[-1] != self.d_model:
            raise ValueError(f"{name} must have shape (B, L, {self.d_model}), got {tuple(x.shape)}")

    def _compiled_training(self, x: Tensor, n_keys: int, mask: Tensor | None) -> bool:
        """Whether this training step's attention takes the compiled CPU kernel (``fused_cpu.attention``):
        short rows, gradients on, no weights asked for. Checks the mask as the other paths do."""
        if not (self.training and torch.is_grad_enabled() and fused_cpu.can_attend(x, n_keys, self.head_dim)):
            return False
        _check_mask(mask, (x.shape[0], self.n_heads, x.shape[1], n_keys))
        return True


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
        self._check_input(x, "self-attention input")
        if cache is None and not need_weights and self._compiled_training(x, x.shape[1], mask):
            heads = fused_cpu.attention(self.qkv_proj(x), None, None, self.n_heads, mask, causal, self.dropout)
            return self.out_proj(heads), None  # heads: (B, T, E), head h in columns h * D .. h * D + D - 1
        q, k, v = linear(self.qkv_proj, x).chunk(3, dim=-1)  # 3 x (B, T, E)
        q, k, v = self._split(q), self._split(k), self._split(v)  # (B, H, T, D)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H, S, D)
        dropout_p = self.dropout if self.training else 0.0
        if not need_weights and dropout_p == 0.0 and fused_cpu.can_decode_attention(q, k, v, mask):
            return linear(self.out_proj, fused_cpu.decode_attention(q, k, v, mask, causal=causal)), None
        heads, weights = scaled_dot_product_attention(
            q, k, v, mask=mask, causal=causal, dropout_p=dropout_p, need_weights=need_weights
        )
        return self._merge_and_project(heads), weights


class CrossAttention(MultiHeadAttention):
    """Encoder-decoder attention: queries from the decoder, keys and values from the encoder output."""

    def __init__(self, *, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True) -> None:
        super().__init__(d_model=d_model, n_heads=n_heads, dropout=dropout, bias=bias)
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)  # W^Q
        self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)  # [W^K; W^V]

    def memory_kv(self, memory: Tensor) -> StaticKV:
        """Project the encoder output once into per-head keys and values ``(B, H, S, D)``."""
        self._check_input(memory, "encoder memory")
        k, v = linear(self.kv_proj, memory).chunk(2, dim=-1)
        return StaticKV(self._split(k), self._split(v))

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
        self._check_input(x, "decoder input to cross-attention")
        if (memory_kv is None and memory is not None and not need_weights and memory.shape[0] == x.shape[0]
                and self._compiled_training(x, memory.shape[1], mask)):
            self._check_input(memory, "encoder memory")
            q = self.q_proj(x)
            kv = self.kv_proj(memory).to(q.dtype)
            heads = fused_cpu.attention(None, q, kv, self.n_heads, mask, False, self.dropout)
            return self.out_proj(heads), None
        if memory_kv is None:
            if memory is None:
                raise ValueError("cross-attention needs the encoder memory or its cached keys/values")
            memory_kv = self.memory_kv(memory)
        q = self._split(linear(self.q_proj, x))  # (B, H, T, D)
        B, H, T, D = q.shape
        M = memory_kv.k.shape[0]
        if B % M != 0:
            raise ValueError(f"{B} query rows cannot share {M} memory rows (need a multiple)")
        G = B // M
        dropout_p = self.dropout if self.training else 0.0
        if not need_weights and dropout_p == 0.0 and fused_cpu.can_decode_attention(q, memory_kv.k, memory_kv.v, mask):
            return linear(self.out_proj, fused_cpu.decode_attention(q, memory_kv.k, memory_kv.v, mask)), None
        if G > 1:  # (M * G, H, T, D) -> (M, H, G * T, D)
            q = q.view(M, G, H, T, D).transpose(1, 2).reshape(M, H, G * T, D)
        heads, weights = scaled_dot_product_attention(
            q, memory_kv.k, memory_kv.v, mask=mask, dropout_p=dropout_p, need_weights=need_weights
        )
        if G > 1:  # back to one row per query sequence
            heads = heads.view(M, H, G, T, -1).transpose(1, 2).reshape(B, H, T, -1)
            if weights is not None:
                weights = weights.view(M, H, G, T, -1).transpose(1, 2).reshape(B, H, T, -1)
        return self._merge_and_project(heads), weights

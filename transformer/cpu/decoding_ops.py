"""The engine's decoding kernels as PyTorch custom operators (namespace ``transformer_cpu``).

Each kernel is a ``torch.library.custom_op`` with a fake implementation (shapes only, for
``torch.compile`` and meta tensors) and no backward pass (decoding runs without autograd);
``tests/test_cpu_ops_opcheck.py`` checks them with ``torch.library.opcheck``. The engine's
modules (``transformer.cpu.decoding``) call the per-step ops through ``eager``, and ``pack``
directly, once per weight when a model is prepared.

Inputs must be CPU tensors the kernels accept: callers check with ``keys_fit`` and the
``fits_*`` functions, which state each kernel's limits. The training kernels' operators are in
``ops``.
"""

from __future__ import annotations

import ctypes
from typing import Optional, Sequence

import torch
from torch import Tensor

from transformer.cpu.build import library, pointer, threads

# ------------------------------------------------------------- calling the ops in eager mode
_DECODING_IMPLS: dict = {}


def _decoding_op(name: str, impl, *, mutates_args: tuple[str, ...]):
    """Register ``impl`` as the custom op ``transformer_cpu::name`` and remember it for ``eager``."""
    op = torch.library.custom_op(f"transformer_cpu::{name}", impl, mutates_args=mutates_args)
    _DECODING_IMPLS[op] = impl
    return op


def eager(op):
    """A decoding op as the engine calls it: its implementation directly in eager mode, the
    registered op under ``torch.compile``. The dispatcher's checks (defaults, aliasing of the
    mutated caches) cost more per call than a decoding step's kernel for a few rows."""
    impl = _DECODING_IMPLS[op]
    return lambda *args: op(*args) if torch.compiler.is_compiling() else impl(*args)


# ----------------------------------------------------------------- attention for decoding steps
def _decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Optional[Tensor], causal: bool) -> Tensor:
    """softmax(Q K^T / sqrt(D)) V for every head, heads merged: ``(B, T, H * D)`` float32.

    Query row b of ``q`` ``(B, H, T, D)`` attends over key row ``b // (B / M)`` of ``k``, ``v``
    ``(M, H, S, D)`` (the beams of a sentence share its keys); masked keys (``mask`` a key mask
    ``(M or 1, 1, 1, S)``), and with ``causal`` keys after position ``S - T + t``, get weight 0;
    a row with no allowed key gives zeros. No dropout.
    """
    B, H, T, D = q.shape
    M, S = k.shape[0], k.shape[2]
    out = torch.empty(B, T, H * D, dtype=torch.float32)
    m = mask.expand(M, 1, 1, S) if mask is not None else None
    if out.numel():
        library().attend_f32(
            q.data_ptr(), q.stride(0), q.stride(1), q.stride(2), k.data_ptr(), k.stride(0), k.stride(1), k.stride(2),
            v.data_ptr(), v.stride(0), v.stride(1), v.stride(2), pointer(m), m.stride(0) if m is not None else 0,
            m.stride(3) if m is not None else 0, int(causal), out.data_ptr(), B, H, T, S, D, B // M, 1.0 / D**0.5)
    return out


decode_attention = _decoding_op("decode_attention", _decode_attention, mutates_args=())


@decode_attention.register_fake
def _(q, k, v, mask, causal):
    B, H, T, D = q.shape
    return q.new_empty(B, T, H * D)


def keys_fit(B: int, H: int, D: int, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
    """Whether B query rows of H heads of size D can attend over ``k`` and ``v`` in the kernels:
    float32 CPU ``(M, H, S, D)`` with unit stride along D, B a multiple of M, and ``mask`` None
    or a bool key mask ``(M or 1, 1, 1, S)``."""
    if not all(t.dtype == torch.float32 and t.device.type == "cpu" and t.dim() == 4 and t.stride(-1) == 1
               for t in (k, v)):
        return False
    M, S = k.shape[0], k.shape[2]
    if k.shape != v.shape or k.shape[1] != H or k.shape[3] != D or M == 0 or B % M:
        return False
    return mask is None or (mask.dtype == torch.bool and mask.dim() == 4 and mask.shape[1:3] == (1, 1)
                            and mask.shape[0] in (1, M) and mask.shape[3] == S)


def fits_decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
    """float32 CPU queries ``(B, H, T, D)`` with unit stride along D and keys that ``keys_fit``."""
    if not (q.dtype == torch.float32 and q.device.type == "cpu" and q.dim() == 4 and q.stride(-1) == 1):
        return False
    B, H, _, D = q.shape
    return keys_fit(B, H, D, k, v, mask)


# ------------------------------------------------------------------ choosing tokens in decoding
def _best_tokens(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest values of each row of ``log_softmax(logits)`` ``(N, V)`` and their ids, best
    first (equal values: the smaller id first), in one pass per row: ``(values float32, ids int64)``."""
    N, V = logits.shape
    logits = logits if logits.stride(-1) == 1 else logits.contiguous()
    values = torch.empty(N, k, dtype=torch.float32)
    ids = torch.empty(N, k, dtype=torch.long)
    if N:
        library().best_tokens_f32(logits.data_ptr(), N, V, logits.stride(0), k, values.data_ptr(), ids.data_ptr())
    return values, ids


best_tokens = _decoding_op("best_tokens", _best_tokens, mutates_args=())


@best_tokens.register_fake
def _(logits, k):
    N = logits.shape[0]
    return logits.new_empty(N, k, dtype=torch.float32), logits.new_empty(N, k, dtype=torch.long)


def fits_best_tokens(logits: Tensor, k: int) -> bool:
    """float32 CPU logits ``(N, V)`` and 0 < k <= V."""
    return (logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.dim() == 2
            and 0 < k <= logits.shape[1])


# ------------------------------------------------------------------------- packed linear layers
def panel_width() -> int:
    """Output features per packed panel: 16, or 32 where the kernels use AVX-512."""
    return library().panel_width()


def _packed_size(N: int, K: int) -> int:
    """Elements of an ``(N, K)`` weight packed in panels: N rounded up to whole panels, times K."""
    panel = panel_width()
    return (N + panel - 1) // panel * panel * K


@torch.library.custom_op("transformer_cpu::pack", mutates_args=())
def pack(weight: Tensor, int8: bool) -> tuple[Tensor, Tensor]:
    """A float32 weight ``(N, K)`` in the products' panel layout: ``(packed, scales)``; with ``int8``
    the panels hold int8 values with one float32 scale per output feature (max |w| / 127), else
    float32 values and ``scales`` is empty."""
    N, K = weight.shape
    size = _packed_size(N, K)
    w = weight if weight.stride(1) == 1 else weight.contiguous()
    if int8:
        packed, scales = torch.empty(size, dtype=torch.int8), torch.empty(N, dtype=torch.float32)
        library().pack_s8(w.data_ptr(), N, K, w.stride(0), packed.data_ptr(), scales.data_ptr(), threads())
    else:
        packed, scales = torch.empty(size, dtype=torch.float32), torch.empty(0, dtype=torch.float32)
        library().pack_f32(w.data_ptr(), N, K, w.stride(0), packed.data_ptr(), threads())
    return packed, scales


@pack.register_fake
def _(weight, int8):
    N, K = weight.shape
    size = _packed_size(N, K)
    scales = weight.new_empty(N if int8 else 0, dtype=torch.float32)
    return weight.new_empty(size, dtype=torch.int8 if int8 else torch.float32), scales


def _packed_linear(x: Tensor, packed: Tensor, scales: Tensor, bias: Optional[Tensor], out_features: int,
                  relu: bool) -> Tensor:
    """``x W^T + b`` (then ReLU with ``relu``) from ``pack``'s output, float32 ``(..., out_features)``."""
    K, N = x.shape[-1], out_features
    rows = x.numel() // K if K else 0
    x2 = x.reshape(rows, K)
    if x2.stride(-1) != 1 or (rows > 1 and x2.stride(0) < K):
        x2 = x2.contiguous()
    b = bias.contiguous() if bias is not None else None
    y = torch.empty(rows, N, dtype=torch.float32)
    if rows and N:
        library().linear_f32(x2.data_ptr(), rows, K, x2.stride(0), packed.data_ptr(),
                             scales.data_ptr() if scales.numel() else None, pointer(b), N, y.data_ptr(), N, int(relu),
                             threads())
    return y.view(*x.shape[:-1], N)


packed_linear = _decoding_op("packed_linear", _packed_linear, mutates_args=())


@packed_linear.register_fake
def _(x, packed, scales, bias, out_features, relu):
    return x.new_empty(*x.shape[:-1], out_features)


# ---------------------------------------------------------------- a decoder layer's decoding step
STEP_POINTERS = 24  # per sub-layer: 2 x (packed weight, scales, bias) and LayerNorm weight, bias


def _decoder_layer_step(x: Tensor, weights: Sequence[Optional[Tensor]], cache_k: Tensor, cache_v: Tensor,
                       position: int, mem_k: Tensor, mem_v: Tensor, mask: Optional[Tensor], n_heads: int, d_ff: int,
                       norm_first: bool, eps: float) -> Tensor:
    """A post-LN (or pre-LN) decoder layer for one new position of each row of ``x`` ``(B, 1, E)``
    float32: the new output ``(B, 1, E)``. The new keys and values are written at ``position``
    of the self-attention cache buffers ``cache_k``, ``cache_v`` ``(B, H, capacity, D)``.

    ``weights``: 24 tensors, 8 per sub-layer (self-attention, encoder-decoder attention,
    feed-forward): packed W_a, its scales, b_a, packed W_b, its scales, b_b, LayerNorm weight,
    bias (empty scales for float32 packing; None for a missing bias). Encoder-decoder attention
    reads memory row b / (B / M) of ``mem_k``, ``mem_v`` ``(M, H, S, D)`` under ``mask``
    ``(M or 1, 1, 1, S)`` or none; the feed-forward is ReLU."""
    B, _, E = x.shape
    out = x.clone()  # updated in place by the kernel
    pointers = (ctypes.c_void_p * STEP_POINTERS)(
        *(t.data_ptr() if t is not None and t.numel() else None for t in weights))
    M, S = mem_k.shape[0], mem_k.shape[2]
    m = mask.expand(M, 1, 1, S) if mask is not None else None
    library().decoder_layer_step_f32(
        out.data_ptr(), B, E, n_heads, d_ff, pointers, cache_k.data_ptr(), cache_v.data_ptr(), cache_k.stride(0),
        cache_k.stride(1), cache_k.stride(2), position, mem_k.data_ptr(), mem_v.data_ptr(), mem_k.stride(0),
        mem_k.stride(1), mem_k.stride(2), mem_v.stride(0), mem_v.stride(1), mem_v.stride(2), S, B // M, pointer(m),
        m.stride(0) if m is not None else 0, m.stride(3) if m is not None else 0, int(norm_first), eps, threads())
    return out


decoder_layer_step = _decoding_op("decoder_layer_step", _decoder_layer_step, mutates_args=("cache_k", "cache_v"))


@decoder_layer_step.register_fake
def _(x, weights, cache_k, cache_v, position, mem_k, mem_v, mask, n_heads, d_ff, norm_first, eps):
    return x.new_empty(x.shape)

"""The engine's training kernels as PyTorch custom operators (namespace ``transformer_cpu``).

Each kernel is a ``torch.library.custom_op`` with a fake implementation (shapes only, for
``torch.compile`` and meta tensors), and the ones autograd goes through (dropout, dropout +
residual + LayerNorm, attention) have their backward pass registered with ``register_autograd``;
``tests/test_cpu_ops_opcheck.py`` checks them with ``torch.library.opcheck``. Random choices are
explicit arguments: a dropout mask is the one the SplitMix64 stream of ``seed`` gives (drawn
from PyTorch's generator by the Python wrappers below, so ``torch.manual_seed`` keeps training
reproducible), and the backward pass recomputes it from the same seed instead of storing it.

The wrappers at the end of each section (``dropout``, ``dropout_add_layer_norm``, ...) are what
the engine's modules call. Inputs must be CPU tensors the kernels accept: callers check with the
``fits_*`` functions, which state each kernel's limits. The decoding kernels' operators, in
the same namespace, are in ``decoding_ops``.
"""

from __future__ import annotations

from typing import Optional

import torch
from torch import Tensor

from transformer.cpu.build import library, pointer, threads

DROP_BITS = 15  # an element is dropped when 15 random bits, as an integer, are below drop_threshold(p)
MAX_FEATURES = 16384  # LayerNorm width the kernels accept (their per-thread buffers are on the stack)
MAX_VOCAB = 1 << 20  # logits per row the loss kernel accepts
MAX_HEAD_DIM = 256  # head size the attention kernels accept
KINDS = {torch.float32: "f32", torch.bfloat16: "bf16"}


def drop_threshold(p: float) -> int:
    """p in units of 1/32768 (the dropout probability the 15-bit comparisons realise)."""
    return round(p * (1 << DROP_BITS))


def draw_seed() -> int:
    """A 64-bit seed (as a signed integer) drawn from PyTorch's default CPU generator."""
    return int(torch.randint(-(1 << 63), (1 << 63) - 1, (), dtype=torch.int64))


# ------------------------------------------------------------------------------------- dropout
@torch.library.custom_op("transformer_cpu::dropout", mutates_args=())
def dropout_op(x: Tensor, seed: int, threshold: int, scale: float) -> Tensor:
    """``x * keep * scale``, keep = 0 where the 15-bit lane of element i is below ``threshold``."""
    x = x.contiguous()
    y = torch.empty_like(x)
    getattr(library(), f"dropout_{KINDS[x.dtype]}")(x.data_ptr(), y.data_ptr(), x.numel(), seed, threshold, scale)
    return y


@dropout_op.register_fake
def _(x, seed, threshold, scale):
    return x.new_empty(x.shape)


def _dropout_setup(ctx, inputs, output) -> None:
    ctx.args = inputs[1:]


def _dropout_backward(ctx, grad):
    return dropout_op(grad, *ctx.args), None, None, None  # the same mask, recomputed from the seed


dropout_op.register_autograd(_dropout_backward, setup_context=_dropout_setup)


def fits_dropout(x: Tensor) -> bool:
    return x.device.type == "cpu" and x.dtype in KINDS


def dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout with probability ``p`` (rounded to 1/32768)."""
    return dropout_op(x, draw_seed(), drop_threshold(p), 1.0 / (1.0 - p))


# ------------------------------------------------------------ dropout + residual + LayerNorm
@torch.library.custom_op("transformer_cpu::dropout_add_layer_norm", mutates_args=())
def dropout_add_layer_norm_op(x: Tensor, sub: Tensor, weight: Tensor, bias: Tensor, seed: int, threshold: int,
                              scale: float, eps: float) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """h = x + dropout(sub), y = LayerNorm(h): ``(y, h, mean, rstd)``, all float32."""
    x, sub = x.contiguous(), sub.contiguous()
    E = x.shape[-1]
    rows = x.numel() // E
    y, h = torch.empty_like(x), torch.empty_like(x)
    mean, rstd = x.new_empty(rows), x.new_empty(rows)
    getattr(library(), f"dropout_add_layer_norm_{KINDS[sub.dtype]}")(
        x.data_ptr(), sub.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), h.data_ptr(),
        mean.data_ptr(), rstd.data_ptr(), rows, E, seed, threshold, scale, eps)
    return y, h, mean, rstd


@dropout_add_layer_norm_op.register_fake
def _(x, sub, weight, bias, seed, threshold, scale, eps):
    rows = x.numel() // x.shape[-1]
    return x.new_empty(x.shape), x.new_empty(x.shape), x.new_empty(rows), x.new_empty(rows)


@torch.library.custom_op("transformer_cpu::dropout_add_layer_norm_backward", mutates_args=())
def dropout_add_layer_norm_backward_op(grad: Tensor, h: Tensor, mean: Tensor, rstd: Tensor, weight: Tensor,
                                       seed: int, threshold: int, scale: float,
                                       sub_bf16: bool) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Gradients ``(dx, dsub, dweight, dbias)`` of ``dropout_add_layer_norm_op``'s y."""
    grad = grad.contiguous().float()
    E = h.shape[-1]
    dx = torch.empty_like(h)
    dsub = torch.empty(h.shape, dtype=torch.bfloat16 if sub_bf16 else torch.float32)
    dweight, dbias = torch.empty_like(weight), torch.empty_like(weight)
    getattr(library(), f"dropout_add_layer_norm_backward_{'bf16' if sub_bf16 else 'f32'}")(
        grad.data_ptr(), h.data_ptr(), mean.data_ptr(), rstd.data_ptr(), weight.data_ptr(), dx.data_ptr(),
        dsub.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), h.numel() // E, E, seed, threshold, scale)
    return dx, dsub, dweight, dbias


@dropout_add_layer_norm_backward_op.register_fake
def _(grad, h, mean, rstd, weight, seed, threshold, scale, sub_bf16):
    dsub = h.new_empty(h.shape, dtype=torch.bfloat16 if sub_bf16 else torch.float32)
    return h.new_empty(h.shape), dsub, weight.new_empty(weight.shape), weight.new_empty(weight.shape)


def _danl_setup(ctx, inputs, output) -> None:
    x, sub, weight, bias, seed, threshold, scale, eps = inputs
    _, h, mean, rstd = output
    ctx.save_for_backward(h, mean, rstd, weight)
    ctx.args = (seed, threshold, scale, sub.dtype == torch.bfloat16)


def _danl_backward(ctx, grad, grad_h, grad_mean, grad_rstd):
    h, mean, rstd, weight = ctx.saved_tensors
    dx, dsub, dweight, dbias = dropout_add_layer_norm_backward_op(grad, h, mean, rstd, weight, *ctx.args)
    return dx, dsub, dweight, dbias, None, None, None, None


dropout_add_layer_norm_op.register_autograd(_danl_backward, setup_context=_danl_setup)


def fits_layer_norm(x: Tensor, sub: Tensor, norm: torch.nn.LayerNorm) -> bool:
    """CPU, float32 ``x``, float32 or bfloat16 ``sub`` of its shape, a LayerNorm with float32
    weight and bias over the last dim (a multiple of 4, at most ``MAX_FEATURES``)."""
    E = x.shape[-1]
    return (x.device.type == "cpu" and x.dtype == torch.float32 and sub.dtype in KINDS and sub.shape == x.shape
            and norm.weight is not None and norm.bias is not None and norm.weight.dtype == torch.float32
            and norm.bias.dtype == torch.float32 and tuple(norm.normalized_shape) == (E,) and E % 4 == 0
            and E <= MAX_FEATURES)


def dropout_add_layer_norm(x: Tensor, sub: Tensor, norm: torch.nn.LayerNorm, p: float) -> Tensor:
    """LayerNorm(x + Dropout(sub)) in training mode, float32 out (see ``fits_layer_norm``)."""
    y, _, _, _ = dropout_add_layer_norm_op(x, sub, norm.weight, norm.bias, draw_seed(), drop_threshold(p),
                                           1.0 / (1.0 - p), norm.eps)
    return y


# ----------------------------------------------------------------------- label-smoothed NLL
@torch.library.custom_op("transformer_cpu::smoothed_nll", mutates_args=())
def smoothed_nll_op(logits: Tensor, target: Tensor, row_scale: Tensor, eps: float,
                    with_grad: bool) -> tuple[Tensor, Tensor, Tensor]:
    """Per row of ``logits`` ``(N, V)``: lse - z_target, lse - mean(z), and if ``with_grad`` the
    gradient (softmax(z) - eps / V - (1 - eps) onehot(target)) * row_scale (else an empty tensor)."""
    logits, target, row_scale = logits.contiguous(), target.contiguous(), row_scale.contiguous()
    N, V = logits.shape
    nll, smooth = logits.new_empty(N, dtype=torch.float32), logits.new_empty(N, dtype=torch.float32)
    grad = torch.empty_like(logits) if with_grad else logits.new_empty(0)
    getattr(library(), f"smoothed_nll_{KINDS[logits.dtype]}")(
        logits.data_ptr(), target.data_ptr(), row_scale.data_ptr(), nll.data_ptr(), smooth.data_ptr(),
        grad.data_ptr() if with_grad else None, N, V, eps)
    return nll, smooth, grad


@smoothed_nll_op.register_fake
def _(logits, target, row_scale, eps, with_grad):
    N = logits.shape[0]
    grad = logits.new_empty(logits.shape) if with_grad else logits.new_empty(0)
    return logits.new_empty(N, dtype=torch.float32), logits.new_empty(N, dtype=torch.float32), grad


def fits_smoothed_nll(logits: Tensor) -> bool:
    """float32 or bfloat16 CPU logits ``(N, V)`` with 0 < V <= ``MAX_VOCAB``."""
    return (logits.device.type == "cpu" and logits.dtype in KINDS and logits.dim() == 2
            and 0 < logits.shape[1] <= MAX_VOCAB)


def smoothed_nll(logits: Tensor, target: Tensor, row_scale: Tensor, eps: float,
                 with_grad: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """``smoothed_nll_op`` with targets checked and the gradient None when not asked for."""
    N, V = logits.shape
    if N and not 0 <= int(target.min()) <= int(target.max()) < V:
        raise IndexError(f"targets must be in [0, {V}), got [{int(target.min())}, {int(target.max())}]")
    nll, smooth, grad = smoothed_nll_op(logits, target, row_scale, eps, with_grad)
    return nll, smooth, grad if with_grad else None


# ------------------------------------------------------------------ attention in training
def _heads(q_src: Tensor, kv_src: Tensor | None) -> tuple[Tensor, Tensor, Tensor]:
    """Q, K, V as (B, L, E) views of the fused projections (self-attention: kv_src is None)."""
    if kv_src is None:
        return q_src.chunk(3, dim=-1)
    return (q_src, *kv_src.chunk(2, dim=-1))


def _mask_args(mask: Tensor | None, shape: tuple[int, int, int, int]) -> tuple:
    if mask is None:
        return None, 0, 0, 0, 0
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    m = mask.expand(shape)
    return (m.data_ptr(), *m.stride())


@torch.library.custom_op("transformer_cpu::attention", mutates_args=())
def attention_op(q_src: Tensor, kv_src: Optional[Tensor], mask: Optional[Tensor], n_heads: int, causal: bool,
                 seed: int, threshold: int, drop_scale: float) -> tuple[Tensor, Tensor]:
    """Multi-head attention before the output projection: ``(out (B, T, E), probs (B, H, T, S) float32)``.

    Self-attention passes the fused projection ``q_src`` = Q|K|V ``(B, T, 3E)`` and no ``kv_src``;
    cross-attention ``q_src`` = Q ``(B, T, E)`` and ``kv_src`` = K|V ``(B, S, 2E)``. ``mask`` bool,
    broadcastable to ``(B, H, T, S)``, True = may attend; ``causal``: query t sees keys up to
    t + S - T; rows with no allowed key give zeros. Head h is in columns h * D .. h * D + D - 1.
    """
    q_src = q_src.contiguous()
    kv_src = kv_src.contiguous() if kv_src is not None else None
    q, k, v = _heads(q_src, kv_src)
    B, T, E = q.shape
    S, D = k.shape[1], E // n_heads
    out = q.new_empty(B, T, E)
    probs = torch.empty(B, n_heads, T, S, dtype=torch.float32)
    getattr(library(), f"attention_forward_{KINDS[q.dtype]}")(
        q.data_ptr(), q.stride(0), q.stride(1), k.data_ptr(), k.stride(0), k.stride(1), v.data_ptr(), v.stride(0),
        v.stride(1), *_mask_args(mask, (B, n_heads, T, S)), int(causal), out.data_ptr(), probs.data_ptr(), B, n_heads,
        T, S, D, 1.0 / D**0.5, seed, threshold, drop_scale)
    return out, probs


@attention_op.register_fake
def _(q_src, kv_src, mask, n_heads, causal, seed, threshold, drop_scale):
    B, T = q_src.shape[:2]
    E = q_src.shape[-1] if kv_src is not None else q_src.shape[-1] // 3
    S = kv_src.shape[1] if kv_src is not None else T
    return q_src.new_empty(B, T, E), q_src.new_empty(B, n_heads, T, S, dtype=torch.float32)


@torch.library.custom_op("transformer_cpu::attention_backward", mutates_args=())
def attention_backward_op(grad: Tensor, q_src: Tensor, kv_src: Optional[Tensor], probs: Tensor, n_heads: int,
                          seed: int, threshold: int, drop_scale: float) -> tuple[Tensor, Tensor]:
    """Gradients of ``attention_op``'s output: ``(d q_src, d kv_src)`` (the latter empty for self-attention)."""
    q_src = q_src.contiguous()
    kv_src = kv_src.contiguous() if kv_src is not None else None
    q, k, v = _heads(q_src, kv_src)
    d_q_src = torch.empty_like(q_src)  # every element is written
    d_kv_src = torch.empty_like(kv_src) if kv_src is not None else q_src.new_empty(0)
    dq, dk, dv = _heads(d_q_src, d_kv_src if kv_src is not None else None)
    grad = grad.contiguous().to(q.dtype)
    B, T, E = q.shape
    S = k.shape[1]
    D = E // n_heads
    getattr(library(), f"attention_backward_{KINDS[q.dtype]}")(
        grad.data_ptr(), q.data_ptr(), q.stride(0), q.stride(1), k.data_ptr(), k.stride(0), k.stride(1), v.data_ptr(),
        v.stride(0), v.stride(1), probs.data_ptr(), dq.data_ptr(), dq.stride(0), dq.stride(1), dk.data_ptr(),
        dk.stride(0), dk.stride(1), dv.data_ptr(), dv.stride(0), dv.stride(1), B, n_heads, T, S, D,
        1.0 / D**0.5, seed, threshold, drop_scale)
    return d_q_src, d_kv_src


@attention_backward_op.register_fake
def _(grad, q_src, kv_src, probs, n_heads, seed, threshold, drop_scale):
    return q_src.new_empty(q_src.shape), kv_src.new_empty(kv_src.shape) if kv_src is not None else q_src.new_empty(0)


def _attention_setup(ctx, inputs, output) -> None:
    q_src, kv_src, mask, n_heads, causal, seed, threshold, drop_scale = inputs
    ctx.save_for_backward(q_src, kv_src, output[1])
    ctx.args = (n_heads, seed, threshold, drop_scale)
    ctx.cross = kv_src is not None


def _attention_backward(ctx, grad, grad_probs):
    q_src, kv_src, probs = ctx.saved_tensors
    d_q, d_kv = attention_backward_op(grad, q_src, kv_src, probs, *ctx.args)
    return d_q, d_kv if ctx.cross else None, None, None, None, None, None, None


attention_op.register_autograd(_attention_backward, setup_context=_attention_setup)


def fits_attention(x: Tensor, head_dim: int) -> bool:
    """Projections ``x`` on CPU in float32 or bfloat16, heads of at most ``MAX_HEAD_DIM``."""
    return x.device.type == "cpu" and x.dtype in KINDS and head_dim <= MAX_HEAD_DIM


def attention(q_src: Tensor, kv_src: Tensor | None, n_heads: int, mask: Tensor | None, causal: bool,
              p: float) -> Tensor:
    """``attention_op``'s output, with dropout ``p`` on the attention weights (a seed drawn here)."""
    seed, threshold, drop_scale = (draw_seed(), drop_threshold(p), 1.0 / (1.0 - p)) if p > 0 else (0, 0, 1.0)
    return attention_op(q_src, kv_src, mask, n_heads, causal, seed, threshold, drop_scale)[0]

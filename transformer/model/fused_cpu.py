"""Fused CPU kernels, mostly for training: dropout, dropout + residual add + LayerNorm, the
label-smoothed NLL with its gradient, and attention over short rows (``fused_cpu.c``).

In a CPU training step the matrix products run near the machine's peak; much of the rest is
the "Add & Norm" around every sub-layer, LayerNorm(x + Dropout(sublayer(x))), which PyTorch runs
as several passes over memory (random bits, mask, multiply, add, LayerNorm, and as many again
backwards), with the random bits drawn serially by PyTorch's Mersenne twister. The kernels here
do it in one pass each way, on all threads, and store no mask: element i's random bits come
from SplitMix64 at counter i / 4 of a seed drawn from PyTorch's generator (so
``torch.manual_seed`` still makes training reproducible), and the backward pass recomputes them.
Measured (torch 2.13, 2 threads, 64 x 24 x 256, bf16 sub-layer output, float32 residual):
forward 0.14 ms against 0.55 ms for the PyTorch composition, forward + backward 0.40 ms against
0.84 ms (at width 512: 0.82 against 1.9 ms); dropout of 64 x 4 x 24 x 24 bf16 attention weights,
forward + backward, 0.14 against 0.24 ms; the label-smoothed loss over 1,472 x 8,000 bf16 logits,
forward + backward, 4.9 against 9.0 ms (``transformer/training/loss.py``).

Attention in a training step on short rows (``attention``, used by ``model/attention.py``) runs
each (batch, head) pair in a thread's own float32 buffers, reading the heads where the Q/K/V
projections wrote them and writing the output where the output projection reads it, and the
gradients likewise; the weights' dropout mask is the one the dropout kernel draws for the
(B, H, T, S) weights, so the result equals the explicit composition with that mask.

Two kernels serve decoding instead (float32, no autograd): ``decode_attention``, attention for a
few queries per row with the heads merged and the beams of a sentence reading its keys in
place, and ``best_tokens``, log-softmax with the k best tokens of each row in one pass.

The C sources (this module's ``fused_cpu.c`` and the inference kernels of ``packed_linear.c``)
are compiled once with the system's C compiler (``cc``, or ``$CC``) into one library in
``~/.cache/transformer/`` (or ``$TRANSFORMER_CACHE``), keyed by the sources, the flags and the
CPU's features, and loaded with ctypes into the process's OpenMP runtime (PyTorch's libgomp).
Where that fails (no compiler, another platform), or with ``TRANSFORMER_FUSED_CPU=0``, or when
``set_enabled(False)`` was called, ``available()`` is False and the model uses its PyTorch code,
with the same distribution of masks (not the same masks).
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import threading
import warnings
from pathlib import Path

import torch
from torch import Tensor

_SOURCES = (Path(__file__).with_name("fused_cpu.c"), Path(__file__).with_name("packed_linear.c"))
# -O3 vectorises the loops for this CPU; the sums may be reassociated (vectorised reductions).
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros",
          "-fno-trapping-math", "-fopenmp", "-shared", "-fPIC"]
MAX_FEATURES = 16384  # LayerNorm width the kernels accept (their per-thread buffers are on the stack)
DROP_BITS = 15  # an element is dropped when 15 random bits, as an integer, are below drop_threshold(p)


def drop_threshold(p: float) -> int:
    """p in units of 1/32768 (the dropout probability the 15-bit comparisons realise)."""
    return round(p * (1 << DROP_BITS))


_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_tried = False
_enabled = os.environ.get("TRANSFORMER_FUSED_CPU", "1") not in ("0", "false", "no", "off")


def set_enabled(enabled: bool) -> None:
    """Use the fused kernels where they apply (the default) or never (e.g. to compare)."""
    global _enabled
    _enabled = bool(enabled)


def available() -> bool:
    """Whether the fused kernels are enabled and compiled (compiling them on first call)."""
    return _enabled and _load() is not None


def library() -> ctypes.CDLL | None:
    """The compiled kernels (None where ``available()`` is False)."""
    return _load() if available() else None


def _cpu_key() -> str:
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def _load() -> ctypes.CDLL | None:
    global _library, _tried
    if _tried:
        return _library
    with _lock:
        if not _tried:
            try:
                _library = _declare(ctypes.CDLL(str(_build())))
            except (OSError, subprocess.SubprocessError) as e:
                warnings.warn(f"fused CPU kernels unavailable, using PyTorch's ({e})", RuntimeWarning, stacklevel=3)
            _tried = True
    return _library


def _build() -> Path:
    if not sys.platform.startswith("linux"):
        raise OSError(f"built and tested on Linux only, not {sys.platform}")
    compiler = os.environ.get("CC", "cc")
    sources = b"".join(path.read_bytes() for path in _SOURCES)
    key = hashlib.sha256(sources + " ".join([compiler, *_FLAGS, _cpu_key()]).encode()).hexdigest()[:16]
    cache = Path(os.environ.get("TRANSFORMER_CACHE", Path.home() / ".cache" / "transformer"))
    target = cache / f"fused_cpu-{key}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache) as tmp:  # build beside it, then rename: atomic
        built = Path(tmp) / target.name
        result = subprocess.run([compiler, *_FLAGS, *map(str, _SOURCES), "-o", str(built)], capture_output=True, text=True,
                                timeout=120)
        if result.returncode != 0:
            raise OSError(f"{compiler} failed: {result.stderr.strip()[:500]}")
        os.replace(built, target)
    return target


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    P, L, U64, U32, F = ctypes.c_void_p, ctypes.c_long, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_float
    for kind in ("f32", "bf16"):
        getattr(lib, f"dropout_{kind}").argtypes = [P, P, L, U64, U32, F]
        getattr(lib, f"dropout_add_layer_norm_{kind}").argtypes = [P, P, P, P, P, P, P, P, L, L, U64, U32, F, F]
        getattr(lib, f"dropout_add_layer_norm_backward_{kind}").argtypes = [P, P, P, P, P, P, P, P, P, L, L, U64, U32, F]
        getattr(lib, f"smoothed_nll_{kind}").argtypes = [P, P, P, P, P, P, L, L, F]
        getattr(lib, f"attention_forward_{kind}").argtypes = [P, L, L, P, L, L, P, L, L, P, L, L, L, L, ctypes.c_int,
                                                              P, P, L, L, L, L, L, F, U64, U32, F]
        getattr(lib, f"attention_backward_{kind}").argtypes = [P, P, L, L, P, L, L, P, L, L, P, P, L, L, P, L, L, P,
                                                               L, L, L, L, L, L, L, F, U64, U32, F]
        for name in ("dropout", "dropout_add_layer_norm", "dropout_add_layer_norm_backward", "smoothed_nll",
                     "attention_forward", "attention_backward"):
            getattr(lib, f"{name}_{kind}").restype = None
    I = ctypes.c_int
    lib.pack_f32.argtypes = [P, L, L, L, P, I]  # packed_linear.c
    lib.pack_s8.argtypes = [P, L, L, L, P, P, I]
    lib.linear_f32.argtypes = [P, L, L, L, P, P, P, L, P, L, I, I]
    lib.attend_f32.argtypes = [P, L, L, L, P, L, L, L, P, L, L, L, P, L, L, I, P, L, L, L, L, L, L, F]
    lib.decoder_layer_step_f32.argtypes = [P, L, L, L, L, P, P, P, L, L, L, L, P, P, L, L, L, L, L, L, L, L, P, L, L,
                                           I, F, I]
    lib.pack_f32.restype = lib.pack_s8.restype = lib.linear_f32.restype = lib.attend_f32.restype = None
    lib.decoder_layer_step_f32.restype = None
    lib.panel_width.argtypes, lib.panel_width.restype = [], I
    lib.best_tokens_f32.argtypes = [P, L, L, L, L, P, P]
    lib.best_tokens_f32.restype = None
    return lib


_KINDS = {torch.float32: "f32", torch.bfloat16: "bf16"}


def _seed() -> int:
    """A 64-bit seed drawn from PyTorch's default CPU generator."""
    return int(torch.randint(-(1 << 63), (1 << 63) - 1, (), dtype=torch.int64)) & ((1 << 64) - 1)


# ------------------------------------------------------------------------------------- dropout
def can_dropout(x: Tensor) -> bool:
    """Whether ``fused_dropout`` applies to ``x`` (CPU, float32 or bfloat16, kernels available)."""
    return x.device.type == "cpu" and x.dtype in _KINDS and available()


def fused_dropout(x: Tensor, p: float) -> Tensor:
    """Training-mode dropout of ``x`` with probability ``p`` (rounded to 1/32768); see ``can_dropout``."""
    return _Dropout.apply(x, p)


def _dropout_kernel(x: Tensor, seed: int, threshold: int, scale: float) -> Tensor:
    x = x.contiguous()
    y = torch.empty_like(x)
    getattr(_load(), f"dropout_{_KINDS[x.dtype]}")(x.data_ptr(), y.data_ptr(), x.numel(), seed, threshold, scale)
    return y


class _Dropout(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        ctx.args = (_seed(), drop_threshold(p), 1.0 / (1.0 - p))
        return _dropout_kernel(x, *ctx.args)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return _dropout_kernel(grad, *ctx.args), None  # the same mask, recomputed from the seed


# ------------------------------------------------------------ dropout + residual + LayerNorm
def can_dropout_add_layer_norm(x: Tensor, sub: Tensor, norm: torch.nn.LayerNorm) -> bool:
    """Whether ``dropout_add_layer_norm`` applies: CPU, float32 ``x``, float32 or bfloat16 ``sub``
    of the same shape, a LayerNorm with weight and bias over the last dim (at most
    ``MAX_FEATURES``, a multiple of 4), kernels available."""
    E = x.shape[-1]
    return (x.device.type == "cpu" and x.dtype == torch.float32 and sub.dtype in _KINDS
            and sub.shape == x.shape and norm.weight is not None and norm.bias is not None
            and norm.weight.dtype == torch.float32 and norm.bias.dtype == torch.float32
            and tuple(norm.normalized_shape) == (E,) and E % 4 == 0 and E <= MAX_FEATURES and available())


def dropout_add_layer_norm(x: Tensor, sub: Tensor, norm: torch.nn.LayerNorm, p: float) -> Tensor:
    """LayerNorm(x + Dropout(sub)) in training mode, float32 out; see ``can_dropout_add_layer_norm``."""
    return _DropoutAddLayerNorm.apply(x, sub, norm.weight, norm.bias, p, norm.eps)


class _DropoutAddLayerNorm(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: Tensor, sub: Tensor, weight: Tensor, bias: Tensor, p: float, eps: float) -> Tensor:
        x, sub = x.contiguous(), sub.contiguous()
        E = x.shape[-1]
        rows = x.numel() // E
        y, h = torch.empty_like(x), torch.empty_like(x)
        mean, rstd = x.new_empty(rows), x.new_empty(rows)
        seed, threshold, scale = _seed(), drop_threshold(p), 1.0 / (1.0 - p)
        getattr(_load(), f"dropout_add_layer_norm_{_KINDS[sub.dtype]}")(
            x.data_ptr(), sub.data_ptr(), weight.data_ptr(), bias.data_ptr(), y.data_ptr(), h.data_ptr(),
            mean.data_ptr(), rstd.data_ptr(), rows, E, seed, threshold, scale, eps)
        ctx.save_for_backward(h, mean, rstd, weight)
        ctx.args = (seed, threshold, scale)
        ctx.sub_dtype = sub.dtype
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        h, mean, rstd, weight = ctx.saved_tensors
        grad = grad.contiguous().float()
        E = h.shape[-1]
        dx = torch.empty_like(h)
        dsub = torch.empty(h.shape, dtype=ctx.sub_dtype)
        dweight, dbias = torch.empty_like(weight), torch.empty_like(weight)
        getattr(_load(), f"dropout_add_layer_norm_backward_{_KINDS[ctx.sub_dtype]}")(
            grad.data_ptr(), h.data_ptr(), mean.data_ptr(), rstd.data_ptr(), weight.data_ptr(), dx.data_ptr(),
            dsub.data_ptr(), dweight.data_ptr(), dbias.data_ptr(), h.numel() // E, E, *ctx.args)
        return dx, dsub, dweight, dbias, None, None


# ----------------------------------------------------------------------- label-smoothed NLL
MAX_VOCAB = 1 << 20  # logits per row the loss kernel accepts (a per-thread row buffer)


def can_smoothed_nll(logits: Tensor) -> bool:
    """Whether ``smoothed_nll`` applies: float32 or bfloat16 CPU logits ``(N, V)``, V <= ``MAX_VOCAB``."""
    return (logits.device.type == "cpu" and logits.dtype in _KINDS and logits.dim() == 2
            and 0 < logits.shape[1] <= MAX_VOCAB and available())


def smoothed_nll(logits: Tensor, target: Tensor, row_scale: Tensor, eps: float,
                 with_grad: bool) -> tuple[Tensor, Tensor, Tensor | None]:
    """Per row of ``logits`` ``(N, V)``: (lse - z_target, lse - mean(z), and if ``with_grad`` the
    gradient (softmax(z) - eps / V - (1 - eps) onehot(target)) * row_scale, in the logits' dtype).
    ``target`` int64 ``(N,)`` in [0, V); ``row_scale`` float32 ``(N,)``. No autograd here: the
    caller (training/loss.py) owns it."""
    logits, target, row_scale = logits.contiguous(), target.contiguous(), row_scale.contiguous()
    N, V = logits.shape
    if N and not 0 <= int(target.min()) <= int(target.max()) < V:
        raise IndexError(f"targets must be in [0, {V}), got [{int(target.min())}, {int(target.max())}]")
    nll, smooth = logits.new_empty(N, dtype=torch.float32), logits.new_empty(N, dtype=torch.float32)
    grad = torch.empty_like(logits) if with_grad else None
    getattr(_load(), f"smoothed_nll_{_KINDS[logits.dtype]}")(
        logits.data_ptr(), target.data_ptr(), row_scale.data_ptr(), nll.data_ptr(), smooth.data_ptr(),
        grad.data_ptr() if grad is not None else None, N, V, eps)
    return nll, smooth, grad


# ---------------------------------------------------------------------- attention (short rows)
# Up to this many keys (and queries) a training step's attention takes the compiled kernel: one
# (batch, head) pair at a time in a thread's own float32 buffers, where PyTorch's CPU path copies
# the heads in and out of (B, H, T, D) order and runs batched products of tiny matrices (bf16)
# or its fused kernel, whose backward pass is slow on short rows (float32). Measured with torch
# 2.13, 2 threads, 8 heads of 64, dropout 0.1, forward + backward, against the PyTorch path:
# bf16 32 x 24 tokens 1.3 vs 2.1 ms, 32 x 64 6.2 vs 7.9 ms, 8 x 128 5.7 vs 6.1 ms, 8 x 192 13.8
# vs 12.6 ms (slower); float32 3.2x faster at 24 tokens, 3.0x at 192, 2.3x at 256.
MAX_ATTENTION_LENGTH = {torch.float32: 256, torch.bfloat16: 128}


def can_attend(q: Tensor, kv_length: int, head_dim: int) -> bool:
    """Whether ``attention`` applies: CPU, float32 or bfloat16 projections ``q`` ``(B, T, ...)``, at
    most ``MAX_ATTENTION_LENGTH[dtype]`` queries and keys, heads of at most 256, kernels available."""
    limit = MAX_ATTENTION_LENGTH.get(q.dtype, 0)
    return (q.device.type == "cpu" and q.shape[1] <= limit and kv_length <= limit and head_dim <= 256
            and available())


def attention(qkv: Tensor | None, q: Tensor | None, kv: Tensor | None, n_heads: int, mask: Tensor | None,
              causal: bool, p: float) -> Tensor:
    """Multi-head attention before the output projection, training mode: ``(B, T, E)``, head h in
    columns ``h * D .. h * D + D - 1``.

    Self-attention passes the fused projection ``qkv`` ``(B, T, 3E)`` (queries, keys, values in
    that order along the last dim; ``q = kv = None``); cross-attention passes ``q`` ``(B, T, E)``
    and ``kv`` ``(B, S, 2E)`` (keys, then values). ``mask``: bool, broadcastable to
    ``(B, H, T, S)``, True = may attend; ``causal``: query t sees keys up to t + S - T. Rows
    without an allowed key get zeros. Dropout ``p`` on the attention weights, with the mask the
    dropout kernel would draw for the ``(B, H, T, S)`` weights.
    """
    if qkv is not None:
        return _SelfAttention.apply(qkv, n_heads, mask, causal, p)
    return _CrossAttention.apply(q, kv, n_heads, mask, causal, p)


def _mask_args(mask: Tensor | None, shape: tuple[int, int, int, int]) -> tuple:
    if mask is None:
        return None, 0, 0, 0, 0
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    m = mask.expand(shape)
    return (m.data_ptr(), *m.stride())


def _attention_forward(ctx, q: Tensor, k: Tensor, v: Tensor, n_heads: int, mask: Tensor | None, causal: bool,
                       p: float) -> Tensor:
    """q, k, v: (B, L, E) views with unit stride along E; saves what the backward pass needs."""
    B, T, E = q.shape
    S, D = k.shape[1], E // n_heads
    scale = 1.0 / D**0.5
    out = q.new_empty(B, T, E)
    probs = torch.empty(B, n_heads, T, S, dtype=torch.float32)
    seed, threshold, drop_scale = (_seed(), drop_threshold(p), 1.0 / (1.0 - p)) if p > 0 else (0, 0, 1.0)
    getattr(_load(), f"attention_forward_{_KINDS[q.dtype]}")(
        q.data_ptr(), q.stride(0), q.stride(1), k.data_ptr(), k.stride(0), k.stride(1), v.data_ptr(), v.stride(0),
        v.stride(1), *_mask_args(mask, (B, n_heads, T, S)), int(causal), out.data_ptr(), probs.data_ptr(), B, n_heads,
        T, S, D, scale, seed, threshold, drop_scale)
    ctx.args = (n_heads, scale, seed, threshold, drop_scale)
    ctx.probs = probs
    return out


def _attention_backward(ctx, grad: Tensor, q: Tensor, k: Tensor, v: Tensor, dq: Tensor, dk: Tensor,
                        dv: Tensor) -> None:
    n_heads, scale, seed, threshold, drop_scale = ctx.args
    grad = grad.contiguous().to(q.dtype)
    B, T, E = q.shape
    S = k.shape[1]
    getattr(_load(), f"attention_backward_{_KINDS[q.dtype]}")(
        grad.data_ptr(), q.data_ptr(), q.stride(0), q.stride(1), k.data_ptr(), k.stride(0), k.stride(1), v.data_ptr(),
        v.stride(0), v.stride(1), ctx.probs.data_ptr(), dq.data_ptr(), dq.stride(0), dq.stride(1), dk.data_ptr(),
        dk.stride(0), dk.stride(1), dv.data_ptr(), dv.stride(0), dv.stride(1), B, n_heads, T, S, E // n_heads,
        scale, seed, threshold, drop_scale)


class _SelfAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, qkv: Tensor, n_heads: int, mask: Tensor | None, causal: bool, p: float) -> Tensor:
        qkv = qkv.contiguous()
        ctx.save_for_backward(qkv)
        return _attention_forward(ctx, *qkv.chunk(3, dim=-1), n_heads, mask, causal, p)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        (qkv,) = ctx.saved_tensors
        dqkv = torch.empty_like(qkv)  # every element is written
        _attention_backward(ctx, grad, *qkv.chunk(3, dim=-1), *dqkv.chunk(3, dim=-1))
        return dqkv, None, None, None, None


class _CrossAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q: Tensor, kv: Tensor, n_heads: int, mask: Tensor | None, causal: bool, p: float) -> Tensor:
        q, kv = q.contiguous(), kv.contiguous()
        ctx.save_for_backward(q, kv)
        return _attention_forward(ctx, q, *kv.chunk(2, dim=-1), n_heads, mask, causal, p)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor | None, ...]:
        q, kv = ctx.saved_tensors
        dq, dkv = torch.empty_like(q), torch.empty_like(kv)
        _attention_backward(ctx, grad, q, *kv.chunk(2, dim=-1), dq, *dkv.chunk(2, dim=-1))
        return dq, dkv, None, None, None, None


# ----------------------------------------------------------- attention for decoding steps
# Queries per row up to which inference takes ``decode_attention`` (decoding steps); more (an
# encoder, a whole target sequence) go to PyTorch's fused kernel, which works in blocks.
DECODE_ATTENTION_MAX_QUERIES = 16


def can_decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
    """Whether ``decode_attention`` applies: no autograd, float32 CPU ``q`` ``(B, H, T, D)`` with
    T <= ``DECODE_ATTENTION_MAX_QUERIES`` and unit stride along D, keys that ``keys_fit``, kernels
    available."""
    if torch.is_grad_enabled() or not (q.dtype == torch.float32 and q.device.type == "cpu" and q.dim() == 4
                                       and q.stride(-1) == 1 and q.shape[2] <= DECODE_ATTENTION_MAX_QUERIES):
        return False
    B, H, _, D = q.shape
    return keys_fit(B, H, D, k, v, mask) and available()


def keys_fit(B: int, H: int, D: int, k: Tensor, v: Tensor, mask: Tensor | None) -> bool:
    """Whether B query rows of H heads of size D can attend over ``k`` and ``v`` in the compiled
    kernels: float32 CPU ``(M, H, S, D)`` with unit stride along D, B a multiple of M, and ``mask``
    None or a bool key mask ``(M or 1, 1, 1, S)``."""
    if not all(t.dtype == torch.float32 and t.device.type == "cpu" and t.dim() == 4 and t.stride(-1) == 1
               for t in (k, v)):
        return False
    M, S = k.shape[0], k.shape[2]
    if k.shape != v.shape or k.shape[1] != H or k.shape[3] != D or M == 0 or B % M:
        return False
    return mask is None or (mask.dtype == torch.bool and mask.dim() == 4 and mask.shape[1:3] == (1, 1)
                            and mask.shape[0] in (1, M) and mask.shape[3] == S)


def decode_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, causal: bool = False) -> Tensor:
    """softmax(Q K^T / sqrt(D)) V for every head, heads merged: ``(B, T, H * D)``, head h in
    columns ``h * D .. h * D + D - 1`` (see ``can_decode_attention``).

    Query row b attends over key row ``b // (B / M)`` (the beams of a sentence share its
    cross-attention keys); masked keys, and with ``causal`` keys after position ``S - T + t``, get
    weight 0; a row with no allowed key gets zeros. No dropout, no weights returned.
    """
    B, H, T, D = q.shape
    M, S = k.shape[0], k.shape[2]
    out = torch.empty(B, T, H * D, dtype=torch.float32)
    m = mask.expand(M, 1, 1, S) if mask is not None else None
    if out.numel():
        _load().attend_f32(
            q.data_ptr(), q.stride(0), q.stride(1), q.stride(2), k.data_ptr(), k.stride(0), k.stride(1), k.stride(2),
            v.data_ptr(), v.stride(0), v.stride(1), v.stride(2), m.data_ptr() if m is not None else None,
            m.stride(0) if m is not None else 0, m.stride(3) if m is not None else 0, int(causal), out.data_ptr(),
            B, H, T, S, D, B // M, 1.0 / D**0.5)
    return out


# ------------------------------------------------------------------ choosing tokens in decoding
def can_best_tokens(logits: Tensor, k: int) -> bool:
    """Whether ``best_tokens`` applies: float32 CPU logits ``(N, V)`` with unit stride along V,
    0 < k <= V, no autograd, kernels available."""
    return (logits.dtype == torch.float32 and logits.device.type == "cpu" and logits.dim() == 2
            and logits.stride(-1) == 1 and 0 < k <= logits.shape[1] and not torch.is_grad_enabled() and available())


def best_tokens(logits: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The k largest log-probabilities of each row, ``log_softmax(logits)``, and their ids, best
    first (equal values: the smaller id first): ``(values (N, k) float32, ids (N, k) int64)``, in
    one pass over each row without the ``(N, V)`` log-probabilities."""
    N, V = logits.shape
    values = torch.empty(N, k, dtype=torch.float32)
    ids = torch.empty(N, k, dtype=torch.long)
    if N:
        _load().best_tokens_f32(logits.data_ptr(), N, V, logits.stride(0), k, values.data_ptr(), ids.data_ptr())
    return values, ids

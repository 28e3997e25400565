"""Linear layers, and whole decoder-layer steps, for inference on CPU from packed float32 (or
int8) weights (``packed_linear.c``).

A decoding step runs every linear layer of the decoder on a few rows (one per sentence and
beam) and the weights stream from memory each time. PyTorch's CPU product (MKL's sgemm) is slow
on such shapes on some CPUs: on a 2-core AMD EPYC with AVX2 (torch 2.13, 2 threads), 16 rows by
a 1,024 x 256 weight took 135-175 us against 60-80 us for the kernel here, and one decoding step
of the Multi30k model's 19 matrices (3 decoder layers and the 8,000-word output layer, weights
cycled through memory) 4.6 ms against 1.8 ms at 16 rows and 2.0 against 0.7 ms at 1 row. The
kernel multiplies blocks of up to 6 rows by panels of 16 output features of a copy of the weight
laid out panel by panel (``pack_f32``); it kept up with MKL for up to 12,000 rows as well. Where
the CPU has AVX-512 the panels are 32 features wide and the sums 512-bit vectors: on a 2-core AMD
EPYC with AVX-512, where PyTorch's float32 products ran at 110-225 GFLOP/s, the kernel ran at
220-530 from 16 to 4,096 rows: 2.0-3.5x PyTorch's speed, and 1.4-2.2x that of 16-column panels.

With a few rows the rest of a step is overhead: about 220 PyTorch operators and the Python
around them, 1.2 ms per step of that model at 1 row. ``decoder_layer_step`` runs a whole
decoder layer for one new position per row in one call (``decoder_layer_step_f32``: the packed
products, the cache write, attention by ``fused_cpu``'s ``attend_f32``, Add & Norm), the same
computation as ``DecoderLayer.forward``; a step of that model at 1 row took 1.6 ms against 2.5.

The packed copies are used only inside ``packing()``, a scope the decoding functions open
(``transformer/decoding``) for the length of one call and the ``Translator`` for one
``translate``. Inside it ``linear(layer, x)`` packs each weight on its first use and reuses the
copy; outside it, or for anything but a plain ``nn.Linear`` in float32 on CPU without autograd
or CPU autocast (quantised int8 layers, bf16 copies, training steps), ``linear`` is
``layer(x)``. Inside a scope the model's weights must not change.

The memory of the copies stays with the weights (about the size of the model's float32 linear
weights). A weight that requires gradients is packed again in each scope: optimizers such as
fused Adam update parameters in place without bumping their version counter, so a copy kept
between scopes could go stale after a training step (validation decodes in the middle of
training). A frozen weight (``requires_grad`` False, as ``Translator.from_run_dir`` leaves the
model it loads) keeps its copy between scopes for as long as its memory, shape, strides and
version counter stay the same and no ``torch.optim`` optimizer has taken a step in the process
(a copy for a translation server made once, not per request: 7-8 ms per ``translate`` call for
the Multi30k model). Only in-place writes through the parameter itself or its views are seen
(and ``load_state_dict``, which makes them). Call ``forget()`` after any other change to a frozen
weight: writes through ``.data``, ``.numpy()`` or another alias of its memory, ``w.data =
other`` (the allocator may hand the old address back), ``Module.to()`` and the like (which
assign ``.data``), or weights in shared memory changed by another process. Scopes in two threads
at once write the same bytes into a copy that must be packed again; a nested scope takes the
outermost scope's format (float32 or int8).

``packing(int8=True)`` packs int8 copies instead (``packed_linear.c``'s ``pack_s8``: one scale
per output feature, max |w| / 127; the kernel converts the bytes to float32 as it loads them, so
activations and sums stay float32): a quarter of the weights' memory traffic. On the AVX2 CPU
above, whole translations with the Multi30k model ran 1.1-1.7x faster than from float32 copies
(1 to 256 sentences; ``Translator(quantize="int8-weights")``).

``set_enabled(False)`` (or ``TRANSFORMER_FUSED_CPU=0`` for all compiled kernels) turns it off,
e.g. to compare; where the kernels cannot be compiled it is off.
"""

from __future__ import annotations

import contextlib
import ctypes
import threading
from dataclasses import dataclass
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch.optim.optimizer import register_optimizer_step_post_hook
from torch import Tensor, nn
from torch.utils.weak import WeakIdKeyDictionary

from transformer.model import fused_cpu


_enabled = True


@dataclass
class _Copy:
    """A weight packed for the kernel: float32 panels, or int8 panels with one scale per output."""

    packed: Tensor
    scales: Tensor | None
    features: int  # N, the output features
    stamp: tuple[int, ...] | None = None  # the frozen weight it was packed from (_stamp); None: pack again


# weight -> {"f32" or "int8": _Copy}. Each weight's copies stay in memory kept for as long as the
# weight lives: allocating ~30 MB afresh (page faults, zeroing) cost more than packing it (17
# against 7 ms per Translator.translate call for the Multi30k model).
_copies: WeakIdKeyDictionary = WeakIdKeyDictionary()
_scopes = threading.local()  # .packs while a scope is open: {id(weight): (weight, _Copy),
#                               ("step", id(layer)): (layer, decoder_layer_step's pointers, what they point to)}
#                               .int8: whether the scope packs weights as int8


def set_enabled(enabled: bool) -> None:
    """Use the packed kernel inside ``packing()`` scopes (the default) or never (e.g. to compare)."""
    global _enabled
    _enabled = bool(enabled)


def enabled() -> bool:
    """Whether ``linear`` may use the kernel: switched on and the kernels compiled."""
    return _enabled and fused_cpu.library() is not None


@contextlib.contextmanager
def packing(*, int8: bool = False) -> Iterator[None]:
    """A scope in which ``linear`` keeps packed copies of the weights it meets: float32, or with
    ``int8`` int8 copies (one scale per output feature; activations and sums stay float32).
    Nested scopes share the outermost one's copies (and its format); they are dropped when it closes."""
    outer = getattr(_scopes, "packs", None)
    if outer is not None:
        yield
        return
    _scopes.packs, _scopes.int8 = {}, bool(int8)
    try:
        yield
    finally:
        _scopes.packs = None


def forget() -> None:
    """Pack every frozen weight again in the next scope (after writes the version counters do
    not see, such as ``weight.data.copy_(...)``)."""
    for copies in list(_copies.values()):
        for copy in list(copies.values()):
            copy.stamp = None


def applies(layer: nn.Module, x: Tensor) -> bool:
    """Whether ``linear(layer, x)`` runs the packed kernel: inside ``packing()``, no autograd, no
    CPU autocast, a plain ``nn.Linear`` with float32 weights on CPU, float32 input of its width,
    kernels enabled."""
    return (_kernel_time() and _packable(layer) and x.dtype == torch.float32 and x.device.type == "cpu"
            and x.dim() >= 1 and x.shape[-1] == layer.in_features > 0 and enabled())


def _kernel_time() -> bool:
    """Inside ``packing()``, without autograd or CPU autocast (which would pick another dtype)."""
    return (getattr(_scopes, "packs", None) is not None and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu"))


def _packable(layer: nn.Module) -> bool:
    """A plain ``nn.Linear`` (not a quantised one) with float32 weights (and bias) on CPU."""
    return (type(layer) is nn.Linear and layer.weight.dtype == torch.float32 and layer.weight.device.type == "cpu"
            and (layer.bias is None or layer.bias.dtype == torch.float32))


def linear(layer: nn.Module, x: Tensor, activation: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """``activation(layer(x))`` (``layer(x)`` without one), through the packed kernel where it
    ``applies`` (a ReLU then runs in the kernel's last pass over the output)."""
    if not applies(layer, x):
        y = layer(x)
        return y if activation is None else activation(y)
    assert isinstance(layer, nn.Linear)
    relu = activation is F.relu
    y = _linear(x, _packed(layer.weight), layer.bias, relu=relu)
    return y if activation is None or relu else activation(y)


def _packed(weight: Tensor) -> _Copy:
    """The scope's copy of ``weight`` (packed on its first use in the scope, unless kept)."""
    packs = _scopes.packs
    entry = packs.get(id(weight))
    if entry is None or entry[0] is not weight:
        entry = packs[id(weight)] = (weight, _pack(weight, "int8" if _scopes.int8 else "f32"))  # the weight is
    return entry[1]  # kept, so its id stays its own


def _pack(weight: Tensor, kind: str) -> _Copy:
    N, K = weight.shape
    panel = fused_cpu.library().panel_width()  # output features per packed panel: 16, 32 with AVX-512
    size = (N + panel - 1) // panel * panel * K
    copies = _copies.get(weight)
    if copies is None:
        copies = _copies[weight] = {}
    copy = copies.get(kind)
    if copy is None or copy.packed.numel() != size or copy.features != N:
        int8 = kind == "int8"
        copy = copies[kind] = _Copy(torch.empty(size, dtype=torch.int8 if int8 else torch.float32),
                                    torch.empty(N, dtype=torch.float32) if int8 else None, N)
    stamp = _stamp(weight)
    if stamp is None or copy.stamp != stamp:
        copy.stamp = None
        w = weight if weight.stride(1) == 1 else weight.contiguous()
        if copy.scales is None:
            fused_cpu.library().pack_f32(w.data_ptr(), N, K, w.stride(0), copy.packed.data_ptr(),
                                         torch.get_num_threads())
        else:
            fused_cpu.library().pack_s8(w.data_ptr(), N, K, w.stride(0), copy.packed.data_ptr(),
                                        copy.scales.data_ptr(), torch.get_num_threads())
        copy.stamp = stamp  # recorded once the copy is complete
    return copy


def _stamp(weight: Tensor) -> tuple[int, ...] | None:
    """What a frozen weight's packed copy was made from: its memory, its version counter (bumped
    by every in-place write except through ``.data``), shape, strides and the number of optimizer
    steps taken in this process so far. None for a weight that requires gradients or an inference
    tensor (which has no version counter): a copy of it is not kept between scopes."""
    if weight.requires_grad or weight.is_inference():  # inference tensors have no version counter
        return None
    return weight.data_ptr(), weight._version, *weight.shape, *weight.stride(), _optimizer_steps


def _count_step(optimizer, args, kwargs) -> None:
    global _optimizer_steps
    _optimizer_steps += 1


# Optimizers may update weights in place without bumping their version counters (fused Adam does
# not): a step of any torch.optim optimizer makes every kept copy stale, e.g. of a weight frozen
# again after a fine-tuning step.
_optimizer_steps = 0
register_optimizer_step_post_hook(_count_step)


def _linear(x: Tensor, copy: _Copy, bias: Tensor | None, *, relu: bool) -> Tensor:
    K, N = x.shape[-1], copy.features
    rows = x.numel() // K
    x2 = x.reshape(rows, K)
    if x2.stride(-1) != 1 or (rows > 1 and x2.stride(0) < K):
        x2 = x2.contiguous()
    b = bias.contiguous() if bias is not None else None
    y = torch.empty(rows, N, dtype=torch.float32)
    if rows and N:
        fused_cpu.library().linear_f32(x2.data_ptr(), rows, K, x2.stride(0), copy.packed.data_ptr(),
                                       _pointer(copy.scales), _pointer(b), N, y.data_ptr(), N, int(relu),
                                       torch.get_num_threads())
    return y.view(*x.shape[:-1], N)


def _pointer(tensor: Tensor | None) -> int | None:
    return tensor.data_ptr() if tensor is not None else None



# ------------------------------------------------------------------------ a decoder layer's step
def can_step(layer: nn.Module, x: Tensor, self_cache, memory_kv, memory_mask: Tensor | None) -> bool:
    """Whether ``decoder_layer_step`` applies to ``layer`` (a ``DecoderLayer``) for ``x`` ``(B, 1, E)``:
    inside ``packing()``, no autograd or CPU autocast, evaluation mode, float32 on CPU (the cache's
    buffers too, if it has them), plain ``nn.Linear`` layers,
    LayerNorms with weight and bias, a ReLU feed-forward, a self-attention cache and the memory's
    keys/values (``StaticKV``) with a key mask ``(M or 1, 1, 1, S)`` or none; kernels enabled."""
    if not _kernel_time() or layer.training or self_cache is None or memory_kv is None or not enabled():
        return False
    keys = getattr(self_cache, "key_buffer", None)
    if keys is not None and not (keys.dtype == torch.float32 and keys.is_contiguous()):
        return False  # the kernel writes float32 rows into a contiguous buffer
    if not (x.dim() == 3 and x.shape[1] == 1 and x.dtype == torch.float32 and x.device.type == "cpu"
            and x.is_contiguous() and layer.ffn.activation is F.relu
            and all(_packable(lin) for lin in _step_linears(layer))):
        return False
    B, _, E = x.shape
    for norm in (layer.self_block.norm, layer.cross_block.norm, layer.ffn_block.norm):
        if norm.weight is None or norm.bias is None or tuple(norm.normalized_shape) != (E,) \
                or norm.weight.dtype != torch.float32:
            return False
    H = layer.cross_attn.n_heads
    return fused_cpu.keys_fit(B, H, E // H, memory_kv.k, memory_kv.v, memory_mask)


def decoder_layer_step(layer: nn.Module, x: Tensor, self_cache, memory_kv, memory_mask: Tensor | None) -> Tensor:
    """``layer(x, ...)``'s output for one new position per row (see ``can_step``), in one call of the
    compiled ``decoder_layer_step_f32``: the same sub-layers, products from the packed weights,
    attention by ``attend_f32``; the new keys and values go into ``self_cache``."""
    B, _, E = x.shape
    H = layer.self_attn.n_heads
    out = x.clone()  # updated in place by the kernel
    keys, values = self_cache.reserve(x.new_empty(B, H, 1, E // H), E // H)
    k, v = memory_kv.k, memory_kv.v
    M, S = k.shape[0], k.shape[2]
    mask = memory_mask.expand(M, 1, 1, S) if memory_mask is not None else None
    fused_cpu.library().decoder_layer_step_f32(
        out.data_ptr(), B, E, H, layer.ffn.linear1.out_features, _step_weights(layer), keys.data_ptr(),
        values.data_ptr(), keys.stride(0), keys.stride(1), keys.stride(2), self_cache.length, k.data_ptr(),
        v.data_ptr(), k.stride(0), k.stride(1), k.stride(2), v.stride(0), v.stride(1), v.stride(2), S, B // M,
        mask.data_ptr() if mask is not None else None, mask.stride(0) if mask is not None else 0,
        mask.stride(3) if mask is not None else 0, int(layer.self_block.norm_first), layer.self_block.norm.eps,
        torch.get_num_threads())
    self_cache.length += 1
    return out


def _step_linears(layer: nn.Module) -> tuple[nn.Linear, ...]:
    return (layer.self_attn.qkv_proj, layer.self_attn.out_proj, layer.cross_attn.q_proj, layer.cross_attn.out_proj,
            layer.ffn.linear1, layer.ffn.linear2)


def _step_weights(layer: nn.Module):
    """The 24 pointers ``decoder_layer_step_f32`` reads, kept in the scope with the packed copies."""
    packs = _scopes.packs
    entry = packs.get(("step", id(layer)))
    if entry is None or entry[0] is not layer:
        pointers, keep = [], []
        lin = _step_linears(layer)
        norms = (layer.self_block.norm, layer.cross_block.norm, layer.ffn_block.norm)
        for pair, norm in zip(((lin[0], lin[1]), (lin[2], lin[3]), (lin[4], lin[5])), norms):
            for linear_layer in pair:
                copy = _packed(linear_layer.weight)
                bias = linear_layer.bias.contiguous() if linear_layer.bias is not None else None
                keep += [copy, bias]
                pointers += [copy.packed.data_ptr(), _pointer(copy.scales), _pointer(bias)]
            gamma, beta = norm.weight.contiguous(), norm.bias.contiguous()
            keep += [gamma, beta]
            pointers += [gamma.data_ptr(), beta.data_ptr()]
        entry = packs[("step", id(layer))] = (layer, (ctypes.c_void_p * 24)(*pointers), keep)
    return entry[1]

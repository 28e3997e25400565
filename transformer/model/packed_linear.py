"""Linear layers for inference on CPU from packed float32 weights (``packed_linear.c``).

A decoding step runs every linear layer of the decoder on a few rows (one per sentence and
beam) and the weights stream from memory each time. PyTorch's CPU product (MKL's sgemm) is slow
on such shapes on some CPUs: on a 2-core AMD EPYC with AVX2 (torch 2.13, 2 threads), 16 rows by
a 1,024 x 256 weight took 135-175 us against 60-80 us for the kernel here, and one decoding step
of the Multi30k model's 19 matrices (3 decoder layers and the 8,000-word output layer, weights
cycled through memory) 4.6 ms against 1.8 ms at 16 rows and 2.0 against 0.7 ms at 1 row. The
kernel multiplies blocks of up to 6 rows by panels of 16 output features of a copy of the weight
laid out panel by panel (``pack_f32``); it kept up with MKL for up to 12,000 rows as well.

The packed copies live only inside ``packing()``, a scope the decoding functions open
(``transformer/decoding``) for the length of one call and the ``Translator`` for one
``translate``. Inside it ``linear(layer, x)`` packs each weight on its first use and reuses the
copy; outside it, or for anything but a plain ``nn.Linear`` in float32 on CPU without autograd
(quantised int8 layers, bf16 copies, training), ``linear`` is ``layer(x)``. A scope, not a
cache keyed by the weights' version: optimizers such as fused Adam update parameters in place
without bumping their version counter, so a copy kept between calls could go stale after a
training step (validation decodes in the middle of training). Inside a scope the model's
weights must not change.

``set_enabled(False)`` (or ``TRANSFORMER_FUSED_CPU=0`` for all compiled kernels) turns it off,
e.g. to compare; where the kernels cannot be compiled it is off.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from transformer.model import fused_cpu

PANEL = 16  # output features per packed panel (packed_linear.c)

_enabled = True
_scopes = threading.local()  # .packs: {id(weight): (weight, packed)} while a scope is open


def set_enabled(enabled: bool) -> None:
    """Use the packed kernel inside ``packing()`` scopes (the default) or never (e.g. to compare)."""
    global _enabled
    _enabled = bool(enabled)


def enabled() -> bool:
    """Whether ``linear`` may use the kernel: switched on and the kernels compiled."""
    return _enabled and fused_cpu.library() is not None


@contextlib.contextmanager
def packing() -> Iterator[None]:
    """A scope in which ``linear`` keeps packed copies of the weights it meets. Nested scopes
    share the outermost one's copies; they are dropped when it closes."""
    outer = getattr(_scopes, "packs", None)
    if outer is not None:
        yield
        return
    _scopes.packs = {}
    try:
        yield
    finally:
        _scopes.packs = None


def applies(layer: nn.Module, x: Tensor) -> bool:
    """Whether ``linear(layer, x)`` runs the packed kernel: inside ``packing()``, no autograd, no
    CPU autocast, a plain ``nn.Linear`` with float32 weights on CPU, float32 input of its width,
    kernels enabled."""
    return (getattr(_scopes, "packs", None) is not None and not torch.is_grad_enabled()
            and not torch.is_autocast_enabled("cpu")
            and type(layer) is nn.Linear and x.dtype == torch.float32 and x.device.type == "cpu"
            and layer.weight.dtype == torch.float32 and layer.weight.device.type == "cpu"
            and (layer.bias is None or layer.bias.dtype == torch.float32)
            and x.dim() >= 1 and x.shape[-1] == layer.in_features > 0 and enabled())


def linear(layer: nn.Module, x: Tensor, activation: Callable[[Tensor], Tensor] | None = None) -> Tensor:
    """``activation(layer(x))`` (``layer(x)`` without one), through the packed kernel where it
    ``applies`` (a ReLU then runs in the kernel's last pass over the output)."""
    if not applies(layer, x):
        y = layer(x)
        return y if activation is None else activation(y)
    assert isinstance(layer, nn.Linear)
    relu = activation is F.relu
    y = _linear(x, _packed(layer.weight), layer.bias, layer.out_features, relu=relu)
    return y if activation is None or relu else activation(y)


def _packed(weight: Tensor) -> Tensor:
    packs = _scopes.packs
    entry = packs.get(id(weight))
    if entry is None or entry[0] is not weight:
        N, K = weight.shape
        w = weight if weight.stride(1) == 1 else weight.contiguous()
        packed = torch.empty((N + PANEL - 1) // PANEL * PANEL * K, dtype=torch.float32)
        fused_cpu.library().pack_f32(w.data_ptr(), N, K, w.stride(0), packed.data_ptr(), torch.get_num_threads())
        entry = packs[id(weight)] = (weight, packed)  # the weight is kept, so its id stays its own
    return entry[1]


def _linear(x: Tensor, packed: Tensor, bias: Tensor | None, N: int, *, relu: bool) -> Tensor:
    K = x.shape[-1]
    rows = x.numel() // K
    x2 = x.reshape(rows, K)
    if x2.stride(-1) != 1 or (rows > 1 and x2.stride(0) < K):
        x2 = x2.contiguous()
    b = bias.contiguous() if bias is not None else None
    y = torch.empty(rows, N, dtype=torch.float32)
    if rows and N:
        fused_cpu.library().linear_f32(x2.data_ptr(), rows, K, x2.stride(0), packed.data_ptr(),
                                       b.data_ptr() if b is not None else None, N, y.data_ptr(), N, int(relu),
                                       torch.get_num_threads())
    return y.view(*x.shape[:-1], N)


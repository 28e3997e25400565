"""The decoder's key/value cache for incremental (autoregressive) decoding.

At inference the decoder produces one token per step (paper 3.2.3). Recomputing the keys and
values of every earlier position at each step would cost O(T^2) projections; the cache keeps
them instead:

* ``KVCache``: a decoder self-attention layer's keys/values, growing by the new positions each
  step. Storage is preallocated and grown by doubling, so a step is an in-place write.
* ``StaticKV``: a cross-attention layer's keys/values, projected once from the encoder
  output and reused at every step.
* ``DecoderCache``: one of each per decoder layer, passed explicitly into and out of
  ``Transformer.decode``. It is never module state and never part of a checkpoint.

``reorder(index)`` selects batch rows (beam search keeps the surviving hypotheses' caches).
It writes into the buffer the previous reorder left behind when that one is large enough, so a
beam-search step does not fault in fresh memory for every layer (for large buffers a fresh
allocation costs several times the copy itself). The price: the cache holds two sets of
buffers, and keys/values returned by ``append`` are valid only until the second ``reorder``
after it. The cache is meant for inference under ``torch.no_grad()``.

Letters: B batch (sentences x beams), H heads, S cached positions, D head size.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import Tensor


class KVCache:
    """Growing keys/values ``(B, H, S, D)`` of one self-attention layer."""

    def __init__(self, initial_capacity: int = 32) -> None:
        if initial_capacity < 1:
            raise ValueError(f"initial_capacity must be >= 1, got {initial_capacity}")
        self._capacity = initial_capacity
        self._k: Tensor | None = None
        self._v: Tensor | None = None
        self._spare: tuple[Tensor, Tensor] | None = None  # the buffers before the last reorder
        self.length = 0  # positions stored

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        """Store the new positions ``k, v (B, H, T, D)``; return all keys/values so far ``(B, H, S, D)``."""
        T = k.shape[2]
        keys, values = self.reserve(k, v.shape[-1])
        needed = self.length + T
        keys[:, :, self.length : needed] = k
        values[:, :, self.length : needed] = v
        self.length = needed
        return keys[:, :, :needed], values[:, :, :needed]

    @property
    def key_buffer(self) -> Tensor | None:
        """The key buffer ``(B, H, capacity, D)`` (None before the first position)."""
        return self._k

    def reserve(self, k: Tensor, value_size: int) -> tuple[Tensor, Tensor]:
        """Room for new positions shaped like ``k (B, H, T, D)`` (values of ``value_size``): the whole
        key and value buffers ``(B, H, capacity, D)``. Whoever writes positions ``length .. length
        + T - 1`` into them then adds T to ``length`` (``append`` does both)."""
        B, H, T, D = k.shape
        if self._k is None:
            capacity = max(self._capacity, T)
            self._k = k.new_empty(B, H, capacity, D)
            self._v = k.new_empty(B, H, capacity, value_size)
        elif self._k.shape[0] != B:
            raise ValueError(f"cache holds {self._k.shape[0]} rows but the new keys have {B}; reorder() first")
        assert self._v is not None
        needed = self.length + T
        if needed > self._k.shape[2]:
            self._k = _grow(self._k, needed, self.length)
            self._v = _grow(self._v, needed, self.length)
        return self._k, self._v

    def reorder(self, index: Tensor) -> None:
        """Keep batch rows ``index`` (B',) in that order (rows may repeat)."""
        if self._k is not None:
            assert self._v is not None
            spare_k, spare_v = self._spare if self._spare is not None else (None, None)
            self._spare = (self._k, self._v)
            self._k = select_rows(self._k, index, spare_k)
            self._v = select_rows(self._v, index, spare_v)


def select_rows(x: Tensor, index: Tensor, spare: Tensor | None = None) -> Tensor:
    """``x.index_select(0, index)``, written into the first rows of ``spare`` when they fit.

    ``spare`` must be a buffer nothing else reads any more (and not ``x``'s memory).
    """
    n = index.numel()
    if (spare is None or spare.shape[0] < n or spare.shape[1:] != x.shape[1:] or spare.dtype != x.dtype
            or spare.device != x.device or not spare.is_contiguous()):
        return x.index_select(0, index)
    return torch.index_select(x, 0, index, out=spare[:n])


def _grow(buffer: Tensor, needed: int, used: int) -> Tensor:
    capacity = max(needed, 2 * buffer.shape[2])
    bigger = buffer.new_empty(*buffer.shape[:2], capacity, buffer.shape[3])
    bigger[:, :, :used] = buffer[:, :, :used]
    return bigger


@dataclass
class StaticKV:
    """Cross-attention keys and values ``(B, H, S, D)``, computed once from the encoder output."""

    k: Tensor
    v: Tensor

    def reorder(self, index: Tensor, spare: StaticKV | None = None) -> StaticKV:
        """The rows ``index``; written into ``spare``'s buffers (no longer read by anyone) when they fit."""
        return StaticKV(select_rows(self.k, index, spare.k if spare else None),
                        select_rows(self.v, index, spare.v if spare else None))


@dataclass
class DecoderCache:
    """Per-layer caches of a decoder stack. Create with ``Transformer.new_cache()``."""

    self_attn: list[KVCache]
    cross_attn: list[StaticKV | None] = field(default_factory=list)
    _cross_spare: list[StaticKV | None] = field(default_factory=list, repr=False)  # before the last reorder

    @classmethod
    def empty(cls, n_layers: int, *, initial_capacity: int = 32) -> DecoderCache:
        return cls([KVCache(initial_capacity) for _ in range(n_layers)], [None] * n_layers)

    @property
    def length(self) -> int:
        """Number of target positions already decoded (the next position's index)."""
        return self.self_attn[0].length if self.self_attn else 0

    def reorder(self, index: Tensor, memory_index: Tensor | None = None) -> None:
        """Select batch rows ``index`` in every layer, e.g. the parents of surviving beams.

        ``memory_index`` selects the cross-attention rows instead, when they are shared by
        groups of target rows (beam search: ``index`` picks beams, ``memory_index`` sentences).
        """
        for name, idx in (("index", index), ("memory_index", memory_index)):
            if idx is not None and (idx.dtype != torch.long or idx.dim() != 1):
                raise ValueError(f"reorder {name} must be a 1-D long tensor, got {idx.dtype} {tuple(idx.shape)}")
        for layer in self.self_attn:
            layer.reorder(index)
        self.reorder_memory(index if memory_index is None else memory_index)

    def reorder_memory(self, index: Tensor) -> None:
        """Select rows ``index`` of the cross-attention keys/values only."""
        spares = self._cross_spare + [None] * (len(self.cross_attn) - len(self._cross_spare))
        self._cross_spare = self.cross_attn
        self.cross_attn = [kv.reorder(index, spare) if kv is not None else None
                           for kv, spare in zip(self.cross_attn, spares)]

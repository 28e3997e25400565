"""The decoder run one step at a time over a batch's rows: what greedy search, sampling and beam
search hand the model, and how its cache follows the rows.

``DecoderSteps`` holds a batch's decoder cache and the encoder memory its rows read; ``logits``
runs one step for every row, ``reorder`` keeps the rows that go on (finished sentences leave,
beams take their parents' places). Its cache is static by default: each self-attention layer's
keys and values are allocated once for every step of the batch (``StaticKVCache``), and a
reorder copies only the positions stored so far. ``static=False`` uses the model's own cache
(``Transformer.new_cache``: buffers that double as they fill, a reorder copying the whole
buffer), the reference the static one is tested equal to.

An engine may bring its own steps: a model with a ``decoder_steps(memory, src_mask, steps=...,
rows=...)`` method (the CUDA engine's, ``transformer.cuda.decoding``) is asked first and its
steps are used where it returns some (it returns None where they do not apply).

Letters: M memory rows (sentences), N rows (M x beams or samples), S source length,
T output positions, H heads, D head size, V vocabulary.
"""

from __future__ import annotations

from typing import Protocol

import torch
from torch import Tensor

from transformer.decoding.common import CACHE_CAPACITY
from transformer.model.cache import DecoderCache, KVCache


class Steps(Protocol):
    """What the decoders ask of a batch's steps."""

    def logits(self, tokens: Tensor) -> Tensor:
        """One step: each row's next-token logits ``(N, V)`` after its token ``tokens (N,)``."""

    def reorder(self, index: Tensor, memory_index: Tensor | None = None) -> None:
        """Keep rows ``index`` (of the current rows, in that order, repeats allowed) and, where
        given, memory rows ``memory_index`` (else the memory rows stay as they are)."""


class StaticKVCache(KVCache):
    """A self-attention layer's keys/values ``(B, H, capacity, D)``, allocated once for every step
    of a batch: never grown, and a reorder copies only the ``length`` positions stored so far
    into the buffer the previous reorder left (the model's ``KVCache`` copies its whole buffer)."""

    def __init__(self, capacity: int) -> None:
        super().__init__(initial_capacity=capacity)

    def reserve(self, k: Tensor, value_size: int) -> tuple[Tensor, Tensor]:
        if self.length + k.shape[2] > self._capacity:
            raise ValueError(f"the static cache holds {self._capacity} positions; "
                             f"{self.length} are stored and {k.shape[2]} more do not fit")
        return super().reserve(k, value_size)

    def reorder(self, index: Tensor) -> None:
        if self._k is None:
            return
        assert self._v is not None
        spare_k, spare_v = self._spare if self._spare is not None else (None, None)
        self._spare = (self._k, self._v)
        self._k = _select_stored(self._k, index, self.length, spare_k)
        self._v = _select_stored(self._v, index, self.length, spare_v)


def _select_stored(x: Tensor, index: Tensor, length: int, spare: Tensor | None) -> Tensor:
    """Rows ``index`` of ``x (B, H, capacity, D)``, positions ``:length`` copied (the rest left as it
    is), in the first rows of ``spare`` where they fit, else in a new buffer."""
    n = index.numel()
    if spare is None or spare.shape[0] < n or spare.shape[1:] != x.shape[1:] or not spare.is_contiguous():
        spare = x.new_empty(n, *x.shape[1:])
    out = spare[:n]
    torch.index_select(x[:, :, :length], 0, index, out=out[:, :, :length])
    return out


class DecoderSteps:
    """A batch's decoder cache and the memory its rows read, through ``model.decode``.

    Args:
        model: a ``Transformer`` (or a model with ``decode`` and ``new_cache``).
        memory: the encoder's output ``(M, S, E)``; src_mask: ``(M, S)`` bool, True = real token.
        steps: the most steps the batch takes (the static cache's capacity).
        static: preallocated keys/values (``StaticKVCache``); False: the model's growing cache.
    """

    def __init__(self, model, memory: Tensor, src_mask: Tensor, *, steps: int, static: bool = True) -> None:
        self.model, self.memory, self.src_mask = model, memory, src_mask
        self.cache = model.new_cache(initial_capacity=steps if static else CACHE_CAPACITY)
        if static and isinstance(self.cache, DecoderCache):
            self.cache.self_attn = [StaticKVCache(steps) for _ in self.cache.self_attn]

    def logits(self, tokens: Tensor) -> Tensor:
        return self.model.decode(tokens.unsqueeze(1), self.memory, self.src_mask, cache=self.cache)[:, -1]

    def reorder(self, index: Tensor, memory_index: Tensor | None = None) -> None:
        if memory_index is not None:
            self.memory = self.memory.index_select(0, memory_index)
            self.src_mask = self.src_mask.index_select(0, memory_index)
        if not isinstance(self.cache, DecoderCache):
            self.cache.reorder(index)  # the recurrent model's state: one row per target row in all of it
        elif memory_index is None:  # the memory's keys/values stay: only the self-attention follows
            for layer in self.cache.self_attn:
                layer.reorder(index)
        else:
            self.cache.reorder(index, memory_index=memory_index)


def decoder_steps(model, memory: Tensor, src_mask: Tensor, *, steps: int, rows: int,
                  static: bool = True) -> Steps:
    """The steps of one batch: the model's own (an engine's ``decoder_steps``) where it has some
    that apply and ``static`` is on, else ``DecoderSteps``.

    ``rows``: the most rows a step will run (sentences x beams, or x samples); ``steps``: the
    most steps."""
    engine = getattr(model, "decoder_steps", None) if static else None
    if engine is not None and (found := engine(memory, src_mask, steps=steps, rows=rows)) is not None:
        return found
    return DecoderSteps(model, memory, src_mask, steps=steps, static=static)

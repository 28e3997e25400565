"""Several corpora in one training run, each with its share of every epoch (``data.mix``).

Fine-tuning on a small in-domain corpus alone makes a model forget what it knew; mixing in a
share of the data it was trained on limits that. ``data.mix=multi30k:0.8,tatoeba:0.2`` names the
corpora and their shares of the *sentence pairs* of an epoch. The first corpus is the in-domain
one: each epoch holds every one of its training pairs, and as many pairs of each other corpus as
its share asks for, drawn anew each epoch (without replacement while the corpus is large enough,
whole copies plus a draw when it is not), so over several epochs the model sees more of a large
secondary corpus than one fixed sample would show. The draw depends only on the seed and the
epoch number, so an interrupted run resumes with the same batches, and every DDP rank draws the
same epoch before taking its share of the batches.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

import numpy as np

from transformer.data.batches import Batch, TokenBudgetBatches
from transformer.data.filtering import Example
from transformer.data.indexed import ConcatPairs
from transformer.errors import UserError

NAMED_CORPORA = ("builtin", "multi30k", "tatoeba")  # what a name in data.mix can be, besides a .tsv file


def parse_mix(text: str) -> list[tuple[str, float]]:
    """``"multi30k:0.8,tatoeba:0.2"`` -> ``[("multi30k", 0.8), ("tatoeba", 0.2)]``, the weights
    normalised to sum to 1.

    Each name is a registry corpus, ``builtin``, or the path of a ``.tsv`` file (source<TAB>target
    lines). Raises ``ValueError`` naming the item for a missing or non-positive weight, an unknown
    name, or a corpus named twice.
    """
    items: list[tuple[str, float]] = []
    for item in text.split(","):
        name, sep, weight_text = item.strip().rpartition(":")
        name = name.strip()
        if not sep or not name:
            raise UserError(f"data.mix item {item.strip()!r} is not NAME:WEIGHT (e.g. data.mix=multi30k:0.8,tatoeba:0.2)")
        try:
            weight = float(weight_text)
        except ValueError:
            raise UserError(f"data.mix item {item.strip()!r}: the weight {weight_text!r} is not a number") from None
        if not (math.isfinite(weight) and weight > 0):
            raise UserError(f"data.mix item {item.strip()!r}: the weight must be a number > 0")
        if name not in NAMED_CORPORA and not name.endswith(".tsv"):
            raise UserError(f"data.mix names an unknown corpus {name!r}: use {', '.join(NAMED_CORPORA)} or the path "
                             "of a .tsv file (source<TAB>target lines)")
        if name in (n for n, _ in items):
            raise UserError(f"data.mix names {name!r} twice")
        items.append((name, weight))
    total = sum(w for _, w in items)
    return [(name, w / total) for name, w in items]


def epoch_counts(sizes: Sequence[int], weights: Sequence[float]) -> list[int]:
    """Pairs of each corpus in one epoch: all of the first's, the others in proportion to their weights."""
    if len(sizes) != len(weights) or not sizes:
        raise ValueError("one weight per corpus, and at least one corpus")
    if any(n < 1 for n in sizes):
        raise ValueError(f"every corpus of a mix needs training pairs, got sizes {list(sizes)}")
    epoch = sizes[0] / weights[0]  # the epoch's size, in pairs, that gives the first corpus its share
    return [sizes[0]] + [max(1, round(epoch * w)) for w in weights[1:]]


class MixedBatches:
    """Token-budget batches over corpora mixed by weight: the interface of
    :class:`~transformer.data.TokenBudgetBatches` (``len``, ``iter_from``, ``batch_indices``), with
    each epoch's pairs drawn by :func:`epoch_counts` from ``numpy.random.default_rng([seed, 2, epoch, i])``
    for corpus ``i``. ``len(self)`` is epoch 0's number of batches (others differ a little, as
    their draws have other lengths)."""

    def __init__(self, parts: Sequence[Sequence[Example]], weights: Sequence[float], *, max_tokens: int, pad_id: int,
                 bos_id: int, eos_id: int, shuffle: bool = True, seed: int = 0, rank: int = 0, world_size: int = 1) -> None:
        self.parts = [p if hasattr(p, "select") else list(p) for p in parts]  # memory-mapped corpora stay on disk
        self.counts = epoch_counts([len(p) for p in self.parts], weights)
        self._batching = dict(max_tokens=max_tokens, pad_id=pad_id, bos_id=bos_id, eos_id=eos_id, shuffle=shuffle,
                              seed=seed, rank=rank, world_size=world_size)
        self.seed = seed
        self._cached: tuple[int, TokenBudgetBatches, np.ndarray] | None = None
        self._len0 = len(self.epoch_batches(0))

    def epoch_draw(self, epoch: int) -> tuple[Sequence[Example], np.ndarray]:
        """The pairs of ``epoch`` and, aligned with them, the index of the corpus each came from (a list,
        or a view of the memory-mapped corpora, :class:`~transformer.data.indexed.ConcatPairs`)."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        drawn: list[Sequence[Example]] = []
        origin: list[np.ndarray] = []
        for i, (part, count) in enumerate(zip(self.parts, self.counts)):
            n = len(part)
            if i == 0:
                chosen = np.arange(n)
            else:
                rng = np.random.default_rng([self.seed, 2, epoch, i])
                whole, rest = divmod(count, n)
                chosen = np.concatenate([np.tile(np.arange(n), whole), rng.choice(n, rest, replace=False)])
            drawn.append(part.select(chosen) if hasattr(part, "select") else [part[j] for j in chosen.tolist()])
            origin.append(np.full(len(chosen), i))
        if any(hasattr(part, "select") for part in self.parts):
            return ConcatPairs(drawn), np.concatenate(origin)
        return [e for d in drawn for e in d], np.concatenate(origin)

    def epoch_batches(self, epoch: int) -> TokenBudgetBatches:
        """The token-budget batches of ``epoch``'s draw (the last epoch's are kept)."""
        if self._cached is None or self._cached[0] != epoch:
            examples, origin = self.epoch_draw(epoch)
            self._cached = (epoch, TokenBudgetBatches(examples, **self._batching), origin)
        return self._cached[1]

    def __len__(self) -> int:
        return self._len0

    def iter_from(self, epoch: int, index: int) -> Iterator[Batch]:
        """Batches ``index, index + 1, ...`` of this rank's epoch ``epoch`` (exact resume)."""
        return self.epoch_batches(epoch).iter_from(epoch, index)

    def target_tokens_by_rank(self, epoch: int, index: int, count: int) -> list[int]:
        """Each rank's target tokens in its batches ``index`` to ``index + count - 1`` of ``epoch``
        (:meth:`TokenBudgetBatches.target_tokens_by_rank`)."""
        return self.epoch_batches(epoch).target_tokens_by_rank(epoch, index, count)

    def batch_sources(self, epoch: int) -> list[list[int]]:
        """For each of this rank's batches of ``epoch``, in order, the corpus index of each pair."""
        batches = self.epoch_batches(epoch)
        origin = self._cached[2]  # type: ignore[index]
        return [origin[idx].tolist() for idx in batches.batch_indices(epoch)]

"""Filtering training pairs by length (token ids): :func:`filter_examples` drops empty, too long
and badly proportioned pairs and says how many of each; :func:`filter_lengths` does it on the
lengths alone, which a memory-mapped corpus gives without reading a token."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from transformer.errors import UserError

__all__ = ["Example", "FilterStats", "example_lengths", "filter_examples", "filter_lengths"]

Example = tuple[list[int], list[int]]  # (source ids, target ids), no BOS/EOS
"""An example: ``(source ids, target ids)``, without BOS/EOS (the batch adds them)."""


@dataclass
class FilterStats:
    """Outcome of :func:`filter_examples`: how many pairs were kept, and dropped for each reason.

    Every dropped pair is counted once, under the first reason that applies, checked in
    the order ``empty``, ``too_long``, ``bad_ratio``.
    """

    kept: int
    too_long: int
    bad_ratio: int
    empty: int

    @property
    def dropped(self) -> int:
        """Pairs dropped for any reason."""
        return self.too_long + self.bad_ratio + self.empty

    @property
    def total(self) -> int:
        """Pairs looked at."""
        return self.kept + self.dropped


def filter_examples(
    examples: Sequence[Example], *, max_len: int, max_ratio: float | None = None
) -> tuple[list[int], FilterStats]:
    """Choose the examples fit for training; return their indices (ascending) and counts.

    A pair is dropped if either side is empty (``empty``); else if either side has more
    than ``max_len`` tokens, counted as given, i.e. without the BOS/EOS the batch adds
    (``too_long``); else if ``max_ratio`` is set and ``longer / shorter > max_ratio``
    (``bad_ratio``; the usual Moses ``clean-corpus-n`` setting is 1.5 to 9).
    """
    src_lens, tgt_lens = example_lengths(examples)
    kept, stats = filter_lengths(src_lens, tgt_lens, max_len=max_len, max_ratio=max_ratio)
    return kept.tolist(), stats


def example_lengths(examples: Sequence[Example]) -> tuple[np.ndarray, np.ndarray]:
    """Source and target lengths (int64 arrays); a memory-mapped corpus
    (:class:`~transformer.data.indexed.IndexedPairs`) gives them from its offsets, reading no token."""
    if hasattr(examples, "lengths"):
        src, tgt = examples.lengths()
        return np.asarray(src, dtype=np.int64), np.asarray(tgt, dtype=np.int64)
    n = len(examples)
    return (np.fromiter((len(e[0]) for e in examples), dtype=np.int64, count=n),
            np.fromiter((len(e[1]) for e in examples), dtype=np.int64, count=n))


def filter_lengths(
    src_lens: np.ndarray, tgt_lens: np.ndarray, *, max_len: int, max_ratio: float | None = None
) -> tuple[np.ndarray, FilterStats]:
    """:func:`filter_examples` on the lengths alone: the kept indices (an ascending int64 array) and the counts."""
    if max_len < 1:
        raise UserError(f"max_len must be >= 1, got {max_len}")
    if max_ratio is not None and not max_ratio >= 1.0:
        raise UserError(f"max_ratio compares longer/shorter, so it must be >= 1 (or None), got {max_ratio}")
    s, t = np.asarray(src_lens, dtype=np.int64), np.asarray(tgt_lens, dtype=np.int64)
    empty = (s == 0) | (t == 0)
    too_long = ~empty & ((s > max_len) | (t > max_len))
    ok = ~empty & ~too_long
    bad_ratio = np.zeros_like(ok)
    if max_ratio is not None:
        bad_ratio = ok & (np.maximum(s, t) > max_ratio * np.minimum(s, t))
        ok &= ~bad_ratio
    kept = np.flatnonzero(ok)
    return kept, FilterStats(kept=len(kept), too_long=int(too_long.sum()), bad_ratio=int(bad_ratio.sum()),
                             empty=int(empty.sum()))

"""A tokenized parallel corpus on disk, memory-mapped: fairseq's "mmap" dataset, for pairs.

One directory per split::

    header.json        {"format": 1, "pairs": N, "dtype": {"src": "uint16", "tgt": "uint16"},
                        "tokens": {"src": .., "tgt": ..}, "vocab": <tokenizer hash>, "source": <data fingerprint>}
    src.bin, tgt.bin   every sentence's token ids, one after the other (no BOS/EOS), in the
                       smallest unsigned integer type that holds the vocabulary (uint16 below 65,536 ids)
    src.idx, tgt.idx   int64 offsets, N + 1 of them: sentence i is ``bin[idx[i]:idx[i + 1]]``

The files are raw arrays (``numpy.memmap`` reads them); the header says how to read them, and
:func:`open_indexed` checks that the files have the sizes it announces. A corpus of 4.5 million
pairs of ~30 tokens a side takes ~0.6 GB on disk and nearly nothing in memory: the operating
system pages in the sentences a batch reads. :class:`IndexedPairs` is a sequence of
``(src_ids, tgt_ids)`` lists, as the in-memory examples are, and knows every sentence's length
from its offsets, without reading a token (:meth:`IndexedPairs.lengths`), which is all that
filtering and length-bucketed batching need.

:class:`IndexedWriter` writes such a directory in one pass, appending chunks of encoded
sentences; :mod:`transformer.data.binary` encodes a corpus into it in parallel.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from transformer.errors import UserError

__all__ = ["FORMAT_VERSION", "HEADER_FILE", "ConcatPairs", "IndexedFormatError", "IndexedPairs", "IndexedWriter",
           "open_indexed", "smallest_dtype"]

FORMAT_VERSION = 1
HEADER_FILE = "header.json"
SIDES = ("src", "tgt")


class IndexedFormatError(UserError):
    """A directory that is not (or no longer) a complete indexed corpus; the message says what is wrong."""


def smallest_dtype(vocab_size: int) -> np.dtype:
    """The smallest unsigned integer type that holds the ids ``0 .. vocab_size - 1``."""
    if vocab_size < 1:
        raise ValueError(f"vocab_size must be >= 1, got {vocab_size}")
    for dtype in (np.uint8, np.uint16, np.uint32):
        if vocab_size - 1 <= np.iinfo(dtype).max:
            return np.dtype(dtype)
    return np.dtype(np.int64)


class IndexedWriter:
    """Writes one indexed corpus directory: :meth:`append` chunks of encoded pairs, then :meth:`close`.

    The token files are written as the chunks come (nothing but the offsets is kept in memory: 16
    bytes a pair); the offsets and the header are written by :meth:`close`, the header last, so a
    directory without a header is an unfinished one. Write into a temporary directory and rename
    it into place (as :mod:`transformer.data.binary` does) to publish it atomically.
    """

    def __init__(self, directory: str | os.PathLike[str], *, n_pairs: int, dtypes: dict[str, np.dtype],
                 meta: dict[str, Any] | None = None) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.n_pairs, self.dtypes, self.meta = n_pairs, {s: np.dtype(dtypes[s]) for s in SIDES}, dict(meta or {})
        self._offsets = {s: np.zeros(n_pairs + 1, dtype=np.int64) for s in SIDES}
        self._files = {s: (self.directory / f"{s}.bin").open("wb") for s in SIDES}
        self._done = 0

    def append(self, ids: dict[str, np.ndarray], lengths: dict[str, np.ndarray]) -> None:
        """Add the next ``len(lengths["src"])`` pairs: per side, their ids concatenated and their lengths."""
        n = len(lengths["src"])
        if len(lengths["tgt"]) != n:
            raise ValueError(f"{n} source lengths but {len(lengths['tgt'])} target lengths")
        if self._done + n > self.n_pairs:
            raise ValueError(f"more than the announced {self.n_pairs} pairs")
        for side in SIDES:
            flat, lens = np.asarray(ids[side]), np.asarray(lengths[side], dtype=np.int64)
            if int(lens.sum()) != len(flat):
                raise ValueError(f"{side}: the lengths add up to {int(lens.sum())} ids, got {len(flat)}")
            if len(flat) and (flat.min() < 0 or flat.max() > np.iinfo(self.dtypes[side]).max):
                raise ValueError(f"{side}: ids outside 0..{np.iinfo(self.dtypes[side]).max} for {self.dtypes[side]}")
            offsets = self._offsets[side]
            np.cumsum(lens, out=offsets[self._done + 1 : self._done + n + 1])
            offsets[self._done + 1 : self._done + n + 1] += offsets[self._done]
            self._files[side].write(flat.astype(self.dtypes[side], copy=False).tobytes())
        self._done += n

    def close(self) -> dict[str, Any]:
        """Write the offsets and the header; returns the header. Every announced pair must have come."""
        if self._done != self.n_pairs:
            raise ValueError(f"{self._done} pairs written, {self.n_pairs} announced")
        for side in SIDES:
            self._files[side].close()
            self._offsets[side].tofile(self.directory / f"{side}.idx")
        header = {"format": FORMAT_VERSION, "pairs": self.n_pairs,
                  "dtype": {s: self.dtypes[s].name for s in SIDES},
                  "tokens": {s: int(self._offsets[s][-1]) for s in SIDES}, **self.meta}
        (self.directory / HEADER_FILE).write_text(json.dumps(header, indent=1, sort_keys=True), encoding="utf-8")
        return header

    def abort(self) -> None:
        """Close the files of an unfinished directory (the caller removes it)."""
        for f in self._files.values():
            f.close()


def _read_header(directory: Path) -> dict[str, Any]:
    path = directory / HEADER_FILE
    try:
        header = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise IndexedFormatError(f"{directory}: no {HEADER_FILE} (not an indexed corpus, or an unfinished one)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise IndexedFormatError(f"{path}: not readable JSON ({err})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT_VERSION:
        found = header.get("format") if isinstance(header, dict) else None
        raise IndexedFormatError(f"{path}: format {found!r}, this version reads format {FORMAT_VERSION}")
    return header


def open_indexed(directory: str | os.PathLike[str]) -> IndexedPairs:
    """Memory-map the corpus in ``directory`` (read-only).

    Raises:
        IndexedFormatError: no header, another format version, or a file whose size is not the
            one the header announces (a truncated or replaced file).
    """
    directory = Path(directory)
    header = _read_header(directory)
    try:
        n = int(header["pairs"])
        arrays: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        for side in SIDES:
            dtype, tokens = np.dtype(header["dtype"][side]), int(header["tokens"][side])
            arrays[side] = (_map(directory / f"{side}.bin", dtype, tokens), _map(directory / f"{side}.idx", np.int64, n + 1))
    except (KeyError, TypeError, ValueError) as err:  # ValueError: a count that is not a number
        raise IndexedFormatError(f"{directory / HEADER_FILE}: incomplete header ({err!r})") from None
    for side, (_, offsets) in arrays.items():
        if offsets[0] != 0 or offsets[-1] != int(header["tokens"][side]):
            raise IndexedFormatError(f"{directory / f'{side}.idx'}: offsets do not span {side}.bin")
    return IndexedPairs(arrays["src"], arrays["tgt"], header=header, path=directory)


def _map(path: Path, dtype: np.dtype, count: int) -> np.ndarray:
    """``count`` items of ``dtype`` from ``path``, memory-mapped; the file must hold exactly that."""
    try:
        size = path.stat().st_size
    except FileNotFoundError:
        raise IndexedFormatError(f"{path}: missing") from None
    if size != count * np.dtype(dtype).itemsize:
        raise IndexedFormatError(f"{path}: {size} bytes, the header announces {count} x {np.dtype(dtype).name}")
    if count == 0:  # numpy cannot map an empty file
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class IndexedPairs(Sequence):
    """Sentence pairs read from memory-mapped arrays; ``pairs[i]`` is ``(src_ids, tgt_ids)`` as lists of int.

    ``select(indices)`` gives a view of some of the pairs in the given order (what length filtering
    keeps) without copying tokens; lengths come from the offsets.
    """

    def __init__(self, src: tuple[np.ndarray, np.ndarray], tgt: tuple[np.ndarray, np.ndarray], *,
                 header: dict[str, Any] | None = None, indices: np.ndarray | None = None,
                 path: Path | None = None) -> None:
        (self._src, self._src_off), (self._tgt, self._tgt_off) = src, tgt
        self.header = dict(header or {})
        self.path = path  # the directory it was opened from
        self._indices = indices  # None: all pairs, in order

    def __len__(self) -> int:
        return len(self._src_off) - 1 if self._indices is None else len(self._indices)

    def _row(self, i: int) -> int:
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} of {len(self)}")
        i %= len(self)
        return i if self._indices is None else int(self._indices[i])

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:  # type: ignore[override]
        if not isinstance(i, (int, np.integer)):
            raise TypeError(f"IndexedPairs takes one integer index, got {type(i).__name__}; use select() for many")
        r = self._row(int(i))
        return (self._src[self._src_off[r] : self._src_off[r + 1]].tolist(),
                self._tgt[self._tgt_off[r] : self._tgt_off[r + 1]].tolist())

    def __iter__(self) -> Iterator[tuple[list[int], list[int]]]:
        for i in range(len(self)):
            yield self[i]

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Source and target lengths of every pair of this view, int64 arrays, from the offsets alone."""
        src, tgt = np.diff(self._src_off), np.diff(self._tgt_off)
        if self._indices is None:
            return src, tgt
        return src[self._indices], tgt[self._indices]

    def select(self, indices: Sequence[int] | np.ndarray) -> IndexedPairs:
        """The pairs ``indices`` of this view, in that order (a view: no token is copied)."""
        idx = np.asarray(indices, dtype=np.int64)
        if idx.ndim != 1:
            raise ValueError(f"select takes a 1-d index array, got shape {idx.shape}")
        if len(idx) and (idx.min() < 0 or idx.max() >= len(self)):
            raise IndexError(f"select: indices outside 0..{len(self) - 1}")
        rows = idx if self._indices is None else self._indices[idx]
        # int32 halves the index's memory where the corpus allows (4.5M pairs: 18 MB instead of 36)
        rows = rows.astype(np.int32) if len(self._src_off) - 1 <= np.iinfo(np.int32).max else rows
        return IndexedPairs((self._src, self._src_off), (self._tgt, self._tgt_off), header=self.header, indices=rows,
                            path=self.path)

    def token_counts(self, side: str, minlength: int = 0) -> np.ndarray:
        """How often each id occurs on ``side`` ("src" or "tgt") over all pairs (a view of all of them only)."""
        if self._indices is not None:
            raise ValueError("token_counts counts a whole corpus, not a selection of it")
        return np.bincount({"src": self._src, "tgt": self._tgt}[side], minlength=minlength)

    def __repr__(self) -> str:
        dtype = self.header.get("dtype", {})
        return f"IndexedPairs({len(self):,} pairs, src {dtype.get('src')}, tgt {dtype.get('tgt')})"


class ConcatPairs(Sequence):
    """Several sequences of pairs (``IndexedPairs`` views or lists) read as one, in order, without copying."""

    def __init__(self, parts: Sequence[Sequence[tuple[list[int], list[int]]]]) -> None:
        self.parts = list(parts)
        self._ends = np.cumsum([len(p) for p in self.parts], dtype=np.int64)

    def __len__(self) -> int:
        return int(self._ends[-1]) if len(self._ends) else 0

    def __getitem__(self, i: int) -> tuple[list[int], list[int]]:  # type: ignore[override]
        if not -len(self) <= i < len(self):
            raise IndexError(f"pair {i} of {len(self)}")
        i %= len(self)
        k = int(np.searchsorted(self._ends, i, side="right"))
        return self.parts[k][i - (int(self._ends[k - 1]) if k else 0)]

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Source and target lengths of every pair, int64 arrays (from the parts' offsets where they have them)."""
        both = [p.lengths() if hasattr(p, "lengths") else
                (np.fromiter((len(e[0]) for e in p), np.int64, len(p)), np.fromiter((len(e[1]) for e in p), np.int64, len(p)))
                for p in self.parts]
        return (np.concatenate([s for s, _ in both]).astype(np.int64, copy=False),
                np.concatenate([t for _, t in both]).astype(np.int64, copy=False))

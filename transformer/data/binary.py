"""Tokenizing a corpus once, in parallel, into a memory-mapped directory (:mod:`.indexed`); fingerprints
that say when such a directory is stale; publishing it atomically; one builder at a time.

* :func:`encode_to_indexed` encodes sentence pairs with a run's :class:`~transformer.text.Vocabularies`
  over worker processes (forked, so they share the text and the tokenizer without copying them;
  a sequential pass off Linux or for a corpus of one chunk), writes the ids in the
  smallest integer type that fits each vocabulary, and shows a progress bar on a terminal, a line
  every ``progress_every`` seconds otherwise. The directory is written under a temporary name and
  renamed into place when complete, so a reader never sees half of one.
* :func:`file_fingerprint` identifies a data file by its size, modification time and a hash of
  its content (all of it up to 64 MiB; above, 1 MiB at the start, the middle and the end):
  hashing a multi-gigabyte corpus in full at every start would cost seconds, while any write
  changes the modification time, and a copy that keeps it (``cp -p``, ``rsync -t``) of a
  different file of the same size differs in the sampled blocks unless it was crafted to.
* :func:`vocab_fingerprint` identifies the tokenization: the tokenizer files, the classes that
  apply them and the ``tokenizers`` / ``sentencepiece`` versions.
* :func:`build_lock` is an exclusive ``flock`` on a file: two processes (DDP ranks, or two runs
  sharing the cache) never build the same thing twice; the second waits, then finds it built.
"""

from __future__ import annotations

import contextlib
import hashlib
import inspect
import json
import multiprocessing as mp
import os
import secrets
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from importlib import metadata
from itertools import chain
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from transformer.data.indexed import IndexedPairs, IndexedWriter, open_indexed, smallest_dtype

try:
    import fcntl
except ImportError:  # not POSIX: no lock; concurrent builders still publish atomically, one wins
    fcntl = None  # type: ignore[assignment]

__all__ = ["build_lock", "encode_to_indexed", "file_fingerprint", "publish", "remove_temporaries",
           "vocab_fingerprint", "workers_available"]

SAMPLE_BLOCK = 1 << 20  # bytes hashed at each sampled place of a large file
FULL_HASH_LIMIT = 64 << 20  # files up to this size are hashed whole
TMP_MARK = ".tmp-"  # in the names of directories and files being written


def _blake(data: bytes | str) -> str:
    return hashlib.blake2b(data.encode("utf-8") if isinstance(data, str) else data, digest_size=16).hexdigest()


def file_fingerprint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """``{"size", "mtime_ns", "content"}`` of a file: ``content`` hashes all of it up to
    :data:`FULL_HASH_LIMIT` bytes, else three :data:`SAMPLE_BLOCK` blocks (start, middle, end)."""
    path = Path(path)
    stat = path.stat()
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as f:
        if stat.st_size <= FULL_HASH_LIMIT:
            for block in iter(lambda: f.read(SAMPLE_BLOCK), b""):
                digest.update(block)
        else:
            for at in (0, stat.st_size // 2, stat.st_size - SAMPLE_BLOCK):
                f.seek(at)
                digest.update(f.read(SAMPLE_BLOCK))
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "content": digest.hexdigest()}


def vocab_fingerprint(vocab: Any) -> str:
    """A hash of what turns text into ids: the tokenizer files ``vocab.save`` writes, the source of
    the tokenizer classes, and the versions of the libraries under them."""
    parts = []
    with tempfile.TemporaryDirectory() as tmp:
        vocab.save(tmp)
        for name in sorted(os.listdir(tmp)):
            parts.append(f"{name}:{_blake(Path(tmp, name).read_bytes())}")
    for cls in sorted({type(vocab.src), type(vocab.tgt)}, key=lambda c: c.__name__):
        parts.append(f"{cls.__name__}:{_blake(inspect.getsource(cls))}")
    for package in ("tokenizers", "sentencepiece"):
        try:
            parts.append(f"{package}=={metadata.version(package)}")
        except metadata.PackageNotFoundError:
            parts.append(f"{package} absent")
    return _blake("\n".join(parts))


def workers_available() -> int:
    """The CPUs this process may run on (its affinity mask where the platform has one)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:
        return max(1, os.cpu_count() or 1)


# --------------------------------------------------------------------------------------------- encoding

# What a forked worker encodes: set before the pool starts, inherited by the children (copy on write).
_JOB: dict[str, Any] = {}


def _encode_range(bounds: tuple[int, int]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Encode pairs ``start:end`` of the job: per side, the ids concatenated and the lengths."""
    start, end = bounds
    ids, lengths = {}, {}
    for side, texts, tokenizer in (("src", _JOB["src"], _JOB["vocab"].src), ("tgt", _JOB["tgt"], _JOB["vocab"].tgt)):
        encoded = tokenizer.encode_batch(list(texts[start:end]))
        lens = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        ids[side] = np.fromiter(chain.from_iterable(encoded), dtype=_JOB["dtypes"][side], count=int(lens.sum()))
        lengths[side] = lens
    return ids, lengths


class _Progress:
    """A tqdm bar on a terminal; otherwise a plain line every ``every`` seconds and one at the end."""

    def __init__(self, total: int, stream: TextIO | None, every: float, what: str) -> None:
        self.total, self.stream, self.every, self.what = total, stream, every, what
        self.done, self.start = 0, time.perf_counter()
        self.last = self.start
        self.bar = None
        if stream is not None and stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit=" pairs", unit_scale=True, desc=what, file=stream, leave=False)

    def update(self, n: int) -> None:
        self.done += n
        if self.bar is not None:
            self.bar.update(n)
        elif self.stream is not None and time.perf_counter() - self.last >= self.every and self.done < self.total:
            self.last = time.perf_counter()
            self._line()

    def _line(self) -> None:
        rate = self.done / max(time.perf_counter() - self.start, 1e-9)
        print(f"{self.what}: {self.done:,} / {self.total:,} pairs ({100 * self.done / max(self.total, 1):.0f}%), "
              f"{rate:,.0f} pairs/s", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.stream is not None:
            self._line()


def encode_to_indexed(
    src_texts: Sequence[str], tgt_texts: Sequence[str], vocab: Any, directory: str | os.PathLike[str], *,
    meta: dict[str, Any] | None = None, workers: int | None = None, chunk_size: int = 20_000,
    progress: TextIO | None = None, progress_every: float = 10.0, what: str = "tokenizing",
) -> IndexedPairs:
    """Encode the pairs ``(src_texts[i], tgt_texts[i])`` into the indexed corpus ``directory`` and open it.

    ``workers`` processes (default: the CPUs available) each encode ``chunk_size`` pairs at a time;
    the chunks are written in order, so the result does not depend on the number of workers.
    ``meta`` goes into the header (the fingerprints). ``directory`` must not exist: it is written
    under a temporary name beside it and renamed into place (:func:`publish`). ``progress``: the
    stream for the progress bar or lines (None: silent).
    """
    if len(src_texts) != len(tgt_texts):
        raise ValueError(f"{len(src_texts)} source texts but {len(tgt_texts)} target texts")
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    final = Path(directory)
    n = len(src_texts)
    dtypes = {"src": smallest_dtype(vocab.src.vocab_size), "tgt": smallest_dtype(vocab.tgt.vocab_size)}
    tmp = final.parent / f".{final.name}{TMP_MARK}{os.getpid()}-{secrets.token_hex(4)}"
    writer = IndexedWriter(tmp, n_pairs=n, dtypes=dtypes, meta=meta)
    bounds = [(a, min(a + chunk_size, n)) for a in range(0, n, chunk_size)]
    workers = min(workers or workers_available(), len(bounds))
    bar = _Progress(n, progress, progress_every, what)
    _JOB.update(src=src_texts, tgt=tgt_texts, vocab=vocab, dtypes=dtypes)
    try:
        with contextlib.ExitStack() as stack:
            # fork only on Linux: macOS forbids it to processes that use some system frameworks
            if workers > 1 and sys.platform.startswith("linux"):
                pool = stack.enter_context(mp.get_context("fork").Pool(workers))
                chunks: Iterator = pool.imap(_encode_range, bounds)  # in order, whatever finishes first
            else:
                chunks = map(_encode_range, bounds)
            for ids, lengths in chunks:
                writer.append(ids, lengths)
                bar.update(len(lengths["src"]))
        writer.close()
    except BaseException:
        writer.abort()
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        _JOB.clear()
    bar.close()
    publish(tmp, final)
    return open_indexed(final)


# --------------------------------------------------------------------------------------------- cache housekeeping

def publish(tmp: Path, final: Path) -> None:
    """Rename the finished ``tmp`` (a file or directory) to ``final``; if another process published
    ``final`` first, keep theirs (same inputs, same content) and drop ours."""
    try:
        os.replace(tmp, final) if tmp.is_file() else os.rename(tmp, final)
    except OSError:
        if not final.exists():
            raise
        shutil.rmtree(tmp, ignore_errors=True)


def remove_temporaries(directory: Path) -> None:
    """Remove what builders killed mid-write left in ``directory`` (call it holding :func:`build_lock`)."""
    if not directory.is_dir():
        return
    for path in directory.iterdir():
        if TMP_MARK in path.name:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


@contextlib.contextmanager
def build_lock(path: Path, *, stream: TextIO | None = sys.stderr) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``path`` (created); says once on ``stream`` when it has to wait."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as f:
        if fcntl is not None:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                f.seek(0)
                try:
                    who = json.loads(f.read())
                    holder = f"process {who['pid']} on {who['host']}"
                except (ValueError, KeyError, TypeError):
                    holder = "another process"
                if stream is not None:
                    print(f"waiting for {holder} to finish building {path.parent} ...", file=stream, flush=True)
                fcntl.flock(f, fcntl.LOCK_EX)
            f.seek(0)
            f.truncate()
            f.write(json.dumps({"pid": os.getpid(), "host": os.uname().nodename}))
            f.flush()
        try:
            yield
        finally:
            if fcntl is not None:
                fcntl.flock(f, fcntl.LOCK_UN)

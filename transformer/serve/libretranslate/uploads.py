"""The server-wide budget of file uploads in flight, and the threads that parse them.

An upload to ``/translate_file`` costs memory from the moment its body is read until its
translated file is stored: its bytes, and a parser's working copies of them (several times its
size). :class:`Uploads` bounds what all uploads together may hold: at most ``max_uploads`` in
flight and ``max_upload_bytes`` of their bodies (as their ``Content-Length`` declares, the file
limit when they declare none); an upload beyond either is refused at once with
:class:`UploadsBusy` (503 with ``Retry-After``) before its body is read. A budget with nothing
in flight takes any upload (as the batcher's queue takes any request when empty), so a file
larger than the byte budget is not refused forever.

Parsing and writing files runs on this object's own threads (:meth:`Uploads.run`), not on
anyio's shared pool where the other routes tokenize and segment: a few large files being
parsed cannot take the threads that short requests need.
"""

from __future__ import annotations

import asyncio
import functools
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, TypeVar

from transformer.errors import UserError

T = TypeVar("T")

PARSE_THREADS = 2  # parsing is mostly Python under the GIL: more threads would only hold more files in memory


class UploadsBusy(Exception):
    """The uploads in flight fill the budget: try again shortly (HTTP 503 with ``Retry-After``)."""

    retry_after = 5


class Uploads:
    """The budget of uploads in flight (see the module docstring) and their parsing threads.

    Args:
        max_uploads: uploads in flight at once.
        max_upload_bytes: their bodies' bytes together.
        threads: threads that parse and write files.
    """

    def __init__(self, max_uploads: int, max_upload_bytes: int, *, threads: int = PARSE_THREADS) -> None:
        if max_uploads < 1 or max_upload_bytes < 1 or threads < 1:
            raise UserError("max_uploads, max_upload_bytes and threads must be >= 1")
        self.max_uploads = max_uploads
        self.max_upload_bytes = max_upload_bytes
        self.threads = threads
        self.in_flight = 0
        self.bytes_in_flight = 0
        self.refused = 0
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None

    @contextmanager
    def reserve(self, n_bytes: int) -> Iterator[None]:
        """Hold ``n_bytes`` of the budget and one upload for the block; :class:`UploadsBusy` at
        once when they do not fit beside the uploads in flight."""
        with self._lock:
            busy = self.in_flight >= self.max_uploads or (
                self.in_flight and self.bytes_in_flight + n_bytes > self.max_upload_bytes)
            if busy:
                self.refused += 1
                raise UploadsBusy(f"the server is busy with {self.in_flight} file uploads "
                                  f"({self.bytes_in_flight:,} bytes; at most {self.max_uploads} uploads and "
                                  f"{self.max_upload_bytes:,} bytes at once): try again shortly")
            self.in_flight += 1
            self.bytes_in_flight += n_bytes
        try:
            yield
        finally:
            with self._lock:
                self.in_flight -= 1
                self.bytes_in_flight -= n_bytes

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` on the parsing threads."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self.threads, thread_name_prefix="transformer-serve-files")
        future = asyncio.get_running_loop().run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            # A thread cannot be stopped: a cancelled upload (its client gone) keeps its share of the
            # budget until the work on its file ends, so the budget still bounds the memory held.
            await asyncio.wait((future,))
            if not future.cancelled():
                future.exception()  # retrieved: nobody waits for it any more
            raise

    def health(self) -> dict[str, int]:
        """The budget's state, for ``/health``."""
        return {"uploads_in_flight": self.in_flight, "upload_bytes_in_flight": self.bytes_in_flight,
                "max_uploads": self.max_uploads, "max_upload_bytes": self.max_upload_bytes,
                "uploads_refused": self.refused}

    def close(self) -> None:
        """Stop the parsing threads (work not started is dropped); the next upload starts them again."""
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

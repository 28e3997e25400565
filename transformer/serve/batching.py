"""Dynamic batching: requests that arrive within a few milliseconds become one model call.

The event loop never runs the model. Each request puts a job on a queue and awaits a future;
one worker task takes the oldest job, waits up to ``batch_wait_ms`` after that job arrived for
more jobs with the same decoding settings (the batch key), and hands all their texts, at most
``max_batch_size``, to one call of ``run_batch(key, texts)`` on a single worker thread (the model
is loaded once and shared; one thread keeps the CPU cores for torch's own parallelism). A
request is never split: one with more texts than ``max_batch_size`` runs in a batch of its own.

Overload: when the texts waiting would exceed ``max_queue`` a request fails at once with
:class:`Overloaded` instead of queueing without bound. A request that has not finished after
``timeout_s`` (waiting included) fails with :class:`TimedOut`; if its batch has not started
yet it is dropped, so a stuck decode cannot pile up work behind it.

Other work on the same model (the attention of one sentence) goes through :meth:`call`: it
takes the same queue, bound and timeout, and runs alone.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any


class Overloaded(Exception):
    """The queue is full: the request was refused without waiting (HTTP 503)."""


class TimedOut(Exception):
    """The request did not finish within ``timeout_s`` (HTTP 503)."""


@dataclass(frozen=True)
class BatchInfo:
    """How one request was served: its wait, the model call it joined and that call's size."""

    queue_ms: float  # from arrival to the start of its model call
    compute_ms: float  # duration of the model call
    batch_size: int  # texts in that model call
    batch_requests: int  # requests merged into that model call


@dataclass
class _Job:
    key: Hashable | None  # None: an exclusive call (fn)
    texts: Sequence[str]
    future: asyncio.Future
    arrived: float = field(default_factory=time.perf_counter)
    fn: Callable[[], Any] | None = None


@dataclass
class BatchStats:
    """Counters since start; ``/health`` reports them."""

    requests: int = 0
    texts: int = 0
    batches: int = 0
    batched_texts: int = 0
    largest_batch: int = 0
    last_batch_size: int = 0
    rejected_overload: int = 0
    timed_out: int = 0

    def to_dict(self) -> dict[str, float]:
        out: dict[str, float] = dict(vars(self))
        out["mean_batch_size"] = round(self.batched_texts / self.batches, 3) if self.batches else 0.0
        return out


class DynamicBatcher:
    """Merge concurrent translation requests into batched model calls (see the module docstring).

    ``run_batch(key, texts)`` returns one result per text, in order; it runs on the worker thread.
    """

    def __init__(self, run_batch: Callable[[Hashable, list[str]], list[Any]], *, max_batch_size: int = 32,
                 batch_wait_ms: float = 5.0, max_queue: int = 256, timeout_s: float = 30.0) -> None:
        if max_batch_size < 1 or max_queue < 1 or batch_wait_ms < 0 or timeout_s <= 0:
            raise ValueError("max_batch_size and max_queue must be >= 1, batch_wait_ms >= 0, timeout_s > 0")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.batch_wait = batch_wait_ms / 1000.0
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self.stats = BatchStats()
        self._queue: deque[_Job] = deque()
        self._queued_texts = 0
        self._running = 0  # texts in the model call now running
        self._executor: ThreadPoolExecutor | None = None
        self._wakeup: asyncio.Event | None = None
        self._worker: asyncio.Task | None = None

    # ------------------------------------------------------------------------------------------
    async def translate(self, key: Hashable, texts: Sequence[str]) -> tuple[list[Any], BatchInfo]:
        """Results of ``run_batch`` for ``texts`` (merged with other requests of the same ``key``)."""
        if not texts:
            raise ValueError("no texts to translate")
        return await self._submit(_Job(key, list(texts), asyncio.get_running_loop().create_future()))

    async def call(self, fn: Callable[[], Any]) -> tuple[Any, BatchInfo]:
        """Run ``fn()`` alone on the worker thread, queued and timed like a one-text request."""
        return await self._submit(_Job(None, ("",), asyncio.get_running_loop().create_future(), fn=fn))

    def health(self) -> dict[str, Any]:
        """Queue state and counters."""
        return {"queued_texts": self._queued_texts, "running_texts": self._running,
                "max_batch_size": self.max_batch_size, "batch_wait_ms": self.batch_wait * 1000,
                "max_queue": self.max_queue, "timeout_s": self.timeout_s, **self.stats.to_dict()}

    async def close(self) -> None:
        """Stop the worker task and the worker thread (jobs still queued fail with TimedOut).

        The batcher stays usable: the next request starts a new worker (an app may be started
        and stopped several times, as test clients do)."""
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        for job in self._queue:
            if not job.future.done():
                job.future.set_exception(TimedOut("the server is shutting down"))
        self._queue.clear()
        self._queued_texts = 0
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # ------------------------------------------------------------------------------------------
    def check_capacity(self, n_texts: int) -> None:
        """Raise :class:`Overloaded` now if ``n_texts`` more would not fit in the queue (a cheap
        early refusal before any other work on the request)."""
        if self._queued_texts + n_texts > self.max_queue:
            self.stats.rejected_overload += 1
            raise Overloaded(f"the server is busy: {self._queued_texts} texts are waiting and at most "
                             f"{self.max_queue} may; try again shortly")

    async def _submit(self, job: _Job) -> tuple[Any, BatchInfo]:
        n = len(job.texts)
        self.check_capacity(n)
        self._ensure_worker()
        self.stats.requests += 1
        self.stats.texts += n
        self._queue.append(job)
        self._queued_texts += n
        assert self._wakeup is not None
        self._wakeup.set()
        try:
            return await asyncio.wait_for(job.future, timeout=self.timeout_s)
        except asyncio.TimeoutError:
            self.stats.timed_out += 1
            raise TimedOut(f"the translation did not finish within {self.timeout_s:g} s") from None

    def _ensure_worker(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transformer-serve")
        if self._worker is None or self._worker.done():
            self._wakeup = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._work(), name="transformer-serve-batcher")

    def _drop_finished(self) -> None:
        """Forget jobs whose requests gave up (timed out or disconnected) before their batch started."""
        while self._queue and self._queue[0].future.done():
            self._queued_texts -= len(self._queue.popleft().texts)

    async def _work(self) -> None:
        assert self._wakeup is not None
        while True:
            self._drop_finished()
            if not self._queue:
                self._wakeup.clear()
                await self._wakeup.wait()
                continue
            first = self._queue[0]
            if first.fn is None:
                await self._wait_for_more(first)
            self._drop_finished()
            if not self._queue:
                continue
            jobs = self._take_batch()
            texts = [t for job in jobs for t in job.texts]
            self._running = len(texts)
            start = time.perf_counter()
            loop = asyncio.get_running_loop()
            try:
                if jobs[0].fn is not None:
                    results = [await loop.run_in_executor(self._executor, jobs[0].fn)]
                else:
                    results = await loop.run_in_executor(self._executor, self.run_batch, jobs[0].key, texts)
                    if len(results) != len(texts):
                        raise RuntimeError(f"run_batch returned {len(results)} results for {len(texts)} texts")
            except Exception as err:  # the batch failed: every request in it gets the error
                for job in jobs:
                    if not job.future.done():
                        job.future.set_exception(err)
                continue
            finally:
                self._running = 0
            end = time.perf_counter()
            self._record(len(texts))
            offset = 0
            for job in jobs:
                part = results[offset: offset + len(job.texts)] if job.fn is None else results[0]
                offset += len(job.texts)
                info = BatchInfo(queue_ms=(start - job.arrived) * 1000, compute_ms=(end - start) * 1000,
                                 batch_size=len(texts), batch_requests=len(jobs))
                if not job.future.done():
                    job.future.set_result((part, info))

    async def _wait_for_more(self, first: _Job) -> None:
        """Wait until ``batch_wait_ms`` after ``first`` arrived, or until a full batch of its key waits."""
        assert self._wakeup is not None
        while True:
            remaining = first.arrived + self.batch_wait - time.perf_counter()
            waiting = sum(len(j.texts) for j in self._queue if j.key == first.key and not j.future.done())
            if remaining <= 0 or waiting >= self.max_batch_size or first.future.done():
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                return

    def _take_batch(self) -> list[_Job]:
        """The first job plus later jobs of its key that fit in ``max_batch_size`` texts; removed from the queue."""
        first = self._queue.popleft()
        self._queued_texts -= len(first.texts)
        jobs, size = [first], len(first.texts)
        if first.fn is not None:
            return jobs
        kept: deque[_Job] = deque()
        while self._queue:
            job = self._queue.popleft()
            if job.future.done():
                self._queued_texts -= len(job.texts)
            elif job.fn is None and job.key == first.key and size + len(job.texts) <= self.max_batch_size:
                jobs.append(job)
                size += len(job.texts)
                self._queued_texts -= len(job.texts)
            else:
                kept.append(job)
        self._queue = kept
        return jobs

    def _record(self, size: int) -> None:
        s = self.stats
        s.batches += 1
        s.batched_texts += size
        s.largest_batch = max(s.largest_batch, size)
        s.last_batch_size = size

"""Dynamic batching: requests that arrive within a few milliseconds become one model call.

The event loop never runs the model. Each request puts a job on a queue and awaits a future;
one worker task takes the oldest job, waits up to ``batch_wait_ms`` after that job arrived for
more jobs with the same decoding settings (the batch key), and hands their texts, at most
``max_batch_size``, to one call of ``run_batch(key, texts)`` on a single worker thread (the model
is loaded once and shared; one thread keeps the CPU cores for torch's own parallelism). The
server's texts are sentences: a paragraph is segmented first and each sentence is one text here.

A model call is filled in queue order: the oldest job's texts first, then the next jobs' of the
same key, the last one taken in part if only part of it fits. When the oldest job alone has
more than ``max_batch_size`` texts left, the call is its own, of at most ``max_alone`` of them
(a list of up to ``max_texts`` texts has always run in one call of its own, and a large call
translates more sentences per second on a CPU). A job taken in part goes back to the queue with
the rest of its texts when that call ends, behind the jobs that arrived during the call (round
robin): a request of many sentences is translated in several calls interleaved with the
requests that came after it, which wait at most one model call for it, no longer than before
paragraphs were segmented; and it is never starved, as later arrivals queue behind it. A
request's answer comes when all its texts are translated.

Overload: when the texts waiting would exceed ``max_queue`` a request fails at once with
:class:`Overloaded` instead of queueing without bound (an idle server takes any request, so a
request larger than ``max_queue`` is not refused forever). A request that has not finished after
``timeout_s`` (waiting included) fails with :class:`TimedOut`; the texts of it that have not
started are dropped, so a stuck decode cannot pile up work behind it. A request whose task is
cancelled (its client closed the connection: :mod:`transformer.serve.disconnect`) gives up the
same way. A model call whose requests have all given up is stopped at its next decoder step
(:mod:`transformer.decoding.cancel`), so the model is free for the requests still waiting.

Other work on the same model (the attention of one sentence) goes through :meth:`call`: it
takes the same queue, bound and timeout, and runs alone.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections import deque
from collections.abc import Callable, Hashable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from transformer.decoding.cancel import Cancelled, cancellable
from transformer.errors import UserError


class Overloaded(Exception):
    """The queue is full: the request was refused without waiting (HTTP 503)."""


class TimedOut(Exception):
    """The request did not finish within ``timeout_s`` (HTTP 503)."""


@dataclass(frozen=True)
class BatchInfo:
    """How one request was served: its wait, the model call it joined and that call's size."""

    queue_ms: float  # from arrival to the start of its (first) model call
    compute_ms: float  # duration of the model call (the sum over its calls when it took several)
    batch_size: int  # texts in that model call (the largest, when it took several)
    batch_requests: int  # requests merged into that model call (the most, when it took several)
    model_calls: int = 1  # model calls its texts were translated in


@dataclass
class _Job:
    key: Hashable | None  # None: an exclusive call (fn)
    texts: Sequence[str]
    future: asyncio.Future
    arrived: float = field(default_factory=time.perf_counter)
    fn: Callable[[], Any] | None = None
    taken: int = 0  # texts handed to model calls so far (they are taken in order)
    finished: int = 0  # texts whose results are in
    results: list[Any] = field(default_factory=list)
    started: float | None = None  # start of its first model call
    compute: float = 0.0
    calls: int = 0
    largest: int = 0
    most_requests: int = 0

    @property
    def remaining(self) -> int:
        """Texts not yet handed to a model call."""
        return len(self.texts) - self.taken


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
    cancelled_requests: int = 0  # requests whose task was cancelled while waiting (their client went)
    cancelled_calls: int = 0  # model calls stopped because every request in them gave up

    def to_dict(self) -> dict[str, float]:
        out: dict[str, float] = dict(vars(self))
        out["mean_batch_size"] = round(self.batched_texts / self.batches, 3) if self.batches else 0.0
        return out


class DynamicBatcher:
    """Merge concurrent translation requests into batched model calls (see the module docstring).

    ``run_batch(key, texts)`` returns one result per text, in order; it runs on the worker thread.
    """

    def __init__(self, run_batch: Callable[[Hashable, list[str]], list[Any]], *, max_batch_size: int = 32,
                 batch_wait_ms: float = 5.0, max_queue: int = 256, timeout_s: float = 30.0,
                 max_alone: int | None = None) -> None:
        if max_batch_size < 1 or max_queue < 1 or batch_wait_ms < 0 or timeout_s <= 0:
            raise UserError("max_batch_size and max_queue must be >= 1, batch_wait_ms >= 0, timeout_s > 0")
        self.run_batch = run_batch
        self.max_batch_size = max_batch_size
        self.max_alone = max(max_batch_size, max_alone or max_batch_size)
        self.batch_wait = batch_wait_ms / 1000.0
        self.max_queue = max_queue
        self.timeout_s = timeout_s
        self.stats = BatchStats()
        self._queue: deque[_Job] = deque()
        self._parked: list[_Job] = []  # taken in part by the call now running; back in the queue after it
        self._queued_texts = 0
        self._running = 0  # texts in the model call now running
        self._call: tuple[list[_Job], threading.Event] | None = None  # the running call's jobs and its stop
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
                "max_batch_size": self.max_batch_size, "max_alone": self.max_alone,
                "batch_wait_ms": self.batch_wait * 1000,
                "max_queue": self.max_queue, "timeout_s": self.timeout_s, **self.stats.to_dict()}

    async def close(self) -> None:
        """Stop the worker task and the worker thread (jobs still queued fail with TimedOut; the
        model call running stops at its next decoder step).

        The batcher stays usable: the next request starts a new worker (an app may be started
        and stopped several times, as test clients do)."""
        if self._call is not None:
            self._call[1].set()
        if self._worker is not None:
            self._worker.cancel()
            try:
                await self._worker
            except asyncio.CancelledError:
                pass
            self._worker = None
        for job in (*self._queue, *self._parked):
            if not job.future.done():
                job.future.set_exception(TimedOut("the server is shutting down"))
        self._queue.clear()
        self._parked.clear()
        self._queued_texts = 0
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None

    # ------------------------------------------------------------------------------------------
    def check_capacity(self, n_texts: int) -> None:
        """Raise :class:`Overloaded` now if ``n_texts`` more would not fit in the queue (a cheap
        early refusal before any other work on the request). An empty queue takes any request."""
        if self._queued_texts and self._queued_texts + n_texts > self.max_queue:
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
        except asyncio.CancelledError:
            self.stats.cancelled_requests += 1
            raise
        finally:
            self._stop_abandoned_call()

    def _stop_abandoned_call(self) -> None:
        """Stop the running model call if no request waits for it any more (every one timed out
        or was cancelled): its search ends at the next decoder step."""
        if self._call is not None:
            jobs, stop = self._call
            if not stop.is_set() and all(job.future.done() for job in jobs):
                stop.set()
                self.stats.cancelled_calls += 1

    def _ensure_worker(self) -> None:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="transformer-serve")
        if self._worker is None or self._worker.done():
            self._wakeup = asyncio.Event()
            self._worker = asyncio.get_running_loop().create_task(self._work(), name="transformer-serve-batcher")

    def _drop_finished(self) -> None:
        """Forget jobs whose requests gave up (timed out or disconnected) before their batch started."""
        while self._queue and self._queue[0].future.done():
            self._queued_texts -= self._queue.popleft().remaining

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
            parts = self._take_batch()
            texts = [t for job, a, b in parts for t in job.texts[a:b]]
            self._running = len(texts)
            start = time.perf_counter()
            loop = asyncio.get_running_loop()
            exclusive = parts[0][0].fn
            stop = threading.Event()
            self._call = ([job for job, _, _ in parts], stop)
            try:
                if exclusive is not None:
                    results = [await loop.run_in_executor(self._executor, _stoppable, stop, exclusive)]
                else:
                    results = await loop.run_in_executor(self._executor, _stoppable, stop, self.run_batch,
                                                         parts[0][0].key, texts)
                    if len(results) != len(texts):
                        raise RuntimeError(f"run_batch returned {len(results)} results for {len(texts)} texts")
            except Cancelled:  # nobody waits for this call's results
                continue
            except Exception as err:  # the batch failed: every request in it gets the error
                for job, _, _ in parts:
                    if not job.future.done():
                        job.future.set_exception(err)
                continue
            finally:
                self._running = 0
                self._call = None
                self._queue.extend(self._parked)  # behind the jobs that arrived during the call
                self._parked = []
            end = time.perf_counter()
            self._record(len(texts))
            offset = 0
            for job, a, b in parts:
                if exclusive is None:
                    job.results[a:b] = results[offset: offset + b - a]
                else:
                    job.results = results[0]
                offset += b - a
                job.finished += b - a
                job.started = start if job.started is None else job.started
                job.compute += end - start
                job.calls += 1
                job.largest = max(job.largest, len(texts))
                job.most_requests = max(job.most_requests, len(parts))
                if job.finished == len(job.texts) and not job.future.done():
                    info = BatchInfo(queue_ms=(job.started - job.arrived) * 1000, compute_ms=job.compute * 1000,
                                     batch_size=job.largest, batch_requests=job.most_requests,
                                     model_calls=job.calls)
                    job.future.set_result((job.results, info))

    async def _wait_for_more(self, first: _Job) -> None:
        """Wait until ``batch_wait_ms`` after ``first`` arrived, or until a full batch of its key waits."""
        assert self._wakeup is not None
        while True:
            remaining = first.arrived + self.batch_wait - time.perf_counter()
            waiting = sum(j.remaining for j in self._queue if j.key == first.key and not j.future.done())
            if remaining <= 0 or waiting >= self.max_batch_size or first.future.done():
                return
            self._wakeup.clear()
            try:
                await asyncio.wait_for(self._wakeup.wait(), timeout=remaining)
            except asyncio.TimeoutError:
                return

    def _take_batch(self) -> list[tuple[_Job, int, int]]:
        """The texts of the next model call as ``(job, start, end)`` parts: the first job's, then
        those of later jobs of its key, in queue order, up to ``max_batch_size`` texts; or, when
        the first job alone has more than that left, at most ``max_alone`` of its own. Jobs taken
        whole leave the queue; a job taken in part is parked until the call ends (then it goes to
        the back of the queue: round robin)."""
        first = self._queue.popleft()
        if first.fn is not None:
            self._queued_texts -= first.remaining
            first.taken = len(first.texts)
            return [(first, 0, 1)]
        if first.remaining > self.max_batch_size:
            return [self._take(first, self.max_alone)]
        room = self.max_batch_size
        parts: list[tuple[_Job, int, int]] = []
        kept: deque[_Job] = deque()
        for job in (first, *self._queue):
            if job.future.done():
                self._queued_texts -= job.remaining
            elif room and job.fn is None and job.key == first.key:
                part = self._take(job, room)
                parts.append(part)
                room -= part[2] - part[1]
            else:
                kept.append(job)
        self._queue = kept
        return parts

    def _take(self, job: _Job, most: int) -> tuple[_Job, int, int]:
        """The next ``most`` texts (or fewer) of ``job`` for a model call; the job is parked if some are left."""
        n = min(most, job.remaining)
        if not job.results:
            job.results = [None] * len(job.texts)
        part = (job, job.taken, job.taken + n)
        job.taken += n
        self._queued_texts -= n
        if job.remaining:
            self._parked.append(job)
        return part

    def _record(self, size: int) -> None:
        s = self.stats
        s.batches += 1
        s.batched_texts += size
        s.largest_batch = max(s.largest_batch, size)
        s.last_batch_size = size


def _stoppable(stop: threading.Event, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on the worker thread, its decoding stopped (:class:`Cancelled`) once ``stop`` is set."""
    with cancellable(stop):
        return fn(*args)

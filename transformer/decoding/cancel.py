"""Stopping a decode from another thread: a server whose request gave up stops its model call.

The server runs the model on a worker thread; when every request of a model call has timed out
or gone, it sets the call's :class:`threading.Event`. The decoding loops call
:func:`check_cancelled` once per step (a thread-local read), so a search stops within one
decoder step instead of running to its end for nobody::

    with cancellable(event):
        translator.translate_n_best(texts)  # raises Cancelled once event is set
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Cancelled(Exception):
    """The decode was stopped because nobody waits for its result any more."""


_local = threading.local()


@contextmanager
def cancellable(event: threading.Event) -> Iterator[None]:
    """Decoding on this thread inside the block raises :class:`Cancelled` at its next step after
    ``event`` is set."""
    previous = getattr(_local, "event", None)
    _local.event = event
    try:
        yield
    finally:
        _local.event = previous


def check_cancelled() -> None:
    """Raise :class:`Cancelled` if this thread's decode was cancelled (see :func:`cancellable`)."""
    event = getattr(_local, "event", None)
    if event is not None and event.is_set():
        raise Cancelled("the decode was cancelled: no request waits for it any more")

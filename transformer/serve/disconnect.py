"""Work stopped when its client goes: a translation nobody will read is not finished.

A route awaits its translation through :func:`unless_client_goes`: beside the work it waits for
the ASGI ``http.disconnect`` message, which the server sends when the client closes its
connection. If that comes first, the work's task is cancelled (the batcher then drops the
request's texts not yet started and stops a model call nobody else waits for at its next
decoder step, :mod:`transformer.serve.batching`) and :class:`ClientGone` is raised; the app
answers it with nothing the client could read (its connection is closed).

It is used once the request's body has been read: until then ``receive`` carries the body.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from typing import TypeVar

from starlette.requests import Request
from starlette.types import Receive

T = TypeVar("T")


class ClientGone(Exception):
    """The client closed its connection before its answer was ready; its work was stopped."""


async def _disconnected(receive: Receive) -> None:
    """Return when the server says the client has gone (``http.disconnect``)."""
    while (await receive())["type"] != "http.disconnect":
        # Another message means the body was still being read: not ours to use, wait for the next.
        await asyncio.sleep(0.05)


async def unless_client_goes(request: Request, work: Awaitable[T]) -> T:
    """The result of ``work``, or :class:`ClientGone` as soon as ``request``'s client disconnects
    (``work`` cancelled, its clean-up done). Call it after the request's body has been read."""
    task = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_disconnected(request.receive))
    try:
        await asyncio.wait((task, gone), return_when=asyncio.FIRST_COMPLETED)
    finally:  # also when this request's own task is cancelled
        gone.cancel()
        if not task.done():
            task.cancel()
    if not task.cancelled() and task.done():
        return task.result()
    # Wait for the work's clean-up (the batcher stopping a model call), whatever it ends with.
    await asyncio.gather(task, return_exceptions=True)
    raise ClientGone("the client closed its connection before its answer was ready")

"""The connections of ``transformer serve``: uvicorn's h11 protocol with deadlines, a connection
cap, a header size limit, and a shutdown that finishes what reached the app and drops the rest.

uvicorn has a keep-alive timeout but no deadline for a request's head or body: a client sending
a byte every few seconds holds a connection (and, once its headers are in, a task) for ever, and
on shutdown uvicorn waits for those, then cancels their tasks with a traceback each. Nor does it
cap the connections (its ``limit_concurrency`` answers 503 only once a request's head is in, and
counts the stalled connections all the same), nor bound a request head that arrives in one read
(h11's ``max_incomplete_event_size`` checks only a head still incomplete). Here, per connection
(:class:`GuardedH11Protocol`):

* over ``max_connections`` open, a new connection is answered 503 (``Retry-After: 1``) at once
  and closed;
* a request's line and headers must arrive within ``header_timeout_s`` of the connection opening
  (or of the previous response): then 408 if part of a head arrived, a quiet close if nothing
  did; its body within ``body_timeout_s`` of its headers: then 408 (the request never reaches
  the model: :class:`~transformer.serve.middleware.BodyGuard` reads the whole body first);
* a head over ``max_header_bytes`` is answered 431.

Each refusal is a JSON error (the API's shape), sent with ``Connection: close``; the connection
is then half-closed and what the client still sends is read and dropped for at most a second,
so that the client reads the answer instead of a reset. Nothing of it is logged as an error.

On SIGTERM or SIGINT (:class:`GuardedServer`) the listening sockets close; idle connections and
stalled ones (a head or body still arriving) are closed at once; requests in flight (whose
request arrived whole) get ``shutdown_grace_s`` to finish, their answers sent with
``Connection: close`` (a keep-alive client then opens a new connection for its next request
instead of sending it into this one), and their connections closed after them; one still
running then is answered 503 and its connection closed, its task cancelled without a traceback.
:class:`ConnectionStats` counts all of it, for the stop message of ``transformer serve``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import socket
from collections import Counter
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, Callable

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from transformer.serve.limits import ConnectionLimits
from transformer.serve.middleware import API_CSP, SECURITY_HEADERS

logger = logging.getLogger("uvicorn.error")

LINGER_S = 1.0  # how long a refused connection is read (and dropped) before it is closed
_HEAD_END = re.compile(rb"\r?\n\r?\n")


@dataclass
class ConnectionStats:
    """What the connection guards did, since the server started (and during its shutdown)."""

    refused: int = 0  # over max_connections: 503
    heads_too_large: int = 0  # 431
    head_timeouts: int = 0  # 408: part of a head, then nothing more in time
    body_timeouts: int = 0  # 408
    idle_closed: int = 0  # nothing sent within header_timeout_s
    # the shutdown
    in_flight: int = 0  # requests that had arrived whole and were being answered
    finished: int = 0  # of those, answered in full
    closed_after_answer: int = 0  # their connections, closed after the answer (which said Connection: close)
    cut: int = 0  # of those, still running at the end of the grace: 503 (or closed) and cancelled
    dropped_idle: int = 0  # connections with no request under way
    dropped_stalled: int = 0  # connections with a request head or body still arriving
    shutdown_s: float | None = None  # from the signal's shutdown to the app's lifespan end
    shutting_down: bool = False
    cutting: bool = False
    refusing: set[Any] = field(default_factory=set)  # connections being refused (not counted as open)

    @property
    def went_away(self) -> int:
        """Requests in flight whose client closed its connection before the answer."""
        return max(0, self.in_flight - self.finished - self.cut)


def raw_response(status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = ()) -> bytes:
    """A complete HTTP/1.1 response with the API's JSON error shape and ``Connection: close``,
    written straight to the transport (the protocol answers before or instead of the app)."""
    body = json.dumps({"error": code, "message": message, "details": []}).encode("utf-8")
    lines = [f"HTTP/1.1 {status} {HTTPStatus(status).phrase}", "content-type: application/json",
             f"content-length: {len(body)}", "connection: close",
             *(f"{name}: {value}" for name, value in SECURITY_HEADERS), f"content-security-policy: {API_CSP}",
             *(f"{name}: {value}" for name, value in headers)]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


def _quiet_when_cut(app: Callable[..., Any], stats: ConnectionStats) -> Callable[..., Any]:
    """The ASGI app, except that a task cancelled at the end of the shutdown grace ends quietly
    (its client has had its 503 already) instead of with uvicorn's "Exception in ASGI application"."""

    async def guarded(scope: Any, receive: Any, send: Any) -> None:
        try:
            await app(scope, receive, send)
        except asyncio.CancelledError:
            if not stats.cutting:
                raise

    return guarded


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the guards of the module docstring. Built by uvicorn for each
    connection, with ``limits`` and the server's shared ``stats`` bound by :func:`uvicorn_config`."""

    def __init__(self, config: uvicorn.Config, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, limits: ConnectionLimits,
                 stats: ConnectionStats) -> None:
        super().__init__(config, server_state, app_state, _loop)
        self.app = _quiet_when_cut(self.app, stats)
        self.limits = limits
        self.stats = stats
        self._timer: asyncio.TimerHandle | None = None
        self._timer_kind = ""
        self._head_bytes = 0  # bytes received since the current request head began
        self._refusing = False
        self._draining = False  # shutting down: finish the request under way, then close

    # -- timers --------------------------------------------------------------------------------
    def _arm(self, kind: str, seconds: float, callback: Callable[[], None]) -> None:
        self._cancel_timer()
        self._timer_kind = kind
        self._timer = self.loop.call_later(seconds, callback)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_kind = ""

    # -- asyncio.Protocol ----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        open_now = len(self.connections)
        if open_now >= self.limits.max_connections or self.stats.shutting_down:
            self.transport = transport
            if len(self.stats.refusing) >= self.limits.max_connections:  # a flood: no answer, no linger
                transport.abort()
                self.stats.refused += 1
                return
            self.stats.refused += 1
            self._refuse(503, "overloaded", f"the server has {open_now} connections open, as many as it takes "
                         "(max_connections); try again shortly", (("retry-after", "1"),))
            return
        super().connection_made(transport)
        self._arm("head", self.limits.header_timeout_s, self._head_timed_out)

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.stats.refusing.discard(self)
        super().connection_lost(exc)

    def eof_received(self) -> bool | None:
        return None  # the transport closes itself (a refused client that read its answer, or any client)

    def data_received(self, data: bytes) -> None:
        if self._refusing:
            return  # read and dropped until the linger ends
        self._unset_keepalive_if_required()
        self.conn.receive_data(data)
        if self.conn.their_state is h11.IDLE:  # a request head is arriving
            self._head_bytes += len(data)
            if self._head_bytes > self.limits.max_header_bytes and self._head_too_large():
                self.stats.heads_too_large += 1
                self._refuse(431, "headers_too_large", "the request line and headers are over "
                             f"{self.limits.max_header_bytes} bytes (max_header_bytes)")
                return
        self.handle_events()

    def _head_too_large(self) -> bool:
        pending, _ = self.conn.trailing_data
        limit = self.limits.max_header_bytes
        return len(pending) > limit and _HEAD_END.search(pending, 0, limit + 4) is None

    def handle_events(self) -> None:
        cycle = self.cycle
        super().handle_events()
        if self._refusing or self.transport.is_closing():
            return
        if self.cycle is not cycle:  # a request head arrived (at most one per call: h11 pauses after it)
            self._head_bytes = 0
            self._cancel_timer()
            if self.cycle.more_body:
                self._arm("body", self.limits.body_timeout_s, self._body_timed_out)
        elif self._timer_kind == "body" and self.cycle is not None and not self.cycle.more_body:
            self._cancel_timer()  # the body arrived whole

    def on_response_complete(self) -> None:
        if self._draining:
            self.stats.finished += 1
            if self.transport.is_closing():  # uvicorn closes a connection that is not kept alive
                self.stats.closed_after_answer += 1
        super().on_response_complete()
        if not self.transport.is_closing() and self.conn.their_state is h11.IDLE and self._timer_kind != "body":
            # waiting for the next request head (uvicorn's keep-alive timer closes an idle one sooner)
            if self.cycle is None or self.cycle.response_complete:
                self._head_bytes = len(self.conn.trailing_data[0])
                self._arm("head", self.limits.header_timeout_s, self._head_timed_out)

    # -- deadlines -----------------------------------------------------------------------------
    def _head_timed_out(self) -> None:
        self._timer = None
        self._timer_kind = ""
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return
        if not self.conn.trailing_data[0].strip():  # nothing of a request: an idle connection
            self.stats.idle_closed += 1
            self.transport.close()
            return
        self.stats.head_timeouts += 1
        self._refuse(408, "request_timeout", "the request line and headers did not arrive within "
                     f"{self.limits.header_timeout_s:g} s (header_timeout)")

    def _body_timed_out(self) -> None:
        self._timer = None
        self._timer_kind = ""
        cycle = self.cycle
        if self.transport.is_closing() or cycle is None or not cycle.more_body:
            return
        self.stats.body_timeouts += 1
        if cycle.response_started:  # answered already (413 by Content-Length): stop waiting for the body
            self._disconnect_cycle()
            self.transport.close()
            return
        self._disconnect_cycle()  # the app reads http.disconnect and ends without an answer
        self._refuse(408, "request_timeout", "the request body did not arrive within "
                     f"{self.limits.body_timeout_s:g} s of its headers (body_timeout)")

    def _disconnect_cycle(self) -> None:
        if self.cycle is not None and not self.cycle.response_complete:
            self.cycle.disconnected = True
            self.cycle.message_event.set()

    def _refuse(self, status: int, code: str, message: str, headers: tuple[tuple[str, str], ...] = ()) -> None:
        """Answer ``status`` (JSON) with ``Connection: close``, half-close, drop what the client
        still sends for at most :data:`LINGER_S`, then close (the transport closes earlier on EOF)."""
        self._cancel_timer()
        self._refusing = True
        self.connections.discard(self)
        self.stats.refusing.add(self)
        transport = self.transport
        transport.write(raw_response(status, code, message, headers))
        if transport.can_write_eof():
            transport.write_eof()
        self._timer = self.loop.call_later(LINGER_S, transport.abort)
        self._timer_kind = "linger"

    # -- shutdown ------------------------------------------------------------------------------
    def shutdown(self) -> str:  # type: ignore[override]
        """The server is stopping: close this connection now unless a request has arrived whole
        and is being answered. Returns ``"idle"``, ``"stalled"`` or ``"in_flight"``."""
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and not cycle.more_body:
            cycle.keep_alive = False
            if not cycle.response_started:
                # The answer says so: a keep-alive client would otherwise send its next request into
                # the connection closed after this answer, and get a reset. (The list is the
                # server's, shared by every cycle: replaced here, not changed.)
                cycle.default_headers = [*cycle.default_headers, (b"connection", b"close")]
            self._draining = True
            return "in_flight"
        if cycle is not None and not cycle.response_complete:  # its body is still arriving
            kind = "stalled"
        elif self.conn.their_state is h11.SEND_BODY:  # answered early (413) while the body arrives
            kind = "stalled"
        else:
            kind = "stalled" if self.conn.trailing_data[0].strip() else "idle"
        self._cancel_timer()
        self._disconnect_cycle()
        self.transport.close()
        return kind

    def cut(self) -> bool:
        """The grace is over: answer 503 to a request still running (if nothing was sent yet) and
        close. True if a request was cut."""
        cycle = self.cycle
        running = cycle is not None and not cycle.response_complete and not cycle.disconnected
        if running and not cycle.response_started and not self.transport.is_closing():
            self.transport.write(raw_response(503, "shutting_down", "the server is shutting down and this request "
                                              f"did not finish within {self.limits.shutdown_grace_s:g} s "
                                              "(shutdown_grace); try again", (("retry-after", "1"),)))
        self._cancel_timer()
        self._disconnect_cycle()
        self.transport.close()
        return running


class GuardedServer(uvicorn.Server):
    """uvicorn's server with a bounded, truthful shutdown (see the module docstring) and an
    ``on_started`` hook called once the sockets listen and the app has started."""

    def __init__(self, config: uvicorn.Config, limits: ConnectionLimits, stats: ConnectionStats,
                 on_started: Callable[[], None] | None = None) -> None:
        super().__init__(config)
        self.limits = limits
        self.stats = stats
        self.on_started = on_started

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets=sockets)
        if self.started and not self.should_exit and self.on_started is not None:
            self.on_started()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        stats = self.stats
        stats.shutting_down = True
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for refused in list(stats.refusing):
            refused.transport.abort()
        kinds = Counter(connection.shutdown() for connection in list(self.server_state.connections))
        stats.in_flight, stats.dropped_idle, stats.dropped_stalled = kinds["in_flight"], kinds["idle"], kinds["stalled"]
        grace = self.limits.shutdown_grace_s
        logger.info("Shutting down: closed %d idle and %d stalled connections; %d requests in flight get up to "
                    "%g s to finish", stats.dropped_idle, stats.dropped_stalled, stats.in_flight, grace)
        state = self.server_state
        while (state.connections or state.tasks) and not self.force_exit and loop.time() - start < grace:
            await asyncio.sleep(0.02)
        if state.connections or state.tasks:
            stats.cutting = True
            stats.cut = sum(connection.cut() for connection in list(state.connections))
            tasks = list(state.tasks)
            for task in tasks:
                task.cancel()
            if tasks:
                await asyncio.wait(tasks, timeout=1.0)
            for connection in list(state.connections):
                connection.transport.abort()
            if stats.cut:
                logger.warning("Answered 503 to %d requests still running after the %g s shutdown grace",
                               stats.cut, grace)
        for server in self.servers:
            try:
                await asyncio.wait_for(server.wait_closed(), timeout=1.0)
            except asyncio.TimeoutError:
                pass
        if not self.force_exit:
            await self.lifespan.shutdown()
        stats.shutdown_s = loop.time() - start


def uvicorn_config(app: Any, limits: ConnectionLimits, stats: ConnectionStats, *, log_level: str = "info",
                   backlog: int = 2048, forwarded_allow_ips: str | None = None) -> uvicorn.Config:
    """A uvicorn configuration serving ``app`` through :class:`GuardedH11Protocol`.

    ``forwarded_allow_ips``: the proxies (comma-separated addresses or networks, ``*`` for any)
    whose ``X-Forwarded-For`` and ``X-Forwarded-Proto`` headers are believed; None: none, the
    client's address is the socket's (uvicorn would otherwise believe any client on 127.0.0.1,
    or $FORWARDED_ALLOW_IPS)."""

    def protocol(config: uvicorn.Config, server_state: Any, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None) -> GuardedH11Protocol:
        return GuardedH11Protocol(config, server_state, app_state, _loop, limits=limits, stats=stats)

    return uvicorn.Config(app, log_level=log_level, http=protocol, ws="none", lifespan="on",  # type: ignore[arg-type]
                          timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
                          h11_max_incomplete_event_size=limits.max_header_bytes + 4,
                          timeout_graceful_shutdown=limits.shutdown_grace_s,  # type: ignore[arg-type]
                          backlog=backlog, proxy_headers=forwarded_allow_ips is not None,
                          forwarded_allow_ips=forwarded_allow_ips or "")


def bind_sockets(host: str, port: int) -> list[socket.socket]:
    """Sockets bound to ``host:port`` (every address ``host`` resolves to, as asyncio's
    ``create_server`` would; with port 0 they share the port the first one got), not listening
    yet: uvicorn listens once the app has started, so until then a client is refused rather than
    kept waiting. Raises ``OSError`` (address in use, not an address of this machine, ...) with
    nothing left open."""
    infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    sockets: list[socket.socket] = []
    seen: set[tuple[int, Any]] = set()
    try:
        for family, kind, proto, _, address in infos:
            if (family, address) in seen:
                continue
            seen.add((family, address))
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6 and hasattr(socket, "IPPROTO_IPV6"):
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            if port == 0 and len(sockets) > 1:
                address = (address[0], sockets[0].getsockname()[1], *address[2:])
            sock.bind(address)
    except BaseException:
        for sock in sockets:
            sock.close()
        raise
    return sockets

"""ASGI middleware: checks on the raw request body before FastAPI parses it (size 413, UTF-8 400),
the answer to an exception no handler took (500), and the security headers of every response."""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from transformer.serve.api import ApiRoutes


# What every response carries: no MIME sniffing, never framed by another page, no Referer sent
# on from the page. The API's answers are data, never a document: a policy that lets them load
# and run nothing. The page at / sets its own policy (transformer.serve.page.page_csp).
SECURITY_HEADERS: tuple[tuple[str, str], ...] = (
    ("x-content-type-options", "nosniff"),
    ("x-frame-options", "DENY"),
    ("referrer-policy", "no-referrer"),
)
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"


class SecurityHeaders:
    """ASGI middleware: add :data:`SECURITY_HEADERS` to every HTTP response, and
    ``Content-Security-Policy: API_CSP`` unless the response sets its own (the page does)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in SECURITY_HEADERS:
                    headers.setdefault(name, value)
                headers.setdefault("content-security-policy", API_CSP)
            await send(message)

        await self.app(scope, receive, send_with_headers)


def error_json(status: int, error: str, message: str, details: list[dict[str, Any]] | None = None,
               headers: dict[str, str] | None = None, **fields: Any) -> JSONResponse:
    """The native API's error shape: ``{"error": code, "message": text, "details": [...]}`` (then ``fields``)."""
    return JSONResponse({"error": error, "message": message, "details": details or [], **fields},
                        status_code=status, headers=headers)


def plain_error_json(status: int, message: str, headers: dict[str, str] | None = None, **fields: Any) -> JSONResponse:
    """LibreTranslate's error shape: ``{"error": message}`` (then ``fields``)."""
    return JSONResponse({"error": message, **fields}, status_code=status, headers=headers)


_DIGITS = re.compile(r"limit \((\d+) digits\).*value has (\d+) digits")


def unreadable_json(err: BaseException) -> str:
    """Why Python's JSON parser gave up on a body, in the request's terms (one line): nesting deeper
    than it recurses, or an integer longer than the digits it converts."""
    if isinstance(err, RecursionError):
        return "nested too deeply"
    found = _DIGITS.search(str(err))
    if found:
        return f"a number has {found[2]} digits (at most {found[1]} are read)"
    return (str(err).splitlines() or [type(err).__name__])[0]


class BodyGuard:
    """ASGI middleware: refuse a body over ``max_body_bytes`` with 413 (by Content-Length when sent,
    else while reading it) and a body that is not UTF-8 with 400; pass the body on otherwise.
    The errors have the shape of the request's API; a route that takes files has its own body
    limit and no UTF-8 check, and holds its reservation (the uploads' budget) from before its body
    is read, which may refuse it unread (:func:`~transformer.serve.api.takes_files`)."""

    def __init__(self, app: ASGIApp, max_body_bytes: int, apis: ApiRoutes) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.apis = apis

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("POST", "PUT", "PATCH"):
            await self.app(scope, receive, send)
            return
        error = self.apis.api(scope).error
        file_limit = self.apis.max_body_bytes(scope)
        limit = self.max_body_bytes if file_limit is None else file_limit
        too_large = error(413, "payload_too_large", f"request body is larger than the limit of {limit} bytes")
        length = dict(scope.get("headers", ())).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > limit:
            await too_large(scope, receive, send)
            return
        reserve = self.apis.reservation(scope) if file_limit is not None else None
        with ExitStack() as held:
            if reserve is not None:  # an upload's share of the budget, taken before its body is read
                try:
                    held.enter_context(reserve(int(length) if length is not None and length.isdigit() else limit))
                except Exception as exc:
                    answer = self.apis.api(scope).answer(exc)
                    if answer is None:
                        raise
                    await answer(scope, receive, send)
                    return
            await self._pass_body(scope, receive, send, limit, too_large, check_utf8=file_limit is None)

    async def _pass_body(self, scope: Scope, receive: Receive, send: Send, limit: int, too_large: Response,
                         check_utf8: bool) -> None:
        """Read the body whole (413 past ``limit``; 400 if ``check_utf8`` and it is not UTF-8), then
        run the app on it."""
        error = self.apis.api(scope).error
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                await too_large(scope, receive, send)
                return
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            if check_utf8:
                body.decode("utf-8")
        except UnicodeDecodeError as err:
            bad = body[err.start: err.start + 1].hex()
            await error(400, "invalid_utf8", f"request body is not valid UTF-8: byte 0x{bad} at offset "
                        f"{err.start} ({err.reason})")(scope, receive, send)
            return
        sent = False

        async def replay() -> Message:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        await self.app(scope, replay, send)


class InternalErrors:
    """ASGI middleware: an exception that no handler of the app took is a bug of the server, never
    the client's mistake; ``answer(scope, exc)`` logs it and gives the 500 to send. It sits inside
    :class:`SecurityHeaders` and :class:`Cors` so that this answer carries their headers too. An
    exception raised after the response started cannot be answered: it goes on to the server,
    which logs it and closes the connection."""

    def __init__(self, app: ASGIApp, answer: Callable[[Scope, Exception], Response]) -> None:
        self.app = app
        self.answer = answer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = False

        async def watched_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, receive, watched_send)
        except Exception as exc:
            if started:
                raise
            await self.answer(scope, exc)(scope, receive, send)


# What LibreTranslate sends on every answer, so that a web page of another origin may call it.
CORS_HEADERS: tuple[tuple[str, str], ...] = (
    ("access-control-allow-origin", "*"),
    ("access-control-allow-headers", "Authorization, Content-Type"),
    ("access-control-expose-headers", "Authorization"),
    ("access-control-allow-methods", "GET, POST"),
    ("access-control-max-age", "1728000"),
)


class Cors:
    """ASGI middleware: on the requests whose API has CORS (LibreTranslate's), the answers carry
    :data:`CORS_HEADERS` and a preflight ``OPTIONS`` is answered 204 with them."""

    def __init__(self, app: ASGIApp, apis: ApiRoutes) -> None:
        self.app = app
        self.apis = apis

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not self.apis.api(scope).cors:
            await self.app(scope, receive, send)
            return
        if scope["method"] == "OPTIONS":
            await send({"type": "http.response.start", "status": 204,
                        "headers": [(k.encode(), v.encode()) for k, v in CORS_HEADERS]})
            await send({"type": "http.response.body", "body": b""})
            return

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in CORS_HEADERS:
                    headers.setdefault(name, value)
            await send(message)

        await self.app(scope, receive, send_with_headers)

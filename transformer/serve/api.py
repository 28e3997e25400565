"""The server's APIs (the native one, LibreTranslate's, the page): each route belongs to one, which
answers the route's errors in its own shape and says whether its answers carry CORS headers.

A route is added to an API by declaring it on a router from :meth:`Api.router`; the middleware
that runs before routing (the body guard, CORS, the answer to a bug) finds a request's API by
matching it against the app's routes (:class:`ApiRoutes`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from dataclasses import dataclass

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute, Match
from starlette.types import Scope


@dataclass(frozen=True, eq=False)
class Api:
    """One API of the server.

    Attributes:
        name: what it is called.
        error: ``error(status, code, message, headers=None, **fields)``: an error answer in its shape
            (``code`` is the native API's machine-readable one; ``fields`` are added to the JSON).
        answer: its answer to an exception one of its routes raised; None for one it leaves to the
            app's handlers (and a bug to the 500 answer).
        cors: whether its answers carry CORS headers and it answers preflight requests.
    """

    name: str
    error: Callable[..., JSONResponse]
    answer: Callable[[Exception], Response | None] = lambda exc: None
    cors: bool = False

    def router(self) -> APIRouter:
        """A router whose routes belong to this API."""
        api = self

        class Route(APIRoute):
            def get_route_handler(self):
                handler = super().get_route_handler()

                async def answered(request: Request) -> Response:
                    try:
                        return await handler(request)
                    except Exception as exc:
                        response = api.answer(exc)
                        if response is None:
                            raise
                        return response

                return answered

        Route.api = api
        return APIRouter(route_class=Route)


def takes_files(max_body_bytes: int, reserve: Callable[[int], AbstractContextManager] | None = None):
    """Mark a route's endpoint as taking file uploads: its body may be ``max_body_bytes`` long, and
    it is not checked for UTF-8 (a file is bytes, its form parts say their own encoding).
    ``reserve(declared_bytes)``: entered before the body is read and held until the answer (the
    uploads' budget, :meth:`~transformer.serve.libretranslate.uploads.Uploads.reserve`); what it raises is
    answered by the route's API."""
    def mark(endpoint):
        endpoint.max_body_bytes = max_body_bytes
        endpoint.reserve = reserve
        return endpoint
    return mark


class ApiRoutes:
    """The app's routes by API, for what runs before routing. A path no route takes (nor begins as
    a route with a parameter does, ``/download_file/x/y``) gets ``unknown(path)``."""

    def __init__(self, routers: Iterable[APIRouter], unknown: Callable[[str], Api]) -> None:
        self.routes: list[BaseRoute] = [route for router in routers for route in router.routes]
        self.unknown = unknown
        for route in self.routes:  # a route on a plain router would have no error shape: refused at start
            if not isinstance(getattr(route, "api", None), Api):
                raise TypeError(f"the route {getattr(route, 'path', route)} is on no API's router (Api.router())")

    def route(self, scope: Scope) -> BaseRoute | None:
        """The route a request goes to: the first its path and method match, else its path (a 405)."""
        matched = [(match, route) for route in self.routes if (match := route.matches(scope)[0]) != Match.NONE]
        return min(matched, key=lambda found: found[0] != Match.FULL)[1] if matched else None

    def api(self, scope: Scope) -> Api:
        """The API a request is for."""
        route = self.route(scope)
        if route is not None:
            return route.api
        path = scope.get("path", "")
        for route in self.routes:
            if "{" in route.path and path.startswith(route.path.split("{")[0]):
                return route.api
        return self.unknown(path)

    def max_body_bytes(self, scope: Scope) -> int | None:
        """The body limit of a route that takes files (:func:`takes_files`); None for the others."""
        return getattr(getattr(self.route(scope), "endpoint", None), "max_body_bytes", None)

    def reservation(self, scope: Scope) -> Callable[[int], AbstractContextManager] | None:
        """What a route that takes files holds while its body is read and answered (:func:`takes_files`)."""
        return getattr(getattr(self.route(scope), "endpoint", None), "reserve", None)

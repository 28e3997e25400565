"""The FastAPI application: ``create_app(translator, limits)``.

The app is one :class:`~transformer.serve.service.TranslationService` (the translator, the
limits, the dynamic batcher, and the operations on them) and the routers that expose it
(:mod:`transformer.serve.routes`, :mod:`transformer.serve.libretranslate`), behind the body
and header middleware (:mod:`transformer.serve.middleware`), with the error handlers below.

Endpoints (the OpenAPI schema is served at ``/openapi.json``; the Swagger and ReDoc pages are
switched off because they load their scripts from a CDN):

* ``POST /v1/translate``: one text or a list, each of any number of sentences, lines and
  paragraphs (or HTML pages, ``format: "html"``); ``beam_size``, ``n_best``, ``max_length``,
  ``alternatives``, ``glossary``, ``confidence``; returns the translations in the texts' structure with scores
  (and distinct alternatives when asked for: :mod:`transformer.translate.alternatives`; each sentence's
  confidence when asked for, where the run is calibrated), the sentence alignment
  (:mod:`transformer.serve.documents`), warnings (a sentence over ``max_input_tokens`` is
  translated in pieces) and the timing of the model calls (the sentences of concurrent requests
  are batched together, see :mod:`transformer.serve.batching`).
* ``POST /v1/attention``: one text and the index of one of its sentences (``sentence``, default
  0; ``piece``, default 0, for a sentence translated in pieces; ``glossary``); returns the document of
  ``transformer/visualize/schema.json`` for that sentence (its translation and every attention
  weight of it), with ``X-Sentence-Index``, ``X-Sentence-Count``, ``X-Source-Span`` and
  ``X-Piece-*`` headers.
* ``GET /health``: liveness and the batcher's queue and counters.
* ``GET /v1/model``: languages, vocabulary sizes, the model config, default decoding, limits,
  whether the model is calibrated (gives confidences).
* ``POST /translate``, ``GET /languages``: the LibreTranslate API
  (:mod:`transformer.serve.libretranslate`; not in the OpenAPI schema, its errors are
  LibreTranslate's ``{"error": message}``).
* ``GET /``: the web page.

Every response carries ``X-Content-Type-Options: nosniff``, ``X-Frame-Options: DENY``,
``Referrer-Policy: no-referrer`` and a Content-Security-Policy: the page's allows only its own
inline code (:func:`transformer.serve.page.page_csp`), the API's allows nothing
(:class:`~transformer.serve.middleware.SecurityHeaders`).

No endpoint reads a path or a model name from the request: the model is the one the app was
built with. Every error of the native API is JSON (:class:`~transformer.serve.schemas.ErrorResponse`):
400 invalid JSON or UTF-8, 413 body too large, 422 invalid fields (empty or whitespace-only
text, control characters, too long, too many texts or sentences, a sentence without tokens,
unknown fields, wrong types: any :class:`~transformer.errors.UserError`), 503 overloaded or timed out.
A 4xx is a mistake in the request. Any other exception is a bug of the server, never the
client's: it is answered 500 (``internal_error``; ``{"error": message, "error_id": id}`` on
LibreTranslate's paths) with an ``error_id``, and its traceback goes to the server's log
(the ``uvicorn.error`` logger) with that id, the security headers on the answer as on any other.
"""

import json
import logging
import uuid
from collections.abc import Sequence
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from transformer import __version__
from transformer.errors import UserError
from transformer.serve import libretranslate, routes
from transformer.serve.access import AccessDenied
from transformer.serve.batching import Overloaded, TimedOut
from transformer.serve.disconnect import ClientGone
from transformer.serve.limits import ServeLimits
from transformer.serve.files import FileStore
from transformer.serve.models import PIVOT, ModelSet
from transformer.serve.middleware import (
    BodyGuard,
    Cors,
    InternalErrors,
    SecurityHeaders,
    error_json,
    plain_error_json,
    unreadable_json,
)
from transformer.serve.schemas import ONE_TEXT, TEXT_LIST, request_models
from transformer.serve.service import TranslationService
from transformer.serve.uploads import Uploads
from transformer.translate.translator import Translator

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type"}

log = logging.getLogger("uvicorn.error")


def create_app(translator: Translator | Sequence[Translator], limits: ServeLimits | None = None, *,
               src_lang: str | None = None, tgt_lang: str | None = None, pivot: str | None = PIVOT,
               libretranslate_options: libretranslate.LibreTranslateOptions | None = None) -> FastAPI:
    """The API and web page for one model or several (each loaded once, shared by every request).

    Args:
        translator: the model, its tokenizers and its default decoding (``beam_size``); or a list
            of them, one per language pair (each run's ``src_lang`` and ``tgt_lang``), the first
            being what a request that names no languages gets.
        limits: the bounds on requests (default :class:`ServeLimits`), the same for every model.
        src_lang, tgt_lang: one model's language pair as reported to clients and checked by the
            LibreTranslate API (None: the run does not say); a list of models reports their own.
        pivot: the language pairs without a model of their own are translated through (None: none).
        libretranslate_options: API keys and limits, suggestions, files, the web page's defaults
            of the LibreTranslate API (default: no keys, no limits, no suggestions, files on).

    Returns:
        The app; ``app.state.models`` is its :class:`~transformer.serve.models.ModelSet`,
        ``app.state.service`` the first model's :class:`TranslationService` (``app.state.batcher``
        its batcher); every batcher is closed when the app's lifespan ends.
    """
    if isinstance(translator, Translator):
        services = [TranslationService(translator, limits, src_lang=src_lang, tgt_lang=tgt_lang)]
    else:
        if src_lang is not None or tgt_lang is not None:
            raise UserError("src_lang and tgt_lang name one model's languages; several models report their own")
        services = [TranslationService(t, limits, src_lang=t.src_lang, tgt_lang=t.tgt_lang) for t in translator]
    models = ModelSet(services, pivot=pivot)
    service = models.primary
    limits = service.limits

    store = FileStore(limits.file_ttl_s, max_files=limits.max_stored_files, max_bytes=limits.max_stored_bytes)
    uploads = Uploads(limits.max_uploads, limits.max_upload_bytes)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await models.close()
        store.close()
        uploads.close()

    app = FastAPI(title="transformer translation server", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Translate texts of any length (cut into sentences, translated, put back in their "
                  "structure) with a Transformer (Vaswani et al., 2017) and see its attention. Offsets are "
                  f"Unicode code points. Limits: {json.dumps(limits.to_dict())}.")
    app.state.models = models
    app.state.files = store
    app.state.uploads = uploads
    app.state.service = service
    app.state.batcher = service.batcher
    app.state.limits = limits
    app.add_middleware(BodyGuard, max_body_bytes=limits.max_body_bytes, plain_errors=_libretranslate_errors,
                       file_paths={"/translate_file": limits.max_file_bytes + _FORM_OVERHEAD})
    app.add_middleware(InternalErrors, answer=_internal_error)  # inside Cors and SecurityHeaders: a 500 gets their headers
    app.add_middleware(Cors, applies=libretranslate.is_libretranslate_path)
    app.add_middleware(SecurityHeaders)  # outermost: BodyGuard's errors get the headers too
    _install_error_handlers(app)
    requests = request_models(limits, service.default.beam_size)  # the limits written into the schema
    libretranslate_options = libretranslate_options or libretranslate.LibreTranslateOptions()
    keys = libretranslate_options.keys  # one access policy for both APIs
    app.include_router(routes.translate_router(models, requests.translate, keys))
    app.include_router(routes.attention_router(models, requests.attention, keys))
    app.include_router(libretranslate.router(models, libretranslate_options, store, uploads))
    app.include_router(routes.status_router(models))
    app.include_router(routes.page_router(models))
    return app


_ACCESS_CODES = {"InvalidKey": "invalid_api_key", "KeyRequired": "api_key_required", "TextTooLong": "text_too_long",
                 "RateLimited": "rate_limited", "Banned": "banned"}
_FORM_OVERHEAD = 64 * 1024  # a file's form: its other fields and the part headers
_NATIVE = ("/v1/", "/health", "/openapi.json")


def _libretranslate_errors(path: str) -> bool:
    """Whether an error on ``path`` has LibreTranslate's shape: its routes, and any path outside
    the native API (an unknown path is most likely a LibreTranslate client's)."""
    return libretranslate.is_libretranslate_path(path) or not (path == "/" or path.startswith(_NATIVE))


def _internal_error(scope: Scope, exc: Exception) -> JSONResponse:
    """The 500 answer to an exception no handler took: a bug, never the client's mistake. The client
    gets an id to quote, the log the traceback with that id."""
    error_id = uuid.uuid4().hex[:12]
    path = scope.get("path", "")
    log.error("internal error %s on %s %s", error_id, scope.get("method", "?"), path,
              exc_info=(type(exc), exc, exc.__traceback__))
    message = f"internal server error (a bug, not a problem with the request); error id {error_id}"
    if _libretranslate_errors(path):
        return JSONResponse({"error": message, "error_id": error_id}, status_code=500)
    return JSONResponse({"error": "internal_error", "message": message, "details": [], "error_id": error_id},
                        status_code=500)


def _location(loc: tuple) -> str:
    """``("body", "text", "text-list", 2)`` -> ``"text.2"``."""
    parts = [str(p) for p in loc if p not in ("body", ONE_TEXT, TEXT_LIST)]
    return ".".join(parts) or "body"


def _install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        bad_json = next((e for e in errors if e.get("type") == "json_invalid"), None)
        if bad_json is not None:
            reason = (bad_json.get("ctx") or {}).get("error", "malformed")
            at = bad_json["loc"][1] if len(bad_json.get("loc", ())) > 1 else "?"
            return error_json(400, "invalid_json", f"request body is not valid JSON: {reason} (at character {at})")
        details = []
        for e in errors:
            msg = str(e.get("msg", "invalid")).removeprefix("Value error, ")
            if e.get("type") == "missing" and tuple(e.get("loc", ())) == ("body",):
                msg = "the request body is missing: send a JSON object"
            loc = [p if isinstance(p, (str, int)) else str(p) for p in e.get("loc", ())]
            details.append({"loc": [p for p in loc if p not in (ONE_TEXT, TEXT_LIST)], "message": msg})
        message = "; ".join(f"{_location(tuple(d['loc']))}: {d['message']}" for d in details)
        return error_json(422, "invalid_request", message, details)

    @app.exception_handler(AccessDenied)  # the native routes' refusals (LibreTranslate's answer their own)
    async def denied(request: Request, exc: AccessDenied) -> JSONResponse:
        if _libretranslate_errors(request.url.path):
            return plain_error_json(exc.status, exc.message, headers=exc.headers)
        return error_json(exc.status, _ACCESS_CODES.get(type(exc).__name__, "forbidden"), exc.message,
                          headers=exc.headers)

    @app.exception_handler(ClientGone)  # nobody reads this answer: the connection is closed
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        return error_json(503, "overloaded", str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(TimedOut)
    async def timed_out(request: Request, exc: TimedOut) -> JSONResponse:
        return error_json(503, "timeout", str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(UserError)  # documents.Unprocessable among them
    async def user_error(request: Request, exc: UserError) -> JSONResponse:
        if _libretranslate_errors(request.url.path):  # LibreTranslate's routes answer 400 in their shape
            return plain_error_json(400, str(exc))
        return error_json(422, "invalid_request", str(exc))

    @app.exception_handler(Exception)  # only for a bug in the outer middleware: InternalErrors takes the rest
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return _internal_error(request.scope, exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if _libretranslate_errors(request.url.path):  # LibreTranslate's error shape there
            return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                                headers=getattr(exc, "headers", None))
        # FastAPI answers JSON its parser cannot read (too deep, a huge integer) with a bare 400 whose
        # cause is the parser's error: it is invalid JSON to the client all the same.
        if exc.status_code == 400 and isinstance(exc.__cause__, (RecursionError, ValueError)):
            reason = unreadable_json(exc.__cause__)
            return error_json(400, "invalid_json", f"request body is not valid JSON: {reason}")
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_json(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

"""The FastAPI application: ``create_app(translator, limits)``.

The app is one :class:`~transformer.serve.service.TranslationService` (the translator, the
limits, the dynamic batcher, and the operations on them) and the routers that expose it, one per
API (:mod:`transformer.serve.api`: the native one and the page, :mod:`transformer.serve.routes`;
LibreTranslate's, :mod:`transformer.serve.libretranslate`), each answering its routes' errors in
its own shape, behind the body and header middleware (:mod:`transformer.serve.middleware`)
(:func:`serve_apis`).

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
* ``POST /admin/reload``: with ``reload`` options, a newer run swapped in without a restart, behind
  an admin key of its own (:mod:`transformer.serve.reload`; not in the OpenAPI schema).

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
A path no route takes is answered in the native shape under ``/v1/``, ``/health`` and
``/openapi.json``, in LibreTranslate's elsewhere (most likely a LibreTranslate client's).
"""

import asyncio
import json
import logging
import uuid
from collections.abc import Sequence
from contextlib import asynccontextmanager

from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Scope

from transformer import __version__
from transformer.errors import UserError
from transformer.serve import libretranslate, routes
from transformer.serve.api import Api, ApiRoutes
from transformer.serve.disconnect import ClientGone
from transformer.serve.limits import ServeLimits
from transformer.serve.memory import ServerMemory
from transformer.serve.libretranslate.files import FileStore
from transformer.serve.model_set import PIVOT, ModelSet
from transformer.serve.middleware import BodyGuard, Cors, InternalErrors, SecurityHeaders
from transformer.serve.reload import ModelVersion, ReloadOptions, Reloader, admin_router, model_version
from transformer.serve.schemas import request_models
from transformer.serve.service import TranslationService
from transformer.serve.libretranslate.uploads import Uploads
from transformer.translate.translator import Translator

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type"}

log = logging.getLogger("uvicorn.error")


def create_app(translator: Translator | Sequence[Translator], limits: ServeLimits | None = None, *,
               src_lang: str | None = None, tgt_lang: str | None = None, pivot: str | None = PIVOT,
               libretranslate_options: libretranslate.LibreTranslateOptions | None = None,
               reload: ReloadOptions | None = None,
               memory: ServerMemory | None = None) -> FastAPI:
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
        reload: the run directory of each model, how to load one, and the admin key: each model's
            version is named in answers, and the models can be reloaded without a restart
            (:mod:`transformer.serve.reload`: ``app.state.reloader``, ``POST /admin/reload``; None:
            neither).
        memory: the translation memory every model looks sentences up in, in its own pair, and
            ``/suggest`` adds to (:mod:`transformer.serve.memory`; None: none). The caller closes it.

    Returns:
        The app; ``app.state.models`` is its :class:`~transformer.serve.model_set.ModelSet`,
        ``app.state.service`` the first model's :class:`TranslationService` (``app.state.batcher``
        its batcher) as the app was built (after a reload, ``app.state.models`` holds the services
        in use); every batcher is closed when the app's lifespan ends.
    """
    if isinstance(translator, Translator):
        services = [TranslationService(translator, limits, src_lang=src_lang, tgt_lang=tgt_lang, memory=memory)]
    else:
        if src_lang is not None or tgt_lang is not None:
            raise UserError("src_lang and tgt_lang name one model's languages; several models report their own")
        services = [TranslationService(t, limits, src_lang=t.src_lang, tgt_lang=t.tgt_lang, memory=memory)
                    for t in translator]
    models = ModelSet(services, pivot=pivot)
    service = models.primary
    limits = service.limits
    reloader = None
    if reload is not None:
        for one, run_dir in zip(services, reload.run_dirs, strict=True):
            one.version = model_version(run_dir)

        def service_for(t: Translator, version: ModelVersion) -> TranslationService:  # a reloaded model's
            return TranslationService(t, limits, src_lang=t.src_lang, tgt_lang=t.tgt_lang, version=version,
                                      memory=memory)

        reloader = Reloader(models, reload.run_dirs, reload.load, service_for)

    store = FileStore(limits.file_ttl_s, max_files=limits.max_stored_files, max_bytes=limits.max_stored_bytes)
    uploads = Uploads(limits.max_uploads, limits.max_upload_bytes)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        if reloader is not None:
            reloader.loop = asyncio.get_running_loop()  # where a signal's reload runs
        yield
        if reloader is not None:
            await reloader.close()
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
    app.state.reloader = reloader
    requests = request_models(limits, service.default.beam_size)  # the limits written into the schema
    libretranslate_options = libretranslate_options or libretranslate.LibreTranslateOptions()
    keys = libretranslate_options.keys  # one access policy for both APIs
    serve_apis(app, [routes.router(models, requests, keys),
                     libretranslate.router(models, libretranslate_options, store, uploads),
                     routes.page_router(models),
                     *([admin_router(reloader, reload.admin_key)] if reloader is not None else [])],
               max_body_bytes=limits.max_body_bytes)
    return app


_NATIVE = ("/v1/", "/health", "/openapi.json", "/admin/")  # FastAPI's /openapi.json is the native API's too
_UNKNOWN = Api("unknown", libretranslate.LIBRETRANSLATE.error)  # no CORS for a path no route takes


def _unknown(path: str) -> Api:
    """The API of a path no route takes: the native one under its paths, else LibreTranslate's
    error shape (an unknown path is most likely a LibreTranslate client's)."""
    return routes.NATIVE if path.startswith(_NATIVE) else _UNKNOWN


def serve_apis(app: FastAPI, routers: Sequence[APIRouter], *, max_body_bytes: int) -> ApiRoutes:
    """Serve ``routers`` (each from an :class:`~transformer.serve.api.Api`) on ``app``, behind the
    middleware that bounds the bodies (``max_body_bytes``), answers bugs and adds the security and
    CORS headers, each in the shape of the request's API, and the handlers of what no route answers."""
    apis = ApiRoutes(routers, _unknown)
    app.add_middleware(BodyGuard, max_body_bytes=max_body_bytes, apis=apis)
    # Inside Cors and SecurityHeaders: a 500 gets their headers.
    app.add_middleware(InternalErrors, answer=lambda scope, exc: _internal_error(apis, scope, exc))
    app.add_middleware(Cors, apis=apis)
    app.add_middleware(SecurityHeaders)  # outermost: BodyGuard's errors get the headers too

    @app.exception_handler(ClientGone)  # nobody reads this answer: the connection is closed
    async def client_gone(request: Request, exc: ClientGone) -> Response:
        return Response(status_code=499)  # nginx's "client closed request"

    @app.exception_handler(Exception)  # only for a bug in the outer middleware: InternalErrors takes the rest
    async def internal_error(request: Request, exc: Exception) -> JSONResponse:
        return _internal_error(apis, request.scope, exc)

    @app.exception_handler(StarletteHTTPException)  # an unknown path, a method a route does not take
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return apis.api(request.scope).error(exc.status_code, _HTTP_CODES.get(exc.status_code, "http_error"),
                                             str(exc.detail), headers=getattr(exc, "headers", None))

    for router in routers:
        app.include_router(router)
    return apis


def _internal_error(apis: ApiRoutes, scope: Scope, exc: Exception) -> JSONResponse:
    """The 500 answer to an exception no handler took: a bug, never the client's mistake. The client
    gets an id to quote, the log the traceback with that id."""
    error_id = uuid.uuid4().hex[:12]
    log.error("internal error %s on %s %s", error_id, scope.get("method", "?"), scope.get("path", ""),
              exc_info=(type(exc), exc, exc.__traceback__))
    message = f"internal server error (a bug, not a problem with the request); error id {error_id}"
    return apis.api(scope).error(500, "internal_error", message, error_id=error_id)

"""The native API and the page: FastAPI routers over the server's models
(:class:`~transformer.serve.model_set.ModelSet`; a request names its languages, or gets the first model's).

* :func:`router`: ``POST /v1/translate``, ``POST /v1/attention``, ``GET /health``, ``GET /v1/model``
  and ``GET /v1/models``, the routes of :data:`NATIVE`;
* :func:`page_router`: ``GET /``, the web page (:data:`PAGE`).

(LibreTranslate's API has its own router, :func:`transformer.serve.libretranslate.router`.) A
route reads its request, calls the service and shapes its answer: the timing, the headers, the
OpenAPI description. What a request means is the service's; what it raises :data:`NATIVE`
answers (:func:`native_answer`): 422 for invalid fields or any other
:class:`~transformer.errors.UserError`, 400 for invalid JSON, 503 overloaded or timed out.

``/v1/translate`` and ``/v1/attention`` are guarded by the same API keys and request limits as
LibreTranslate's routes (:class:`~transformer.serve.access.KeyRing`), a dependency of their body
(:func:`guarded`): the key comes in an ``X-API-Key`` header (or ``Authorization: Bearer KEY``), a
request counts as many requests as it has texts, and a refusal is an
:class:`~transformer.serve.access.AccessDenied` answered in the native shape. A request whose
client disconnects before its answer is ready has its translation stopped
(:mod:`transformer.serve.disconnect`).
"""

# No ``from __future__ import annotations`` here: FastAPI reads the request models of the routes
# from their annotations, and those models are built per app (their limits are in the schema).

import json
import time
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException

from transformer.errors import UserError
from transformer.serve.access import AccessDenied, KeyRing
from transformer.serve.api import Api
from transformer.serve.batching import BatchInfo, Overloaded, TimedOut
from transformer.serve.disconnect import unless_client_goes
from transformer.serve.page import index_html, page_csp
from transformer.serve.documents import Unprocessable
from transformer.serve.model_set import ModelSet, Route
from transformer.serve.middleware import error_json, unreadable_json
from transformer.serve.schemas import (ONE_TEXT, TEXT_LIST, ErrorResponse, Health, ModelInfo, ModelList, PairInfo,
                                       RequestModels, TranslateResponse)
from transformer.serve.service import DecodingSettings, TranslationService

_ERRORS = {400: "invalid JSON or UTF-8 (invalid_json, invalid_utf8); under API keys and limits, no key where one "
           "is required (api_key_required) or a text over the character limit (text_too_long)",
           403: "an API key the server does not know (invalid_api_key), or an address banned for going over "
           "the request limits too often (banned, with Retry-After)",
           413: "request body too large", 422: "invalid request fields",
           429: "over the request limit of the API key or of the address (rate_limited); Retry-After says when "
           "there is room again",
           500: "an internal error, a bug of the server (not a problem with the request): error_id names its "
           "traceback in the server's log", 503: "overloaded, or the translation timed out (Retry-After: 1)"}
_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait before trying again", "schema": {"type": "integer"}}}

_SENTENCE_HEADERS = {
    "X-Sentence-Index": {"description": "the sentence shown, from 0", "schema": {"type": "integer"}},
    "X-Sentence-Count": {"description": "sentences in the text", "schema": {"type": "integer"}},
    "X-Source-Span": {"description": "start,end of the sentence in the text (code points)",
                      "schema": {"type": "string"}},
    "X-Piece-Index": {"description": "the piece of the sentence shown, from 0 (a sentence over max_input_tokens "
                      "is translated in pieces)", "schema": {"type": "integer"}},
    "X-Piece-Count": {"description": "pieces the sentence is translated in (1: it fits whole)",
                      "schema": {"type": "integer"}},
    "X-Piece-Span": {"description": "start,end of that piece in the text (code points): the attention document's "
                     "source", "schema": {"type": "string"}},
}


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    """The error answers of a route, in the native shape (:class:`ErrorResponse`), with the
    ``Retry-After`` header where one is sent (403 only when banned)."""
    return {code: {"model": ErrorResponse, "description": _ERRORS[code],
                   **({"headers": _RETRY_AFTER} if code in (403, 429, 503) else {})} for code in codes}


def _attention_schema() -> dict[str, Any]:
    text = resources.files("transformer.visualize").joinpath("schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    schema.pop("$schema", None)
    return schema


def _timing(start: float, info: BatchInfo) -> dict[str, float]:
    return {"total_ms": round((time.perf_counter() - start) * 1000, 2), "queue_ms": round(info.queue_ms, 2),
            "compute_ms": round(info.compute_ms, 2), "batch_size": info.batch_size,
            "batch_requests": info.batch_requests, "model_calls": info.model_calls}


def _glossary(service: TranslationService, body: Any) -> tuple[tuple[str, str], ...]:
    """The request's ``glossary`` as checked pairs (() without one)."""
    return service.glossary([(term.source, term.target) for term in body.glossary or ()])


def _settings_for(body: Any, beam_size: int | None = None):
    """The decoding a request asks for, on the route that translates it (its last model's glossary
    check and calibration)."""
    def settings_for(route: Route) -> DecodingSettings:
        service = route.last
        # A model without a calibration has no confidence to give: such a request is answered as without it.
        return DecodingSettings(body.beam_size if beam_size is None else beam_size, getattr(body, "n_best", 1),
                                body.max_length, glossary=_glossary(service, body),
                                confidence=getattr(body, "confidence", False) and service.calibrated)
    return settings_for


def api_key(request: Request) -> str | None:
    """The API key of a native request: its ``X-API-Key`` header, or ``Authorization: Bearer KEY``."""
    key = request.headers.get("x-api-key")
    if key is None:
        scheme, _, value = request.headers.get("authorization", "").partition(" ")
        key = value.strip() if scheme.lower() == "bearer" else None
    return key or None


def guarded(keys: KeyRing, Body: type[BaseModel]) -> Any:  # noqa: N803
    """A request body of type ``Body`` (a ``text`` or a list of them) once the API keys and request
    limits let it through: a dependency (AccessDenied when refused). It validates the body itself,
    so that a request with invalid fields is answered 422 without being counted."""
    async def guard(body: Body, request: Request) -> BaseModel:  # type: ignore[valid-type]
        texts = [body.text] if isinstance(body.text, str) else list(body.text)
        keys.check(api_key(request), client=request.client.host if request.client else None,
                   origin=request.headers.get("origin"), chars=max(map(len, texts), default=0),
                   cost=max(1, len(texts)))
        return body
    return Annotated[Body, Depends(guard)]


_ACCESS_CODES = {"InvalidKey": "invalid_api_key", "KeyRequired": "api_key_required", "TextTooLong": "text_too_long",
                 "RateLimited": "rate_limited", "Banned": "banned"}


def _location(loc: tuple) -> str:
    """``("body", "text", "text-list", 2)`` -> ``"text.2"``."""
    parts = [str(p) for p in loc if p not in ("body", ONE_TEXT, TEXT_LIST)]
    return ".".join(parts) or "body"


def _invalid(exc: RequestValidationError) -> JSONResponse:
    """The answer to a body FastAPI refused: 400 for invalid JSON, 422 naming each invalid field."""
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


def native_answer(exc: Exception) -> Response | None:
    """The native API's answer to what its routes raise (None: the app's handlers take it)."""
    if isinstance(exc, RequestValidationError):
        return _invalid(exc)
    if isinstance(exc, AccessDenied):
        return error_json(exc.status, _ACCESS_CODES.get(type(exc).__name__, "forbidden"), exc.message,
                          headers=exc.headers)
    if isinstance(exc, (Overloaded, TimedOut)):
        return error_json(503, "overloaded" if isinstance(exc, Overloaded) else "timeout", str(exc),
                          headers={"Retry-After": "1"})
    if isinstance(exc, UserError):  # documents.Unprocessable among them
        return error_json(422, "invalid_request", str(exc))
    # FastAPI answers JSON its parser cannot read (too deep, a huge integer) with a bare 400 whose
    # cause is the parser's error: it is invalid JSON to the client all the same.
    if isinstance(exc, HTTPException) and exc.status_code == 400 and \
            isinstance(exc.__cause__, (RecursionError, ValueError)):
        return error_json(400, "invalid_json", f"request body is not valid JSON: {unreadable_json(exc.__cause__)}")
    return None


NATIVE = Api("native", error_json, native_answer)
PAGE = Api("page", error_json)  # its errors (a POST to /) have the native shape


def router(models: ModelSet, requests: RequestModels, keys: KeyRing | None = None) -> APIRouter:
    """The native API (:data:`NATIVE`); ``requests``: the bodies of ``/v1/translate`` and
    ``/v1/attention``, built for the service's limits (:func:`transformer.serve.schemas.request_models`);
    ``keys``: the API keys and request limits (default: none)."""
    router = NATIVE.router()
    keys = keys or KeyRing()

    # Fields left unset (alternatives not asked for) stay out of the answer.
    @router.post("/v1/translate", response_model=TranslateResponse, response_model_exclude_unset=True,
                 responses=_responses(400, 403, 413, 422, 429, 500, 503),
                 summary="Translate one text or a list of texts (paragraphs, or HTML pages), with the sentence "
                         "alignment")
    async def translate(body: guarded(keys, requests.translate), request: Request) -> TranslateResponse:
        start = time.perf_counter()
        texts = [body.text] if isinstance(body.text, str) else list(body.text)
        settings_for, taken = _settings_for(body), []

        def settings_noted(route: Route) -> DecodingSettings:  # the routes taken: their models' versions
            taken.append(route)
            return settings_for(route)

        translations, info, detected, _ = await unless_client_goes(request, models.translate(
            texts, body.source, body.target, settings_noted, html=body.format == "html",
            alternatives=body.alternatives))
        for result, found in zip(translations, detected or ()):
            result["detected_language"] = {"language": found.language, "confidence": round(found.confidence, 4)}
        shown = models.primary if detected is not None else models.route(body.source, body.target).last
        versions = list(dict.fromkeys(s.version.label for r in taken for s in r.steps if s.version is not None))
        if not taken and shown.version is not None:  # every text was already in the target language
            versions = [shown.version.label]
        extra = {"model_version": ", ".join(versions)} if versions else {}
        return TranslateResponse(translations=translations, decoding=shown.decoding(settings_for(Route(
            None, None, (shown,)))), timing=_timing(start, info), **extra)

    # The document of transformer/visualize/schema.json for one sentence of a text, where it is in
    # the text in the X-Sentence-* and X-Piece-* headers.
    @router.post("/v1/attention", responses={200: {"content": {"application/json": {"schema": _attention_schema()}},
                                                  "description": "transformer/visualize/schema.json, for the "
                                                  "sentence chosen by `sentence`", "headers": _SENTENCE_HEADERS},
                                             **_responses(400, 403, 413, 422, 429, 500, 503)},
                 summary="Translate one sentence of a text and return every attention weight of that translation")
    async def attention(body: guarded(keys, requests.attention), request: Request) -> JSONResponse:
        start = time.perf_counter()
        route = models.route(body.source, body.target)
        if route.via is not None:
            raise Unprocessable(f"the attention of one model is drawn: no model translates {route.source} into "
                                f"{route.target} (it is translated through {route.via}); ask for "
                                f"{route.source} -> {route.via} or {route.via} -> {route.target}")
        service = route.last
        settings = _settings_for(body)(route)
        result = await unless_client_goes(request, service.attention(body.text, settings, sentence=body.sentence,
                                                                     piece=body.piece))
        timing, where = _timing(start, result.info), result.piece
        return JSONResponse(result.data, headers={
            "Server-Timing": f"queue;dur={timing['queue_ms']}, compute;dur={timing['compute_ms']}",
            "X-Sentence-Index": str(where.sentence), "X-Sentence-Count": str(where.sentences),
            "X-Source-Span": "{},{}".format(*where.sentence_span),
            "X-Piece-Index": str(where.piece), "X-Piece-Count": str(where.pieces),
            "X-Piece-Span": "{},{}".format(*where.span)})

    @router.get("/health", response_model=Health, response_model_exclude_unset=True,
                summary="Liveness and the batchers' queues and counters")
    async def health() -> Health:
        service = models.primary  # read on each request: a reload replaces it
        extra = {"versions": versions} if (versions := models.versions()) else {}
        if service.memory is not None:
            extra["memory"] = service.memory.health()
        if models.single:
            return Health(status="ok", batching=service.health(), **extra)
        return Health(status="ok", batching=service.health(), models=models.health(), **extra)

    @router.get("/v1/model", response_model=ModelInfo, summary="The model being served (the first, of several)")
    async def model_info() -> ModelInfo:
        return models.primary.model_info()

    @router.get("/v1/models", response_model=ModelList, summary="Every model served and every language pair")
    async def model_list() -> ModelList:
        pairs = [PairInfo(source=s, target=t, via=models.route(s, t).via)
                 for s in models.languages() for t in models.targets(s)] if not models.single or \
            models.primary.src_lang else []
        return ModelList(models=[s.model_info() for s in models.services], pairs=pairs, pivot=models.pivot)

    return router


def page_router(models: ModelSet) -> APIRouter:
    """``GET /``: the web page for the server's languages (with several models, every pair, to
    choose from) and limits (and confidence threshold, where a model is calibrated), with its own
    Content-Security-Policy (built once)."""
    service = models.primary
    threshold = service.limits.confidence_threshold if any(s.calibrated for s in models.services) else None
    pairs = None if models.single else [(s, t, models.route(s, t).via)
                                        for s in models.languages() for t in models.targets(s)]
    page = index_html(src_lang=service.src_lang, tgt_lang=service.tgt_lang, max_chars=service.limits.max_chars,
                      max_sentences=service.limits.max_sentences, confidence_threshold=threshold, pairs=pairs)
    headers = {"Content-Security-Policy": page_csp(page)}
    router = PAGE.router()

    @router.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page, headers=headers)

    return router

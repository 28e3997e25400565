"""The FastAPI application: ``create_app(translator, limits)``.

Endpoints (the OpenAPI schema is served at ``/openapi.json``; the Swagger and ReDoc pages are
switched off because they load their scripts from a CDN):

* ``POST /v1/translate``: one text or a list; ``beam_size``, ``n_best``, ``max_length``; returns the
  translations with scores and the timing of the model call (dynamic batching, see
  :mod:`transformer.serve.batching`).
* ``POST /v1/attention``: one text; returns the document of ``transformer/visualize/schema.json``
  (the translation and every attention weight of it).
* ``GET /health``: liveness and the batcher's queue and counters.
* ``GET /v1/model``: languages, vocabulary sizes, the model config, default decoding, limits.
* ``GET /``: the web page.

No endpoint reads a path or a model name from the request: the model is the one the app was
built with. Every error is JSON (:class:`~transformer.serve.schemas.ErrorResponse`): 400 invalid
JSON or UTF-8, 413 body too large, 422 invalid fields (empty or whitespace-only text, control
characters, too long, unknown fields, wrong types), 503 overloaded or timed out.
"""

import json
import time
import warnings
from collections.abc import Hashable
from contextlib import asynccontextmanager
from importlib import resources
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from transformer import __version__
from transformer.serve.batching import BatchInfo, DynamicBatcher, Overloaded, TimedOut
from transformer.serve.limits import ServeLimits
from transformer.serve.middleware import BodyGuard, error_json
from transformer.serve.page import index_html
from transformer.serve.schemas import (
    Decoding,
    ErrorResponse,
    Health,
    ONE_TEXT,
    TEXT_LIST,
    ModelInfo,
    TranslateResponse,
    request_models,
)
from transformer.translate.translator import Translator
from transformer.visualize.data import collect_attention

_ERRORS = {400: "invalid JSON or UTF-8", 413: "request body too large", 422: "invalid request fields",
           503: "overloaded, or the translation timed out"}
_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 413: "payload_too_large", 415: "unsupported_media_type"}


def _responses(*codes: int) -> dict[int | str, dict[str, Any]]:
    return {code: {"model": ErrorResponse, "description": _ERRORS[code]} for code in codes}


def _attention_schema() -> dict[str, Any]:
    text = resources.files("transformer.visualize").joinpath("schema.json").read_text(encoding="utf-8")
    schema = json.loads(text)
    schema.pop("$schema", None)
    return schema


def create_app(translator: Translator, limits: ServeLimits | None = None, *, src_lang: str | None = None,
               tgt_lang: str | None = None) -> FastAPI:
    """The API and web page for ``translator`` (loaded once, shared by every request)."""
    limits = limits or ServeLimits()
    base = translator.with_decoding(strategy="beam", n_best=1, return_attention=False) \
        if translator.decoding.strategy == "sample" else translator
    input_limit = min(limits.max_input_tokens, translator.max_input_tokens)
    models = request_models(limits, base.decoding.beam_size)
    TranslateRequest, AttentionRequest = models.translate, models.attention  # noqa: N806 (classes)

    def decoding_of(beam_size: int, n_best: int, max_length: int | None) -> Decoding:
        return Decoding(strategy="greedy" if beam_size == 1 else "beam", beam_size=beam_size, n_best=n_best,
                        alpha=base.decoding.alpha, max_length=max_length)

    def translator_for(key: Hashable) -> Translator:
        beam_size, n_best, max_length = key
        lengths = {} if max_length is None else {"max_len_a": 0.0, "max_len_b": max_length}
        if beam_size == 1:
            return base.with_decoding(strategy="greedy", n_best=1, **lengths)
        return base.with_decoding(strategy="beam", beam_size=beam_size, n_best=n_best, **lengths)

    def run_batch(key: Hashable, texts: list[str]) -> list[list[tuple[str, float, float]]]:
        chosen = translator_for(key)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lengths were checked on arrival; nothing is cut
            n_best = chosen.translate_n_best(texts)
        return [[(chosen.detokenize(h), float(h.score), float(h.log_prob)) for h in hyps] for hyps in n_best]

    batcher = DynamicBatcher(run_batch, max_batch_size=limits.max_batch_size, batch_wait_ms=limits.batch_wait_ms,
                             max_queue=limits.max_queue, timeout_s=limits.timeout_s)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()

    app = FastAPI(title="transformer translation server", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Translate with a Transformer (Vaswani et al., 2017) and see its attention. "
                  f"Limits: {json.dumps(limits.to_dict())}.")
    app.state.batcher = batcher
    app.state.limits = limits
    app.add_middleware(BodyGuard, max_body_bytes=limits.max_body_bytes)
    _install_error_handlers(app)

    async def check_lengths(texts: list[str]) -> None:
        """422 naming the first text that is too long in tokens or has no tokens at all."""
        ids = await run_in_threadpool(base.vocab.src.encode_batch, texts)
        for i, seq in enumerate(ids):
            name = "text" if len(texts) == 1 else f"text {i}"
            if not seq:
                raise _Unprocessable(f"{name} has no tokens the model can read")
            if len(seq) > input_limit:
                raise _Unprocessable(f"{name} is {len(seq)} tokens long; at most {input_limit} are translated")

    @app.post("/v1/translate", response_model=TranslateResponse, responses=_responses(400, 413, 422, 503),
              summary="Translate one text or a list of texts")
    async def translate(body: TranslateRequest) -> TranslateResponse:  # type: ignore[valid-type]
        start = time.perf_counter()
        texts = [body.text] if isinstance(body.text, str) else list(body.text)
        batcher.check_capacity(len(texts))
        await check_lengths(texts)
        key = (body.beam_size, body.n_best, body.max_length)
        results, info = await batcher.translate(key, texts)
        translations = [{"source": src, "translation": hyps[0][0], "score": hyps[0][1],
                         "n_best": [{"translation": t, "score": s, "log_prob": lp} for t, s, lp in hyps]}
                        for src, hyps in zip(texts, results)]
        return TranslateResponse(translations=translations,
                                 decoding=decoding_of(body.beam_size, body.n_best, body.max_length),
                                 timing=_timing(start, info))

    @app.post("/v1/attention", responses={200: {"content": {"application/json": {"schema": _attention_schema()}},
                                               "description": "transformer/visualize/schema.json"},
                                          **_responses(400, 413, 422, 503)},
              summary="Translate one text and return every attention weight of that translation")
    async def attention(body: AttentionRequest) -> JSONResponse:  # type: ignore[valid-type]
        start = time.perf_counter()
        batcher.check_capacity(1)
        await check_lengths([body.text])
        chosen = translator_for((body.beam_size, 1, body.max_length))
        data, info = await batcher.call(lambda: collect_attention(chosen, body.text).to_dict())
        timing = _timing(start, info)
        return JSONResponse(data, headers={"Server-Timing": f"queue;dur={timing['queue_ms']}, "
                                                            f"compute;dur={timing['compute_ms']}"})

    @app.get("/health", response_model=Health, summary="Liveness and the batcher's queue and counters")
    async def health() -> Health:
        return Health(status="ok", batching=batcher.health())

    config = base.model.config

    @app.get("/v1/model", response_model=ModelInfo, summary="The model being served")
    async def model_info() -> ModelInfo:
        return ModelInfo(src_lang=src_lang, tgt_lang=tgt_lang, src_vocab_size=config.src_vocab_size,
                         tgt_vocab_size=config.tgt_vocab_size, shared_vocabulary=base.vocab.joint,
                         parameters=base.model.num_parameters(), config=config.to_dict(),
                         decoding=decoding_of(base.decoding.beam_size, 1, None), limits=limits.to_dict())

    page = index_html(src_lang=src_lang, tgt_lang=tgt_lang, max_chars=limits.max_chars)

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page)

    return app


def _timing(start: float, info: BatchInfo) -> dict[str, float]:
    return {"total_ms": round((time.perf_counter() - start) * 1000, 2), "queue_ms": round(info.queue_ms, 2),
            "compute_ms": round(info.compute_ms, 2), "batch_size": info.batch_size,
            "batch_requests": info.batch_requests}


class _Unprocessable(Exception):
    """A request that passed the schema but cannot be translated (422)."""


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

    @app.exception_handler(_Unprocessable)
    async def unprocessable(request: Request, exc: _Unprocessable) -> JSONResponse:
        return error_json(422, "invalid_request", str(exc))

    @app.exception_handler(Overloaded)
    async def overloaded(request: Request, exc: Overloaded) -> JSONResponse:
        return error_json(503, "overloaded", str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(TimedOut)
    async def timed_out(request: Request, exc: TimedOut) -> JSONResponse:
        return error_json(503, "timeout", str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(ValueError)
    async def value_error(request: Request, exc: ValueError) -> JSONResponse:
        return error_json(422, "invalid_request", str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_json(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

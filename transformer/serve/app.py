"""The FastAPI application: ``create_app(translator, limits)``.

Endpoints (the OpenAPI schema is served at ``/openapi.json``; the Swagger and ReDoc pages are
switched off because they load their scripts from a CDN):

* ``POST /v1/translate``: one text or a list, each of any number of sentences, lines and
  paragraphs (or HTML pages, ``format: "html"``); ``beam_size``, ``n_best``, ``max_length``;
  returns the translations in the texts' structure with scores, the sentence alignment
  (:mod:`transformer.serve.documents`), warnings (a sentence over ``max_input_tokens`` is
  translated in pieces) and the timing of the model calls (the sentences of concurrent requests
  are batched together, see :mod:`transformer.serve.batching`).
* ``POST /v1/attention``: one text and the index of one of its sentences (``sentence``, default
  0; ``piece``, default 0, for a sentence translated in pieces); returns the document of
  ``transformer/visualize/schema.json`` for that sentence (its translation and every attention
  weight of it), with ``X-Sentence-Index``, ``X-Sentence-Count``, ``X-Source-Span`` and
  ``X-Piece-*`` headers.
* ``GET /health``: liveness and the batcher's queue and counters.
* ``GET /v1/model``: languages, vocabulary sizes, the model config, default decoding, limits.
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
unknown fields, wrong types), 503 overloaded or timed out.
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
from transformer.serve import libretranslate
from transformer.serve.batching import BatchInfo, DynamicBatcher, Overloaded, TimedOut
from transformer.serve.documents import (
    Unprocessable,
    assemble,
    assemble_html,
    html_sentences_of,
    per_text,
    segment_texts,
    text_name,
)
from transformer.serve.limits import ServeLimits
from transformer.serve.middleware import BodyGuard, SecurityHeaders, error_json, unreadable_json
from transformer.serve.page import index_html, page_csp
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
from transformer.visualize.data import collect_attention, token_limit

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

    # A request's own call may hold up to max_texts sentences, as a list of max_texts texts always could.
    batcher = DynamicBatcher(run_batch, max_batch_size=limits.max_batch_size, batch_wait_ms=limits.batch_wait_ms,
                             max_queue=limits.max_queue, timeout_s=limits.timeout_s,
                             max_alone=max(limits.max_batch_size, limits.max_texts))
    lang = src_lang or base.src_lang  # for sentence splitting
    config = base.model.config
    default_key = (base.decoding.beam_size, 1, None)

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        yield
        await batcher.close()

    app = FastAPI(title="transformer translation server", version=__version__, lifespan=lifespan,
                  docs_url=None, redoc_url=None,
                  description="Translate texts of any length (cut into sentences, translated, put back in their "
                  "structure) with a Transformer (Vaswani et al., 2017) and see its attention. Offsets are "
                  f"Unicode code points. Limits: {json.dumps(limits.to_dict())}.")
    app.state.batcher = batcher
    app.state.limits = limits
    app.add_middleware(BodyGuard, max_body_bytes=limits.max_body_bytes, plain_error_paths=libretranslate.PATHS)
    app.add_middleware(SecurityHeaders)  # outermost: BodyGuard's errors get the headers too
    _install_error_handlers(app)

    async def segment(texts: list[str], max_sentences: int = limits.max_sentences,
                      names: list[str] | None = None) -> tuple[list, Any]:
        """The texts cut into checked sentences (422 naming the first problem) and the model
        inputs (an over-long sentence in pieces), off the event loop."""
        batcher.check_capacity(len(texts))  # every text has a sentence at least: refuse early
        documents, inputs = await run_in_threadpool(segment_texts, texts, lang, max_sentences=max_sentences,
                                                    encode_batch=base.vocab.src.encode_batch,
                                                    input_limit=input_limit, names=names)
        batcher.check_capacity(len(inputs.texts))
        return documents, inputs

    async def translate_texts(texts: list[str], key: Hashable = default_key, max_sentences: int = limits.max_sentences,
                              names: list[str] | None = None) -> tuple[list[dict[str, Any]], BatchInfo]:
        """Each text translated sentence by sentence in its structure (``Translation`` dicts)."""
        documents, inputs = await segment(texts, max_sentences, names)
        results, info = await batcher.translate(key, inputs.texts)
        counts = [len(d.segments) for d in documents]
        hyps, pieces = per_text(counts, inputs.hypotheses(results)), per_text(counts, inputs.spans)
        return [assemble(*parts, key[1]) for parts in zip(documents, hyps, pieces, inputs.warnings)], info

    async def translate_pages(pages: list[str], key: Hashable = default_key,
                              names: list[str] | None = None) -> tuple[list[dict[str, Any]], BatchInfo]:
        """Each HTML page's text translated, its markup kept (``Translation`` dicts,
        :func:`transformer.serve.documents.assemble_html`); the pages' sentences are counted and
        checked first, then translated as one request through the batcher."""
        names = names or [text_name(i, len(pages)) for i in range(len(pages))]
        batcher.check_capacity(len(pages))
        found, inputs = await run_in_threadpool(html_sentences_of, pages, lang, max_sentences=limits.max_sentences,
                                                encode_batch=base.vocab.src.encode_batch, input_limit=input_limit,
                                                names=names)
        results, info = [], BatchInfo(queue_ms=0.0, compute_ms=0.0, batch_size=0, batch_requests=0, model_calls=0)
        if inputs.texts:  # a page may have no text to translate
            batcher.check_capacity(len(inputs.texts))
            results, info = await batcher.translate(key, inputs.texts)
        counts = [len(f) for f in found]
        hyps, pieces = per_text(counts, inputs.hypotheses(results)), per_text(counts, inputs.spans)

        def rebuild() -> list[dict[str, Any]]:  # parsing the pages again: off the event loop
            return [assemble_html(*parts, key[1], lang) for parts in zip(pages, found, hyps, pieces, inputs.warnings)]

        return await run_in_threadpool(rebuild), info

    @app.post("/v1/translate", response_model=TranslateResponse, responses=_responses(400, 413, 422, 503),
              summary="Translate one text or a list of texts (paragraphs, or HTML pages), with the sentence "
                      "alignment")
    async def translate(body: TranslateRequest) -> TranslateResponse:  # type: ignore[valid-type]
        start = time.perf_counter()
        texts = [body.text] if isinstance(body.text, str) else list(body.text)
        key = (body.beam_size, body.n_best, body.max_length)
        run = translate_pages if body.format == "html" else translate_texts
        translations, info = await run(texts, key)
        return TranslateResponse(translations=translations,
                                 decoding=decoding_of(body.beam_size, body.n_best, body.max_length),
                                 timing=_timing(start, info))

    sentence_headers = {"X-Sentence-Index": {"description": "the sentence shown, from 0",
                                             "schema": {"type": "integer"}},
                        "X-Sentence-Count": {"description": "sentences in the text", "schema": {"type": "integer"}},
                        "X-Source-Span": {"description": "start,end of the sentence in the text (code points)",
                                          "schema": {"type": "string"}},
                        "X-Piece-Index": {"description": "the piece of the sentence shown, from 0 (a sentence "
                                          "over max_input_tokens is translated in pieces)",
                                          "schema": {"type": "integer"}},
                        "X-Piece-Count": {"description": "pieces the sentence is translated in (1: it fits whole)",
                                          "schema": {"type": "integer"}},
                        "X-Piece-Span": {"description": "start,end of that piece in the text (code points): the "
                                         "attention document's source", "schema": {"type": "string"}}}

    def attention_length(sentence: str, requested: int | None) -> int | None:
        """``max_length`` for the attention of ``sentence``: the teacher-forced pass reads <s> and
        every output token, one position more than decoding does, so a translation that would
        reach the end of a learned position table is cut one token shorter (only such a one)."""
        limit = token_limit(config) - 1
        if requested is not None:
            return min(requested, limit)
        d = base.decoding
        return None if int(len(base.vocab.src.encode(sentence)) * d.max_len_a + d.max_len_b) <= limit else limit

    @app.post("/v1/attention", responses={200: {"content": {"application/json": {"schema": _attention_schema()}},
                                               "description": "transformer/visualize/schema.json, for the sentence "
                                               "chosen by `sentence`", "headers": sentence_headers},
                                          **_responses(400, 413, 422, 503)},
              summary="Translate one sentence of a text and return every attention weight of that translation")
    async def attention(body: AttentionRequest) -> JSONResponse:  # type: ignore[valid-type]
        start = time.perf_counter()
        documents, inputs = await segment([body.text])
        count = len(documents[0].segments)
        if body.sentence >= count:
            raise Unprocessable(f"sentence {body.sentence} does not exist: the text has {count} "
                                f"sentence{'s' if count != 1 else ''} (0 to {count - 1})")
        chosen_sentence, pieces = documents[0].segments[body.sentence], inputs.spans[body.sentence]
        if body.piece >= len(pieces):
            raise Unprocessable(f"piece {body.piece} does not exist: sentence {body.sentence} is translated in "
                                f"{len(pieces)} piece{'s' if len(pieces) != 1 else ''} (0 to {len(pieces) - 1})")
        # A sentence over the input limit is translated in pieces; the model reads one piece at a time.
        a, b = (chosen_sentence.start + x for x in pieces[body.piece])
        piece = body.text[a:b]
        chosen = translator_for((body.beam_size, 1, attention_length(piece, body.max_length)))
        data, info = await batcher.call(lambda: collect_attention(chosen, piece).to_dict())
        timing = _timing(start, info)
        return JSONResponse(data, headers={"Server-Timing": f"queue;dur={timing['queue_ms']}, "
                                                            f"compute;dur={timing['compute_ms']}",
                                           "X-Sentence-Index": str(body.sentence), "X-Sentence-Count": str(count),
                                           "X-Source-Span": f"{chosen_sentence.start},{chosen_sentence.end}",
                                           "X-Piece-Index": str(body.piece), "X-Piece-Count": str(len(pieces)),
                                           "X-Piece-Span": f"{a},{b}"})

    async def libretranslate_html(pages: list[str], names: list[str]) -> list[str]:
        return [t["translation"] for t in (await translate_pages(pages, names=names))[0]]

    libretranslate.add_routes(app, translate=translate_texts, translate_html=libretranslate_html,
                              src_lang=src_lang, tgt_lang=tgt_lang, limits=limits)

    @app.get("/health", response_model=Health, summary="Liveness and the batcher's queue and counters")
    async def health() -> Health:
        return Health(status="ok", batching=batcher.health())

    @app.get("/v1/model", response_model=ModelInfo, summary="The model being served")
    async def model_info() -> ModelInfo:
        return ModelInfo(src_lang=src_lang, tgt_lang=tgt_lang, src_vocab_size=config.src_vocab_size,
                         tgt_vocab_size=config.tgt_vocab_size, shared_vocabulary=base.vocab.joint,
                         parameters=base.model.num_parameters(), config=config.to_dict(),
                         decoding=decoding_of(base.decoding.beam_size, 1, None), limits=limits.to_dict())

    page = index_html(src_lang=src_lang, tgt_lang=tgt_lang, max_chars=limits.max_chars,
                      max_sentences=limits.max_sentences)

    page_headers = {"Content-Security-Policy": page_csp(page)}

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    async def index() -> HTMLResponse:
        return HTMLResponse(page, headers=page_headers)

    return app


def _timing(start: float, info: BatchInfo) -> dict[str, float]:
    return {"total_ms": round((time.perf_counter() - start) * 1000, 2), "queue_ms": round(info.queue_ms, 2),
            "compute_ms": round(info.compute_ms, 2), "batch_size": info.batch_size,
            "batch_requests": info.batch_requests, "model_calls": info.model_calls}


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

    @app.exception_handler(Unprocessable)
    async def unprocessable(request: Request, exc: Unprocessable) -> JSONResponse:
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
        if request.url.path in libretranslate.PATHS:  # LibreTranslate's error shape there
            return JSONResponse({"error": str(exc.detail)}, status_code=exc.status_code,
                                headers=getattr(exc, "headers", None))
        # FastAPI answers JSON its parser cannot read (too deep, a huge integer) with a bare 400 whose
        # cause is the parser's error: it is invalid JSON to the client all the same.
        if exc.status_code == 400 and isinstance(exc.__cause__, (RecursionError, ValueError)):
            reason = unreadable_json(exc.__cause__)
            return error_json(400, "invalid_json", f"request body is not valid JSON: {reason}")
        code = _HTTP_CODES.get(exc.status_code, "http_error")
        return error_json(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

"""The LibreTranslate API, so that existing clients of self-hosted translation servers work with ours.

LibreTranslate (https://libretranslate.com, its web page, ``libretranslatepy``, ``deep-translator``
and the other client libraries) is the de facto interface of self-hosted translation servers.
The server answers all of it that its clients call, over the server's models
(:class:`~transformer.serve.model_set.ModelSet`: a model per language pair, others through a pivot):

* ``POST /translate``: ``q`` (a string, or in a JSON body a list of strings), ``source`` (a code,
  or ``auto``: detected per text, and ``detectedLanguage`` answered), ``target``, ``format``
  (``text``, the default, or ``html``), ``alternatives`` (up to that many distinct translations
  of each text from the beam's hypotheses, :mod:`transformer.translate.alternatives`),
  ``api_key``, and ``glossary`` (this server's extension, in a JSON body:
  ``[{"source", "target"}, ...]`` as on ``/v1/translate``). The body is JSON or a form
  (urlencoded or multipart; form parameters may also come in the query string, as LibreTranslate
  takes them). Answers ``{"translatedText": ...}``, a list when ``q`` is a list; each text is
  translated sentence by sentence in its structure, through the same dynamic batcher and limits
  as ``/v1/translate``; blank texts in a list come back as they are. A pair translated through
  the pivot is said in the ``X-Translated-Via`` header.
* ``POST /detect``: every language the server knows, most likely first, confidences in percent.
* ``GET /languages``: ``[{"code", "name", "targets"}]``: every language served, with the targets
  reachable from it (a language only translated into has none).
* ``POST /translate_file`` (multipart ``file``, ``source``, ``target``) and ``GET
  /download_file/<name>``: a document translated whole (:mod:`transformer.serve.libretranslate.files`).
* ``POST /suggest``: a suggested translation appended to the suggestions file; on a server with a
  translation memory (:mod:`transformer.serve.memory`), checked and kept as a pending entry, or
  refused (400 with its ``reason``); 403 when neither. With a memory, ``/translate``'s answer has a
  ``memory`` field: per text, the sentences the memory translated or has fuzzy matches for.
* ``GET /frontend/settings`` and ``GET /spec``: what LibreTranslate's web page reads, and a
  Swagger 2.0 description (:mod:`transformer.serve.libretranslate.spec`).

The parameters are read and checked by :mod:`transformer.serve.libretranslate.params`. API keys and
request limits (:mod:`transformer.serve.access`) apply to ``/translate``,
``/detect``, ``/translate_file`` and ``/suggest``, as in LibreTranslate (and, with the same
counters, to the native ``/v1/translate`` and ``/v1/attention``: :mod:`transformer.serve.routes`).

Errors have LibreTranslate's shape, ``{"error": message}``: 400 for a missing or bad parameter
(a language or pair not served, a format other than text or html, a text too long, too many
texts or sentences, a control character, ``alternatives`` not an integer, negative or over
``max_alternatives``, a bad ``glossary``, a file of another format or a corrupt one), 403 for a
bad key or a feature turned off, 404 for an unknown route or an expired download, 413 for a
body over ``max_body_bytes`` (a file over ``max_file_bytes``), 429 over a request limit, 503
when overloaded or timed out; any other :class:`~transformer.errors.UserError` that reaches the
app is answered 400 too. Anything else is a bug of the server: 500 with an ``error_id`` beside
the message, naming its traceback in the server's log (:mod:`transformer.serve.app`). A sentence over ``max_input_tokens`` is translated in pieces, as
on ``/v1/translate``; LibreTranslate's answer has no place for the warning ``/v1/translate``
gives. A translation (of texts or of a file) whose client disconnects before its answer is
ready is stopped (:mod:`transformer.serve.disconnect`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Depends, Request
from fastapi.responses import JSONResponse, Response

from transformer import __version__
from transformer.errors import UserError
from transformer.serve.libretranslate import params as lt_params, spec as lt_spec
from transformer.serve.access import AccessDenied, KeyRing
from transformer.serve.api import Api, takes_files
from transformer.serve.batching import Overloaded, TimedOut
from transformer.serve.disconnect import unless_client_goes
from transformer.serve.libretranslate.files import FileStore, translate_upload
from transformer.serve.documents import Unprocessable
from transformer.serve.libretranslate.params import BadRequest, TooLarge, read_parameters
from transformer.serve.middleware import plain_error_json
from transformer.serve.service import _off_the_loop
from transformer.serve.model_set import AUTO, UNKNOWN, ModelSet, NoRoute, language_name
from transformer.serve.libretranslate.uploads import Uploads, UploadsBusy
from transformer.serve.libretranslate.suggestions import (SuggestionStore, SuggestionStoreError, SuggestionStoreFull,
                                                          check_fields)
from transformer.serve.memory import SuggestionRefused, sender
from transformer.translate.files import SUPPORTED_EXTENSIONS, FileFormatError, format_for, read_file
from transformer.translate.html import html_sentences


def _error(status: int, code: str, message: str, headers: dict[str, str] | None = None, **fields: Any) -> JSONResponse:
    """An error in LibreTranslate's shape (which has no place for the native API's ``code``)."""
    return plain_error_json(status, message, headers, **fields)


def libretranslate_answer(exc: Exception) -> JSONResponse | None:
    """LibreTranslate's answer to what its routes raise (None: the app's handlers take it)."""
    if isinstance(exc, AccessDenied):
        return plain_error_json(exc.status, exc.message, headers=exc.headers)
    if isinstance(exc, (Overloaded, TimedOut, UploadsBusy)):  # the uploads say their own wait
        return plain_error_json(503, str(exc), headers={"Retry-After": str(getattr(exc, "retry_after", 1))})
    if isinstance(exc, SuggestionStoreError):
        return plain_error_json(507 if isinstance(exc, SuggestionStoreFull) else 500, str(exc))
    if isinstance(exc, UserError):  # a bad parameter (BadRequest), a text or file refused, a bad suggestion
        said = isinstance(exc, (Unprocessable, FileFormatError)) and not isinstance(exc, NoRoute)
        return plain_error_json(413 if isinstance(exc, TooLarge) else 400, f"Invalid request: {exc}" if said else str(exc))
    return None


LIBRETRANSLATE = Api("libretranslate", _error, libretranslate_answer, cors=True)
_FORM_OVERHEAD = 64 * 1024  # a file's form: its other fields and the part headers


def languages(models: ModelSet) -> list[dict[str, Any]]:
    """``GET /languages``: every language served with the languages it is translated into
    (directly or through the pivot); a language only translated into has no targets."""
    if models.single and not (models.primary.src_lang and models.primary.tgt_lang):
        src, tgt = models.primary.src_lang, models.primary.tgt_lang
        out = [{"code": src or UNKNOWN, "name": language_name(src) if src else _UNDETERMINED,
                "targets": [tgt or UNKNOWN]}]
        if (tgt or UNKNOWN) != (src or UNKNOWN):
            out.append({"code": tgt or UNKNOWN, "name": language_name(tgt) if tgt else _UNDETERMINED, "targets": []})
        return out
    return [{"code": code, "name": language_name(code), "targets": models.targets(code)}
            for code in models.languages()]


_UNDETERMINED = "Undetermined (the run does not say)"


def _detection(found) -> dict[str, Any]:
    """A detected language as LibreTranslate gives it: the confidence in percent."""
    return {"confidence": round(found.confidence * 100, 1), "language": found.language}


@dataclass
class LibreTranslateOptions:
    """How the LibreTranslate API of a server is set up (``transformer serve``'s options).

    Attributes:
        keys: the API keys and request limits (:class:`~transformer.serve.access.KeyRing`; the
            default has no keys and no limits).
        suggestions: where ``/suggest`` stores suggestions; None: it answers 403, as
            LibreTranslate does with suggestions off.
        files: whether ``/translate_file`` and ``/download_file`` are on.
        frontend_source, frontend_target: the languages LibreTranslate's web page starts with
            (``/frontend/settings``); "auto" (detect) and the first model's target by default.
        frontend_timeout_ms: how long the web page waits after typing before it translates.
    """

    keys: KeyRing = field(default_factory=KeyRing)
    suggestions: SuggestionStore | None = None
    files: bool = True
    frontend_source: str = AUTO
    frontend_target: str | None = None
    frontend_timeout_ms: int = 500


def _texts(params: dict[str, Any]) -> int:
    """A request's cost: one for each of its texts."""
    q = params.get("q")
    return len(q) if isinstance(q, list) else 1


def _remembered(result: dict[str, Any]) -> list[dict[str, Any]]:
    """A text's ``memory`` on a server with a translation memory: each sentence the memory has
    something for, its index and its native ``memory``, or ``memory_alternatives`` (and
    ``memory_terms`` with ``--tm-constraints``) fields."""
    return [{"sentence": j, **{k: v for k, v in sentence.items() if k in ("memory", "memory_alternatives", "memory_terms")}}
            for j, sentence in enumerate(result.get("sentences", ()))
            if "memory" in sentence or "memory_alternatives" in sentence]


def _client(request: Request) -> str | None:
    return request.client.host if request.client else None


def _access(options: LibreTranslateOptions, request: Request, params: dict[str, Any], *, cost: int = 1) -> None:
    """Count the request against its key's or its address's limits (:class:`AccessDenied` when refused)."""
    q = params.get("q")
    texts = q if isinstance(q, list) else [q]
    chars = max((len(t) for t in texts if isinstance(t, str)), default=0)
    key = params.get("api_key")
    options.keys.check(key if isinstance(key, str) else None, client=_client(request),
                       origin=request.headers.get("origin"), chars=chars, cost=max(1, cost))


def _parameters(options: LibreTranslateOptions, cost: Callable[[dict[str, Any]], int] = lambda params: 1) -> Any:
    """A dependency: the request's parameters (:func:`read_parameters`), once its key's or its
    address's limits let it through at ``cost(params)`` requests."""
    async def read(request: Request) -> dict[str, Any]:
        params = await read_parameters(request)
        _access(options, request, params, cost=cost(params))
        return params
    return Depends(read)


def _on(on: bool, message: str) -> list[Any]:
    """A route's dependencies refusing it (403, ``message``) when its feature is turned off."""
    async def check() -> None:
        if not on:
            raise AccessDenied(message)
    return [Depends(check)]


def router(models: ModelSet, options: LibreTranslateOptions | None = None, store: FileStore | None = None,
           uploads: Uploads | None = None) -> APIRouter:
    """LibreTranslate's routes (see the module doc) over the server's models: their routes,
    languages and limits; ``store`` keeps the translated files, ``uploads`` bounds the uploads in
    flight and parses them (the app closes both). What the routes raise :data:`LIBRETRANSLATE`
    answers in LibreTranslate's shape (:func:`libretranslate_answer`)."""
    options = options or LibreTranslateOptions()
    routes = LIBRETRANSLATE.router()
    limits = models.primary.limits
    memory = models.primary.memory  # one memory for every model: each looks up and adds in its own pair
    store = FileStore(limits.file_ttl_s, max_files=limits.max_stored_files, max_bytes=limits.max_stored_bytes) \
        if store is None else store
    uploads = Uploads(limits.max_uploads, limits.max_upload_bytes) if uploads is None else uploads

    @routes.get("/languages", include_in_schema=False)
    async def get_languages() -> JSONResponse:
        return JSONResponse(languages(models))

    @routes.post("/detect", include_in_schema=False)
    async def post_detect(params: dict[str, Any] = _parameters(options)) -> JSONResponse:
        texts, batch = lt_params.texts(params, limits)
        found = await _off_the_loop(models.detect_any, texts)
        answers = [[_detection(d) for d in one] for one in found]
        return JSONResponse(answers if batch else answers[0])

    @routes.post("/translate", include_in_schema=False)
    async def post_translate(request: Request,
                             params: dict[str, Any] = _parameters(options, cost=_texts)) -> JSONResponse:
        texts, batch = lt_params.texts(params, limits)
        source = lt_params.string(params, "source")
        target = lt_params.string(params, "target")
        text_format = lt_params.string(params, "format", required=False) or "text"
        if text_format not in ("text", "html"):
            raise BadRequest(f"{text_format} format is not supported (text or html)")
        auto = source.lower() == AUTO
        if not auto:
            models.route(source, target)  # a pair not served: 400 before anything is read further
        count = lt_params.alternatives(params, limits)
        pairs = lt_params.glossary(params, limits, models.primary.default.beam_size, lt_params.is_json(request))
        out = list(texts)
        others: list[list[str]] = [[] for _ in texts]
        todo = [i for i, t in enumerate(texts) if t.strip()]  # blank texts come back as they are
        names = [f"q[{i}]" if batch else "q" for i in todo]
        detected: list[Any] = [None] * len(texts)
        remembered: list[list[dict[str, Any]]] = [[] for _ in texts]
        vias: set[str] = set()
        if todo:
            def settings_for(route):
                service = route.last
                return replace(service.default, glossary=service.glossary(pairs))

            results, _, found, through = await unless_client_goes(request, models.translate(
                [texts[i] for i in todo], source, target, settings_for, html=text_format == "html",
                names=names, alternatives=count))
            for k, (i, result) in enumerate(zip(todo, results)):
                out[i] = result["translation"]
                others[i] = result.get("alternatives", [])
                remembered[i] = _remembered(result)
                if found is not None:
                    detected[i] = found[k]
            vias = {v for v in through if v is not None}
        answer: dict[str, Any] = {"translatedText": out if batch else out[0]}
        if count:
            answer["alternatives"] = others if batch else others[0]
        if auto:
            shown = [_detection(d) if d is not None else {"confidence": 0.0, "language": UNKNOWN} for d in detected]
            answer["detectedLanguage"] = shown if batch else shown[0]
        if memory is not None:  # a field LibreTranslate's clients do not know, and ignore
            answer["memory"] = remembered if batch else remembered[0]
        # LibreTranslate's answer has no field for it: a pivot language is said in a header.
        return JSONResponse(answer, headers={"X-Translated-Via": ",".join(sorted(vias))} if vias else None)

    @routes.post("/translate_file", include_in_schema=False,
                 dependencies=_on(options.files, "Files translation are disabled on this server."))
    # The upload's share of the budget is taken by the body guard, before the body is read.
    @takes_files(limits.max_file_bytes + _FORM_OVERHEAD, reserve=uploads.reserve)
    async def post_translate_file(request: Request) -> JSONResponse:
        params, upload = await lt_params.file_form(request, limits)
        # Counted here, not by a dependency: a file's cost is known once its form is read, in its reservation.
        _access(options, request, params, cost=max(1, len(upload[1]) // max(1, limits.max_chars)))
        source = lt_params.string(params, "source")
        target = lt_params.string(params, "target")
        name, data = upload
        if not name:
            raise BadRequest("Invalid request: empty file")
        _check_file_name(name)
        if format_for_name(name) is None:
            raise BadRequest(f"Invalid request: file format not supported ({name}; supported: "
                             f"{', '.join(SUPPORTED_EXTENSIONS)})")
        document = await uploads.run(read_file, data, name)
        del data, upload  # the parsed document is what is kept
        if source.lower() == AUTO:
            source = await uploads.run(_file_language, models, document, target)
        route = models.route(source, target)
        translated_name, out = await unless_client_goes(request, translate_upload(
            route, document, name, run=uploads.run, max_sentences=limits.max_file_sentences))
        stored = store.put(translated_name, out)
        # Percent-encoded: a name may hold '#', '?', '%', spaces or tabs, which a URL cannot carry raw.
        url = request.url_for("download_file", filename=quote(stored, safe=""))
        return JSONResponse({"translatedFileUrl": str(url)})

    @routes.get("/download_file/{filename}", name="download_file", include_in_schema=False)
    async def get_download_file(filename: str) -> Response:
        if not options.files:
            return plain_error_json(400, "Files translation are disabled on this server.")
        found = store.get(filename)
        if found is None:
            return plain_error_json(404, f"No translated file {filename}: it does not exist or has expired (files "
                                    f"are kept {limits.file_ttl_s:g} s)")
        download_name, data = found
        media = format_for_name(download_name)
        return Response(data, media_type=media.media_type if media else "application/octet-stream",
                        headers={"Content-Disposition": _attachment(download_name)})

    @routes.post("/suggest", include_in_schema=False,
                 dependencies=_on(options.suggestions is not None or memory is not None,
                                  "Suggestions are disabled on this server."))
    async def post_suggest(request: Request, params: dict[str, Any] = _parameters(options)) -> JSONResponse:
        if memory is None:
            await _off_the_loop(options.suggestions.add, params.get("q"), params.get("s"), params.get("source"),
                                params.get("target"))
            return JSONResponse({"success": True})
        q, s, source, target = (params.get(name) for name in ("q", "s", "source", "target"))
        check_fields(q, s, source, target, max_chars=limits.max_chars)
        if source.lower() == AUTO:  # as LibreTranslate's page sends it by default: the text's language
            source = (await _off_the_loop(models.detect, [q], target))[0].language
        route = models.route(source, target)
        if route.via is not None:
            raise BadRequest(f"Invalid request: suggestions are taken for the pairs a model translates; "
                             f"{route.source} -> {route.target} is translated through {route.via}")
        key = params.get("api_key")
        who = sender(key if isinstance(key, str) else None, _client(request), options.keys)
        memory.check_rate(who)
        try:
            entry = await _off_the_loop(memory.suggest, route.last, q, s, who=who)
        except SuggestionRefused as refused:
            return plain_error_json(400, f"Invalid request: {refused}", reason=refused.refusal.reason.value)
        return JSONResponse({"success": True, "id": entry.id, "status": entry.status})

    @routes.get("/frontend/settings", include_in_schema=False)
    async def get_frontend_settings() -> JSONResponse:
        return JSONResponse(frontend_settings(models, options))

    @routes.get("/spec", include_in_schema=False)
    async def get_spec(request: Request) -> JSONResponse:
        return JSONResponse(lt_spec.spec(languages(models), version=__version__, title="transformer (LibreTranslate API)",
                                         files=options.files,
                                         suggestions=options.suggestions is not None or memory is not None,
                                         max_alternatives=limits.max_alternatives))

    return routes


def frontend_settings(models: ModelSet, options: LibreTranslateOptions) -> dict[str, Any]:
    """``GET /frontend/settings``: what LibreTranslate's web page reads to set itself up."""
    policy_chars = options.keys.policy.char_limit
    limit = models.primary.limits.max_chars
    listed = languages(models)
    codes = {language["code"] for language in listed}
    target = options.frontend_target or models.primary.tgt_lang
    return lt_spec.frontend_settings(
        listed, char_limit=limit if policy_chars == -1 else min(limit, policy_chars),
        frontend_timeout_ms=options.frontend_timeout_ms, api_keys=options.keys.api_keys,
        key_required=options.keys.key_required,
        suggestions=options.suggestions is not None or models.primary.memory is not None,
        file_formats=list(SUPPORTED_EXTENSIONS) if options.files else None,
        source=options.frontend_source if options.frontend_source in codes | {AUTO} else AUTO,
        target=target if target in codes else None)


def format_for_name(name: str):
    """The file format class for ``name``'s extension; None when not supported."""
    try:
        return format_for(name)
    except FileFormatError:
        return None


def _attachment(name: str) -> str:
    """A Content-Disposition naming the download (RFC 6266: an ASCII fallback, the UTF-8 name)."""
    ascii_name = name.encode("ascii", "replace").decode("ascii").replace('"', "_").replace("?", "_")
    return f"attachment; filename=\"{ascii_name}\"; filename*=UTF-8''{quote(name)}"


MAX_FILE_NAME_BYTES = 200  # the stored name adds a 33-byte token and the target's code: within 255 bytes
_BAD_NAME = re.compile(r"[\x00-\x08\x0a-\x1f\x7f/\\]")


def _check_file_name(name: str) -> None:
    """BadRequest for an upload's name the download store could not keep: too long for a file
    name, or holding a control character (a tab is fine) or a path separator."""
    size = len(name.encode("utf-8", "surrogatepass"))
    if size > MAX_FILE_NAME_BYTES:
        raise BadRequest(f"Invalid request: the file name is {size} bytes long; at most {MAX_FILE_NAME_BYTES} are "
                         "taken (rename the file)")
    if _BAD_NAME.search(name):
        raise BadRequest("Invalid request: the file name holds a control character or a path separator "
                         "(rename the file)")


def _file_language(models: ModelSet, document, target: str | None) -> str:
    """The language of an uploaded file's text (its first few thousand characters)."""
    text = " ".join(" ".join(html_sentences(u.text)) if u.html else u.text for u in document.units())[:4000]
    return models.detect([text], target)[0].language

"""Reading LibreTranslate's requests: its parameters as LibreTranslate takes them, each checked.

A request's parameters come in a JSON body, or in a form (urlencoded or multipart) and the query
string (:func:`read_parameters`); a file comes in a multipart form (:func:`file_form`). Each
parameter is checked against the server's limits, and a missing or bad one raises
:class:`BadRequest` with LibreTranslate's message (``Invalid request: missing q parameter``),
which the routes of :mod:`transformer.serve.libretranslate` answer 400 (:class:`TooLarge`: 413).
"""

from __future__ import annotations

import json
import re
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qsl

from fastapi import Request
from starlette.exceptions import HTTPException
from starlette.formparsers import MultiPartException

from transformer.errors import UserError
from transformer.serve.limits import ServeLimits
from transformer.serve.middleware import unreadable_json
from transformer.serve.schemas import check_text


class BadRequest(UserError):
    """A LibreTranslate request with a missing or bad parameter (400)."""


class TooLarge(BadRequest):
    """A file over ``max_file_bytes`` (413)."""


def _form_fields(body: bytes, content_type: str) -> list[tuple[str, str]]:
    """The fields of a form body (urlencoded or multipart); file parts are skipped."""
    media = content_type.split(";")[0].strip().lower()
    if media == "application/x-www-form-urlencoded":
        try:
            return parse_qsl(body.decode("utf-8"), keep_blank_values=True, errors="strict")
        except UnicodeDecodeError as err:
            raise BadRequest(f"Invalid request: a form value is not valid UTF-8 ({err.reason})") from None
    if media == "multipart/form-data":
        message = BytesParser(policy=HTTP).parsebytes(b"Content-Type: " + content_type.encode("latin-1") + b"\r\n\r\n"
                                                      + body)
        if not message.is_multipart():
            raise BadRequest("Invalid request: the multipart/form-data body cannot be read")
        fields = []
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            if not name or part.get_filename() is not None:
                continue
            payload = part.get_payload(decode=True) or b""
            try:
                fields.append((str(name), payload.decode(part.get_content_charset() or "utf-8")))
            except (UnicodeDecodeError, LookupError):
                raise BadRequest(f"Invalid request: form field {name} is not valid text") from None
        return fields
    return []


def is_json(request: Request) -> bool:
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return media == "application/json" or media.endswith("+json")


async def read_parameters(request: Request) -> dict[str, Any]:
    """The request's parameters as LibreTranslate reads them: a JSON body's object, or else the
    query string's and the form's fields (the first of a repeated name)."""
    content_type = request.headers.get("content-type", "")
    body = await request.body()
    if is_json(request):
        try:
            data = json.loads(body)
        except json.JSONDecodeError as err:
            raise BadRequest(f"Invalid JSON: {err}") from None
        except (RecursionError, ValueError) as err:  # valid JSON that Python's parser does not read
            raise BadRequest(f"Invalid JSON: {unreadable_json(err)}") from None
        if not isinstance(data, dict):
            raise BadRequest("Invalid JSON format")
        return data
    values: dict[str, Any] = {}
    for name, value in [*request.query_params.multi_items(), *_form_fields(body, content_type)]:
        values.setdefault(name, value)
    return values


def string(params: dict[str, Any], name: str, *, required: bool = True) -> str | None:
    value = params.get(name)
    if value is None or value == "":
        if required:
            raise BadRequest(f"Invalid request: missing {name} parameter")
        return None
    if not isinstance(value, str):
        raise BadRequest(f"Invalid request: {name} must be a string")
    return value


def texts(params: dict[str, Any], limits: ServeLimits) -> tuple[list[str], bool]:
    """``q`` as a list of texts, and whether it was a list; each checked against the limits."""
    q = params.get("q")
    if q is None or q == "" or q == []:
        raise BadRequest("Invalid request: missing q parameter")
    batch = isinstance(q, list)
    texts = q if batch else [q]
    if not all(isinstance(t, str) for t in texts):
        raise BadRequest("Invalid request: q must be a string or a list of strings")
    if len(texts) > limits.max_texts:
        raise BadRequest(f"Invalid request: q holds {len(texts)} texts; at most {limits.max_texts} are translated "
                         "per request")
    for i, text in enumerate(texts):
        name = f"q[{i}]" if batch else "q"
        if len(text) > limits.max_chars:
            raise BadRequest(f"Invalid request: {name} is {len(text)} characters long; at most {limits.max_chars} "
                             "are translated")
        if text.strip():
            try:
                check_text(text)
            except UserError as err:
                raise BadRequest(f"Invalid request: {name} {err}") from None
    return texts, batch


# An integer as a form (or a JSON string) gives it; longer ones are over any limit.
_INTEGER = re.compile(r"\s*[+-]?\d{1,9}\s*")
_DIGITS = re.compile(r"\s*[+-]?\d+\s*")


def alternatives(params: dict[str, Any], limits: ServeLimits) -> int:
    """``alternatives``: how many distinct translations besides the translation are asked for (0: none)."""
    value = params.get("alternatives")
    if value is None or value == "":
        return 0
    if isinstance(value, str) and _DIGITS.fullmatch(value):
        if not _INTEGER.fullmatch(value):
            raise BadRequest(f"Invalid request: alternatives parameter must be <= {limits.max_alternatives}")
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest("Invalid request: alternatives parameter is not an integer")
    if value < 0:
        raise BadRequest(f"Invalid request: alternatives parameter must be >= 0, got {value}")
    if value > limits.max_alternatives:
        raise BadRequest(f"Invalid request: alternatives parameter must be <= {limits.max_alternatives}, got {value}")
    return value


def glossary(params: dict[str, Any], limits: ServeLimits, beam_size: int,
              json_body: bool) -> list[tuple[str, str]] | None:
    """``glossary`` (this server's extension): a JSON list of ``{"source", "target"}`` objects."""
    value = params.get("glossary")
    if value is None or value == [] or (value == "" and not json_body):
        return None
    if not json_body:
        raise BadRequest("Invalid request: glossary is read from a JSON body only (a list of "
                         '{"source": ..., "target": ...} objects)')
    if not isinstance(value, list) or not all(isinstance(t, dict) and set(t) == {"source", "target"}
                                              and all(isinstance(v, str) for v in t.values()) for t in value):
        raise BadRequest('Invalid request: glossary must be a list of {"source": ..., "target": ...} objects '
                         "with string values")
    if len(value) > limits.max_glossary_terms:
        raise BadRequest(f"Invalid request: glossary holds {len(value)} terms; at most {limits.max_glossary_terms} "
                         "are taken per request")
    if beam_size == 1:
        raise BadRequest("Invalid request: a glossary needs beam search, and this server decodes greedily "
                         "(--beam 1)")
    return [(t["source"], t["target"]) for t in value]


async def file_form(request: Request, limits: ServeLimits) -> tuple[dict[str, Any], tuple[str, bytes]]:
    """The fields and the ``file`` part of a ``multipart/form-data`` upload."""
    media = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if media != "multipart/form-data":
        raise BadRequest("Invalid request: send the file as multipart/form-data with a file field")
    try:
        form = await request.form(max_files=1, max_fields=32, max_part_size=limits.max_file_bytes)
    except (HTTPException, MultiPartException) as err:  # a body python-multipart cannot parse, as Starlette says it
        raise BadRequest(f"Invalid request: the multipart/form-data body cannot be read ({err})") from None
    params: dict[str, Any] = dict(request.query_params)
    upload = None
    for key, value in form.multi_items():
        if isinstance(value, str):
            params.setdefault(key, value)
        elif key == "file" and upload is None:
            data = await value.read()
            if len(data) > limits.max_file_bytes:
                raise TooLarge(f"the file is {len(data)} bytes, larger than the limit of {limits.max_file_bytes} "
                               "bytes (--max-file-bytes)")
            upload = (value.filename or "", data)
    await form.close()
    if upload is None:
        raise BadRequest("Invalid request: missing file parameter")
    return params, upload

"""The documents the LibreTranslate API describes itself with: ``GET /spec`` and ``GET /frontend/settings``.

:func:`spec` is a Swagger 2.0 document of the LibreTranslate routes a server offers, as
LibreTranslate's own ``/spec`` is (its definitions keep LibreTranslate's names: ``translate``,
``languages``, ``detections``, ``translate-file``, ``frontend-settings``, ``suggest-response``,
``error-response``, ``error-slow-down``); Swagger UI and client generators read it.
:func:`frontend_settings` is the answer of ``/frontend/settings``, which LibreTranslate's web page
reads before anything else, with exactly LibreTranslate's keys::

    {"charLimit": -1, "frontendTimeout": 500, "apiKeys": false, "keyRequired": false,
     "suggestions": false, "filesTranslation": true, "supportedFilesFormat": [".txt", ".srt"],
     "language": {"source": {"code": "auto", "name": "Auto Detect"},
                  "target": {"code": "en", "name": "English"}}}

Both take the server's ``/languages`` answer (``[{"code", "name", "targets"}]``) and its options as
arguments, and hold no state: a server builds them once at start.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from typing import Any

from transformer.errors import UserError

AUTO = {"code": "auto", "name": "Auto Detect"}
_EXTENSION = re.compile(r"\.?[A-Za-z0-9]{1,16}")


def _codes(languages: Sequence[Mapping[str, Any]]) -> list[str]:
    return [str(language["code"]) for language in languages]


def _file_formats(formats: Sequence[str]) -> list[str]:
    out = []
    for extension in formats:
        if not isinstance(extension, str) or not _EXTENSION.fullmatch(extension):
            raise UserError(f"{extension!r} is not a file extension (such as .txt)")
        extension = "." + extension.lstrip(".").lower()
        if extension not in out:
            out.append(extension)
    return out


def frontend_settings(languages: Sequence[Mapping[str, Any]], *, char_limit: int = -1,
                      frontend_timeout_ms: int = 500, api_keys: bool = False, key_required: bool = False,
                      suggestions: bool = False, file_formats: Sequence[str] | None = None,
                      source: str = "auto", target: str | None = None) -> dict[str, Any]:
    """The answer of ``GET /frontend/settings``, key for key LibreTranslate's.

    Args:
        languages: the server's ``/languages`` answer (at least one language).
        char_limit: characters per text (-1: no limit), the server's (a key's own limit is not shown).
        frontend_timeout_ms: how long LibreTranslate's page waits after a keystroke before translating.
        api_keys: whether the server has API keys.
        key_required: whether some requests need a key
            (:attr:`transformer.serve.access.KeyRing.key_required`).
        suggestions: whether ``/suggest`` takes suggestions.
        file_formats: the extensions ``/translate_file`` takes (``"txt"`` or ``".txt"``); ``None``:
            files are not translated (``filesTranslation`` false, ``supportedFilesFormat`` empty).
        source: the page's first source language: ``auto`` or a code of ``languages``.
        target: the page's first target language, a code of ``languages``; ``None``: the first
            target of ``source``, else the second language listed (LibreTranslate's choice), else
            the first.

    Raises:
        UserError: no languages, a ``source`` or ``target`` not among them, a bad extension.
    """
    if not languages:
        raise UserError("frontend settings need at least one language")
    by_code = {str(language["code"]): language for language in languages}

    def entry(code: str, what: str) -> dict[str, str]:
        if code not in by_code:
            raise UserError(f"the frontend's {what} language {code!r} is not served "
                            f"(languages: {', '.join(by_code)})")
        return {"code": code, "name": str(by_code[code].get("name", code))}

    first_source = dict(AUTO) if source == "auto" else entry(source, "source")
    if target is None:
        targets = list(by_code.get(source, {}).get("targets", []))
        codes = _codes(languages)
        target = targets[0] if targets else codes[1] if len(codes) > 1 else codes[0]
    return {
        "charLimit": char_limit,
        "frontendTimeout": frontend_timeout_ms,
        "apiKeys": api_keys,
        "keyRequired": key_required,
        "suggestions": suggestions,
        "filesTranslation": file_formats is not None,
        "supportedFilesFormat": [] if file_formats is None else _file_formats(file_formats),
        "language": {"source": first_source, "target": entry(target, "target")},
    }


# --- the Swagger 2.0 document ----------------------------------------------------------------------

def _ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/definitions/{name}"}


def _error(description: str, name: str = "error-response") -> dict[str, Any]:
    return {"description": description, "schema": _ref(name)}


def _slow_down() -> dict[str, Any]:
    answer = _error("Slow down: over a request limit", "error-slow-down")
    answer["headers"] = {"Retry-After": {"type": "integer", "description": "Seconds until a request may pass"}}
    return answer


def _form(name: str, description: str, *, required: bool = False, type_: str = "string", **more: Any) -> dict[str, Any]:
    return {"in": "formData", "name": name, "type": type_, "required": required, "description": description,
            **more}


_JSON_TOO = "The parameters come as a form, or as a JSON object with the same names (Content-Type: application/json)."
_API_KEY = _form("api_key", "API key (required where the server requires keys)")
_LANGUAGE_ITEM = {"type": "object", "required": ["code", "name"], "properties": {
    "code": {"type": "string", "description": "Language code"},
    "name": {"type": "string", "description": "Human-readable language name (in English)"},
}}
_DETECTION = {"type": "object", "required": ["confidence", "language"], "properties": {
    "confidence": {"type": "number", "minimum": 0, "maximum": 100, "description": "Confidence, a percentage"},
    "language": {"type": "string", "description": "Language code"},
}}

DEFINITIONS: dict[str, Any] = {
    "translate": {"type": "object", "required": ["translatedText"], "properties": {
        "translatedText": {"description": "The translation: a string, or a list of strings when q is a list"},
        "alternatives": {"type": "array", "items": {},
                         "description": "Other translations of each text (lists of strings when q is a list)"},
        "detectedLanguage": {"description": "With source auto: the detected language (a list of them when q "
                                            "is a list)"},
    }},
    "languages": {"type": "array", "items": {**_LANGUAGE_ITEM, "required": ["code", "name", "targets"],
                                             "properties": {**_LANGUAGE_ITEM["properties"], "targets": {
                                                 "type": "array", "items": {"type": "string"},
                                                 "description": "Supported target language codes"}}}},
    "detections": {"type": "array", "items": _DETECTION},
    "translate-file": {"type": "object", "required": ["translatedFileUrl"], "properties": {
        "translatedFileUrl": {"type": "string", "description": "Where to download the translated file"}}},
    "frontend-settings": {"type": "object", "properties": {
        "charLimit": {"type": "integer", "description": "Character input limit (-1 indicates no limit)"},
        "frontendTimeout": {"type": "integer", "description": "Frontend translation timeout (milliseconds)"},
        "apiKeys": {"type": "boolean", "description": "Whether the server has API keys"},
        "keyRequired": {"type": "boolean", "description": "Whether an API key is required"},
        "suggestions": {"type": "boolean", "description": "Whether submitting suggestions is enabled"},
        "filesTranslation": {"type": "boolean", "description": "Whether files are translated"},
        "supportedFilesFormat": {"type": "array", "items": {"type": "string"},
                                 "description": "Extensions of the files translated"},
        "language": {"type": "object", "properties": {"source": _LANGUAGE_ITEM, "target": _LANGUAGE_ITEM}},
    }},
    "suggest-response": {"type": "object", "properties": {
        "success": {"type": "boolean", "description": "Whether the suggestion was stored"}}},
    "error-response": {"type": "object", "required": ["error"], "properties": {
        "error": {"type": "string", "description": "Error message"}}},
    "error-slow-down": {"type": "object", "required": ["error"], "properties": {
        "error": {"type": "string", "description": "Reason for slow down"}}},
}


def spec(languages: Sequence[Mapping[str, Any]], *, version: str, title: str = "LibreTranslate",
         host: str | None = None, base_path: str | None = None, detect: bool = True, files: bool = True,
         suggestions: bool = True, max_alternatives: int | None = None) -> dict[str, Any]:
    """A Swagger 2.0 document of the LibreTranslate routes a server offers (``GET /spec``).

    Args:
        languages: the server's ``/languages`` answer: the ``source`` and ``target`` parameters
            list their codes (``source`` also ``auto``).
        version: the server's version (``info.version``).
        title: ``info.title``.
        host: ``host[:port]`` the API is served at; ``None`` leaves it out (clients use the host
            they read the document from).
        base_path: the path the routes are under (``/lt``); ``None``: the root.
        detect, files, suggestions: whether ``/detect``, ``/translate_file`` with
            ``/download_file/{filename}``, and ``/suggest`` are listed.
        max_alternatives: the largest ``alternatives`` taken, if bounded.

    Raises:
        UserError: a ``base_path`` that does not start with ``/``, a ``host`` with a scheme or path.
    """
    if base_path is not None and not base_path.startswith("/"):
        raise UserError(f"base_path must start with '/', got {base_path!r}")
    if host is not None and ("/" in host or not host):
        raise UserError(f"host is host[:port], without a scheme or path; got {host!r}")
    sources = ["auto", *_codes(languages)]
    targets = sorted({str(t) for language in languages for t in language.get("targets", [])})
    source = _form("source", "Source language code (auto: detected)", required=True, enum=sources)
    target = _form("target", "Target language code", required=True, enum=targets or _codes(languages))
    form_types = ["application/x-www-form-urlencoded", "multipart/form-data"]
    refusals = {"400": _error("Invalid request"), "403": _error("Banned, or an invalid API key"),
                "429": _slow_down()}
    alternatives = _form("alternatives", "Number of alternative translations wanted", type_="integer",
                         minimum=0, default=0)
    if max_alternatives is not None:
        alternatives["maximum"] = max_alternatives

    paths: dict[str, Any] = {
        "/translate": {"post": {
            "tags": ["translate"], "operationId": "translate",
            "summary": "Translate text from a language to another",
            "description": _JSON_TOO + " In JSON, q may be a list of texts.",
            "consumes": form_types, "produces": ["application/json"],
            "parameters": [
                _form("q", "Text to translate (in a JSON body, a string or a list of strings)", required=True),
                source, target,
                _form("format", "Format of the text: text, or html (markup kept)", enum=["text", "html"],
                      default="text"),
                alternatives, _API_KEY,
            ],
            "responses": {"200": {"description": "Translated text", "schema": _ref("translate")}, **refusals,
                          "413": _error("Request body too large"), "500": _error("Translation error"),
                          "503": _error("Overloaded or timed out")},
        }},
        "/languages": {"get": {
            "tags": ["translate"], "operationId": "languages", "summary": "Retrieve list of supported languages",
            "produces": ["application/json"],
            "responses": {"200": {"description": "List of languages", "schema": _ref("languages")}},
        }},
        "/frontend/settings": {"get": {
            "tags": ["frontend"], "operationId": "frontendSettings",
            "summary": "Retrieve frontend specific settings", "produces": ["application/json"],
            "responses": {"200": {"description": "frontend settings", "schema": _ref("frontend-settings")}},
        }},
    }
    if detect:
        paths["/detect"] = {"post": {
            "tags": ["translate"], "operationId": "detect", "summary": "Detect the language of a single text",
            "description": _JSON_TOO,
            "consumes": form_types, "produces": ["application/json"],
            "parameters": [_form("q", "Text to detect", required=True), _API_KEY],
            "responses": {"200": {"description": "Detections, most likely first", "schema": _ref("detections")},
                          **refusals, "500": _error("Detection error")},
        }}
    if files:
        paths["/translate_file"] = {"post": {
            "tags": ["translate"], "operationId": "translateFile",
            "summary": "Translate file from a language to another",
            "consumes": ["multipart/form-data"], "produces": ["application/json"],
            "parameters": [_form("file", "File to translate", required=True, type_="file"), source, target,
                           _API_KEY],
            "responses": {"200": {"description": "Translated file", "schema": _ref("translate-file")}, **refusals,
                          "413": _error("File too large"), "500": _error("Translation error")},
        }}
        paths["/download_file/{filename}"] = {"get": {
            "tags": ["translate"], "operationId": "downloadFile", "summary": "Download a translated file",
            "produces": ["application/octet-stream"],
            "parameters": [{"in": "path", "name": "filename", "type": "string", "required": True,
                            "description": "The file name in translatedFileUrl"}],
            "responses": {"200": {"description": "The translated file", "schema": {"type": "string", "format": "binary"}},
                          "400": _error("Invalid filename"), "404": _error("No such file (or expired)")},
        }}
    if suggestions:
        paths["/suggest"] = {"post": {
            "tags": ["feedback"], "operationId": "suggest", "summary": "Submit a suggestion to improve a translation",
            "description": _JSON_TOO,
            "consumes": form_types, "produces": ["application/json"],
            "parameters": [_form("q", "Original text", required=True),
                           _form("s", "Suggested translation", required=True),
                           _form("source", "Language of original text", required=True),
                           _form("target", "Language of suggested translation", required=True)],
            "responses": {"200": {"description": "Success", "schema": _ref("suggest-response")},
                          "400": _error("Invalid request"), "403": _error("Suggestions are disabled"),
                          "429": _slow_down(), "500": _error("The suggestion could not be stored")},
        }}
    document: dict[str, Any] = {
        "swagger": "2.0",
        "info": {"title": title, "version": version,
                 "description": "LibreTranslate-compatible translation API"},
    }
    if host is not None:
        document["host"] = host
    if base_path is not None:
        document["basePath"] = base_path
    document.update({
        "tags": [{"name": "translate"}, {"name": "frontend"}, {"name": "feedback"}],
        "paths": paths,
        "definitions": DEFINITIONS,
    })
    return copy.deepcopy(document)  # the caller's to change; DEFINITIONS and the shared parameters stay

"""Every bound the translation server enforces, in one place (CLI options map onto these fields).

:class:`ServeLimits` bounds the work of a request (the app enforces them, ``/v1/model`` lists
them); :class:`ConnectionLimits` bounds the connections themselves: how long a client may take
to send a request, how many connections may be open, how large a request head may be, and how
long a shutdown may take (:mod:`transformer.serve.protocol` enforces them).

``PIVOT``, the language a pair without a model of its own is translated through, is here beside
them: like them, ``transformer serve --help`` shows it without loading the server (this module
imports nothing heavy).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from transformer.errors import UserError

PIVOT = "en"  # the language a pair without a model of its own is translated through (--pivot's default)


@dataclass(frozen=True)
class ServeLimits:
    """Limits of the server; each one breached gives a 4xx JSON error (or 503 for load and time).

    A text may hold many sentences, lines and paragraphs: the server cuts it into sentences and
    the model translates sentences, so the limits on work count sentences and characters.

    max_chars: characters (Unicode code points) per text (422 beyond).
    max_texts: texts per /v1/translate request (422 beyond).
    max_sentences: sentences per request, all its texts together (422 beyond).
    max_body_bytes: request body size (413 beyond, checked before the body is parsed).
    max_input_tokens: source subword tokens per model input: a longer sentence is translated in pieces
        (cut at clause punctuation, then between words; never cut off), with a warning in the answer.
    max_output_tokens: the largest ``max_length`` a request may ask for (422 beyond). Without
        ``max_length`` a sentence gets the paper's input length + 50 tokens.
    max_beam_size: the largest beam (and n-best) a request may ask for (422 beyond).
    max_alternatives: the most ``alternatives`` a request may ask for (422 on /v1/translate, 400 on
        LibreTranslate's /translate beyond; 0 turns them off). A text has at most ``beam_size - 1``
        alternatives whatever the request asks (:mod:`transformer.translate.alternatives`).
    max_glossary_terms: glossary terms per request (``glossary`` on /v1/translate and /v1/attention,
        and on LibreTranslate's /translate; 422, or 400 there, beyond). Each term found in a
        sentence is a constraint of its beam search.
    max_glossary_work: the glossary work of one request: the terms found in its sentences (each
        occurrence in each sentence counted) times its ``beam_size`` (422, or 400 on LibreTranslate's
        routes, beyond). A constrained search's cost grows with both: 8 texts holding 256 terms at
        beam 16 (32,768) kept a CPU busy for minutes.
    max_batch_size: sentences of one or more requests merged into one model call by the dynamic
        batcher (1 = no merging); a request with more runs in calls of its own of up to
        max(max_batch_size, max_texts) sentences, interleaved with other requests.
    batch_wait_ms: how long the batcher waits for more requests after the first one arrives.
    max_queue: sentences waiting for the model; a request that would exceed it gets 503 at once
        (unless none are waiting).
    timeout_s: seconds a request may wait and run; after that it gets 503.
    confidence_threshold: the web page marks a sentence whose confidence is below this (0 to 1) as
        one to check; the confidence itself is the run's calibration's (a run without one has none).
    max_file_bytes: the size of a file sent to LibreTranslate's /translate_file (413 beyond); its
        request body may be this and a little more.
    max_file_sentences: sentences in such a file (400 beyond): a file's sentences are not bound by
        max_sentences, they are fed to the batcher a call at a time, between other requests.
    file_ttl_s: seconds a translated file can be downloaded (/download_file) before it is deleted.
    max_stored_files: translated files kept for download at once; storing one more removes the
        expired ones, then the oldest.
    max_stored_bytes: their bytes together (the same).
    max_suggestions_bytes: the size the suggestions file may grow to (/suggest answers 507 beyond).
    max_uploads: files uploaded to /translate_file in flight at once, from their body's arrival to
        their translated file's storing (503 with ``Retry-After`` beyond).
    max_upload_bytes: the bodies of those uploads together, as their ``Content-Length`` declares
        (503 with ``Retry-After`` beyond; a server with no upload in flight takes any one).
    """

    max_chars: int = 5000
    max_texts: int = 64
    max_sentences: int = 256
    max_body_bytes: int = 256 * 1024
    max_input_tokens: int = 256
    max_output_tokens: int = 256
    max_beam_size: int = 16
    max_alternatives: int = 15
    max_glossary_terms: int = 256
    max_glossary_work: int = 2048
    max_batch_size: int = 32
    batch_wait_ms: float = 5.0
    max_queue: int = 1024
    timeout_s: float = 30.0
    confidence_threshold: float = 0.5
    max_file_bytes: int = 10 * 1024 * 1024
    max_file_sentences: int = 5000
    file_ttl_s: float = 1800.0
    max_stored_files: int = 1000
    max_stored_bytes: int = 1024 * 1024 * 1024
    max_suggestions_bytes: int = 64 * 1024 * 1024
    max_uploads: int = 4
    max_upload_bytes: int = 32 * 1024 * 1024

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UserError(f"{f.name} must be a finite number, got {value!r}")
            if f.name == "confidence_threshold":  # a probability
                if not 0 <= value <= 1:
                    raise UserError(f"{f.name} must be in [0, 1], got {value!r}")
                continue
            minimum = 0 if f.name in ("batch_wait_ms", "timeout_s", "max_alternatives") else 1
            if value < minimum or (f.name == "timeout_s" and value <= 0):
                raise UserError(f"{f.name} must be {'> 0' if f.name == 'timeout_s' else f'>= {minimum}'}, got {value!r}")

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ConnectionLimits:
    """Bounds on the connections of ``transformer serve`` (slow, idle and abusive clients).

    max_connections: connections open at once; a connection beyond it is answered 503 (with
        ``Retry-After: 1``) as soon as it is accepted and closed, instead of piling up.
    header_timeout_s: seconds a client has to send a request's line and headers, counted from
        the moment the connection opened or its previous response was sent; then a client that
        sent part of a head gets 408 and is closed, one that sent nothing is closed quietly.
    body_timeout_s: seconds a client has to send a request's body once its headers arrived; a
        slower one gets 408 and is closed (its request never reaches the model).
    keep_alive_s: seconds an idle connection is kept open after a response (uvicorn's keep-alive).
    max_header_bytes: bytes of the request line and headers together; 431 beyond.
    shutdown_grace_s: on SIGTERM/SIGINT, seconds the requests in flight (those whose request has
        arrived whole) get to finish; idle and stalled connections are closed at once. A request
        still running after it is answered 503 and its connection closed.
    """

    max_connections: int = 1000
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    keep_alive_s: float = 5.0
    max_header_bytes: int = 64 * 1024  # LibreTranslate's clients may send a 5,000-character text in the URL
    shutdown_grace_s: float = 20.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UserError(f"{f.name} must be a finite number, got {value!r}")
            if f.name.endswith("_s"):
                if value <= 0:
                    raise UserError(f"{f.name} must be > 0 seconds, got {value!r}")
            elif value < 1 or value != int(value):
                raise UserError(f"{f.name} must be a whole number >= 1, got {value!r}")
        if self.max_header_bytes < 1024:
            raise UserError(f"max_header_bytes must be >= 1024 (a browser's request head alone may be near that), "
                            f"got {self.max_header_bytes}")

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

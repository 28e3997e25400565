"""Every bound the translation server enforces, in one place (CLI options map onto these fields)."""

from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass(frozen=True)
class ServeLimits:
    """Limits of the server; each one breached gives a 4xx JSON error (or 503 for load and time).

    A text may hold many sentences, lines and paragraphs: the server cuts it into sentences and
    the model translates sentences, so the limits on work count sentences and characters.

    max_chars: characters (Unicode code points) per text (422 beyond).
    max_texts: texts per /v1/translate request (422 beyond).
    max_sentences: sentences per request, all its texts together (422 beyond).
    max_body_bytes: request body size (413 beyond, checked before the body is parsed).
    max_input_tokens: source subword tokens per sentence (422 beyond; sentences are never cut silently).
    max_output_tokens: the largest ``max_length`` a request may ask for (422 beyond). Without
        ``max_length`` a sentence gets the paper's input length + 50 tokens.
    max_beam_size: the largest beam (and n-best) a request may ask for (422 beyond).
    max_batch_size: sentences of one or more requests merged into one model call by the dynamic
        batcher (1 = no merging); a request with more runs in calls of its own of up to
        max(max_batch_size, max_texts) sentences, interleaved with other requests.
    batch_wait_ms: how long the batcher waits for more requests after the first one arrives.
    max_queue: sentences waiting for the model; a request that would exceed it gets 503 at once
        (unless none are waiting).
    timeout_s: seconds a request may wait and run; after that it gets 503.
    """

    max_chars: int = 5000
    max_texts: int = 64
    max_sentences: int = 256
    max_body_bytes: int = 256 * 1024
    max_input_tokens: int = 256
    max_output_tokens: int = 256
    max_beam_size: int = 16
    max_batch_size: int = 32
    batch_wait_ms: float = 5.0
    max_queue: int = 1024
    timeout_s: float = 30.0

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"{f.name} must be a number, got {value!r}")
            minimum = 0 if f.name in ("batch_wait_ms", "timeout_s") else 1
            if value < minimum or (f.name == "timeout_s" and value <= 0):
                raise ValueError(f"{f.name} must be {'> 0' if f.name == 'timeout_s' else f'>= {minimum}'}, got {value!r}")

    def to_dict(self) -> dict[str, float]:
        return {f.name: getattr(self, f.name) for f in fields(self)}

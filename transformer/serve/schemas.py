"""Request and response models of the API; their JSON Schema is the app's OpenAPI schema.

The request models are built for a :class:`ServeLimits`, so the limits appear in the schema
(``maxLength``, ``maxItems``, ``maximum``) and clients and fuzzers see them. Requests are strict:
unknown fields, strings for numbers and numbers for strings are refused (422).
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, create_model, model_validator

from transformer.serve.limits import ServeLimits

# Tab, line feed and carriage return are ordinary whitespace in a text; other control characters
# (C0, DEL, C1) and lone surrogates are refused.
_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


def check_text(text: str) -> str:
    """``text`` if it is translatable; ValueError naming the problem otherwise."""
    if not text:
        raise ValueError("must not be empty")
    if not text.strip():
        raise ValueError("must not be only whitespace")
    for i, ch in enumerate(text):
        category = unicodedata.category(ch)
        if (category == "Cc" and ch not in _ALLOWED_CONTROLS) or category == "Cs":
            what = "a lone surrogate" if category == "Cs" else "the control character"
            raise ValueError(f"contains {what} U+{ord(ch):04X} at position {i}, which is not allowed")
    return text


class ErrorDetail(BaseModel):
    loc: list[str | int] = Field(description="where in the request: e.g. ['body', 'text', 0]")
    message: str


class ErrorResponse(BaseModel):
    """Every error: a short code, a message naming the problem, and per-field details for 422."""

    error: str = Field(description="invalid_json, invalid_request, payload_too_large, overloaded, timeout, ...")
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)


class Hypothesis(BaseModel):
    translation: str
    score: float = Field(description="the ranking score (length-normalised log-probability for beam search)")
    log_prob: float = Field(description="the model's total log-probability of the output tokens")


class SentenceTranslation(BaseModel):
    """One sentence of a text: which source span produced which target span."""

    source_span: tuple[int, int] = Field(description="[start, end) of the sentence in the text (source): "
                                         "Unicode code points (Python str indices), not bytes or UTF-16 units")
    target_span: tuple[int, int] = Field(description="[start, end) of its translation in translation, in the "
                                         "same unit")
    line: int = Field(description="the line of the text the sentence is on, from 1")
    score: float = Field(description="the score of its best hypothesis")
    n_best: list[Hypothesis] = Field(description="this sentence's hypotheses, best first")


class Translation(BaseModel):
    source: str
    translation: str = Field(description="the text with each sentence translated, its lines, blank lines and "
                             "spacing kept")
    score: float = Field(description="the sentences' mean score (a one-sentence text: its score)")
    n_best: list[Hypothesis] = Field(description="n_best hypotheses, best first; for several sentences the k-th "
                                     "puts every sentence's k-th hypothesis in the text's structure (log_prob: "
                                     "their sum, score: their mean)")
    sentences: list[SentenceTranslation] = Field(description="the sentence alignment, in text order")


class Timing(BaseModel):
    total_ms: float = Field(description="time spent in the server on this request")
    queue_ms: float = Field(description="waiting for the model, the batching window included")
    compute_ms: float = Field(description="the model call this request joined")
    batch_size: int = Field(description="sentences in that model call (several requests merged by dynamic "
                            "batching); the largest when the request took several calls")
    batch_requests: int = Field(description="requests merged into that model call (the most, over its calls)")
    model_calls: int = Field(description="model calls that translated the request's sentences (a request with more "
                             "than max_batch_size sentences takes several)")


class Decoding(BaseModel):
    strategy: str
    beam_size: int
    n_best: int
    alpha: float
    max_length: int | None = Field(description="output tokens per sentence; null: input length + 50 (the paper)")


class TranslateResponse(BaseModel):
    translations: list[Translation] = Field(description="one per text, in request order")
    decoding: Decoding
    timing: Timing


class ModelInfo(BaseModel):
    src_lang: str | None
    tgt_lang: str | None
    src_vocab_size: int
    tgt_vocab_size: int
    shared_vocabulary: bool
    parameters: int
    config: dict[str, Any] = Field(description="the model's config.json")
    decoding: Decoding = Field(description="the defaults a request gets")
    limits: dict[str, int | float]


class Health(BaseModel):
    status: str
    batching: dict[str, int | float] = Field(description="queue state and counters of the dynamic batcher")


# Tags of the two forms of ``text``; error locations leave them out ("text.2", not "text.list.2").
ONE_TEXT, TEXT_LIST = "one-text", "text-list"


def _text_or_list(value: Any) -> str | None:
    return ONE_TEXT if isinstance(value, str) else TEXT_LIST if isinstance(value, list) else None


@dataclass(frozen=True)
class RequestModels:
    translate: type[BaseModel]
    attention: type[BaseModel]


def request_models(limits: ServeLimits, default_beam: int) -> RequestModels:
    """The two request bodies, with ``limits`` written into their fields."""
    text = Annotated[str, Field(max_length=limits.max_chars), AfterValidator(check_text)]
    strict = ConfigDict(extra="forbid", strict=True)
    default_beam = min(default_beam, limits.max_beam_size)
    beam = Annotated[int, Field(ge=1, le=limits.max_beam_size,
                                description="beam width; 1 is greedy search")]
    max_length = Annotated[int | None, Field(ge=1, le=limits.max_output_tokens,
                                             description="most output tokens per sentence (default: input "
                                             "length + 50)")]

    def n_best_fits(self):
        if self.n_best > self.beam_size:
            raise ValueError(f"n_best ({self.n_best}) cannot exceed beam_size ({self.beam_size})")
        return self

    translate = create_model(
        "TranslateRequest",
        __config__=strict,
        __doc__="One text or a list of texts (each may hold several sentences, lines and paragraphs), "
                "and decoding settings.",
        __validators__={"n_best_fits": model_validator(mode="after")(n_best_fits)},
        text=(Annotated[Annotated[text, Tag(ONE_TEXT)]
                        | Annotated[list[text], Field(min_length=1, max_length=limits.max_texts), Tag(TEXT_LIST)],
                        Discriminator(_text_or_list, custom_error_type="text_type",
                                      custom_error_message="text must be a string or a list of strings")],
              Field(description=f"a text or a list of at most {limits.max_texts} texts, "
                                f"each at most {limits.max_chars} characters; at most {limits.max_sentences} "
                                "sentences in all")),
        beam_size=(beam, default_beam),
        n_best=(Annotated[int, Field(ge=1, le=limits.max_beam_size, description="hypotheses per sentence")], 1),
        max_length=(max_length, None),
    )
    attention = create_model(
        "AttentionRequest",
        __config__=strict,
        __doc__="One text (several sentences allowed): the translation of one of its sentences and every "
                "attention weight of that translation.",
        text=(text, Field(description=f"at most {limits.max_chars} characters, "
                                      f"at most {limits.max_sentences} sentences")),
        sentence=(Annotated[int, Field(ge=0, le=max(0, limits.max_sentences - 1),
                                       description="which sentence of the text, from 0, in the order of "
                                       "/v1/translate's sentences")], 0),
        beam_size=(beam, default_beam),
        max_length=(max_length, None),
    )
    return RequestModels(translate, attention)

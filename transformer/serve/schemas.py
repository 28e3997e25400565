"""Request and response models of the API; their JSON Schema is the app's OpenAPI schema.

The request models are built for a :class:`ServeLimits`, so the limits appear in the schema
(``maxLength``, ``maxItems``, ``maximum``) and clients and fuzzers see them. Requests are strict:
unknown fields, strings for numbers and numbers for strings are refused (422).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field, Tag, create_model, model_validator

from transformer.errors import UserError
from transformer.serve.limits import ServeLimits

# Tab, line feed and carriage return are ordinary whitespace in a text; other control characters
# (C0, DEL, C1) and lone surrogates are refused.
_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


def check_text(text: str) -> str:
    """``text`` if it is translatable; UserError naming the problem otherwise."""
    if not text:
        raise UserError("must not be empty")
    if not text.strip():
        raise UserError("must not be only whitespace")
    for i, ch in enumerate(text):
        category = unicodedata.category(ch)
        if (category == "Cc" and ch not in _ALLOWED_CONTROLS) or category == "Cs":
            what = "a lone surrogate" if category == "Cs" else "the control character"
            line = len(_LINE_BREAK.findall(text, 0, i)) + 1  # as the segmenter counts lines
            raise UserError(f"contains {what} U+{ord(ch):04X} at position {i} (line {line}), which is not allowed")
    return text


_LINE_BREAK = re.compile(r"\r\n|\r|\n")


class ErrorDetail(BaseModel):
    loc: list[str | int] = Field(description="where in the request: e.g. ['body', 'text', 0]")
    message: str


class ErrorResponse(BaseModel):
    """Every error: a short code, a message naming the problem, and per-field details for 422; a
    500 (a bug of the server) names its traceback in the server's log by ``error_id``."""

    error: str = Field(description="invalid_json, invalid_request, payload_too_large, overloaded, timeout, "
                       "internal_error, ...")
    message: str
    details: list[ErrorDetail] = Field(default_factory=list)
    error_id: str | None = Field(None, description="internal_error only: the id of the traceback in the server's "
                                 "log, to quote in a bug report")


class Hypothesis(BaseModel):
    translation: str
    score: float = Field(description="the ranking score (length-normalised log-probability for beam search)")
    log_prob: float = Field(description="the model's total log-probability of the output tokens")


class GlossaryTerm(BaseModel):
    """A glossary entry: where ``source`` is in a sentence, its translation must contain ``target``."""

    source: str
    target: str


class SentenceTranslation(BaseModel):
    """One sentence of a text: which source span produced which target span."""

    source_span: tuple[int, int] | None = Field(description="[start, end) of the sentence in the text (source): "
                                                "Unicode code points (Python str indices), not bytes or UTF-16 "
                                                "units; null for html (a sentence of a page is not one span of "
                                                "its markup: see text)")
    target_span: tuple[int, int] | None = Field(description="[start, end) of its translation in translation, in "
                                                "the same unit; null for html")
    line: int | None = Field(description="the line of the text the sentence is on, from 1; null for html")
    text: str | None = Field(description="html only: the sentence as the model read it (the page's text: tags "
                             "removed, entities decoded, whitespace collapsed); null for plain text, whose "
                             "sentence is source[source_span]")
    pieces: int = Field(description="model inputs the sentence was translated in: 1, or more for a sentence "
                        "over max_input_tokens, split at clause punctuation or between words and its pieces' "
                        "translations joined with spaces (see warnings)")
    score: float = Field(description="the score of its best hypothesis (in pieces: the mean of theirs)")
    n_best: list[Hypothesis] = Field(description="this sentence's hypotheses, best first (in pieces: the k-th "
                                     "joins every piece's k-th; log_prob their sum)")
    missing_terms: list[GlossaryTerm] = Field(default_factory=list, description="only when the request has a "
                                              "glossary: its terms found in this sentence that the translation "
                                              "could not be made to contain within its length limit (each also "
                                              "in warnings)")
    confidence: float | None = Field(None, description="only when the request asks for confidence and the "
                                     "model is calibrated (GET /v1/model: confidence.calibrated): the probability, "
                                     "0 to 1, that the best translation is adequate (sentence chrF >= 50; "
                                     "docs/decoding.md, Confidence), 4 decimals; in pieces: the lowest of theirs")
    memory: MemoryEntry | None = Field(None, description="only on a server with a translation memory (--tm), "
                                       "for a sentence whose translation is an accepted entry of the memory "
                                       "(the same source, whitespace normalised): which entry; its score is 0.0")
    memory_alternatives: list[MemoryAlternative] = Field(default_factory=list, description="only on a server "
                                                         "with a translation memory, for a sentence the model "
                                                         "translated: the accepted entries whose sources are most "
                                                         "like it (from --tm-threshold up), best first")
    memory_terms: list[MemoryTerm] = Field(default_factory=list, description="only on a server with "
                                           "--tm-constraints, for a sentence the model was unsure of and translated "
                                           "again by beam search: the phrases it shares with its best fuzzy match "
                                           "and the words of that entry's translation they were translated as")


class MemoryEntry(BaseModel):
    """The translation memory's entry that gave a sentence its translation."""

    id: int = Field(description="the entry's id (transformer tm list)")
    similarity: float = Field(description="1.0: its source is the sentence")


class MemoryAlternative(BaseModel):
    """An accepted entry of the translation memory whose source is like a sentence's (a fuzzy match)."""

    text: str = Field(description="the entry's target: a translation of a sentence like this one")
    similarity: float = Field(description="how alike the entry's source and the sentence are, 0 to 1 "
                              "(rapidfuzz's ratio of the normalised texts)")
    id: int = Field(description="the entry's id")
    source: str = Field(description="the entry's source")


class MemoryTerm(BaseModel):
    """A phrase a sentence shares with its best fuzzy match, a glossary term of its translation."""

    source: str = Field(description="the phrase, as the sentence has it")
    target: str = Field(description="the words of the entry's translation aligned to it")
    id: int = Field(description="the entry's id")


class TextWarning(BaseModel):
    """Something the client should know about a text that was still translated whole."""

    sentence: int = Field(description="the sentence it is about: its index in sentences")
    message: str = Field(description="what happened, naming the text, sentence and line")


class DetectedLanguage(BaseModel):
    """The language detected for a text (a request whose source is "auto")."""

    language: str = Field(description="its code (ISO 639-1)")
    confidence: float = Field(description="the detector's probability, 0 to 1, among the languages it chose from")


class Via(BaseModel):
    """A text translated through a pivot language (no model translates its pair directly)."""

    language: str = Field(description="the pivot language")
    translation: str = Field(description="the text in the pivot language: what the second model translated, and "
                             "what the sentence alignment's source spans refer to")


class Translation(BaseModel):
    source: str = Field(description="what was translated: the request's text, or (through a pivot) its "
                        "translation into the pivot language")
    translation: str = Field(description="the text with each sentence translated, its lines, blank lines and "
                             "spacing kept")
    score: float = Field(description="the sentences' mean score (a one-sentence text: its score)")
    n_best: list[Hypothesis] = Field(description="n_best hypotheses, best first; for several sentences the k-th "
                                     "puts every sentence's k-th hypothesis in the text's structure (log_prob: "
                                     "their sum, score: their mean)")
    confidence: float | None = Field(None, description="only when the request asks for confidence and the model "
                                     "is calibrated: the lowest of its sentences' confidence")
    sentences: list[SentenceTranslation] = Field(description="the sentence alignment, in text order")
    warnings: list[TextWarning] = Field(description="one per sentence translated in pieces (over "
                                        "max_input_tokens), and one per sentence lacking glossary terms "
                                        "(missing_terms); empty when every sentence fit")
    detected_language: DetectedLanguage | None = Field(None, description="only when the request's source is "
                                                       "auto: the language detected for this text")
    via: Via | None = Field(None, description="only when the text was translated through a pivot language")
    alternatives: list[str] = Field(default_factory=list, description="only when the request asks for "
                                    "alternatives: up to that many distinct translations of the text other than "
                                    "translation, best first (from the beam's hypotheses, deduplicated after "
                                    "detokenisation: at most beam_size - 1, fewer where the beam has fewer "
                                    "distinct texts); for several sentences the k-th puts each sentence's k-th "
                                    "distinct translation (its last when it has fewer) in the text's structure")


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
    model_version: str | None = Field(None, description="the version of the model that translated the texts "
                                      "(GET /v1/model: version.label; several, comma-separated, when the texts "
                                      "took several models); only where the server loaded its models from run "
                                      "directories")


class ConfidenceInfo(BaseModel):
    """Whether the served model gives confidences, and what the web page does with them."""

    calibrated: bool = Field(description="whether the run has a calibration (RUN_DIR/confidence.json, written by "
                             "transformer calibrate): only then does a request's confidence give numbers")
    threshold: float = Field(description="--confidence-threshold: the web page marks sentences whose confidence is "
                             "below it")
    chrf: float | None = Field(description="the event a confidence is the probability of: sentence chrF >= this "
                               "(null without a calibration)")


class ModelVersionInfo(BaseModel):
    """Which model is served: it changes when the model is reloaded (docs/serving.md, Reloading)."""

    step: int | None = Field(description="the step of the run's newest checkpoint (null: the run keeps none)")
    checkpoint: str = Field(description="the first 12 hex digits of the SHA-256 of the model.safetensors loaded")
    label: str = Field(description="step-STEP.CHECKPOINT (CHECKPOINT alone without a step): what /v1/translate's "
                       "model_version and /health name")


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
    confidence: ConfidenceInfo
    version: ModelVersionInfo | None = Field(None, description="which model is served (null where the server "
                                             "was not given run directories)")


class Health(BaseModel):
    status: str
    batching: dict[str, int | float] = Field(description="queue state and counters of the dynamic batcher (of the "
                                             "first model, when there are several)")
    models: dict[str, dict[str, int | float]] | None = Field(None, description="only with several models: each "
                                                             "one's batcher, by language pair ('fr-en')")
    versions: dict[str, str] | None = Field(None, description="each pair's model version ('fr-en': "
                                            "'step-40.3f9c2a1b7d0e'), where the server loaded its models from run "
                                            "directories")
    memory: dict[str, int] | None = Field(None, description="only with a translation memory (--tm): sentences "
                                          "looked up and answered from it, lookups that found it locked (the model "
                                          "translated those), suggestions kept and refused")


class PairInfo(BaseModel):
    source: str
    target: str
    via: str | None = Field(description="the pivot language it is translated through; null: a model of its own")


class ModelList(BaseModel):
    models: list[ModelInfo] = Field(description="every model served; the first is what a request naming no "
                                    "languages gets")
    pairs: list[PairInfo] = Field(description="every language pair translated")
    pivot: str | None = Field(description="the language pairs without a model of their own are translated through")


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
            raise UserError(f"n_best ({self.n_best}) cannot exceed beam_size ({self.beam_size})")
        return self

    def glossary_needs_a_beam(self):
        if self.glossary and self.beam_size == 1:
            raise UserError("a glossary needs beam search (its terms are constraints of the beam): "
                            "beam_size must be >= 2")
        return self

    language = Annotated[str | None, Field(min_length=2, max_length=16, pattern=r"^[A-Za-z]{2,3}(-[A-Za-z0-9]+)*$",
                                           description="a language code (ISO 639-1, as the runs record it)")]
    source = (language | Literal["auto"], Field(None, description="the language of the texts, or auto (detected per "
                                                "text among the languages served); default: the first model's "
                                                "source"))
    target = (language, Field(None, description="the language to translate into; default: the first model's "
                              "target. A pair without a model of its own is translated through the pivot "
                              "language (GET /v1/models)"))
    side = Annotated[str, Field(min_length=1, max_length=limits.max_chars)]
    term = create_model("GlossaryTermRequest", __config__=strict, __doc__=GlossaryTerm.__doc__,
                        source=(side, Field(description="the source term, found case-insensitively as whole "
                                                        "words")),
                        target=(side, Field(description="what the translation must contain, exactly as "
                                                        "written")))
    glossary = (Annotated[list[term], Field(max_length=limits.max_glossary_terms)] | None,
                Field(None, description=f"at most {limits.max_glossary_terms} terms: the translation of a "
                      "sentence that contains a term's source contains its target (constrained beam search; "
                      "needs beam_size >= 2). The same source twice with different targets is refused"))

    translate = create_model(
        "TranslateRequest",
        __config__=strict,
        __doc__="One text or a list of texts (each may hold several sentences, lines and paragraphs), "
                "and decoding settings.",
        __validators__={"n_best_fits": model_validator(mode="after")(n_best_fits),
                        "glossary_needs_a_beam": model_validator(mode="after")(glossary_needs_a_beam)},
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
        alternatives=(Annotated[int, Field(ge=0, le=limits.max_alternatives,
                                           description="up to this many distinct translations of each text "
                                           "besides translation, in its alternatives (at most beam_size - 1; "
                                           "0: none, and no alternatives field)")], 0),
        glossary=glossary,
        confidence=(bool, Field(False, description="each sentence's confidence, and the text's (the lowest): the "
                                "probability that its translation is adequate, from the run's calibration; a model "
                                "without one (GET /v1/model: confidence.calibrated) answers without them. It costs "
                                "a teacher-forced pass over the translations; requests asking for it share model "
                                "calls with each other only")),
        source=source,
        target=target,
        format=(Literal["text", "html"], Field("text", description="text: plain text; html: each text is an "
                                               "HTML page (or fragment) whose text is translated and whose markup "
                                               "is kept (tags, attributes, entities; script, style, code and pre "
                                               "untouched)")),
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
        piece=(Annotated[int, Field(ge=0, le=max(0, limits.max_chars - 1),
                                    description="which piece of a sentence translated in pieces (over "
                                    "max_input_tokens), from 0; a sentence that fits is piece 0")], 0),
        beam_size=(beam, default_beam),
        max_length=(max_length, None),
        glossary=glossary,
        source=(language, Field(None, description="the text's language; default: the first model's source")),
        target=(language, Field(None, description="the language to translate into; default: the first model's "
                                "target. One model draws the attention: a pair translated through the pivot "
                                "language is refused")),
        __validators__={"glossary_needs_a_beam": model_validator(mode="after")(glossary_needs_a_beam)},
    )
    return RequestModels(translate, attention)

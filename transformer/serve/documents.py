"""Texts of any length for the server: what it adds to the shared pipeline.

A request's texts are cut into sentences as ``translate_document`` cuts them (an HTML page's text
as :func:`transformer.translate.html.html_sentences` finds it) and planned and assembled as the
library does it (:mod:`transformer.translate.pipeline`: a sentence over ``max_input_tokens`` in
pieces, never cut off); the dynamic batcher runs the model between, in calls it may share with
other requests. What is the server's own: the refusals (:class:`Unprocessable`: more than
``max_sentences`` sentences, a text without a sentence, a sentence without tokens), its warnings'
wording, and each text's JSON ``Translation`` (:func:`assemble`, :func:`assemble_html`): its
translation in the text's structure, ``n_best``, ``alternatives``
(:func:`transformer.translate.alternatives.combine`), glossary terms missed and ``confidence``.
An HTML page is rebuilt around its sentences' translations with its markup kept; its sentences
are not spans of the markup, so their alignment carries their text instead. :func:`input_piece`
says which part of a text one model input (a sentence or a piece of one) is, for its attention.

Offsets (``source_span``, ``target_span``) are Python ``str`` indices: Unicode code points,
``[start, end)``. (JavaScript strings count UTF-16 code units: a character outside the Basic
Multilingual Plane, an emoji say, is one code point but two JavaScript units.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from transformer.errors import UserError
from transformer.translate.alternatives import combine
from transformer.translate.html import html_sentences, translate_html
from transformer.translate.pipeline import ModelOutput, Plan, plan, rounds
from transformer.translate.segment import Document, segment_text

Hyp = tuple[str, float, float]  # one hypothesis as the batcher returns it: (translation, score, log_prob)
_NONE: Hyp = ("", 0.0, 0.0)  # a sentence without a hypothesis: an empty translation


class Unprocessable(UserError):
    """A request that passed the schema but cannot be translated (422 on /v1, 400 on LibreTranslate's API)."""


def preview(text: str, width: int = 40) -> str:
    return repr(text if len(text) <= width else text[: width - 1] + "\u2026")


def text_name(index: int, count: int) -> str:
    """How a message names text ``index`` of ``count``: "text", or "text 2" in a list."""
    return "text" if count == 1 else f"text {index}"


def sentence_name(text: str, document: Document, j: int) -> str:
    """``text`` itself when its document is one sentence, else "text, sentence j (line l: '...')"."""
    if len(document.segments) == 1:
        return text
    segment = document.segments[j]
    return f"{text}, sentence {j} (line {segment.line + 1}: {preview(segment.text)})"


def _plan(sentences: Sequence[Sequence[str]], names: Sequence[Sequence[str]], *,
          encode_batch: Callable[[list[str]], list[list[int]]],
          input_limit: int) -> tuple[Plan, list[list[dict[str, Any]]]]:
    """The model inputs for ``sentences`` (per text) and each text's warnings, ``{"sentence": j,
    "message": ...}`` for each sentence over ``input_limit`` tokens (translated in pieces);
    :class:`Unprocessable` naming the first sentence without tokens (``names``: how messages
    name each sentence)."""
    planned = plan([s for text in sentences for s in text], encode_batch, input_limit)
    warnings, k = [], 0
    for text_names in names:
        warnings.append([])
        for j, name in enumerate(text_names):
            length, pieces = planned.tokens[k + j], planned.spans[k + j]
            if not length:
                raise Unprocessable(f"{name} has no tokens the model can read")
            if length > input_limit:
                warnings[-1].append({"sentence": j, "message": (
                    f"{name} is {length} tokens long, over the limit of {input_limit} per sentence "
                    f"(max_input_tokens): translated in {len(pieces)} pieces, cut at clause punctuation "
                    "or between words")})
        k += len(text_names)
    return planned, warnings


def _check_count(counts: Sequence[int], max_sentences: int) -> None:
    total = sum(counts)
    if total > max_sentences:
        per_text = f" ({', '.join(map(str, counts))} per text)" if len(counts) > 1 else ""
        raise Unprocessable(f"the request holds {total} sentences{per_text}; "
                            f"at most {max_sentences} are translated per request (max_sentences)")


def segment_texts(texts: Sequence[str], lang: str | None, *, max_sentences: int,
                  encode_batch: Callable[[list[str]], list[list[int]]], input_limit: int,
                  names: Sequence[str] | None = None,
                  whole: Callable[[str], bool] | None = None) -> tuple[list[Document], Plan, list[list[dict[str, Any]]]]:
    """Every text cut into sentences, the model inputs of those sentences and each text's
    warnings; :class:`Unprocessable` naming the first problem (more than ``max_sentences``
    sentences in all, a text or a sentence without tokens). ``names``: how messages name each
    text (default "text", "text i"); ``whole``: ``segment_text``'s (lines kept whole). Runs the
    segmenter and the tokenizer: call it off the event loop."""
    names = list(names) if names is not None else [text_name(i, len(texts)) for i in range(len(texts))]
    documents = [segment_text(text, lang, whole=whole) for text in texts]
    _check_count([len(d.segments) for d in documents], max_sentences)
    for i, document in enumerate(documents):
        if not document.segments:
            raise Unprocessable(f"{names[i]} has no sentence to translate")
    planned, warnings = _plan([d.sentences for d in documents],
                              [[sentence_name(names[i], d, j) for j in range(len(d.segments))]
                               for i, d in enumerate(documents)],
                              encode_batch=encode_batch, input_limit=input_limit)
    return documents, planned, warnings


def html_sentences_of(pages: Sequence[str], lang: str | None, *, max_sentences: int,
                      encode_batch: Callable[[list[str]], list[list[int]]], input_limit: int,
                      names: Sequence[str]) -> tuple[list[list[str]], Plan, list[list[dict[str, Any]]]]:
    """The sentences of each HTML page's text (:func:`transformer.translate.html.html_sentences`;
    a page may have none), their model inputs and each page's warnings; :class:`Unprocessable`
    as for :func:`segment_texts`. Call it off the event loop."""
    found = [html_sentences(page, lang=lang) for page in pages]
    _check_count([len(f) for f in found], max_sentences)
    planned, warnings = _plan(found, [[f"{name}, sentence {j} ({preview(s)})" for j, s in enumerate(f)]
                                      for name, f in zip(names, found)],
                              encode_batch=encode_batch, input_limit=input_limit)
    return found, planned, warnings

@dataclass(frozen=True)
class InputPiece:
    """Where one model input lies in its text: piece ``piece`` of sentence ``sentence`` (a
    sentence that fits whole is its own piece 0). Spans are ``[start, end)`` in the text."""

    sentence: int
    sentences: int  # sentences in the text
    sentence_span: tuple[int, int]
    piece: int
    pieces: int  # pieces the sentence is translated in (1: it fits whole)
    span: tuple[int, int]
    text: str  # the piece itself, as the model reads it


def input_piece(document: Document, spans: Sequence[Sequence[tuple[int, int]]], sentence: int,
                piece: int) -> InputPiece:
    """Piece ``piece`` of sentence ``sentence`` of ``document``, whose sentences are translated in
    the pieces ``spans`` (per sentence, offsets in the sentence: :attr:`Plan.spans`);
    :class:`Unprocessable` naming the sentences, or the pieces, there are when it does not exist."""
    count = len(document.segments)
    if not 0 <= sentence < count:
        raise Unprocessable(f"sentence {sentence} does not exist: the text has {count} "
                            f"sentence{'s' if count != 1 else ''} (0 to {count - 1})")
    segment, cuts = document.segments[sentence], spans[sentence]
    if not 0 <= piece < len(cuts):
        raise Unprocessable(f"piece {piece} does not exist: sentence {sentence} is translated in "
                            f"{len(cuts)} piece{'s' if len(cuts) != 1 else ''} (0 to {len(cuts) - 1})")
    start, end = (segment.start + offset for offset in cuts[piece])  # from the sentence's offsets to the text's
    return InputPiece(sentence, count, (segment.start, segment.end), piece, len(cuts), (start, end),
                      document.text[start:end])


def _hypotheses(hyps: Sequence[Hyp]) -> list[dict[str, Any]]:
    return [{"translation": t, "score": s, "log_prob": lp} for t, s, lp in hyps]


def _answer(source: str, ranked: list[tuple], entries: list[dict[str, Any]], translated: Sequence[ModelOutput],
            pieces: Sequence[Sequence[tuple[int, int]]], warnings: list[dict[str, Any]], names: Sequence[str],
            n_best: int, alternatives: list[str] | None, glossary: bool, confidence: bool) -> dict[str, Any]:
    """The ``Translation`` of one text: ``ranked``, its ``(translation, score, log_prob)``
    translations best first; ``entries``, its sentences' alignment (spans, line, text), each
    completed with its pieces, score and first ``n_best`` hypotheses; with ``glossary`` each
    sentence's ``missing_terms`` and a warning naming it (``names``) where there are some; with
    ``confidence`` each sentence's (4 decimals; absent where it has none) and the text's, the
    lowest of its sentences'."""
    missing = [list(dict.fromkeys(sentence.missing)) for sentence in translated]  # a term missed in two pieces: once
    for entry, sentence, cuts, terms in zip(entries, translated, pieces, missing):
        hyps = sentence.hyps[:max(1, n_best)]
        entry.update(pieces=len(cuts), score=hyps[0][1] if hyps else 0.0, n_best=_hypotheses(hyps))
        if glossary:
            entry["missing_terms"] = [{"source": t.source, "target": t.target} for t in terms]
        if confidence and sentence.confidence is not None:
            entry["confidence"] = round(sentence.confidence, 4)
    if glossary:
        listed = [", ".join(f"{t.source!r} -> {t.target!r}" for t in terms) for terms in missing]
        warnings = sorted(warnings + [{"sentence": j, "message": f"{names[j]}: the glossary's {listed[j]} could not be "
                                       "placed in the translation within its length limit (max_length)"}
                                      for j, terms in enumerate(missing) if terms], key=lambda w: w["sentence"])
    answer = {"source": source, "translation": ranked[0][0], "score": ranked[0][1],
              "n_best": _hypotheses(ranked),
              "sentences": entries, "warnings": warnings}
    if alternatives is not None:
        answer["alternatives"] = alternatives
    values = [sentence.confidence for sentence in translated]
    if confidence and values and None not in values:
        answer["confidence"] = round(min(values), 4)
    return answer


def _alternatives(translated: Sequence[ModelOutput], count: int, build: Callable[[list[str]], str]) -> list[str] | None:
    """Up to ``count`` distinct translations of a text other than its best, from all its
    sentences' hypotheses (:func:`transformer.translate.alternatives.combine`); None for none asked."""
    return combine([[h[0] for h in sentence.hyps] for sentence in translated], count + 1, build)[1:] if count else None


def assemble(document: Document, translated: Sequence[ModelOutput], pieces: Sequence[Sequence[tuple[int, int]]],
             warnings: list[dict[str, Any]], n_best: int, alternatives: int = 0, *, glossary: bool = False,
             confidence: bool = False, name: str = "text") -> dict[str, Any]:
    """The ``Translation`` of one text from its sentences' outputs (:meth:`Plan.assemble`), the
    pieces each sentence was translated in, and the warnings about the text.

    ``translation`` is the text with every sentence replaced by its best hypothesis; the k-th
    entry of ``n_best`` puts every sentence's k-th in the same structure
    (:func:`~transformer.translate.pipeline.rounds`: ``score`` the mean, ``log_prob`` the sum),
    so a one-sentence text gets exactly that sentence's hypotheses. Only the first ``n_best``
    hypotheses of a sentence are reported; with ``alternatives`` > 0 all of them give up to that
    many distinct translations other than ``translation`` (no ``alternatives`` key for 0).
    ``glossary``: each sentence's ``missing_terms``, and a warning naming the sentence of the
    text ``name`` that lacks some. ``confidence``: each sentence's, rounded to 4 decimals, and
    the text's, the lowest."""
    hyps = [sentence.hyps[:max(1, n_best)] for sentence in translated]
    ranked = rounds(hyps, max(1, n_best), document.rebuild_with_spans, _NONE)  # empty translations stay empty
    entries = [{"source_span": [segment.start, segment.end], "target_span": list(target), "line": segment.line + 1,
                "text": None} for segment, target in zip(document.segments, ranked[0][0][1])]
    return _answer(document.text, [(text, score, lp) for (text, _), score, lp in ranked], entries, translated,
                   pieces, warnings, [sentence_name(name, document, j) for j in range(len(document.segments))],
                   n_best, _alternatives(translated, alternatives, document.rebuild), glossary, confidence)


def assemble_html(page: str, found: Sequence[str], translated: Sequence[ModelOutput],
                  pieces: Sequence[Sequence[tuple[int, int]]], warnings: list[dict[str, Any]], n_best: int,
                  lang: str | None, alternatives: int = 0, *, glossary: bool = False, confidence: bool = False,
                  name: str = "text") -> dict[str, Any]:
    """The ``Translation`` of one HTML page whose text's sentences are ``found``: the k-th entry
    of ``n_best`` is the page rebuilt around every sentence's k-th hypothesis
    (:func:`transformer.translate.html.translate_html`, markup kept), scored as in
    :func:`assemble`; a page without text comes back as it is (score 0). A page's sentence is
    not one span of its markup (tags and entities interrupt it, and the tags are placed anew in
    the translation): its alignment entry gives its ``text`` as the model read it, no spans.
    ``alternatives``: as in :func:`assemble`, each a page rebuilt (a page without text has none);
    ``glossary``, ``confidence`` and ``name`` as there (a page without text has no confidence)."""
    def build(translations: list[str]) -> str:  # the page around these translations of its sentences
        def given(asked: list[str]) -> list[str]:
            if list(asked) != list(found):  # the page is parsed the same way each time
                raise RuntimeError("the page's sentences changed between counting and translating")
            return translations

        return translate_html(page, given, lang=lang) if found else page

    hyps = [sentence.hyps[:max(1, n_best)] for sentence in translated]
    ranked = rounds(hyps, max(1, n_best) if found else 1, build, _NONE)  # a page without text: itself, once
    entries = [{"source_span": None, "target_span": None, "line": None, "text": sentence} for sentence in found]
    return _answer(page, ranked, entries, translated, pieces, warnings,
                   [f"{name}, sentence {j} ({preview(sentence)})" for j, sentence in enumerate(found)],
                   n_best, _alternatives(translated, alternatives, build), glossary, confidence)

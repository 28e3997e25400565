"""Texts of any length for the server: what is particular to it around the shared pipeline.

Each text of a request is cut into sentences (:func:`transformer.translate.segment.segment_text`,
as ``translate_document`` cuts it; an HTML page's text by
:func:`transformer.translate.html.html_sentences`) and the model's inputs are planned as the
library plans them (:func:`transformer.translate.pipeline.plan`: a sentence longer than
``max_input_tokens`` in pieces, never cut off). What the server adds: it refuses a request of
more than ``max_sentences`` sentences, a text without a sentence and a sentence without tokens
(:class:`Unprocessable`), and words its notes as the JSON answer's ``warnings``. The inputs go to
the dynamic batcher, which may put them in model calls with other requests' sentences; the
outputs are assembled per sentence (:meth:`transformer.translate.pipeline.Plan.assemble`) and
each text's answer is built here (:func:`assemble`, :func:`assemble_html`): its translations in
the text's structure (:meth:`Document.rebuild_with_spans`: line breaks, blank lines, indentation
and the spacing between sentences kept), its ``n_best`` (:func:`transformer.translate.pipeline.rounds`),
``alternatives`` (:func:`transformer.translate.alternatives.combine`), glossary terms missed and
``confidence`` (a sentence's is its best hypothesis', a sentence in pieces the lowest of its
pieces', a text's the lowest of its sentences').

An HTML page is rebuilt around its sentences' translations with its markup kept
(:func:`transformer.translate.html.translate_html`). A sentence of a page is not one span of its
markup, so its alignment has no spans: it carries its text instead.

The attention of one sentence is drawn for one model input: :func:`input_piece` says which part
of the text that is (the sentence, or one of its pieces) and where it lies.

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
                  names: Sequence[str] | None = None) -> tuple[list[Document], Plan, list[list[dict[str, Any]]]]:
    """Every text cut into sentences, the model inputs of those sentences and each text's
    warnings; :class:`Unprocessable` naming the first problem (more than ``max_sentences``
    sentences in all, a text or a sentence without tokens). ``names``: how messages name each
    text (default "text", "text i"). Runs the segmenter and the tokenizer: call it off the event loop."""
    names = list(names) if names is not None else [text_name(i, len(texts)) for i in range(len(texts))]
    documents = [segment_text(text, lang) for text in texts]
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
    for entry, sentence, cuts in zip(entries, translated, pieces):
        hyps = sentence.hyps[:max(1, n_best)]
        entry.update(pieces=len(cuts), score=hyps[0][1] if hyps else 0.0, n_best=_hypotheses(hyps))
        if glossary:  # a term lacking in two pieces of a sentence is named once
            entry["missing_terms"] = [{"source": t.source, "target": t.target} for t in dict.fromkeys(sentence.missing)]
        if confidence and sentence.confidence is not None:
            entry["confidence"] = round(sentence.confidence, 4)
    if glossary:
        warnings = sorted(warnings + [
            {"sentence": j, "message": f"{names[j]}: the glossary's "
             + ", ".join(f"{t.source!r} -> {t.target!r}" for t in dict.fromkeys(sentence.missing))
             + " could not be placed in the translation within its length limit (max_length)"}
            for j, sentence in enumerate(translated) if sentence.missing], key=lambda w: w["sentence"])
    answer = {"source": source, "translation": ranked[0][0], "score": ranked[0][1],
              "n_best": [{"translation": t, "score": s, "log_prob": lp} for t, s, lp in ranked],
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

    ``translation`` is the text with every sentence replaced by its best hypothesis. The k-th
    entry of ``n_best`` puts every sentence's k-th hypothesis (its last when it has fewer) in the
    same structure: its ``log_prob`` is the sum over the sentences (they are translated
    independently), its ``score`` the mean of theirs. A one-sentence text gets exactly that
    sentence's hypotheses, as before paragraphs were segmented. Only the first ``n_best``
    hypotheses of a sentence are reported; with ``alternatives`` > 0 all of them give the
    text's ``alternatives``: up to that many distinct translations other than ``translation``
    (absent from the dict when ``alternatives`` is 0). ``glossary``: each sentence's
    ``missing_terms``, and a warning naming the sentence of the text ``name`` that lacks some.
    ``confidence``: each sentence's ``confidence``, rounded to 4 decimals, and the text's, the lowest."""
    hyps = [sentence.hyps[:max(1, n_best)] for sentence in translated]
    ranked = rounds(hyps, max(1, n_best), document.rebuild_with_spans, _NONE)  # empty translations stay empty
    entries = [{"source_span": [segment.start, segment.end], "target_span": list(target), "line": segment.line + 1,
                "text": None} for segment, target in zip(document.segments, ranked[0][0][1])]
    return _answer(document.text, [(text, score, lp) for (text, _), score, lp in ranked], entries, translated,
                   pieces, warnings, [sentence_name(name, document, j) for j in range(len(document.segments))],
                   n_best, _alternatives(translated, alternatives, document.rebuild), glossary, confidence)


def _page_with(page: str, found: Sequence[str], translations: list[str], lang: str | None) -> str:
    """``page`` rebuilt around ``translations`` of the sentences ``found`` in its text, markup kept."""
    def given(asked: list[str]) -> list[str]:
        if list(asked) != list(found):  # the page is parsed the same way each time
            raise RuntimeError("the page's sentences changed between counting and translating")
        return translations

    return translate_html(page, given, lang=lang) if found else page


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
    def build(chosen: list[str]) -> str:
        return _page_with(page, found, chosen, lang)

    hyps = [sentence.hyps[:max(1, n_best)] for sentence in translated]
    ranked = rounds(hyps, max(1, n_best) if found else 1, build, _NONE)  # a page without text: itself, once
    entries = [{"source_span": None, "target_span": None, "line": None, "text": sentence} for sentence in found]
    return _answer(page, ranked, entries, translated, pieces, warnings,
                   [f"{name}, sentence {j} ({preview(sentence)})" for j, sentence in enumerate(found)],
                   n_best, _alternatives(translated, alternatives, build), glossary, confidence)

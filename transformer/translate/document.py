"""Translating real text: paragraphs, lines and blank lines kept, no sentence lost.

Models trained on sentence pairs translate one sentence at a time, so a text is cut into lines
and each line into sentences (``segment.segment_text``), the sentences are translated in one
call (batched by length), and each translation goes back where its sentence was: line breaks,
blank lines, indentation and the gaps between sentences come out as they went in, and a text of
N lines gives N lines. A sentence longer than the model's input limit is cut at clause
punctuation, then between words (``segment.fit_spans``), its pieces translated and joined, with
a ``TranslationWarning`` naming the line: nothing is ever truncated.

``translate_document`` also says which source span produced which target span (the sentence
alignment the server returns). ``translate_lines`` translates many lines at once (a chunk of a
file: ``transformer translate``), one result per line, with n-best alternatives and scores.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol

from transformer.decoding import Hypothesis
from transformer.text import Vocabularies
from transformer.translate.segment import fit_spans, segment_text
from transformer.translate.warning import TermWarning, TranslationWarning


class SentenceTranslator(Protocol):
    """What translating a document needs of a translator: a
    :class:`~transformer.translate.translator.Translator`, or anything that translates sentences
    the same way (this module imports none, so the translator's ``translate_text`` can import it)."""

    src_lang: str | None  # the language its sentences are cut by, when the caller names none
    max_input_tokens: int  # the longest source it translates whole
    vocab: Vocabularies

    def translate_n_best(self, texts: Iterable[str]) -> list[list[Hypothesis]]: ...
    # With a glossary or confidence asked for, also translate_n_best(texts, glossary=..., confidence=...)
    # and glossary_terms(texts, glossary), as the Translator has them.

    def detokenize(self, hypothesis: Hypothesis) -> str: ...


@dataclass(frozen=True)
class SentenceAlignment:
    """One source sentence and its translation: character spans ``[start, end)`` in the source
    text and in the translated text, and the line (from 1) they are on. ``confidence``: the
    probability that the translation is adequate, when asked for and the run is calibrated (the
    lowest of its pieces' for a sentence translated in pieces). ``missing_terms``: glossary terms
    found in the sentence that its translation could not be made to contain."""

    source: tuple[int, int]
    target: tuple[int, int]
    line: int
    confidence: float | None = None
    missing_terms: tuple = ()


@dataclass(frozen=True)
class SentenceNotes:
    """What a sentence's translation says besides its text: its confidence, the glossary terms it lacks."""

    confidence: float | None = None
    missing_terms: tuple = ()


@dataclass(frozen=True)
class TranslatedDocument:
    """A translated text and the alignment of its sentences, in order."""

    text: str
    sentences: list[SentenceAlignment]



@dataclass(frozen=True)
class TranslatedLine:
    """One line of a file translated by ``translate_lines``.

    ``text``: the line with each sentence replaced by its best translation (whitespace, gaps and
    an empty line kept). ``sentences``: the alignment of its sentences (``line`` is the line's
    number in the file). ``scores``: each sentence's score (the mean of its pieces' when it was
    translated in pieces). ``n_best``: ``(text, score)`` alternatives for the whole line, best
    first: the k-th puts every sentence's k-th hypothesis (its last when it has fewer) in the
    line, with the mean of their scores, as the server's ``n_best`` does; [] for a line without
    a sentence."""

    text: str
    sentences: list[SentenceAlignment]
    scores: list[float]
    n_best: list[tuple[str, float]]


def translate_document(translator: SentenceTranslator, text: str, *, lang: str | None = None, glossary=None,
                       confidence: bool = False) -> TranslatedDocument:
    """Translate ``text`` sentence by sentence, keeping its structure (see the module doc).

    ``lang``: the source language for sentence splitting (default: the translator's ``src_lang``).
    ``glossary``: terms each sentence's translation must use (``Translator.translate``); a term
    that cannot be placed gives a ``TermWarning`` naming the line. ``confidence``: fill
    ``SentenceAlignment.confidence``.
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    document = segment_text(text, lang or translator.src_lang)
    items = [(s.text, f"line {s.line + 1}", "") for s in document.segments]
    hypotheses, notes = translate_with_notes(translator, items, glossary=glossary, confidence=confidence)
    out, spans = document.rebuild_with_spans([h[0][0] if h else "" for h in hypotheses])
    alignment = [SentenceAlignment((segment.start, segment.end), target, segment.line + 1, note.confidence,
                                   note.missing_terms)
                 for segment, target, note in zip(document.segments, spans, notes)]
    return TranslatedDocument(out, alignment)


def translate_lines(translator: SentenceTranslator, lines: Sequence[str], *, lang: str | None = None,
                    first_line: int = 1, glossary=None, confidence: bool = False,
                    line_langs: Sequence[str | None] | None = None) -> list[TranslatedLine]:
    """Translate the lines of a file (or a chunk of one), all their sentences batched together.

    Line i is segmented on its own and named ``first_line + i`` in warnings and alignments; the
    result has one ``TranslatedLine`` per line, in order. A line that starts with a language code
    (``>>fra<<``, multilingual Marian models) gives that code to each of its sentences, and the
    code is not part of the translated line (as when the line is translated whole).
    ``glossary`` and ``confidence``: as for ``translate_document``. ``line_langs``: each line's
    own language for sentence splitting (a detected one, ``--src-lang auto``), ``lang`` where it
    is None.
    """
    if isinstance(lines, str):
        raise TypeError("translate_lines() takes a list of lines; use translate_document for one text")
    lines = list(lines)
    if line_langs is not None and len(line_langs) != len(lines):
        raise ValueError(f"{len(line_langs)} line languages for {len(lines)} lines")
    for i, line in enumerate(lines):
        if not isinstance(line, str):
            raise TypeError(f"line {first_line + i} is {type(line).__name__}, not str")
    lang = lang or translator.src_lang
    documents, codes = [], []
    for i, line in enumerate(lines):
        match = _LANGUAGE_CODE.match(line)
        code, rest = (match.group(1) + " ", line[match.end():]) if match else ("", line)
        documents.append(segment_text(rest, (line_langs[i] if line_langs is not None else None) or lang))
        codes.append(code)
    items = [(s.text, f"line {first_line + i}", code) for i, (d, code) in enumerate(zip(documents, codes))
             for s in d.segments]
    found, found_notes = translate_with_notes(translator, items, glossary=glossary, confidence=confidence)
    hypotheses, sentence_notes = iter(found), iter(found_notes)
    out = []
    for i, document in enumerate(documents):
        hyps = [next(hypotheses) for _ in document.segments]
        notes = [next(sentence_notes) for _ in document.segments]
        if not hyps:
            out.append(TranslatedLine(document.text, [], [], []))
            continue
        alternatives = []
        for k in range(max(1, max(len(h) for h in hyps))):
            chosen = [h[min(k, len(h) - 1)] if h else ("", 0.0) for h in hyps]
            text, spans = document.rebuild_with_spans([c[0] for c in chosen])
            alternatives.append((text, spans, sum(c[1] for c in chosen) / len(chosen)))
        text, spans, _ = alternatives[0]
        alignment = [SentenceAlignment((s.start, s.end), span, first_line + i, note.confidence, note.missing_terms)
                     for s, span, note in zip(document.segments, spans, notes)]
        out.append(TranslatedLine(text, alignment, [h[0][1] if h else 0.0 for h in hyps],
                                  [(t, score) for t, _, score in alternatives]))
    return out


# A language code at the start of a line, as multilingual Marian models take them (">>fra<< Bonjour.").
_LANGUAGE_CODE = re.compile(r"\s*(>>[^\s<>]+<<)\s*")


def translate_sentences(translator: SentenceTranslator, sentences: Sequence[str], *, glossary=None) -> list[str]:
    """The best translation of each sentence, all translated in one call; a sentence longer than
    the model's input limit is translated in pieces (a ``TranslationWarning`` names it): nothing
    is cut. What ``translate_html`` is given to translate a page's sentences. ``glossary``: as
    for ``translate_document``."""
    if isinstance(sentences, str):
        raise TypeError("translate_sentences() takes a list of sentences")
    items = [(s, f"sentence {i + 1}", "") for i, s in enumerate(sentences)]
    return [h[0][0] if h else "" for h in translate_with_notes(translator, items, glossary=glossary)[0]]


def _translate_sentences(translator: SentenceTranslator,
                         items: list[tuple[str, str, str]]) -> list[list[tuple[str, float]]]:
    """``translate_with_notes`` without a glossary, its hypotheses alone."""
    return translate_with_notes(translator, items)[0]


def translate_with_notes(translator: SentenceTranslator, items: list[tuple[str, str, str]], *, glossary=None,
                         confidence: bool = False) -> tuple[list[list[tuple[str, float]]], list[SentenceNotes]]:
    """``(sentence, where, prefix)`` items -> each sentence's ``(translation, score)`` hypotheses,
    best first ([] when it has nothing the model can read), all translated in one call, and its
    ``SentenceNotes`` (confidence when asked for, glossary terms its best translation lacks, each
    also named by a ``TermWarning``).

    A sentence over the model's input limit is cut into pieces (``fit_spans``), with a
    ``TranslationWarning`` naming it (``where``: "line 3"); its k-th hypothesis joins its pieces'
    k-th, its score is the mean of theirs. ``prefix`` goes before every piece (a language code)."""
    pieces: list[str] = []  # what the model translates
    owners: list[int] = []  # the sentence each piece belongs to
    for index, (sentence, where, prefix) in enumerate(items):
        spans = _fitting_spans(translator, sentence, prefix)
        if len(spans) > 1:
            warnings.warn(f"{where}: a sentence of {_count(translator, prefix + sentence)} tokens is longer "
                          f"than the model's input limit ({translator.max_input_tokens}); translated in "
                          f"{len(spans)} pieces", TranslationWarning, stacklevel=4)
        for a, b in spans:
            pieces.append(prefix + sentence[a:b])
            owners.append(index)
    # Only the options asked for are passed, so a translator without them still translates plain text.
    options = {**({"glossary": glossary} if glossary is not None else {}), **({"confidence": True} if confidence else {})}
    per_piece = translator.translate_n_best(pieces, **options)
    terms = translator.glossary_terms(pieces, glossary) if glossary is not None else [[] for _ in pieces]
    grouped: list[list[list[tuple[str, float]]]] = [[] for _ in items]
    confidences: list[list[float | None]] = [[] for _ in items]
    missing: list[list] = [[] for _ in items]
    for owner, hyps, found in zip(owners, per_piece, terms):
        if hyps:
            grouped[owner].append([(translator.detokenize(h), h.score) for h in hyps])
            confidences[owner].append(hyps[0].confidence)
            missing[owner] += [found[c] for c in hyps[0].unmet]
    notes = []
    for (_, where, _), values, lacking in zip(items, confidences, missing):
        if lacking:
            warnings.warn(TermWarning(lacking, where), stacklevel=3)
        known = values and all(v is not None for v in values)
        notes.append(SentenceNotes(min(values) if known else None, tuple(lacking)))
    return [join_pieces(parts) for parts in grouped], notes


def join_pieces(parts: Sequence[Sequence[tuple]]) -> list[tuple]:
    """The hypotheses of a sentence translated in pieces, from each piece's hypotheses.

    A hypothesis is a tuple ``(translation, score)``, or with more numbers after the score (the
    server's log-probability). The k-th joins every piece's k-th (its last when it has fewer)
    with single spaces; its score is the mean of theirs, and any further numbers are summed, the
    pieces being translated independently. One piece: its own hypotheses; no piece: [].
    ``translate_document`` and the server both join pieces with it."""
    alternatives = []
    for k in range(max((len(p) for p in parts), default=0)):
        chosen = [p[min(k, len(p) - 1)] for p in parts]
        extra = (sum(c[i] for c in chosen) for i in range(2, len(chosen[0])))
        alternatives.append((" ".join(c[0] for c in chosen if c[0]), sum(c[1] for c in chosen) / len(chosen), *extra))
    return alternatives


def _count(translator: SentenceTranslator, text: str) -> int:
    return len(translator.vocab.src.encode(text))


# Sentences longer than this many characters per token of the limit are first cut into blocks of
# that size at whitespace, so finding the pieces stays linear in the sentence's length (fit_spans
# searches each block; a whole 10 MB "sentence" would be tokenized again and again).
BLOCK_CHARS_PER_TOKEN = 16


def _fitting_spans(translator: SentenceTranslator, sentence: str, prefix: str = "") -> list[tuple[int, int]]:
    """Spans of ``sentence`` that each fit the model's input limit with ``prefix`` before them
    (one span if the sentence fits whole)."""
    count = (lambda piece: _count(translator, prefix + piece)) if prefix else (lambda piece: _count(translator, piece))
    return fitting_spans(sentence, count, translator.max_input_tokens)


def fitting_spans(sentence: str, count: Callable[[str], int], limit: int) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of ``sentence`` that each hold at most ``limit`` tokens as ``count``
    counts them: ``[(0, len(sentence))]`` when it fits whole, else pieces cut at clause
    punctuation, then between words (``segment.fit_spans``), with only whitespace between them.
    How an over-long sentence is split for ``translate_document``, ``transformer translate`` and
    the server."""
    block = max(limit * BLOCK_CHARS_PER_TOKEN, 1)
    if len(sentence) <= block:
        return [(0, len(sentence))] if count(sentence) <= limit else fit_spans(sentence, count, limit)
    if count(sentence) <= limit:
        return [(0, len(sentence))]
    spans, start = [], 0
    while start < len(sentence):
        end = len(sentence)
        if end - start > block:
            cut = max(sentence.rfind(c, start + 1, start + block) for c in " \t\u00a0\u3000")
            end = cut if cut > start else start + block
        spans += [(start + a, start + b) for a, b in fit_spans(sentence[start:end], count, limit)]
        start = end
    return spans

"""Translating real text: paragraphs, lines and blank lines kept, no sentence lost.

Models trained on sentence pairs translate one sentence at a time, so a text is cut into lines
and each line into sentences (``segment.segment_text``), the sentences are translated in one
call (batched by length), and each translation goes back where its sentence was: line breaks,
blank lines, indentation and the gaps between sentences come out as they went in, and a text of
N lines gives N lines. A sentence longer than the model's input limit is cut at clause
punctuation, then between words (:mod:`transformer.translate.pipeline`), its pieces translated
and joined, with a ``TranslationWarning`` naming the line: nothing is ever truncated.

``translate_document`` also says which source span produced which target span (the sentence
alignment the server returns). ``translate_lines`` translates many lines at once (a chunk of a
file: ``transformer translate``), one result per line, with n-best alternatives and scores.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Callable, Protocol

from transformer.decoding import Hypothesis
from transformer.text import Vocabularies
from transformer.translate.pipeline import ModelOutput, per_text, plan, rounds
from transformer.translate.segment import segment_text
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
    # A translator may also have keeps_whole(line) -> bool: a line of several sentences it
    # translates whole (a translation memory's entry), not cut into sentences.


def kept_whole(translator: SentenceTranslator) -> Callable[[str], bool] | None:
    """The translator's ``keeps_whole``, for :func:`~transformer.translate.segment.segment_text`."""
    return getattr(translator, "keeps_whole", None)


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
    document = segment_text(text, lang or translator.src_lang, whole=kept_whole(translator))
    items = [(s.text, f"line {s.line + 1}", "") for s in document.segments]
    translated = translate_with_notes(translator, items, glossary=glossary, confidence=confidence)
    out, spans = document.rebuild_with_spans([t.hyps[0][0] if t.hyps else "" for t in translated])
    alignment = [SentenceAlignment((segment.start, segment.end), target, segment.line + 1, t.confidence, t.missing)
                 for segment, target, t in zip(document.segments, spans, translated)]
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
    whole = kept_whole(translator)
    documents, codes = [], []
    for i, line in enumerate(lines):
        match = _LANGUAGE_CODE.match(line)
        code, rest = (match.group(1) + " ", line[match.end():]) if match else ("", line)
        documents.append(segment_text(rest, (line_langs[i] if line_langs is not None else None) or lang, whole=whole))
        codes.append(code)
    items = [(s.text, f"line {first_line + i}", code) for i, (d, code) in enumerate(zip(documents, codes))
             for s in d.segments]
    found = translate_with_notes(translator, items, glossary=glossary, confidence=confidence)
    out = []
    for i, (document, translated) in enumerate(zip(documents, per_text([len(d.segments) for d in documents], found))):
        if not translated:
            out.append(TranslatedLine(document.text, [], [], []))
            continue
        hyps = [t.hyps for t in translated]
        alternatives = rounds(hyps, max(1, max(map(len, hyps))), document.rebuild_with_spans)
        (text, spans), _ = alternatives[0]
        alignment = [SentenceAlignment((s.start, s.end), span, first_line + i, t.confidence, t.missing)
                     for s, span, t in zip(document.segments, spans, translated)]
        out.append(TranslatedLine(text, alignment, [h[0][1] if h else 0.0 for h in hyps],
                                  [(built, score) for (built, _), score in alternatives]))
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
    return [t.hyps[0][0] if t.hyps else "" for t in translate_with_notes(translator, items, glossary=glossary)]


def _translate_sentences(translator: SentenceTranslator,
                         items: list[tuple[str, str, str]]) -> list[list[tuple[str, float]]]:
    """``translate_with_notes`` without a glossary, its hypotheses alone."""
    return [t.hyps for t in translate_with_notes(translator, items)]


def translate_with_notes(translator: SentenceTranslator, items: list[tuple[str, str, str]], *, glossary=None,
                         confidence: bool = False) -> list[ModelOutput]:
    """``(sentence, where, prefix)`` items -> each sentence's :class:`~transformer.translate.pipeline.ModelOutput`:
    its ``(translation, score)`` hypotheses, best first ([] when it has nothing the model can
    read), all translated in one call; the glossary terms its best translation lacks, each also
    named by a ``TermWarning``; its confidence when asked for.

    A sentence over the model's input limit is cut into pieces (:func:`~transformer.translate.pipeline.plan`),
    with a ``TranslationWarning`` naming it (``where``: "line 3"); its k-th hypothesis joins its
    pieces' k-th, its score is the mean of theirs. ``prefix`` goes before every piece (a language code)."""
    limit = translator.max_input_tokens
    planned = plan([sentence for sentence, _, _ in items], lambda texts: list(map(translator.vocab.src.encode, texts)),
                   limit, [prefix for _, _, prefix in items])
    for (_, where, _), tokens, spans in zip(items, planned.tokens, planned.spans):
        if len(spans) > 1:
            warnings.warn(f"{where}: a sentence of {tokens} tokens is longer than the model's input limit ({limit}); "
                          f"translated in {len(spans)} pieces", TranslationWarning, stacklevel=4)
    # Only the options asked for are passed, so a translator without them still translates plain text.
    options = {**({"glossary": glossary} if glossary is not None else {}), **({"confidence": True} if confidence else {})}
    per_piece = translator.translate_n_best(planned.inputs, **options)
    terms = translator.glossary_terms(planned.inputs, glossary) if glossary is not None else [[]] * len(per_piece)
    translated = planned.assemble([ModelOutput([(translator.detokenize(h), h.score) for h in hyps],
                                               tuple(found[c] for c in hyps[0].unmet) if hyps else (),
                                               hyps[0].confidence if hyps else None)
                                   for hyps, found in zip(per_piece, terms)])
    for (_, where, _), sentence in zip(items, translated):
        if sentence.missing:
            warnings.warn(TermWarning(sentence.missing, where), stacklevel=3)
    return translated

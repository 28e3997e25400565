"""Translating real text: paragraphs, lines and blank lines kept, no sentence lost.

Models trained on sentence pairs translate one sentence at a time, so a text is cut into lines
and each line into sentences (``segment.segment_text``), the sentences are translated in one
call (batched by length), and each translation goes back where its sentence was: line breaks,
blank lines, indentation and the gaps between sentences come out as they went in, and a text of
N lines gives N lines. A sentence longer than the model's input limit is cut at clause
punctuation, then between words (``segment.fit_spans``), its pieces translated and joined, with
a ``TranslationWarning`` naming the line: nothing is ever truncated.

``translate_document`` also says which source span produced which target span (the sentence
alignment the server returns).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

from transformer.translate.segment import fit_spans, segment_text
from transformer.translate.translator import TranslationWarning, Translator


@dataclass(frozen=True)
class SentenceAlignment:
    """One source sentence and its translation: character spans ``[start, end)`` in the source
    text and in the translated text, and the line (from 1) they are on."""

    source: tuple[int, int]
    target: tuple[int, int]
    line: int


@dataclass(frozen=True)
class TranslatedDocument:
    """A translated text and the alignment of its sentences, in order."""

    text: str
    sentences: list[SentenceAlignment]


def translate_document(translator: Translator, text: str, *, lang: str | None = None) -> TranslatedDocument:
    """Translate ``text`` sentence by sentence, keeping its structure (see the module doc).

    ``lang``: the source language for sentence splitting (default: the translator's ``src_lang``).
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    document = segment_text(text, lang or translator.src_lang)
    pieces: list[str] = []  # what the model translates
    owners: list[int] = []  # the sentence each piece belongs to
    for index, segment in enumerate(document.segments):
        spans = _fitting_spans(translator, segment.text)
        if len(spans) > 1:
            warnings.warn(f"line {segment.line + 1}: a sentence of {_count(translator, segment.text)} tokens is longer "
                          f"than the model's input limit ({translator.max_input_tokens}); translated in "
                          f"{len(spans)} pieces", TranslationWarning, stacklevel=2)
        for a, b in spans:
            pieces.append(segment.text[a:b])
            owners.append(index)
    translated = translator.translate(pieces)
    joined: list[list[str]] = [[] for _ in document.segments]
    for owner, translation in zip(owners, translated):
        if translation:
            joined[owner].append(translation)
    out, spans = document.rebuild_with_spans([" ".join(parts) for parts in joined])
    alignment = [SentenceAlignment((segment.start, segment.end), target, segment.line + 1)
                 for segment, target in zip(document.segments, spans)]
    return TranslatedDocument(out, alignment)


def _count(translator: Translator, text: str) -> int:
    return len(translator.vocab.src.encode(text))


def _fitting_spans(translator: Translator, sentence: str) -> list[tuple[int, int]]:
    """Spans of ``sentence`` that each fit the model's input limit (one span if it fits whole)."""
    limit = translator.max_input_tokens
    if _count(translator, sentence) <= limit:
        return [(0, len(sentence))]
    return fit_spans(sentence, lambda piece: _count(translator, piece), limit)

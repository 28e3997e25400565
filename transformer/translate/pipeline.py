"""The two ends of every text-to-text translation: plan the model's inputs, assemble its outputs.

Models trained on sentence pairs translate one sentence at a time, up to an input limit. Every
way a text is translated (``translate_document``, ``translate_lines``, HTML pages, files, each
route of the server) cuts it into sentences, then:

* :func:`plan`: sentences -> the model's inputs. A sentence over the limit is cut into pieces
  that fit (:func:`fitting_spans`: at clause punctuation, then between words; nothing is cut
  off), a language code (``>>fra<<``) put before each piece of a sentence that has one. The
  :class:`Plan` keeps each sentence's tokens and pieces: what a warning about it says.
* the middle, which differs: a ``Translator``'s ``translate_n_best``, or the server's batcher
  (in model calls shared with other requests), giving one :class:`ModelOutput` per input.
* :meth:`Plan.assemble`: outputs -> one :class:`ModelOutput` per sentence, its pieces joined
  (hypotheses, the glossary terms its translation lacks, its confidence), and :func:`rounds`:
  a text's k-th translation from every sentence's k-th hypothesis put in the text's structure.

How the warnings and notes are worded is the caller's (Python warnings naming "line 3" in the
library, JSON entries on the server). A translation memory stands in the middle
(``translate/tm.py``: a translator that answers the inputs it knows and gives the model the others).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from transformer.translate.segment import fit_spans


class ModelOutput(NamedTuple):
    """What the model gave for one input (or, assembled, for one sentence): its hypotheses
    ``(translation, score)`` best first, further numbers after the score where the middle gives
    them (the server's log-probability), [] for an input without a token the model reads; the
    glossary's terms (``Term`` objects) its best hypothesis lacks; its best one's confidence
    (None unless asked for on a calibrated run); the translation memory's terms it was translated
    with (the server's model calls; not kept by :meth:`Plan.assemble`)."""

    hyps: list[tuple]
    missing: tuple = ()
    confidence: float | None = None
    memory_terms: tuple = ()


@dataclass(frozen=True)
class Plan:
    """What the model translates for a list of sentences: each sentence whole, or in pieces when
    it is over the input limit."""

    sentences: list[str]
    tokens: list[int]  # each sentence's source tokens (its language code included)
    spans: list[list[tuple[int, int]]]  # per sentence: its pieces, [start, end) in the sentence
    inputs: list[str]  # the model's inputs, in order: every sentence's pieces, its language code before each

    def assemble(self, outputs: Sequence[ModelOutput]) -> list[ModelOutput]:
        """Each sentence's output from ``outputs`` (one per input, in order). A sentence in pieces:
        its k-th hypothesis joins its pieces' k-th (:func:`rounds`: with single spaces, the scores'
        mean, further numbers summed: the pieces are translated independently); the terms every
        piece lacks, in order; the lowest of its pieces' confidences (None where one has none)."""
        if len(outputs) != len(self.inputs):
            raise ValueError(f"{len(outputs)} model outputs for {len(self.inputs)} inputs")
        out, k = [], 0
        for spans in self.spans:
            found = [output for output in outputs[k:k + len(spans)] if output.hyps]
            k += len(spans)
            parts, values = [output.hyps for output in found], [output.confidence for output in found]
            out.append(ModelOutput(rounds(parts, max(map(len, parts), default=0), _join),
                                   tuple(term for output in found for term in output.missing),
                                   min(values) if values and None not in values else None))
        return out


def plan(sentences: Sequence[str], encode: Callable[[list[str]], list[list[int]]], limit: int,
         prefixes: Sequence[str] | None = None) -> Plan:
    """The model's inputs for ``sentences``: each whole when its tokens (``encode``: the source
    tokenizer's ids of each of a list of texts) are at most ``limit``, else in pieces that fit
    (:func:`fitting_spans`); ``prefixes``: each sentence's language code and a space, put before
    each of its pieces (and counted with them)."""
    prefixes = prefixes if prefixes is not None else [""] * len(sentences)
    tokens = [len(ids) for ids in encode([prefix + sentence for prefix, sentence in zip(prefixes, sentences)])]
    spans: list[list[tuple[int, int]]] = []
    inputs: list[str] = []
    for sentence, prefix, count in zip(sentences, prefixes, tokens):
        cuts = [(0, len(sentence))] if count <= limit else \
            _cut(sentence, lambda piece, prefix=prefix: len(encode([prefix + piece])[0]), limit)
        spans.append(cuts)
        inputs += [prefix + sentence[a:b] for a, b in cuts]
    return Plan(list(sentences), tokens, spans, inputs)


def rounds(per_sentence: Sequence[Sequence[tuple]], count: int, build: Callable[[list[str]], Any],
           empty: tuple = ("", 0.0)) -> list[tuple]:
    """A text's first ``count`` translations, best first: the k-th is ``build`` of every
    sentence's k-th hypothesis (its last when it has fewer, ``empty`` when it has none), with
    the mean of their scores (0.0 for a text without a sentence) and any further numbers summed
    (the sentences are translated independently): ``(build(...), score, ...)``."""
    out = []
    for k in range(count):
        chosen = [hyps[min(k, len(hyps) - 1)] if hyps else empty for hyps in per_sentence]
        extra = (sum(c[i] for c in chosen) for i in range(2, len(chosen[0]) if chosen else len(empty)))
        out.append((build([c[0] for c in chosen]), sum(c[1] for c in chosen) / len(chosen) if chosen else 0.0,
                    *extra))
    return out


def _join(pieces: list[str]) -> str:
    return " ".join(piece for piece in pieces if piece)


def per_text(counts: Sequence[int], items: Sequence[Any]) -> list[list[Any]]:
    """``items`` (one per sentence of all texts, in order) cut back per text (``counts[i]`` each)."""
    out, k = [], 0
    for count in counts:
        out.append(list(items[k: k + count]))
        k += count
    return out


# Sentences longer than this many characters per token of the limit are first cut into blocks of
# that size at whitespace, so finding the pieces stays linear in the sentence's length (fit_spans
# searches each block; a whole 10 MB "sentence" would be tokenized again and again).
BLOCK_CHARS_PER_TOKEN = 16


def fitting_spans(sentence: str, count: Callable[[str], int], limit: int) -> list[tuple[int, int]]:
    """Spans ``[start, end)`` of ``sentence`` that each hold at most ``limit`` tokens as ``count``
    counts them: ``[(0, len(sentence))]`` when it fits whole, else pieces cut at clause
    punctuation, then between words (``segment.fit_spans``), with only whitespace between them.
    How an over-long sentence is split for the library, ``transformer translate`` and the server."""
    return [(0, len(sentence))] if count(sentence) <= limit else _cut(sentence, count, limit)


def _cut(sentence: str, count: Callable[[str], int], limit: int) -> list[tuple[int, int]]:
    """:func:`fitting_spans` of a sentence known to be over ``limit``."""
    block = max(limit * BLOCK_CHARS_PER_TOKEN, 1)
    if len(sentence) <= block:
        return fit_spans(sentence, count, limit)
    spans, start = [], 0
    while start < len(sentence):
        end = len(sentence)
        if end - start > block:
            cut = max(sentence.rfind(c, start + 1, start + block) for c in " \t\u00a0\u3000")
            end = cut if cut > start else start + block
        spans += [(start + a, start + b) for a, b in fit_spans(sentence[start:end], count, limit)]
        start = end
    return spans

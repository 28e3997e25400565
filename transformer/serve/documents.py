"""Texts of any length for the server: cut into sentences on arrival, put back together after.

A text sent to the server may hold several sentences, lines and paragraphs. On arrival each text
is cut into sentences (:func:`transformer.translate.segment.segment_text`, the segmenter of
:func:`transformer.translate.document.translate_document`) and each sentence is checked (it must
have tokens and fit ``max_input_tokens``); the request's sentences go to the dynamic batcher,
which may put them in model calls with other requests' sentences; the translations come back
in the text's structure (:meth:`Document.rebuild_with_spans`): line breaks, blank lines,
indentation and the spacing between sentences are kept, exactly as ``translate_document`` does.

Offsets (``source_span``, ``target_span``) are Python ``str`` indices: Unicode code points,
``[start, end)``. (JavaScript strings count UTF-16 code units: a character outside the Basic
Multilingual Plane, an emoji say, is one code point but two JavaScript units.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from transformer.translate.segment import Document, segment_text

# One hypothesis as the batcher returns it: (translation, score, log_prob).
Hyp = tuple[str, float, float]


class Unprocessable(Exception):
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


def segment_texts(texts: Sequence[str], lang: str | None, *, max_sentences: int,
                  encode_batch: Callable[[list[str]], list[list[int]]], input_limit: int,
                  names: Sequence[str] | None = None) -> list[Document]:
    """Every text cut into sentences, checked: :class:`Unprocessable` naming the first problem
    (more than ``max_sentences`` sentences in all, a sentence without tokens or longer than
    ``input_limit`` tokens). ``names``: how messages name each text (default "text", "text i").
    Runs the segmenter and the tokenizer: call it off the event loop."""
    names = list(names) if names is not None else [text_name(i, len(texts)) for i in range(len(texts))]
    documents = [segment_text(text, lang) for text in texts]
    total = sum(len(d.segments) for d in documents)
    if total > max_sentences:
        counts = ", ".join(str(len(d.segments)) for d in documents) if len(documents) > 1 else ""
        raise Unprocessable(f"the request holds {total} sentences{f' ({counts} per text)' if counts else ''}; "
                            f"at most {max_sentences} are translated per request (max_sentences)")
    for i, document in enumerate(documents):
        if not document.segments:
            raise Unprocessable(f"{names[i]} has no sentence to translate")
    check_sentences([s for d in documents for s in d.sentences],
                    [sentence_name(names[i], d, j) for i, d in enumerate(documents) for j in range(len(d.segments))],
                    encode_batch=encode_batch, input_limit=input_limit)
    return documents


def check_sentences(sentences: Sequence[str], names: Sequence[str], *,
                    encode_batch: Callable[[list[str]], list[list[int]]], input_limit: int) -> None:
    """:class:`Unprocessable` naming the first sentence without tokens or over ``input_limit`` tokens."""
    for name, seq in zip(names, encode_batch(list(sentences))):
        if not seq:
            raise Unprocessable(f"{name} has no tokens the model can read")
        if len(seq) > input_limit:
            raise Unprocessable(f"{name} is {len(seq)} tokens long; at most {input_limit} are translated "
                                "(max_input_tokens, per sentence)")


def sentences_of(documents: Sequence[Document]) -> list[str]:
    """The sentences of all documents, in order (what the batcher translates)."""
    return [s for d in documents for s in d.sentences]


def split_results(documents: Sequence[Document], results: Sequence[Any]) -> list[list[Any]]:
    """``results`` (one per sentence of all documents, in order) cut back per document."""
    out, k = [], 0
    for document in documents:
        out.append(list(results[k: k + len(document.segments)]))
        k += len(document.segments)
    return out


def rebuild(document: Document, translations: Sequence[str]) -> tuple[str, list[tuple[int, int]]]:
    """The translated text in ``document``'s structure, and each sentence's target span; empty
    translations stay empty, as in ``translate_document``."""
    return document.rebuild_with_spans(list(translations))


def assemble(document: Document, hyps: Sequence[Sequence[Hyp]], n_best: int) -> dict[str, Any]:
    """The ``Translation`` of one text from its sentences' hypotheses (best first).

    ``translation`` is the text with every sentence replaced by its best hypothesis. The k-th
    entry of ``n_best`` puts every sentence's k-th hypothesis (its last when it has fewer) in the
    same structure: its ``log_prob`` is the sum over the sentences (they are translated
    independently), its ``score`` the mean of theirs. A one-sentence text gets exactly that
    sentence's hypotheses, as before paragraphs were segmented."""
    alternatives = []
    for k in range(max(1, n_best)):
        chosen = [h[min(k, len(h) - 1)] for h in hyps]
        text, spans = rebuild(document, [c[0] for c in chosen])
        alternatives.append((text, spans, sum(c[1] for c in chosen) / len(chosen), sum(c[2] for c in chosen)))
    text, spans, score, _ = alternatives[0]
    sentences = [{"source_span": [segment.start, segment.end], "target_span": list(span), "line": segment.line + 1,
                  "score": h[0][1], "n_best": [{"translation": t, "score": s, "log_prob": lp} for t, s, lp in h]}
                 for segment, span, h in zip(document.segments, spans, hyps)]
    return {"source": document.text, "translation": text, "score": score,
            "n_best": [{"translation": t, "score": s, "log_prob": lp} for t, _, s, lp in alternatives],
            "sentences": sentences}

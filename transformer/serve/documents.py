"""Texts of any length for the server: cut into sentences on arrival, put back together after.

A text sent to the server may hold several sentences, lines and paragraphs. On arrival each text
is cut into sentences (:func:`transformer.translate.segment.segment_text`, the segmenter of
:func:`transformer.translate.document.translate_document`) and each sentence is checked (it must
have tokens the model reads). A sentence longer than ``max_input_tokens`` is split as
``translate_document`` splits it (:func:`transformer.translate.document.fitting_spans`: at
clause punctuation, then between words; never cut off), and a warning names it. The request's
sentences (or their pieces) go to the dynamic batcher, which may put them in model calls with
other requests' sentences; the pieces of a sentence are joined back into its translation
(:func:`transformer.translate.document.join_pieces`), and the translations come back in the
text's structure (:meth:`Document.rebuild_with_spans`): line breaks, blank lines, indentation and
the spacing between sentences are kept, exactly as ``translate_document`` does.

A request's ``alternatives`` (distinct translations of a text besides its translation) are built
from all its sentences' hypotheses by :func:`transformer.translate.alternatives.combine`, each
sentence's k-th distinct translation put in the text's structure.

A request's ``confidence`` (on a calibrated run) gives each sentence the confidence of its best
hypothesis, a sentence in pieces the lowest of its pieces' (as ``translate_document`` gives it),
and each text the lowest of its sentences'.

HTML pages (``format: "html"``) go through :mod:`transformer.translate.html`: their sentences are
the text of the page (tags removed, entities decoded), split and translated the same way, and the
page is rebuilt around the translations with its markup kept. A sentence of a page is not one
span of its markup, so its alignment has no spans: it carries its text instead.

The attention of one sentence is drawn for one model input: :func:`input_piece` says which part
of the text that is (the sentence, or one of its pieces) and where it lies.

Offsets (``source_span``, ``target_span``) are Python ``str`` indices: Unicode code points,
``[start, end)``. (JavaScript strings count UTF-16 code units: a character outside the Basic
Multilingual Plane, an emoji say, is one code point but two JavaScript units.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

from transformer.errors import UserError
from transformer.translate.alternatives import combine
from transformer.translate.document import fitting_spans, join_pieces
from transformer.translate.html import html_sentences, translate_html
from transformer.translate.segment import Document, segment_text

# One hypothesis as the batcher returns it: (translation, score, log_prob).
Hyp = tuple[str, float, float]


class ModelOutput(NamedTuple):
    """What the model gave for one input (a sentence or a piece of one): its hypotheses, best
    first, the glossary terms its best one lacks (``Term`` objects; none without a glossary), and
    its best one's confidence (None unless asked for on a calibrated run)."""

    hyps: list[Hyp]
    missing: tuple = ()
    confidence: float | None = None


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


@dataclass(frozen=True)
class ModelInputs:
    """What the model translates for a request's sentences (every text's, in order): each
    sentence whole, or in pieces when it is longer than the input limit."""

    texts: list[str]  # the batcher's inputs
    spans: list[list[tuple[int, int]]]  # per sentence: its pieces, [start, end) in the sentence
    warnings: list[list[dict[str, Any]]]  # per text: {"sentence": j, "message": ...} for each split sentence

    def hypotheses(self, results: Sequence[ModelOutput]) -> list[list[Hyp]]:
        """Per sentence, its hypotheses (best first) from ``results`` (one per input): a
        sentence's pieces joined back into one translation."""
        return [join_pieces([r.hyps for r in outputs if r.hyps]) for outputs in self._per_sentence(results)]

    def missing_terms(self, results: Sequence[ModelOutput]) -> list[list[Any]]:
        """Per sentence, the glossary terms its translation lacks (its pieces' together, each once)."""
        return [list(dict.fromkeys(term for r in outputs for term in r.missing))
                for outputs in self._per_sentence(results)]

    def confidences(self, results: Sequence[ModelOutput]) -> list[float | None]:
        """Per sentence, its translation's confidence: the lowest of its pieces' (as
        :func:`transformer.translate.document.translate_with_notes` gives it); None where a piece
        has none."""
        out = []
        for outputs in self._per_sentence(results):
            values = [r.confidence for r in outputs if r.hyps]
            out.append(min(values) if values and None not in values else None)
        return out

    def _per_sentence(self, results: Sequence[ModelOutput]) -> list[Sequence[ModelOutput]]:
        out, k = [], 0
        for spans in self.spans:
            out.append(results[k: k + len(spans)])
            k += len(spans)
        return out


def model_inputs(sentences: Sequence[Sequence[str]], names: Sequence[Sequence[str]], *,
                 encode_batch: Callable[[list[str]], list[list[int]]], input_limit: int) -> ModelInputs:
    """The model inputs for ``sentences`` (per text): :class:`Unprocessable` naming the first
    sentence without tokens; a sentence over ``input_limit`` tokens in pieces that fit, with a
    warning naming it (``names``: how messages name each sentence)."""
    flat = [s for text in sentences for s in text]
    ids = iter(encode_batch(flat))
    texts: list[str] = []
    spans: list[list[tuple[int, int]]] = []
    warnings: list[list[dict[str, Any]]] = []
    for text, text_names in zip(sentences, names):
        warnings.append([])
        for j, (sentence, name) in enumerate(zip(text, text_names)):
            length = len(next(ids))
            if not length:
                raise Unprocessable(f"{name} has no tokens the model can read")
            pieces = [(0, len(sentence))]
            if length > input_limit:
                pieces = fitting_spans(sentence, lambda piece: len(encode_batch([piece])[0]), input_limit)
                warnings[-1].append({"sentence": j, "message": (
                    f"{name} is {length} tokens long, over the limit of {input_limit} per sentence "
                    f"(max_input_tokens): translated in {len(pieces)} pieces, cut at clause punctuation "
                    "or between words")})
            spans.append(pieces)
            texts += [sentence[a:b] for a, b in pieces]
    return ModelInputs(texts, spans, warnings)


def _check_count(counts: Sequence[int], max_sentences: int) -> None:
    total = sum(counts)
    if total > max_sentences:
        per_text = f" ({', '.join(map(str, counts))} per text)" if len(counts) > 1 else ""
        raise Unprocessable(f"the request holds {total} sentences{per_text}; "
                            f"at most {max_sentences} are translated per request (max_sentences)")


def segment_texts(texts: Sequence[str], lang: str | None, *, max_sentences: int,
                  encode_batch: Callable[[list[str]], list[list[int]]], input_limit: int,
                  names: Sequence[str] | None = None) -> tuple[list[Document], ModelInputs]:
    """Every text cut into sentences, and the model inputs of those sentences;
    :class:`Unprocessable` naming the first problem (more than ``max_sentences`` sentences in
    all, a text or a sentence without tokens). ``names``: how messages name each text (default
    "text", "text i"). Runs the segmenter and the tokenizer: call it off the event loop."""
    names = list(names) if names is not None else [text_name(i, len(texts)) for i in range(len(texts))]
    documents = [segment_text(text, lang) for text in texts]
    _check_count([len(d.segments) for d in documents], max_sentences)
    for i, document in enumerate(documents):
        if not document.segments:
            raise Unprocessable(f"{names[i]} has no sentence to translate")
    inputs = model_inputs([d.sentences for d in documents],
                          [[sentence_name(names[i], d, j) for j in range(len(d.segments))]
                           for i, d in enumerate(documents)],
                          encode_batch=encode_batch, input_limit=input_limit)
    return documents, inputs


def html_sentences_of(pages: Sequence[str], lang: str | None, *, max_sentences: int,
                      encode_batch: Callable[[list[str]], list[list[int]]], input_limit: int,
                      names: Sequence[str]) -> tuple[list[list[str]], ModelInputs]:
    """The sentences of each HTML page's text (:func:`transformer.translate.html.html_sentences`;
    a page may have none), and their model inputs; :class:`Unprocessable` as for
    :func:`segment_texts`. Call it off the event loop."""
    found = [html_sentences(page, lang=lang) for page in pages]
    _check_count([len(f) for f in found], max_sentences)
    inputs = model_inputs(found, [[f"{name}, sentence {j} ({preview(s)})" for j, s in enumerate(f)]
                                  for name, f in zip(names, found)],
                          encode_batch=encode_batch, input_limit=input_limit)
    return found, inputs


def per_text(counts: Sequence[int], items: Sequence[Any]) -> list[list[Any]]:
    """``items`` (one per sentence of all texts, in order) cut back per text (``counts[i]`` each)."""
    out, k = [], 0
    for count in counts:
        out.append(list(items[k: k + count]))
        k += count
    return out


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
    the pieces ``spans`` (per sentence, offsets in the sentence: :attr:`ModelInputs.spans`);
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


def _kth(hyps: Sequence[Hyp], k: int) -> Hyp:
    """A sentence's k-th hypothesis, its last when it has fewer (none: an empty translation)."""
    return hyps[min(k, len(hyps) - 1)] if hyps else ("", 0.0, 0.0)


def _hypotheses(hyps: Sequence[Hyp]) -> list[dict[str, Any]]:
    return [{"translation": t, "score": s, "log_prob": lp} for t, s, lp in hyps]


def _translation(source: str, alternatives: list[tuple[str, float, float]], sentences: list[dict[str, Any]],
                 warnings: list[dict[str, Any]]) -> dict[str, Any]:
    return {"source": source, "translation": alternatives[0][0], "score": alternatives[0][1],
            "n_best": [{"translation": t, "score": s, "log_prob": lp} for t, s, lp in alternatives],
            "sentences": sentences, "warnings": warnings}


def _alternatives(hyps: Sequence[Sequence[Hyp]], count: int, build: Callable[[list[str]], str]) -> list[str]:
    """Up to ``count`` distinct translations of a text other than its best, from all its
    sentences' hypotheses (:func:`transformer.translate.alternatives.combine`)."""
    return combine([[h[0] for h in sentence] for sentence in hyps], count + 1, build)[1:]


def _with_missing_terms(translation: dict[str, Any], missing: Sequence[Sequence[Any]] | None,
                        names: Sequence[str]) -> dict[str, Any]:
    """``translation`` with each sentence's ``missing_terms`` and a warning for each sentence that
    has some (``names``: how the warnings name the sentences); as it was without a glossary (None)."""
    if missing is None:
        return translation
    for sentence, terms in zip(translation["sentences"], missing):
        sentence["missing_terms"] = [{"source": t.source, "target": t.target} for t in terms]
    added = [{"sentence": j, "message": f"{names[j]}: the glossary's "
              + ", ".join(f"{t.source!r} -> {t.target!r}" for t in terms)
              + " could not be placed in the translation within its length limit (max_length)"}
             for j, terms in enumerate(missing) if terms]
    translation["warnings"] = sorted(translation["warnings"] + added, key=lambda w: w["sentence"])
    return translation


def _with_confidence(translation: dict[str, Any], confidence: Sequence[float | None] | None) -> dict[str, Any]:
    """``translation`` with each sentence's ``confidence`` (4 decimals; absent where it has none)
    and the text's, the lowest of its sentences'; as it was without confidences (None)."""
    if confidence is None:
        return translation
    for sentence, value in zip(translation["sentences"], confidence):
        if value is not None:
            sentence["confidence"] = round(value, 4)
    if confidence and None not in confidence:
        translation["confidence"] = round(min(confidence), 4)
    return translation


def assemble(document: Document, hyps: Sequence[Sequence[Hyp]], pieces: Sequence[Sequence[tuple[int, int]]],
             warnings: list[dict[str, Any]], n_best: int, alternatives: int = 0,
             missing: Sequence[Sequence[Any]] | None = None, name: str = "text",
             confidence: Sequence[float | None] | None = None) -> dict[str, Any]:
    """The ``Translation`` of one text from its sentences' hypotheses (best first), the pieces
    each sentence was translated in, and the warnings about the text.

    ``translation`` is the text with every sentence replaced by its best hypothesis. The k-th
    entry of ``n_best`` puts every sentence's k-th hypothesis (its last when it has fewer) in the
    same structure: its ``log_prob`` is the sum over the sentences (they are translated
    independently), its ``score`` the mean of theirs. A one-sentence text gets exactly that
    sentence's hypotheses, as before paragraphs were segmented. Only the first ``n_best``
    hypotheses of a sentence are reported; with ``alternatives`` > 0 all of them give the
    text's ``alternatives``: up to that many distinct translations other than ``translation``
    (absent from the dict when ``alternatives`` is 0). ``missing``: with a glossary, each
    sentence's terms that its translation lacks (``missing_terms``, and a warning naming the
    sentence of the text ``name``). ``confidence``: each sentence's confidence, when asked for
    (``confidence`` of each sentence, rounded to 4 decimals, and of the text, the lowest)."""
    extra = {"alternatives": _alternatives(hyps, alternatives, document.rebuild)} if alternatives else {}
    hyps = [h[:max(1, n_best)] for h in hyps]
    ranked, spans = [], []
    for k in range(max(1, n_best)):
        chosen = [_kth(h, k) for h in hyps]
        text, targets = document.rebuild_with_spans([c[0] for c in chosen])  # empty ones stay empty
        spans.append(targets)
        ranked.append((text, sum(c[1] for c in chosen) / len(chosen), sum(c[2] for c in chosen)))
    sentences = [{"source_span": [segment.start, segment.end], "target_span": list(target), "line": segment.line + 1,
                  "text": None, "pieces": len(cuts), "score": _kth(h, 0)[1], "n_best": _hypotheses(h)}
                 for segment, target, h, cuts in zip(document.segments, spans[0], hyps, pieces)]
    names = [sentence_name(name, document, j) for j in range(len(document.segments))]
    translation = _with_missing_terms(_translation(document.text, ranked, sentences, warnings) | extra, missing, names)
    return _with_confidence(translation, confidence)


def _page_with(page: str, found: Sequence[str], translations: list[str], lang: str | None) -> str:
    """``page`` rebuilt around ``translations`` of the sentences ``found`` in its text, markup kept."""
    def given(asked: list[str]) -> list[str]:
        if list(asked) != list(found):  # the page is parsed the same way each time
            raise RuntimeError("the page's sentences changed between counting and translating")
        return translations

    return translate_html(page, given, lang=lang) if found else page


def assemble_html(page: str, found: Sequence[str], hyps: Sequence[Sequence[Hyp]],
                  pieces: Sequence[Sequence[tuple[int, int]]], warnings: list[dict[str, Any]], n_best: int,
                  lang: str | None, alternatives: int = 0, missing: Sequence[Sequence[Any]] | None = None,
                  name: str = "text", confidence: Sequence[float | None] | None = None) -> dict[str, Any]:
    """The ``Translation`` of one HTML page whose text's sentences are ``found``: the k-th entry
    of ``n_best`` is the page rebuilt around every sentence's k-th hypothesis
    (:func:`transformer.translate.html.translate_html`, markup kept), scored as in
    :func:`assemble`; a page without text comes back as it is (score 0). A page's sentence is
    not one span of its markup (tags and entities interrupt it, and the tags are placed anew in
    the translation): its alignment entry gives its ``text`` as the model read it, no spans.
    ``alternatives``: as in :func:`assemble`, each a page rebuilt (a page without text has none);
    ``missing``, ``name`` and ``confidence`` as there (a page without text has no confidence)."""
    extra = {}
    if alternatives:
        extra["alternatives"] = _alternatives(hyps, alternatives, lambda chosen: _page_with(page, found, chosen, lang))
    hyps = [h[:max(1, n_best)] for h in hyps]
    ranked = []
    for k in range(max(1, n_best) if found else 1):  # a page without text has one translation: itself
        chosen = [_kth(h, k) for h in hyps]
        text = _page_with(page, found, [c[0] for c in chosen], lang)
        ranked.append((text, sum(c[1] for c in chosen) / len(chosen) if chosen else 0.0,
                             sum(c[2] for c in chosen)))
    sentences = [{"source_span": None, "target_span": None, "line": None, "text": sentence, "pieces": len(cuts),
                  "score": _kth(h, 0)[1], "n_best": _hypotheses(h)}
                 for sentence, h, cuts in zip(found, hyps, pieces)]
    names = [f"{name}, sentence {j} ({preview(sentence)})" for j, sentence in enumerate(found)]
    return _with_confidence(_with_missing_terms(_translation(page, ranked, sentences, warnings) | extra, missing, names),
                            confidence)

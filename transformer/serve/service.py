"""One model's translation service: what the server's routes call, with no HTTP in it.

:class:`TranslationService` holds a translator (loaded once, shared by every request), the
server's limits, the language pair it reports and the dynamic batcher that runs the model
(:mod:`transformer.serve.batching`), and offers the operations of the API:

* :meth:`~TranslationService.translate_texts` and :meth:`~TranslationService.translate_pages`:
  texts (or HTML pages) cut into sentences, planned and assembled as the library does it
  (:mod:`transformer.translate.pipeline`), translated through the batcher between, answered
  in their structure (:mod:`transformer.serve.documents`), with distinct alternatives when asked for, and
  with a request's glossary (:meth:`~TranslationService.glossary`; its terms are part of the
  batcher's key, so only requests with the same terms share a model call), and with each
  sentence's confidence when a request asks for it and the run is calibrated (``calibrated``);
  with a translation memory (``memory``, :mod:`transformer.serve.memory`), the sentences it holds
  accepted translations of are answered from it and only the others reach the batcher (as do
  :meth:`~TranslationService.translate_sentences`' for files), translated again with the terms
  they share with their fuzzy matches where the memory has ``constraints`` and the model is
  unsure of its translation;
* :meth:`~TranslationService.attention`: the translation of one sentence (or piece) of a text
  and every attention weight of it;
* :meth:`~TranslationService.model_info`, :meth:`~TranslationService.health`,
  :meth:`~TranslationService.decoding`: what is served, how busy it is, what a request gets;
* :meth:`~TranslationService.close`: stop the batcher's worker (the app's shutdown).

The routes (:mod:`transformer.serve.routes`, :mod:`transformer.serve.libretranslate`) turn
HTTP requests into these calls and their results into answers; the layering is routes ->
service -> batcher -> translator. A request the service cannot serve raises
:class:`~transformer.serve.documents.Unprocessable` (422, or 400 on LibreTranslate's API),
:class:`~transformer.serve.batching.Overloaded` or :class:`~transformer.serve.batching.TimedOut`
(503). The operations are coroutines: the batcher's queue lives on the event loop, and the
segmenter and tokenizer run on a worker thread so that they do not hold it up.

A service serves one model in one direction; a server of several models has one service each.
"""

from __future__ import annotations

import asyncio
import functools
import re
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import anyio.to_thread
import torch

from transformer.decoding import Hypothesis
from transformer.errors import UserError
from transformer.serve.batching import BatchInfo, DynamicBatcher, Overloaded
from transformer.serve.documents import (
    Document,
    InputPiece,
    Unprocessable,
    assemble,
    assemble_html,
    html_sentences_of,
    input_piece,
    segment_texts,
    text_name,
)
from transformer.serve.limits import ServeLimits
from transformer.serve.memory import NOTHING, Recalled, ServerMemory
from transformer.serve.schemas import ConfidenceInfo, Decoding, ModelInfo
from transformer.translate.calibration import attach_confidence
from transformer.translate.glossary import Glossary, GlossaryError
from transformer.translate.tm_terms import retranslate_unsure
from transformer.translate.pipeline import ModelOutput, Plan, per_text, plan
from transformer.translate.translator import Translator
from transformer.visualize.data import collect_attention, token_limit

T = TypeVar("T")


@dataclass(frozen=True)
class DecodingSettings:
    """The decoding a request chooses; the batcher's key (only sentences with equal settings
    share a model call).

    Args:
        beam_size: beam width; 1 is greedy search.
        n_best: hypotheses per sentence (at most ``beam_size``).
        max_length: output tokens per sentence; None: the translator's (input length + 50).
        glossary: ``(source, target)`` terms the translations must use, as
            :meth:`TranslationService.glossary` checked them (empty: none).
        confidence: compute the confidence of each sentence's best hypothesis (only where the
            run is calibrated: ``TranslationService.calibrated``).
        memory_matches: ``(input, source, target)``: the best fuzzy match of each input that
            has one (with ``--tm-constraints``); an input the model is unsure of is translated
            again with the terms it shares with its match, after ``glossary``'s
            (:func:`~transformer.translate.tm_terms.retranslate_unsure`).
    """

    beam_size: int
    n_best: int = 1
    max_length: int | None = None
    glossary: tuple[tuple[str, str], ...] = ()
    confidence: bool = False
    memory_matches: tuple[tuple[str, str, str], ...] = ()


@functools.lru_cache(maxsize=64)
def _glossary(pairs: tuple[tuple[str, str], ...]) -> Glossary | None:
    """The glossary of checked ``pairs``, built once for the model calls of the requests that share them."""
    return Glossary.from_pairs(pairs) if pairs else None


@dataclass(frozen=True)
class SentenceAttention:
    """The answer of :meth:`TranslationService.attention`."""

    data: dict[str, Any]  # the document of transformer/visualize/schema.json
    piece: InputPiece  # which sentence (and piece) of the text it is, and where
    info: BatchInfo


def _in_use(method: Callable[..., Any]) -> Callable[..., Any]:
    """Count the calls of a service's operation in progress (:meth:`TranslationService.busy`): a
    service replaced by a reload is closed only once none is left."""
    @functools.wraps(method)
    async def counted(self: TranslationService, *args: Any, **kwargs: Any) -> Any:
        self.active += 1
        try:
            return await method(self, *args, **kwargs)
        finally:
            self.active -= 1
    return counted


async def _off_the_loop(fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``fn(*args, **kwargs)`` on a worker thread of anyio's pool (where FastAPI runs blocking code)."""
    return await anyio.to_thread.run_sync(functools.partial(fn, *args, **kwargs))


def _noted(answers: list[dict[str, Any]], recalled: list[list[Recalled]]) -> list[dict[str, Any]]:
    """Each text's sentences completed with what the memory holds for them (``memory`` where an
    entry is the translation, ``memory_alternatives`` for fuzzy matches and ``memory_terms`` for
    the terms they gave; nothing without)."""
    for answer, found in zip(answers, recalled):
        for sentence, one in zip(answer["sentences"], found):
            sentence.update(one.notes())
    return answers


# BCP 47-like: a 2- or 3-letter language, then up to 3 subtags (script, region, variant): fr, pt-br, zh-hant.
_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}(?:[-_][a-z0-9]{1,8}){0,3}")
RESERVED_CODES = ("auto",)  # a request's source "auto" asks for detection: no run may be that language


def language_code(code: str | None, what: str) -> str | None:
    """A run's language code lower-cased (requests are matched in lower case), or :class:`UserError`
    naming it when it is not a BCP 47-like code (``fr``, ``pt-BR``, ``zh-Hant``) or is reserved."""
    if code is None or code == "":  # the run does not say
        return None
    lowered = code.lower() if isinstance(code, str) else code
    if lowered in RESERVED_CODES:
        raise UserError(f"the run's {what} language {code!r} is reserved (a request's source 'auto' asks for "
                        "detection): name the run's language in its config")
    if not isinstance(lowered, str) or not _LANGUAGE_CODE.fullmatch(lowered):
        raise UserError(f"the run's {what} language {str(code)[:40]!r} is not a language code (a 2- or 3-letter "
                        "code with optional subtags: fr, pt-BR, zh-Hant): check data.src_lang and data.tgt_lang "
                        "in its config")
    return lowered


class TranslationService:
    """The operations of the translation server for one model (see the module docstring).

    Args:
        translator: the model, its tokenizers and its default decoding (a sampling translator
            is served with beam search: a server answers the same text the same way).
        limits: the bounds on a request's work (default :class:`ServeLimits`).
        src_lang, tgt_lang: the language pair reported to clients (None: the run does not say);
            the source language also picks the sentence splitter, the translator's own when None.
        version: which model it is (:class:`~transformer.serve.reload.ModelVersion`: the run's step and
            the weights' hash), named in answers; None where it was not loaded from a run directory.
        memory: the translation memory sentences are looked up in before the model translates
            them (:mod:`transformer.serve.memory`; None: none).
    """

    def __init__(self, translator: Translator, limits: ServeLimits | None = None, *, version: Any = None,
                 src_lang: str | None = None,
                 tgt_lang: str | None = None, memory: ServerMemory | None = None) -> None:
        self.memory = memory
        self.limits = limits = limits or ServeLimits()
        self.version = version
        self.active = 0  # operations in progress (_in_use)
        # Sampling would answer the same text differently each time: a sampling translator is served by search.
        self.translator = translator.with_decoding(strategy="beam", n_best=1, return_attention=False) \
            if translator.decoding.strategy == "sample" else translator
        # as reported to clients and matched against requests: checked, lower-cased
        self.src_lang, self.tgt_lang = language_code(src_lang, "source"), language_code(tgt_lang, "target")
        self.segment_lang = src_lang or self.translator.src_lang  # the sentence splitter's
        self.input_limit = min(limits.max_input_tokens, translator.max_input_tokens)  # source tokens per model input
        self.default = DecodingSettings(self.translator.decoding.beam_size)  # for a request that chooses nothing
        # A translation's confidence needs the run's calibration (RUN_DIR/confidence.json).
        self.calibrated = self.translator.calibration is not None
        # A request's own call may hold up to max_texts sentences, as a list of max_texts texts always could.
        self.batcher = DynamicBatcher(self._run_batch, max_batch_size=limits.max_batch_size,
                                      batch_wait_ms=limits.batch_wait_ms, max_queue=limits.max_queue,
                                      timeout_s=limits.timeout_s,
                                      max_alone=max(limits.max_batch_size, limits.max_texts))

    # -- decoding ------------------------------------------------------------------------------
    def translator_for(self, settings: DecodingSettings) -> Translator:
        """The translator decoding with ``settings`` (greedy search for a beam of 1)."""
        lengths = {} if settings.max_length is None else {"max_len_a": 0.0, "max_len_b": settings.max_length}
        if settings.beam_size == 1:
            return self.translator.with_decoding(strategy="greedy", n_best=1, **lengths)
        return self.translator.with_decoding(strategy="beam", beam_size=settings.beam_size, n_best=settings.n_best,
                                             **lengths)

    def decoding(self, settings: DecodingSettings) -> Decoding:
        """How a request with ``settings`` is decoded, as the API reports it."""
        return Decoding(strategy="greedy" if settings.beam_size == 1 else "beam", beam_size=settings.beam_size,
                        n_best=settings.n_best, alpha=self.translator.decoding.alpha, max_length=settings.max_length)

    def glossary(self, pairs: list[tuple[str, str]] | None) -> tuple[tuple[str, str], ...]:
        """A request's glossary checked (:class:`Unprocessable` naming the first bad pair: an empty
        side, a tab or line break in one, a source given twice with different targets), as
        ``DecodingSettings.glossary``; () for none."""
        if not pairs:
            return ()
        try:
            glossary = Glossary.from_pairs(pairs)
        except GlossaryError as err:
            raise Unprocessable(str(err)) from None
        return tuple((term.source, term.target) for term in glossary.terms)

    def _check_glossary(self, settings: DecodingSettings, texts: list[str]) -> None:
        """:class:`Unprocessable` for a term found in ``texts`` that is longer than any output
        (checked on arrival, so that it never fails a model call other requests share), or for
        more constrained search than ``max_glossary_work`` (terms found x beam size)."""
        if settings.glossary:
            try:
                terms = self.translator_for(settings).glossary_terms(texts, _glossary(settings.glossary))
            except GlossaryError as err:
                raise Unprocessable(str(err)) from None
            found = sum(map(len, terms))
            work, limit = found * settings.beam_size, self.limits.max_glossary_work
            if work > limit:
                raise Unprocessable(f"the glossary's terms are found {found} times in the request's sentences; "
                                    f"at beam_size {settings.beam_size} that is {work} units of constrained search, "
                                    f"more than the {limit} a request may ask for (--max-glossary-work): send "
                                    "fewer sentences or terms, or a smaller beam_size")

    def _run_batch(self, settings: DecodingSettings, texts: list[str]) -> list[ModelOutput]:
        """One model call of the batcher (on its worker thread): each text's hypotheses, best
        first, the glossary terms its best one lacks, and with ``settings.confidence`` the best
        one's confidence. With a glossary, a hypothesis after the best that lacks a term (cut at
        the length limit before it could hold it) is left out."""
        chosen = self.translator_for(settings)
        glossary = _glossary(settings.glossary)
        used = [()] * len(texts)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # lengths were checked on arrival; nothing is cut
            n_best = chosen.translate_n_best(texts, glossary=glossary)
            if settings.memory_matches:
                matches = {text: (source, target) for text, source, target in settings.memory_matches}
                used = retranslate_unsure(chosen, texts, n_best, [matches.get(text) for text in texts],
                                          [glossary] * len(texts), {"glossary": glossary}, self.memory.unsure_below)
            terms = chosen.glossary_terms(texts, glossary) if glossary else [[] for _ in texts]
            best = [hyps[0] if hyps else None for hyps in n_best]
            confidences = self._confidences(chosen, texts, best) if settings.confidence else [None] * len(texts)
        if glossary:  # after the best, only hypotheses that hold every term found are translations to offer
            n_best = [[h for k, h in enumerate(hyps) if k == 0 or not h.unmet] for hyps in n_best]
        return [ModelOutput([(chosen.detokenize(h), float(h.score), float(h.log_prob)) for h in hyps],
                            tuple(found[c] for c in hyps[0].unmet) if hyps else (), confidence, tuple(memory))
                for hyps, found, confidence, memory in zip(n_best, terms, confidences, used)]

    @staticmethod
    def _confidences(translator: Translator, texts: list[str], best: list[Hypothesis | None]) -> list[float | None]:
        """The confidence of each text's best hypothesis, from one teacher-forced pass over them all
        (the features of a hypothesis do not depend on its batch, so each is what
        ``translate_n_best(texts, confidence=True)`` gives it). None for a text without a
        hypothesis."""
        rows = [i for i, h in enumerate(best) if h is not None]
        if rows:
            ids = translator.encode_sources([texts[i] for i in rows])
            src = torch.full((len(rows), max(len(seq) for seq in ids)), translator.vocab.src.pad_id, dtype=torch.long)
            mask = torch.zeros_like(src, dtype=torch.bool)
            for row, seq in enumerate(ids):
                src[row, : len(seq)] = torch.tensor(seq, dtype=torch.long)
                mask[row, : len(seq)] = True
            attach_confidence(translator.model, src.to(translator.device), mask.to(translator.device),
                              [[best[i]] for i in rows], translator.calibration,
                              bos_id=translator.vocab.tgt.bos_id, eos_id=translator.vocab.tgt.eos_id)
        return [h.confidence if h is not None else None for h in best]

    # -- translation ---------------------------------------------------------------------------
    def kept_whole(self) -> Callable[[str], bool] | None:
        """For cutting texts into sentences: which lines of several sentences stay whole (those
        that are one entry of the translation memory); None without a memory."""
        return self.memory.keeps_whole(self.src_lang, self.tgt_lang) if self.memory is not None else None

    async def _segment(self, texts: list[str],
                       names: list[str] | None = None) -> tuple[list[Document], Plan, list[list[dict[str, Any]]]]:
        """The texts cut into checked sentences (:class:`Unprocessable` naming the first problem),
        the model inputs (an over-long sentence in pieces) and each text's warnings, off the event loop."""
        self.batcher.check_capacity(len(texts))  # every text has a sentence at least: refuse early
        documents, planned, warnings = await _off_the_loop(segment_texts, texts, self.segment_lang,
                                                           max_sentences=self.limits.max_sentences,
                                                           encode_batch=self.translator.vocab.src.encode_batch,
                                                           input_limit=self.input_limit, names=names,
                                                           whole=self.kept_whole())
        self.batcher.check_capacity(len(planned.inputs))
        return documents, planned, warnings

    @_in_use
    async def translate_texts(self, texts: list[str], settings: DecodingSettings | None = None, *,
                              names: list[str] | None = None,
                              alternatives: int = 0) -> tuple[list[dict[str, Any]], BatchInfo]:
        """Each text translated sentence by sentence in its structure.

        Args:
            texts: the texts, each of any number of sentences, lines and paragraphs.
            settings: the decoding (default :attr:`default`).
            names: how error messages name each text (default "text", "text i").
            alternatives: up to this many distinct translations of each text besides its
                translation (:mod:`transformer.translate.alternatives`: at most
                ``beam_size - 1``); 0: none, and no ``alternatives`` key.

        With ``settings.confidence`` each sentence gets the ``confidence`` of its best
        hypothesis (a sentence in pieces the lowest of its pieces'), and each text the lowest of
        its sentences'.

        Returns:
            The ``Translation`` dict of each text (:func:`transformer.serve.documents.assemble`)
            and how the batcher served the request.
        """
        settings = settings or self.default
        names = names or [text_name(i, len(texts)) for i in range(len(texts))]
        documents, planned, warnings = await self._segment(texts, names)
        await _off_the_loop(self._check_glossary, settings, planned.inputs)
        searched = self._searched(settings, alternatives)
        results, info, recalled = await self._memory_first(
            planned, searched, lambda how, inputs: self.batcher.translate(how, inputs))
        counts = [len(d.segments) for d in documents]
        translated, pieces = per_text(counts, planned.assemble(results)), per_text(counts, planned.spans)
        answers = [assemble(document, t, p, w, settings.n_best, alternatives, glossary=bool(settings.glossary),
                            confidence=settings.confidence, name=name)
                   for document, t, p, w, name in zip(documents, translated, pieces, warnings, names)]
        return _noted(answers, per_text(counts, recalled)), info

    async def _memory_first(self, planned: Plan, settings: DecodingSettings,
                            run: Callable[[DecodingSettings, list[str]], Any]
                            ) -> tuple[list[ModelOutput], BatchInfo, list[Recalled]]:
        """The output of each of ``planned``'s inputs, from the translation memory where it holds
        an accepted translation of the sentence, from ``await run(settings, inputs)`` (the
        batcher) for the others, how the batcher served them, and what the memory holds for each
        sentence. Only a sentence translated whole is looked up (a piece of one is not a sentence
        of the memory); without a memory every input goes to ``run``. With the memory's
        ``constraints`` and beam search, the sentences' best fuzzy matches go with them
        (``settings.memory_matches``), and the terms a translation was made with are its
        sentence's ``recalled`` terms."""
        if self.memory is None:
            results, info = await run(settings, planned.inputs)
            return results, info, [NOTHING] * len(planned.sentences)
        whole = [j for j, spans in enumerate(planned.spans) if len(spans) == 1]
        found = await _off_the_loop(self.memory.recall, [planned.sentences[j] for j in whole], self.src_lang,
                                    self.tgt_lang)
        recalled = [NOTHING] * len(planned.sentences)
        for j, one in zip(whole, found):
            recalled[j] = one
        first = [0]  # each sentence's first input
        for spans in planned.spans:
            first.append(first[-1] + len(spans))
        if self.memory.constraints and settings.beam_size > 1:
            best = {j: recalled[j].matches[0].entry for j in whole if recalled[j].entry is None and recalled[j].matches}
            settings = replace(settings, memory_matches=tuple(
                (planned.inputs[first[j]], entry.source, entry.target) for j, entry in best.items()))
        served = {first[j]: recalled[j].entry for j in whole if recalled[j].entry is not None}
        todo = [i for i in range(len(planned.inputs)) if i not in served]
        outputs: list[ModelOutput | None] = [None] * len(planned.inputs)
        info = BatchInfo(queue_ms=0.0, compute_ms=0.0, batch_size=0, batch_requests=0, model_calls=0)
        if todo:  # the model runs only for what the memory does not hold
            results, info = await run(settings, [planned.inputs[i] for i in todo])
            for i, result in zip(todo, results):
                outputs[i] = result
        for i, entry in served.items():  # an accepted translation: no model score, no confidence
            outputs[i] = ModelOutput([(entry.target, 0.0, 0.0)])
        for j in whole:
            if outputs[first[j]].memory_terms:
                recalled[j] = replace(recalled[j], terms=outputs[first[j]].memory_terms)
        return outputs, info, recalled

    @staticmethod
    def _searched(settings: DecodingSettings, alternatives: int) -> DecodingSettings:
        """The decoding that gives ``alternatives``: every hypothesis the beam keeps (its best is
        the same; the answer's ``n_best`` keeps the request's count)."""
        return replace(settings, n_best=settings.beam_size) if alternatives else settings

    @_in_use
    async def translate_sentences(self, sentences: list[str], settings: DecodingSettings | None = None, *,
                                  busy_wait_s: float = 0.05) -> list[str]:
        """The best translation of each sentence, for the sentences of a whole file: no sentence
        limit (``max_sentences`` is a request's), fed to the batcher in calls of at most
        ``max_batch_size`` so other requests' sentences still get their turn; a call that finds
        the queue full waits for room (``busy_wait_s`` between tries) until ``timeout_s``. A
        sentence over ``max_input_tokens`` is translated in pieces; one without a token the model
        reads, or without a letter, is kept as it is.
        """
        settings = replace(settings or self.default, n_best=1, confidence=False)
        encode = self.translator.vocab.src.encode_batch
        ids = await _off_the_loop(encode, sentences) if sentences else []
        todo = [i for i, (s, seq) in enumerate(zip(sentences, ids)) if seq and any(c.isalpha() for c in s)]
        out = list(sentences)
        step = max(1, self.limits.max_batch_size)
        for start in range(0, len(todo), step):
            rows = todo[start:start + step]
            planned = await _off_the_loop(plan, [sentences[i] for i in rows], encode, self.input_limit)

            async def run(how: DecodingSettings, inputs: list[str]) -> tuple[list[ModelOutput], None]:
                return await self._when_there_is_room(how, inputs, busy_wait_s), None

            results, _, _ = await self._memory_first(planned, settings, run)
            for i, translated in zip(rows, planned.assemble(results)):
                out[i] = translated.hyps[0][0] if translated.hyps else sentences[i]
        return out

    async def _when_there_is_room(self, settings: DecodingSettings, texts: list[str],
                                  busy_wait_s: float) -> list[ModelOutput]:
        """The batcher's results for ``texts``, waiting (up to ``timeout_s``) while its queue is full."""
        deadline = time.monotonic() + self.limits.timeout_s
        while True:
            try:
                results, _ = await self.batcher.translate(settings, texts)
                return results
            except Overloaded:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(busy_wait_s)

    @_in_use
    async def translate_pages(self, pages: list[str], settings: DecodingSettings | None = None, *,
                              names: list[str] | None = None,
                              alternatives: int = 0) -> tuple[list[dict[str, Any]], BatchInfo]:
        """Each HTML page's text translated, its markup kept; the pages' sentences are counted and
        checked first, then translated as one request through the batcher.

        Args and Returns as :meth:`translate_texts`; the dicts are those of
        :func:`transformer.serve.documents.assemble_html` (a page without text comes back as it is).
        """
        settings = settings or self.default
        names = names or [text_name(i, len(pages)) for i in range(len(pages))]
        self.batcher.check_capacity(len(pages))
        found, planned, warnings = await _off_the_loop(html_sentences_of, pages, self.segment_lang,
                                                       max_sentences=self.limits.max_sentences,
                                                       encode_batch=self.translator.vocab.src.encode_batch,
                                                       input_limit=self.input_limit, names=names)
        results, info = [], BatchInfo(queue_ms=0.0, compute_ms=0.0, batch_size=0, batch_requests=0, model_calls=0)
        recalled = [NOTHING] * len(planned.sentences)
        if planned.inputs:  # a page may have no text to translate
            self.batcher.check_capacity(len(planned.inputs))
            await _off_the_loop(self._check_glossary, settings, planned.inputs)
            searched = self._searched(settings, alternatives)
            results, info, recalled = await self._memory_first(
                planned, searched, lambda how, inputs: self.batcher.translate(how, inputs))
        counts = [len(f) for f in found]
        translated, pieces = per_text(counts, planned.assemble(results)), per_text(counts, planned.spans)

        def rebuild() -> list[dict[str, Any]]:  # parsing the pages again: off the event loop
            return [assemble_html(page, f, t, p, w, settings.n_best, self.segment_lang, alternatives,
                                  glossary=bool(settings.glossary), confidence=settings.confidence, name=name)
                    for page, f, t, p, w, name in zip(pages, found, translated, pieces, warnings, names)]

        return _noted(await _off_the_loop(rebuild), per_text(counts, recalled)), info

    # -- attention -----------------------------------------------------------------------------
    @_in_use
    async def attention(self, text: str, settings: DecodingSettings | None = None, *, sentence: int = 0,
                        piece: int = 0) -> SentenceAttention:
        """The translation of one sentence of ``text`` and every attention weight of it.

        Args:
            text: a text of any number of sentences, cut as :meth:`translate_texts` cuts it.
            settings: the decoding (``n_best`` is not used; default :attr:`default`).
            sentence: which sentence, from 0.
            piece: which piece of a sentence translated in pieces (a sentence that fits is piece 0);
                the model reads one piece at a time.

        Returns:
            The attention document of that piece, where it is in the text, and how the batcher
            served it. :class:`Unprocessable` when the sentence or the piece does not exist.
        """
        settings = settings or self.default
        documents, planned, _ = await self._segment([text])
        chosen = input_piece(documents[0], planned.spans, sentence, piece)
        settings = replace(settings, n_best=1, max_length=self._attention_length(chosen.text, settings.max_length))
        await _off_the_loop(self._check_glossary, settings, [chosen.text])
        translator, glossary = self.translator_for(settings), _glossary(settings.glossary)

        def run() -> dict[str, Any]:
            translation = None  # the translator's own, unless a glossary term is in the sentence
            if glossary is not None and glossary.matches(chosen.text):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # a missing term is /v1/translate's to report
                    translation = translator.translate([chosen.text], glossary=glossary)[0]
            return collect_attention(translator, chosen.text, translation=translation).to_dict()

        data, info = await self.batcher.call(run)
        return SentenceAttention(data, chosen, info)

    def _attention_length(self, sentence: str, requested: int | None) -> int | None:
        """``max_length`` for the attention of ``sentence``: the teacher-forced pass reads <s> and
        every output token, one position more than decoding does, so a translation that would
        reach the end of a learned position table is cut one token shorter (only such a one)."""
        limit = token_limit(self.translator.model.config) - 1
        if requested is not None:
            return min(requested, limit)
        d = self.translator.decoding
        decoded = int(len(self.translator.vocab.src.encode(sentence)) * d.max_len_a + d.max_len_b)
        return None if decoded <= limit else limit

    # -- the model and the queue ---------------------------------------------------------------
    def model_info(self) -> ModelInfo:
        """The model being served: languages, vocabularies, config, default decoding, limits, and
        whether it gives confidences."""
        base, config = self.translator, self.translator.model.config
        calibration = base.calibration
        confidence = ConfidenceInfo(calibrated=self.calibrated, threshold=self.limits.confidence_threshold,
                                    chrf=None if calibration is None else calibration.threshold)
        return ModelInfo(src_lang=self.src_lang, tgt_lang=self.tgt_lang, src_vocab_size=config.src_vocab_size,
                         tgt_vocab_size=config.tgt_vocab_size, shared_vocabulary=base.vocab.joint,
                         parameters=base.model.num_parameters(), config=config.to_dict(),
                         decoding=self.decoding(self.default), limits=self.limits.to_dict(), confidence=confidence,
                         version=self.version.to_dict() if self.version is not None else None)

    def health(self) -> dict[str, Any]:
        """The batcher's queue state and counters."""
        return self.batcher.health()

    def busy(self) -> bool:
        """Whether a request is using the service: an operation in progress, texts queued or in a model call."""
        state = self.batcher.health()
        return bool(self.active or state["queued_texts"] or state["running_texts"])

    async def close(self) -> None:
        """Stop the batcher's worker task and thread (requests still queued fail with
        :class:`~transformer.serve.batching.TimedOut`); the next request starts them again."""
        await self.batcher.close()


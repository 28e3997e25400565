"""A server of several models: which model (or chain of two) translates which language pair.

A server is given one or more runs, each a language pair (its ``data.src_lang`` and
``data.tgt_lang``), each served by its own :class:`~transformer.serve.service.TranslationService`
(the model loaded once, its own dynamic batcher). :class:`ModelSet` holds them and answers
:meth:`ModelSet.route`: a pair with a model of its own is translated by it; a pair without one,
where a model translates the source into the pivot language (English by default) and another
the pivot into the target, is translated through the pivot (fr -> de as fr -> en, then en -> de).
A :class:`Route` runs the one or two steps; a route through the pivot says so (``via``).

With ``source`` "auto", the language of each text is detected
(:mod:`transformer.translate.detect`) among the languages a route leads from to the target,
and the target itself (a text already in the target language comes back as it is).

A server of one model that does not record its languages is served as before: every request goes
to it, whatever languages it names.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from transformer.errors import UserError
from transformer.serve.batching import BatchInfo
from transformer.serve.documents import Unprocessable
from transformer.serve.limits import PIVOT
from transformer.serve.service import DecodingSettings, TranslationService
from transformer.text.languages import language_name


UNKNOWN = "und"  # ISO 639's "undetermined": a run that does not record a language
AUTO = "auto"


class NoRoute(Unprocessable):
    """A language pair the server cannot translate (the message names it and what is served)."""


@dataclass(frozen=True)
class Detected:
    """The language detected for one text: its code and the detector's probability (0 to 1)."""

    language: str
    confidence: float


def _merge(first: BatchInfo, second: BatchInfo) -> BatchInfo:
    """How a request served in two steps was served: waits and computation added, the larger batch."""
    return BatchInfo(queue_ms=first.queue_ms + second.queue_ms, compute_ms=first.compute_ms + second.compute_ms,
                     batch_size=max(first.batch_size, second.batch_size),
                     batch_requests=max(first.batch_requests, second.batch_requests),
                     model_calls=first.model_calls + second.model_calls)


def unchanged(text: str, alternatives: int = 0) -> dict[str, Any]:
    """The answer for a text given back as it is (detected as the target language already)."""
    result = {"source": text, "translation": text, "score": 0.0,
              "n_best": [{"translation": text, "score": 0.0, "log_prob": 0.0}], "sentences": [], "warnings": []}
    if alternatives:
        result["alternatives"] = []
    return result


def _holding(method):
    """Count a route's operation as in progress on every step's service for as long as it runs: a
    reload does not close the second model of a route through the pivot while the first works."""
    @functools.wraps(method)
    async def held(self: Route, *args: Any, **kwargs: Any) -> Any:
        for service in self.steps:
            service.active += 1
        try:
            return await method(self, *args, **kwargs)
        finally:
            for service in self.steps:
                service.active -= 1
    return held


@dataclass(frozen=True)
class Route:
    """How one language pair is translated: one model, or two through the pivot language.

    Attributes:
        source, target: the pair (None where a run of one model does not record it).
        steps: the services, in order (one, or two whose languages meet at the pivot).
    """

    source: str | None
    target: str | None
    steps: tuple[TranslationService, ...]

    @property
    def via(self) -> str | None:
        """The pivot language of a route of two steps; None for a model of its own."""
        return self.steps[0].tgt_lang if len(self.steps) > 1 else None

    @property
    def last(self) -> TranslationService:
        return self.steps[-1]

    def check_settings(self, settings: DecodingSettings) -> None:
        """:class:`Unprocessable` for what a route through the pivot cannot give: a glossary (its
        terms are source -> target words, and no step translates source into target)."""
        if self.via is not None and settings.glossary:
            raise Unprocessable(f"a glossary cannot be used for {self.source} -> {self.target}: no model translates "
                                f"{self.source} into {self.target} (it is translated through {self.via}), and a "
                                "glossary's terms are source -> target words")

    @_holding
    async def translate_sentences(self, sentences: list[str]) -> list[str]:
        """The best translation of each sentence along the route, each step with its model's
        default decoding (:meth:`TranslationService.translate_sentences`: a whole file's)."""
        for service in self.steps:
            sentences = await service.translate_sentences(sentences)
        return sentences

    @_holding
    async def translate(self, texts: list[str], settings: DecodingSettings | None = None, *, html: bool = False,
                        names: list[str] | None = None, alternatives: int = 0) -> tuple[list[dict[str, Any]],
                                                                                        BatchInfo]:
        """The texts (or HTML pages) translated along the route.

        Through the pivot, the first step translates each text with its model's default decoding
        (the best hypothesis only), and the second translates those translations with
        ``settings`` (n-best, alternatives, confidence, lengths): its answer is the route's, with
        ``via`` (the pivot language and the text in it, which the sentence alignment refers to)
        added to each text's.
        """
        settings = settings or self.last.default
        self.check_settings(settings)

        def run(service: TranslationService):
            return service.translate_pages if html else service.translate_texts

        if len(self.steps) == 1:
            return await run(self.last)(texts, settings, names=names, alternatives=alternatives)
        first, second = self.steps
        middle, info = await run(first)(texts, first.default, names=names)
        pivots = [result["translation"] for result in middle]
        results, more = await run(second)(pivots, settings, names=names, alternatives=alternatives)
        for result, pivot in zip(results, pivots):
            result["source"] = pivot
            result["via"] = {"language": self.via, "translation": pivot}
        return results, _merge(info, more)


class ModelSet:
    """The services of a server, one per language pair, and the routes between its languages.

    Args:
        services: one per model; no two may serve the same pair. Only a server of one model may
            serve a run that does not record its languages.
        pivot: the language pairs without a model of their own are translated through (None: none are).
    """

    def __init__(self, services: Sequence[TranslationService], *, pivot: str | None = PIVOT) -> None:
        if not services:
            raise UserError("a server needs at least one model")
        self.services = list(services)
        self.pivot = pivot
        self.pairs: dict[tuple[str, str], TranslationService] = {}
        for service in self.services:
            if len(self.services) > 1 and not (service.src_lang and service.tgt_lang):
                raise UserError("a server of several models needs each run's languages (data.src_lang and "
                                "data.tgt_lang in its config); one does not record them")
            pair = (service.src_lang, service.tgt_lang)
            if pair in self.pairs:
                raise UserError(f"two models translate {pair[0]} -> {pair[1]}: give one run per language pair")
            self.pairs[pair] = service
        self._detectors: dict[tuple[str, ...], Any] = {}

    @property
    def primary(self) -> TranslationService:
        """The first model: what a request that names no languages gets."""
        return self.services[0]

    @property
    def single(self) -> bool:
        return len(self.services) == 1

    @property
    def single_unlabelled(self) -> bool:
        """One model whose run does not record its languages: it takes every request, and
        ``auto`` is its source language, with nothing to detect among."""
        return self.single and not (self.primary.src_lang and self.primary.tgt_lang)

    # -- languages -----------------------------------------------------------------------------
    def targets(self, source: str) -> list[str]:
        """The languages ``source`` is translated into: by a model of its own, then through the pivot."""
        direct = [t for (s, t) in self.pairs if s == source]
        through = []
        if self.pivot is not None and source != self.pivot and self.pivot in direct:
            through = [t for (s, t) in self.pairs if s == self.pivot and t != source and t not in direct]
        return direct + through

    def languages(self) -> list[str]:
        """Every language served, as a source or a target, in the order the models were given."""
        seen: dict[str, None] = {}
        for s, t in self.pairs:
            seen.setdefault(s or UNKNOWN)
            seen.setdefault(t or UNKNOWN)
        return list(seen)

    def sources_for(self, target: str) -> list[str]:
        """The languages a route leads from into ``target``."""
        return [s for s in self.languages() if s != target and target in self.targets(s)]

    # -- routes --------------------------------------------------------------------------------
    def route(self, source: str | None, target: str | None) -> Route:
        """How ``source`` -> ``target`` is translated (:class:`NoRoute` when it is not).

        None for either side means "the first model's" (a request of the native API that names
        no languages); "auto" is not a language here (detect first: :meth:`detect`)."""
        if self.single_unlabelled:
            return Route(source, target, (self.primary,))  # a run without languages takes every request
        source = self.primary.src_lang if source is None else source.lower()
        target = self.primary.tgt_lang if target is None else target.lower()
        service = self.pairs.get((source, target))
        if service is not None:
            return Route(source, target, (service,))
        if self.pivot is not None and target in self.targets(source):
            return Route(source, target, (self.pairs[(source, self.pivot)], self.pairs[(self.pivot, target)]))
        raise NoRoute(self.unsupported(source, target))

    def unsupported(self, source: str, target: str) -> str:
        """The message for a pair the server does not translate: what it does translate."""
        known = self.languages()
        if source not in known:
            return f"{source} is not supported as the source language: {self.served()}"
        if target not in known or not self.targets(source):
            return f"{target} is not supported as the target language: {self.served()}"
        return (f"{source} -> {target} is not supported: {source} ({language_name(source)}) is translated into "
                f"{', '.join(self.targets(source))} only")

    def served(self) -> str:
        """What the server translates, in words: 'this server translates fr (French) to en (English)'."""
        def one(code: str | None) -> str:
            return f"{code or UNKNOWN} ({language_name(code) if code else 'Undetermined'})"

        pairs = [f"{one(s)} to {one(t)}" for (s, t) in self.pairs]
        if self.single:
            return f"this server translates {pairs[0]}"
        return "this server translates " + ", ".join(pairs) + (
            f" (and any pair through {self.pivot})" if self.pivot else "")

    # -- detection -----------------------------------------------------------------------------
    def detector(self, languages: Iterable[str]):
        """A language detector restricted to ``languages`` (built once per set of languages)."""
        key = tuple(sorted(set(languages)))
        if key not in self._detectors:
            from transformer.translate.detect import LanguageDetector

            self._detectors[key] = LanguageDetector(key)
        return self._detectors[key]

    def candidates(self, target: str | None) -> list[str]:
        """The languages ``source: auto`` chooses among for ``target``: those a route leads from
        into it, and the target itself (a text already in it is given back as it is)."""
        target = (target or self.primary.tgt_lang or UNKNOWN).lower()
        return [*self.sources_for(target), target] if target != UNKNOWN else []

    def detect(self, texts: Sequence[str], target: str | None) -> list[Detected]:
        """The language of each text among :meth:`candidates` of ``target``. A text with nothing
        to detect a language from (no letters) gets the first candidate, with confidence 0."""
        candidates = self.candidates(target)
        known = [c for c in candidates if c != UNKNOWN]
        if known and len(known) == len(candidates) and not self.sources_for(known[-1]):
            # nothing translates into the target: "detecting" it would hand every text back unchanged
            raise NoRoute(f"{known[-1]} is not supported as the target language: {self.served()}")
        if len(known) < 1:
            raise Unprocessable("the source language cannot be detected: the model's run does not record its "
                                "languages (data.src_lang, data.tgt_lang); name the source language")
        if len(known) == 1:
            return [Detected(known[0], 1.0) for _ in texts]
        detector = self.detector(known)
        out = []
        for text in texts:
            best = detector.best(text)
            # No letters: nothing to tell the languages apart by; LibreTranslate answers its first language, at 0.
            out.append(Detected(known[0], 0.0) if best.language not in known else
                       Detected(best.language, float(best.confidence)))
        return out

    def detect_any(self, texts: Sequence[str]) -> list[list[Detected]]:
        """For each text, every language the server knows (as a source or a target), most likely
        first, with the detector's probabilities (LibreTranslate's ``/detect``). A text with no
        letters gets the first language, with confidence 0."""
        known = [c for c in self.languages() if c != UNKNOWN]
        if not known:
            raise Unprocessable("no language can be detected: the model's run does not record its languages "
                                "(data.src_lang, data.tgt_lang)")
        if len(known) == 1:
            return [[Detected(known[0], 1.0)] for _ in texts]
        detector = self.detector(known)
        out = []
        for text in texts:
            found = [Detected(d.language, float(d.confidence)) for d in detector.detect(text) if d.language in known]
            out.append(found or [Detected(known[0], 0.0)])  # no letters: LibreTranslate's answer
        return out

    async def translate(self, texts: list[str], source: str | None, target: str | None,
                        settings_for: Any = None, *, html: bool = False, names: list[str] | None = None,
                        alternatives: int = 0) -> tuple[list[dict[str, Any]], BatchInfo, list[Detected] | None,
                                                         list[str | None]]:
        """Translate ``texts`` from ``source`` (a language, "auto", or None: the first model's) into
        ``target``.

        Args:
            settings_for: a function of the :class:`Route` giving its decoding settings (its last
                step's default when None).
            html, names, alternatives: as :meth:`Route.translate`.

        Returns:
            Each text's translation dict, how the request was served (the slowest route's wait,
            every route's model calls), the detected languages (None unless ``source`` is "auto"),
            and each text's pivot language (None where a model of its own translated it). A text
            detected as the target language comes back as it is (:func:`unchanged`).
        """
        detected = None
        if source is not None and source.lower() == AUTO and not self.single_unlabelled:
            from transformer.serve.service import _off_the_loop

            detected = await _off_the_loop(self.detect, texts, target)
            groups: dict[str, list[int]] = {}
            for i, found in enumerate(detected):
                groups.setdefault(found.language, []).append(i)
        else:
            groups = {None if self.single_unlabelled else source: list(range(len(texts)))}
        target_code = (target or self.primary.tgt_lang or "").lower()
        results: list[dict[str, Any] | None] = [None] * len(texts)
        vias: list[str | None] = [None] * len(texts)
        jobs, infos = [], []
        for language, rows in groups.items():
            if detected is not None and language == target_code:
                for i in rows:  # already in the target language
                    results[i] = unchanged(texts[i], alternatives)
                continue
            route = self.route(language, target)
            settings = settings_for(route) if settings_for is not None else route.last.default
            route.check_settings(settings)
            jobs.append((route, rows, route.translate([texts[i] for i in rows], settings, html=html,
                                                       names=[names[i] for i in rows] if names else None,
                                                       alternatives=alternatives)))
        answers = await asyncio.gather(*(job for _, _, job in jobs)) if jobs else []
        for (route, rows, _), (found, info) in zip(jobs, answers):
            infos.append(info)
            for i, result in zip(rows, found):
                results[i] = result
                vias[i] = route.via
        info = infos[0] if infos else BatchInfo(queue_ms=0.0, compute_ms=0.0, batch_size=0, batch_requests=0,
                                                model_calls=0)
        for more in infos[1:]:
            info = replace(info, queue_ms=max(info.queue_ms, more.queue_ms),
                           compute_ms=info.compute_ms + more.compute_ms,
                           batch_size=max(info.batch_size, more.batch_size),
                           batch_requests=max(info.batch_requests, more.batch_requests),
                           model_calls=info.model_calls + more.model_calls)
        return results, info, detected, vias

    def health(self) -> dict[str, Any]:
        return {f"{s.src_lang or UNKNOWN}-{s.tgt_lang or UNKNOWN}": s.health() for s in self.services}

    def versions(self) -> dict[str, str]:
        """Each pair's model version (:class:`~transformer.serve.reload.ModelVersion`'s label), where known."""
        return {f"{s.src_lang or UNKNOWN}-{s.tgt_lang or UNKNOWN}": s.version.label for s in self.services
                if s.version is not None}

    def swap(self, service: TranslationService) -> TranslationService:
        """Serve ``service`` for its language pair instead of the service that serves it now, and
        return that one (a reload: :mod:`transformer.serve.reload`). A route taken before keeps the
        old service; one taken after gets the new. :class:`UserError` for a pair not served."""
        pair = (service.src_lang, service.tgt_lang)
        old = self.pairs.get(pair)
        if old is None:
            raise UserError(f"this server serves no {pair[0] or UNKNOWN} -> {pair[1] or UNKNOWN} model: "
                            f"{self.served()}")
        self.services[self.services.index(old)] = service
        self.pairs[pair] = service
        return old

    async def close(self) -> None:
        for service in self.services:
            await service.close()

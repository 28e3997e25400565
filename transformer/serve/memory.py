"""The server's translation memory (``transformer serve RUN... --tm PATH``).

:class:`ServerMemory` holds the open memory (:mod:`transformer.memory`) and what the server does
with it:

* when texts are cut into sentences, a line of several sentences that is one accepted entry
  stays whole (:meth:`ServerMemory.keeps_whole`);
* before translation, every sentence translated whole is looked up in its model's language pair
  (:func:`transformer.translate.tm.recall`, as ``transformer translate --tm`` does): an accepted
  entry whose source is the sentence, once whitespace is normalised, is its translation, and the
  model translates only the others; the fuzzy matches of those others come back as
  ``memory_alternatives`` (:meth:`ServerMemory.recall`, used by
  :class:`~transformer.serve.service.TranslationService`), and with ``constraints`` one the
  model is unsure of is translated again with the phrases it shares with its best match as
  glossary terms (:func:`~transformer.translate.tm_terms.retranslate_unsure`);
* ``POST /suggest`` (:meth:`ServerMemory.suggest`): a suggestion is checked
  (:func:`~transformer.translate.suggestion_checks.check_suggestion`, the model's parts waiting
  their turn on the service's batcher) and, when it passes, kept as a pending entry (accepted at
  once with ``auto_accept``), its sender counted against a rate of its own.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import anyio.from_thread

from transformer.errors import UserError
from transformer.memory import Entry, Match, TMBusyError, TranslationMemory
from transformer.memory.records import identity
from transformer.serve.access import AccessPolicy, KeyRing
from transformer.translate.glossary import Term
from transformer.translate.suggestion_checks import Refusal, Thresholds, check_suggestion
from transformer.translate.tm import DEFAULT_THRESHOLD, holds, memory_notes, recall
from transformer.translate.tm_terms import UNSURE_LOG_PROB

SUGGESTIONS_PER_MINUTE = 10  # a person correcting translations sends a few a minute; a script sends more
BUSY_WARNING_EVERY_S = 60.0  # a memory locked for long would otherwise log a line per request

log = logging.getLogger("uvicorn.error")


@dataclass(frozen=True)
class Recalled:
    """What the memory holds for one sentence: the accepted entry that is its translation, or
    the fuzzy matches of a sentence without one (best first) and the terms it shares with the
    best (with ``--tm-constraints``)."""

    entry: Entry | None = None
    matches: tuple[Match, ...] = ()
    terms: tuple[Term, ...] = ()

    def notes(self) -> dict[str, Any]:
        """The sentence's ``memory`` or ``memory_alternatives`` and ``memory_terms`` fields ({} for none)."""
        return memory_notes(self.entry, self.matches, [(term, self.matches[0].entry) for term in self.terms])


NOTHING = Recalled()


class SuggestionRefused(UserError):
    """A suggestion that failed a check (400): the :class:`Refusal` says which and why."""

    def __init__(self, refusal: Refusal) -> None:
        super().__init__(refusal.message)
        self.refusal = refusal


@dataclass
class ServerMemory:
    """The server's translation memory (see the module doc).

    Args:
        memory: the open memory (closed by :meth:`close`).
        threshold: the lowest similarity of a fuzzy match given as an alternative (None: none given).
        auto_accept: a suggestion that passes every check is accepted at once, not left pending.
        suggestions_per_minute: suggestions one API key (or, without one, one address) may send a minute.
        thresholds: the suggestion checks' thresholds (their documented defaults).
        constraints: the phrases a sentence shares with its best fuzzy match are glossary terms
            of its translation where the model is unsure of its own (beam search only).
        unsure_below: the mean log-probability per token under which a translation is unsure
            (:func:`~transformer.translate.tm_terms.unsure`).
    """

    memory: TranslationMemory
    threshold: float | None = DEFAULT_THRESHOLD
    auto_accept: bool = False
    suggestions_per_minute: int = SUGGESTIONS_PER_MINUTE
    thresholds: Thresholds = field(default_factory=Thresholds)
    constraints: bool = False
    unsure_below: float = UNSURE_LOG_PROB
    _rate: KeyRing = field(init=False, repr=False)
    counts: Counter = field(default_factory=Counter, init=False, repr=False)
    _warned_at: float = field(default=float("-inf"), init=False, repr=False)

    def __post_init__(self) -> None:
        if self.threshold is not None and not 0 < self.threshold <= 1:
            raise UserError(f"--tm-threshold must be a similarity above 0 and at most 1, got {self.threshold}")
        if self.constraints and self.threshold is None:
            raise UserError("--tm-constraints takes the terms of fuzzy matches: give --tm-threshold a similarity")
        if self.suggestions_per_minute < 1:
            raise UserError(f"--tm-suggest-limit must be >= 1, got {self.suggestions_per_minute}")
        # A ring of its own: suggestions are counted apart from translations, per sender identity.
        self._rate = KeyRing(None, AccessPolicy(req_limit=self.suggestions_per_minute))

    def recall(self, sentences: Sequence[str], source_lang: str | None, target_lang: str | None) -> list[Recalled]:
        """What the memory holds for each sentence in the pair (blocking: call it off the event
        loop). A pair the run does not name, or a memory locked past its timeout, finds nothing:
        the model translates every sentence, as without a memory."""
        if not source_lang or not target_lang:
            return [NOTHING] * len(sentences)
        out = []
        try:
            for sentence in sentences:
                entry, matches = recall(self.memory, sentence, source_lang, target_lang, self.threshold)
                out.append(Recalled(entry, tuple(matches)) if entry is not None or matches else NOTHING)
        except TMBusyError as err:
            self.counts["lookups_busy"] += 1
            if time.monotonic() - self._warned_at >= BUSY_WARNING_EVERY_S:
                self._warned_at = time.monotonic()
                log.warning("the translation memory was locked past its timeout: the model translated "
                               "without it (%s; /health counts lookups_busy)", err)
            return [NOTHING] * len(sentences)
        self.counts["sentences_looked_up"] += len(sentences)
        self.counts["sentences_from_memory"] += sum(1 for r in out if r.entry is not None)
        return out

    def health(self) -> dict[str, int]:
        """The counters /health shows: sentences looked up and answered from the memory, lookups
        that found it locked, suggestions kept and refused."""
        names = ("sentences_looked_up", "sentences_from_memory", "lookups_busy", "suggestions_kept",
                 "suggestions_refused")
        return {name: self.counts[name] for name in names}

    def keeps_whole(self, source_lang: str | None, target_lang: str | None) -> Callable[[str], bool] | None:
        """For cutting texts into sentences: whether a line of several sentences is one accepted
        entry of the pair, translated whole (:func:`~transformer.translate.tm.holds`); None for a
        pair the run does not name."""
        if not source_lang or not target_lang:
            return None
        return lambda line: holds(self.memory, line, source_lang, target_lang)

    def check_rate(self, who: str | None) -> None:
        """Count a suggestion from ``who`` (:func:`~transformer.memory.records.identity`), or raise
        :class:`~transformer.serve.access.RateLimited` past the rate."""
        self._rate.check(None, client=who or "")

    def suggest(self, service: Any, source: str, suggestion: str, *, who: str | None) -> Entry:
        """Check ``suggestion`` (a translation of ``source`` in the pair of ``service``, a
        :class:`~transformer.serve.service.TranslationService`, which imports this module) and keep it:
        pending, or accepted with ``auto_accept``. Blocking, on a worker thread of anyio's pool:
        the model's translation and scores wait their turn on the service's batcher.

        Raises:
            SuggestionRefused: a check failed (nothing is written).
            TMError: the memory cannot be written (TMBusyError: locked past its timeout).
        """
        refusal = check_suggestion(source, suggestion, service.src_lang, service.tgt_lang,
                                   translator=_Queued(service), memory=self.memory, thresholds=self.thresholds)
        if refusal is not None:
            self.counts["suggestions_refused"] += 1
            raise SuggestionRefused(refusal)
        entry = self.memory.add(source, suggestion, service.src_lang, service.tgt_lang, origin="suggestion",
                                status="accepted" if self.auto_accept else "pending", who=who)
        self.counts["suggestions_kept"] += 1
        return entry

    def close(self) -> None:
        self.memory.close()


def sender(api_key: str | None, client: str | None, keys: KeyRing) -> str | None:
    """Who sent a suggestion, as the memory stores it: the API key's hash where the server has
    keys and the request gave one, else the client's address."""
    return identity(api_key=api_key if keys.api_keys and api_key else None, client=client)


class _Queued:
    """A service's translator whose model calls (decoding, forced-decoding scores) run on the
    service's batcher, in turn with the requests' (called from a worker thread of anyio's pool);
    everything else is the translator's own."""

    def __init__(self, service: Any) -> None:
        self._service = service

    def __getattr__(self, name: str) -> Any:
        return getattr(self._service.translator, name)

    def _on_batcher(self, fn: Callable[[], Any]) -> Any:
        async def call() -> Any:
            result, _ = await self._service.batcher.call(fn)
            return result
        return anyio.from_thread.run(call)

    def translate_n_best(self, texts, **options):
        translator = self._service.translator
        return self._on_batcher(lambda: translator.translate_n_best(texts, **options))

    def score_translations(self, *args, **options):
        translator = self._service.translator
        return self._on_batcher(lambda: translator.score_translations(*args, **options))

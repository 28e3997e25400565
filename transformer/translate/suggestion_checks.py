"""The checks a suggested translation passes before it is kept for review.

People send corrections ("this is how the sentence should be translated"), and with them junk:
"aaaaaa", the source pasted back, the machine's own translation, a sentence of another language,
half a sentence. :func:`check_suggestion` refuses those with a reason, cheap checks first and the
model last, so that junk costs no decoding (in this order):

- ``implausible_length``: the suggestion is empty, or its length against the source's is outside
  ``[min_length_ratio, max_length_ratio]``;
- ``copy_of_source``: it is the source again (``copy_similarity`` alike, ignoring case,
  punctuation and spacing);
- ``near_duplicate_pending``: a pending entry of the memory has the same source and a target
  ``duplicate_similarity`` alike (it is already waiting for review);
- ``wrong_language``: the language detector gives the target language a probability below
  ``min_target_probability``;
- ``machine_translation``: it is the model's own translation (ignoring case, punctuation and
  spacing): nothing to learn from;
- ``unfinished``: the model does not expect the translation to end where the suggestion ends
  (the log-probability of ``</s>`` after it, forced decoding, is below ``min_end_log_prob``):
  half a sentence;
- ``absurd``: the model finds it far less probable than its own translation: the mean
  log-probability per token (forced decoding) is more than ``absurd_margin`` below that of the
  model's translation;
- ``unrelated``: it is hardly more probable as a translation of its source than of other
  sentences (the sources of other entries of the memory in the pair, ``CONTRAST_SOURCES`` of them):
  its mean log-probability per token given the source exceeds the mean given those by less than
  ``min_relevance``; another sentence's translation. Not made without such entries.

The thresholds are a :class:`Thresholds` (its defaults the constants below, each with what it was
set on). ``benchmarks/suggestion_checks.py`` measures how many planted bad suggestions and real
translations pass them. How often one key or one address may suggest is the server's to limit,
not a check of the text.
"""

from __future__ import annotations

import enum
import functools
import re
import unicodedata
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

from rapidfuzz import fuzz

from transformer.errors import UserError
from transformer.translate.detect import LanguageDetector, known_languages

if TYPE_CHECKING:
    from transformer.memory import TranslationMemory
    from transformer.translate.translator import Translator

# Lengths are characters, plus LENGTH_SLACK on each side so that short sentences ("Go." / "Va !") may
# differ more. On 3,000 Tatoeba en/fr pairs the ratio (en + 10) / (fr + 10) runs from 0.53 (0.1st
# percentile) to 1.43 (99.9th): these bounds refuse none of them and any suggestion half or twice the
# expected length (a truncation of a long sentence, a paste of several).
MIN_LENGTH_RATIO = 0.5
MAX_LENGTH_RATIO = 2.0
LENGTH_SLACK = 10
# A Chinese or Japanese character carries about as much as 3 Latin letters: counted so in lengths.
CJK_WEIGHT = 3
# Of Tatoeba's 167,130 en/fr pairs 3 have translations this alike to their sources (ignoring case
# and punctuation): "Ignore Tom." / "Ignore Tom.", "Stop!" / "Stop !".
COPY_SIMILARITY = 0.95
# The memory's own measure of a repeated suggestion (TranslationMemory.near_duplicates' default).
DUPLICATE_SIMILARITY = 0.9
# With the detector over the pair's languages and COMMON_LANGUAGES, 1,000 Tatoeba English sentences all
# have P(en) >= 0.1 and 8 of 1,000 French sentences reach it.
MIN_TARGET_PROBABILITY = 0.1
COMMON_LANGUAGES = ("de", "en", "es", "fr", "it", "nl", "pt")
# The three model checks were set on 400 Tatoeba references and 200 planted truncations and other
# sentences (Tatoeba's train split) with the Multi30k French-English recipe run of docs/quality.md:
# a caption model, out of its domain on Tatoeba, the hard case. Natural logs throughout.
# </s> after a reference: -0.11 to -0.04 (5th to 95th percentile); after a truncation -10.5 to -5.2.
MIN_END_LOG_PROB = -3.0
# Log-probability per token (with </s>) below the model's own translation: references 1.7 to 4.7
# (5th to 95th), random strings 5.1 to 8.3; another sentence's translation overlaps references (3.0
# to 6.0) and is left to the relevance check.
ABSURD_MARGIN = 6.0
# Per-token log-probability given the source minus that given 4 other sources: references 0.14 to
# 2.59 (5th to 95th), other sentences -0.72 to 0.84; with the checks above, 90.5% of references and
# 29.5% of other sentences pass at 0.3 (90.7% and 33.5% at 0.25, 88.2% and 23.5% at 0.4).
MIN_RELEVANCE = 0.3
CONTRAST_SOURCES = 4


class Reason(str, enum.Enum):
    """Why a suggestion was refused (its value is the name an answer carries)."""

    IMPLAUSIBLE_LENGTH = "implausible_length"
    COPY_OF_SOURCE = "copy_of_source"
    NEAR_DUPLICATE_PENDING = "near_duplicate_pending"
    WRONG_LANGUAGE = "wrong_language"
    MACHINE_TRANSLATION = "machine_translation"
    UNFINISHED = "unfinished"
    ABSURD = "absurd"
    UNRELATED = "unrelated"


@dataclass(frozen=True)
class Refusal:
    """A refused suggestion: the check that refused it, a one-line message for whoever sent it,
    and the measured value the check compared with its threshold (None for yes-or-no checks)."""

    reason: Reason
    message: str
    measured: float | None = None


@dataclass(frozen=True)
class Thresholds:
    """The checks' thresholds (the module's constants by default; see there what each was set on)."""

    min_length_ratio: float = MIN_LENGTH_RATIO
    max_length_ratio: float = MAX_LENGTH_RATIO
    length_slack: int = LENGTH_SLACK
    copy_similarity: float = COPY_SIMILARITY
    duplicate_similarity: float = DUPLICATE_SIMILARITY
    min_target_probability: float = MIN_TARGET_PROBABILITY
    min_end_log_prob: float = MIN_END_LOG_PROB
    absurd_margin: float = ABSURD_MARGIN
    min_relevance: float = MIN_RELEVANCE

    def __post_init__(self) -> None:
        if not 0 < self.min_length_ratio <= 1 <= self.max_length_ratio:
            raise UserError(f"length ratios must satisfy 0 < min <= 1 <= max, got {self.min_length_ratio} and "
                            f"{self.max_length_ratio}")
        for name in ("copy_similarity", "duplicate_similarity", "min_target_probability"):
            if not 0 <= getattr(self, name) <= 1:
                raise UserError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        if self.length_slack < 0 or self.absurd_margin < 0:
            raise UserError("length_slack and absurd_margin must be >= 0")
        if self.min_end_log_prob > 0:
            raise UserError(f"min_end_log_prob is a log-probability, at most 0; got {self.min_end_log_prob}")


class Detector(Protocol):
    """What the language check needs of a detector: ``LanguageDetector.detect``'s ranked
    ``(language, probability)`` pairs."""

    def detect(self, text: str) -> list: ...


def check_suggestion(source: str, suggestion: str, source_lang: str, target_lang: str, *,
                     translator: Translator, detector: Detector | None = None,
                     memory: TranslationMemory | None = None, contrast: Sequence[str] | None = None,
                     thresholds: Thresholds = Thresholds()) -> Refusal | None:
    """The first check ``suggestion`` (a translation of ``source`` from ``source_lang`` into
    ``target_lang``) fails, or None when it passes them all (see the module's table).

    Args:
        translator: the pair's model: its translation of ``source`` (its decoding settings) and its
            forced-decoding score of the suggestion.
        detector: a :class:`~transformer.translate.detect.LanguageDetector` (anything with its
            ``detect``); None: :func:`suggestion_detector` of the pair.
        memory: where pending suggestions wait, and whose other entries of the pair give the
            relevance check its contrast sources; None: neither check is made.
        contrast: the other sources of the relevance check (instead of the memory's).
        thresholds: the checks' thresholds.
    """
    if not isinstance(source, str) or not isinstance(suggestion, str):
        raise TypeError("source and suggestion must be str")
    t = thresholds
    ratio = length_ratio(source, suggestion, slack=t.length_slack)
    if not suggestion.strip() or not t.min_length_ratio <= ratio <= t.max_length_ratio:
        what = "empty" if not suggestion.strip() else "too short" if ratio < t.min_length_ratio else "too long"
        return Refusal(Reason.IMPLAUSIBLE_LENGTH, f"the suggestion is {what} for its source (length ratio {ratio:.2f}; "
                       f"accepted {t.min_length_ratio:g} to {t.max_length_ratio:g})", ratio)
    copied = fuzz.ratio(comparable(source), comparable(suggestion)) / 100
    if copied >= t.copy_similarity:
        return Refusal(Reason.COPY_OF_SOURCE, "the suggestion is the source text, not a translation of it", copied)
    if memory is not None:
        pending = memory.near_duplicates(source, suggestion, source_lang, target_lang,
                                         min_similarity=t.duplicate_similarity, status="pending")
        if pending:
            return Refusal(Reason.NEAR_DUPLICATE_PENDING, f"the same suggestion is already waiting for review "
                           f"(entry {pending[0].entry.id})", pending[0].similarity)
    detections = (detector or suggestion_detector(source_lang, target_lang)).detect(suggestion)
    probability = next((p for code, p in detections if code == _base(target_lang)), 0.0)
    if probability < t.min_target_probability:
        found = detections[0][0]
        return Refusal(Reason.WRONG_LANGUAGE, f"the suggestion is not in {target_lang} (detected: {found}; "
                       f"P({_base(target_lang)}) = {probability:.2f})", probability)
    if contrast is None and memory is not None:
        contrast = contrast_sources(memory, source, source_lang, target_lang)
    view = model_views(translator, [source], [suggestion], [contrast or ()])[0]
    if view is None:  # a source without a token the model reads: nothing for the model to judge
        return None
    if comparable(view.own) == comparable(suggestion):
        return Refusal(Reason.MACHINE_TRANSLATION, "the suggestion is the machine's own translation", None)
    if view.end_log_prob is not None and view.end_log_prob < t.min_end_log_prob:
        return Refusal(Reason.UNFINISHED, f"the suggestion seems unfinished: the model does not expect the "
                       f"translation to end there (log-probability of the end {view.end_log_prob:.2f}; "
                       f"allowed down to {t.min_end_log_prob:g})", view.end_log_prob)
    if view.gap > t.absurd_margin:
        return Refusal(Reason.ABSURD, f"the model finds the suggestion implausible for this source ({view.gap:.2f} "
                       f"log-probability per token below its own translation; allowed {t.absurd_margin:g})", view.gap)
    if view.relevance is not None and view.relevance < t.min_relevance:
        return Refusal(Reason.UNRELATED, f"the suggestion seems unrelated to its source: the model finds it about as "
                       f"probable a translation of other sentences ({view.relevance:.2f} log-probability per token "
                       f"more; at least {t.min_relevance:g} needed)", view.relevance)
    return None


@dataclass(frozen=True)
class ModelView:
    """What the model makes of a suggestion: the model checks' measures (natural logs).

    ``own``: its translation of the source. ``gap``: how much less probable per token it finds
    the suggestion than ``own`` (negative when it prefers the suggestion). ``end_log_prob``: the
    log-probability of ``</s>`` after the suggestion (None when the suggestion is longer than the
    model's positions). ``relevance``: the suggestion's log-probability per token given its
    source minus the mean of that given each contrast source (None without any).
    """

    own: str
    gap: float
    end_log_prob: float | None
    relevance: float | None


def model_views(translator: Translator, sources: Sequence[str], suggestions: Sequence[str],
                contrasts: Sequence[Sequence[str]]) -> list[ModelView | None]:
    """The :class:`ModelView` of each suggestion, in batches: the translations decoded together,
    then each translation, its suggestion and the suggestion after each contrast source scored in
    one forced pass (so the translation and the suggestion count ``</s>`` alike, even a translation
    the decoder cut at its length limit). None for a source with no token the model can read; a
    contrast source without one is left out."""
    hyps = translator.translate_n_best(list(sources))
    todo = [i for i, found in enumerate(hyps) if found]
    pairs = [(i, src, tgt) for i in todo
             for src, tgt in ((sources[i], hyps[i][0].tokens), (sources[i], suggestions[i]),
                              *((c, suggestions[i]) for c in contrasts[i]))]
    scores = translator.score_translations([src for _, src, _ in pairs], [tgt for _, _, tgt in pairs])
    by_source: dict[int, list] = {}
    for (i, _, _), score in zip(pairs, scores):
        by_source.setdefault(i, []).append(score)
    out: list[ModelView | None] = [None] * len(sources)
    for i in todo:
        own, given, *others = by_source[i]
        others = [o.mean_log_prob for o in others if o is not None]
        relevance = given.mean_log_prob - sum(others) / len(others) if others else None
        out[i] = ModelView(translator.detokenize(hyps[i][0]), own.mean_log_prob - given.mean_log_prob,
                           given.end_log_prob, relevance)
    return out


def contrast_sources(memory: TranslationMemory, source: str, source_lang: str, target_lang: str, *,
                     n: int = CONTRAST_SOURCES) -> list[str]:
    """Up to ``n`` sources of other entries of the pair in ``memory`` (the first added, whatever
    their status), none of them ``source`` again: the relevance check's contrast."""
    same = comparable(source)
    found = memory.entries(source_lang=source_lang, target_lang=target_lang, limit=2 * n)
    return [e.source for e in found if comparable(e.source) != same][:n]


def length_ratio(source: str, target: str, *, slack: int = LENGTH_SLACK) -> float:
    """``(length(target) + slack) / (length(source) + slack)``, lengths in characters after
    whitespace is normalised (a Chinese or Japanese character counts ``CJK_WEIGHT``)."""
    return (_length(target) + slack) / (_length(source) + slack) if slack or _length(source) else float("inf")


_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")
_NOT_WORD = re.compile(r"[\W_]+")


def _length(text: str) -> int:
    text = " ".join(text.split())
    return len(text) + (CJK_WEIGHT - 1) * len(_CJK.findall(text))


def comparable(text: str) -> str:
    """``text`` as two texts are compared for sameness here: NFC, case-folded, punctuation and
    spacing as single spaces ("Va !" and "va" are the same)."""
    return " ".join(_NOT_WORD.sub(" ", unicodedata.normalize("NFC", text).casefold()).split())


def _base(code: str) -> str:
    """A language code without its region, in lower case, as the detector names languages."""
    return re.split(r"[-_]", code.strip().lower())[0]


@functools.lru_cache(maxsize=64)
def suggestion_detector(source_lang: str, target_lang: str) -> LanguageDetector:
    """The detector the language check uses by default: the pair's languages and
    ``COMMON_LANGUAGES`` (those the detector knows). Few candidates keep short sentences right:
    over all 139 languages, 1 in 100 Tatoeba English sentences gets P(en) < 0.1."""
    known = set(known_languages())
    wanted = {_base(source_lang), _base(target_lang), *COMMON_LANGUAGES}
    if _base(target_lang) not in known:
        raise UserError(f"language detection does not know {target_lang}: the language check cannot be made")
    return LanguageDetector(sorted(wanted & known))

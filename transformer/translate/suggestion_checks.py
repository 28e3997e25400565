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
- ``absurd``: the model finds it far less probable than its own translation: the mean
  log-probability per token (forced decoding) is more than ``absurd_margin`` below that of the
  model's translation.

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
# Natural-log probability per token (with </s>): a translation of the source scores near the model's own,
# random strings and unrelated sentences far below. Not yet calibrated on a trained model: the value
# benchmarks/suggestion_checks.py reports for a trained run (docs/memory.md) replaces it.
ABSURD_MARGIN = 3.0


class Reason(str, enum.Enum):
    """Why a suggestion was refused (its value is the name an answer carries)."""

    IMPLAUSIBLE_LENGTH = "implausible_length"
    COPY_OF_SOURCE = "copy_of_source"
    NEAR_DUPLICATE_PENDING = "near_duplicate_pending"
    WRONG_LANGUAGE = "wrong_language"
    MACHINE_TRANSLATION = "machine_translation"
    ABSURD = "absurd"


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
    absurd_margin: float = ABSURD_MARGIN

    def __post_init__(self) -> None:
        if not 0 < self.min_length_ratio <= 1 <= self.max_length_ratio:
            raise UserError(f"length ratios must satisfy 0 < min <= 1 <= max, got {self.min_length_ratio} and "
                            f"{self.max_length_ratio}")
        for name in ("copy_similarity", "duplicate_similarity", "min_target_probability"):
            if not 0 <= getattr(self, name) <= 1:
                raise UserError(f"{name} must be between 0 and 1, got {getattr(self, name)}")
        if self.length_slack < 0 or self.absurd_margin < 0:
            raise UserError("length_slack and absurd_margin must be >= 0")


class Detector(Protocol):
    """What the language check needs of a detector: ``LanguageDetector.detect``'s ranked
    ``(language, probability)`` pairs."""

    def detect(self, text: str) -> list: ...


def check_suggestion(source: str, suggestion: str, source_lang: str, target_lang: str, *,
                     translator: Translator, detector: Detector | None = None,
                     memory: TranslationMemory | None = None,
                     thresholds: Thresholds = Thresholds()) -> Refusal | None:
    """The first check ``suggestion`` (a translation of ``source`` from ``source_lang`` into
    ``target_lang``) fails, or None when it passes them all (see the module's table).

    Args:
        translator: the pair's model: its translation of ``source`` (its decoding settings) and its
            forced-decoding score of the suggestion.
        detector: a :class:`~transformer.translate.detect.LanguageDetector` (anything with its
            ``detect``); None: :func:`suggestion_detector` of the pair.
        memory: where pending suggestions wait; None: the near-duplicate check is not made.
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
    own, gap = score_gaps(translator, [source], [suggestion])[0]
    if own is not None and comparable(own) == comparable(suggestion):
        return Refusal(Reason.MACHINE_TRANSLATION, "the suggestion is the machine's own translation", None)
    if gap is not None and gap > t.absurd_margin:
        return Refusal(Reason.ABSURD, f"the model finds the suggestion implausible for this source ({gap:.2f} "
                       f"log-probability per token below its own translation; allowed {t.absurd_margin:g})", gap)
    return None


def score_gap(translator: Translator, source: str, suggestion: str) -> float | None:
    """How much less probable per token the model finds ``suggestion`` than its own translation of
    ``source`` (natural log; negative when it prefers the suggestion): the ``absurd`` check's
    measure. None for a source with no token the model can read."""
    return score_gaps(translator, [source], [suggestion])[0][1]


def score_gaps(translator: Translator, sources: Sequence[str],
               suggestions: Sequence[str]) -> list[tuple[str | None, float | None]]:
    """The model's translation of each source and :func:`score_gap`, for many pairs in batches:
    the translations decoded together, then each translation and its suggestion scored in one
    forced pass (so both count ``</s>`` alike, even a translation the decoder cut at its length
    limit); ``(None, None)`` for a source with no token the model can read."""
    hyps = translator.translate_n_best(list(sources))
    todo = [i for i, found in enumerate(hyps) if found]
    scores = translator.score_translations([sources[i] for i in todo for _ in (0, 1)],
                                           [t for i in todo for t in (hyps[i][0].tokens, suggestions[i])])
    out: list[tuple[str | None, float | None]] = [(None, None)] * len(sources)
    for k, i in enumerate(todo):
        own, given = scores[2 * k], scores[2 * k + 1]
        out[i] = translator.detokenize(hyps[i][0]), own.mean_log_prob - given.mean_log_prob
    return out


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

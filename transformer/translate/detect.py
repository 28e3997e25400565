"""Which language a text is written in: offline language detection with py3langid.

py3langid (naive Bayes over byte n-grams, its model inside its wheel, numpy its only dependency)
was chosen among offline detectors for its accuracy on short sentences and its speed; the
comparison is in docs/benchmarks.md ("Language detection").

- ``LanguageDetector(languages)``: a detector restricted to some languages (all it knows by
  default). ``detect(text)`` ranks them with a probability each; ``best(text)`` gives the first;
  ``detect_sentences(text)`` gives each sentence its language, for texts that mix languages.
- ``Detection(language, confidence)``: one answer. A text without a letter (empty, digits,
  punctuation, emoji) has no language to find: it gets ``Detection("und", 0.0)`` (``und``: ISO
  639-2's "undetermined"), where LibreTranslate answers its default language with confidence 0.

The model is read once per process (about a second, 75 MB of memory) and shared by every detector;
each detector adds its own copy of its languages' columns, about 0.4 MB a language.
"""

from __future__ import annotations

import copy
import re
import threading
from typing import Iterable, NamedTuple

import numpy as np

from transformer.errors import UserError
from transformer.translate.segment import segment_text

UNDETERMINED = "und"  # ISO 639-2: the language of a text without a letter
SHORT_WORDS = 2  # a sentence of at most this many words borrows its language from the sentences around it
_NOT_A_LANGUAGE = "zxx"  # py3langid's label for text without linguistic content: never offered as an answer

Span = tuple[int, int]
"""``(start, end)``: a sentence is ``text[start:end]``."""


class Detection(NamedTuple):
    """A detected language (a code of :func:`known_languages`, or ``und``) and its probability (0..1)."""

    language: str
    confidence: float


_model_lock = threading.Lock()
_model = None


def _full_model():
    """py3langid's identifier over all its languages, with normalised probabilities; read once."""
    global _model
    with _model_lock:
        if _model is None:
            from py3langid.langid import MODEL_FILE, LanguageIdentifier

            _model = LanguageIdentifier.from_model_file(MODEL_FILE, norm_probs=True)
        return _model


def known_languages() -> tuple[str, ...]:
    """The codes of the languages py3langid knows, sorted: ISO 639-1 where a language has one
    (``en``, ``de``), ISO 639-3 otherwise (``ace``, ``yue``)."""
    return tuple(sorted(code for code in _full_model().labels if code != _NOT_A_LANGUAGE))


_LETTER = re.compile(r"[^\W\d_]")
# Chinese and Japanese are written without spaces: each of their characters counts as a word.
_CJK = re.compile("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]")


def count_words(text: str) -> int:
    """The words of ``text``: whitespace-separated tokens with a letter, each Chinese or Japanese
    character counted as one."""
    return sum(len(_CJK.findall(token)) or bool(_LETTER.search(token)) for token in text.split())


class LanguageDetector:
    """A language detector restricted to ``languages`` (codes of :func:`known_languages`; None:
    all of them).

    ``detect`` may be called from several threads at once: the detector is not changed after it
    is built (py3langid's module-level functions share one global identifier, which this class
    does not use).

    Args:
        languages: the candidate languages, such as ``["en", "de", "fr"]``; the fewer, the more
            accurate on short texts. A single language is always the answer, with confidence 1.

    Raises:
        UserError: a code py3langid does not know (the message lists those it knows), or no code.
        TypeError: ``languages`` is a string (give a list of codes).
    """

    def __init__(self, languages: Iterable[str] | None = None) -> None:
        known = known_languages()
        if languages is None:
            wanted = set(known)
        else:
            if isinstance(languages, str):
                raise TypeError(f"languages is a collection of codes, such as ['en', 'de'], not the string "
                                f"{languages!r}")
            given = {code.strip().lower() if isinstance(code, str) else code: code for code in languages}
            if not given:
                raise UserError("no languages given to detect among")
            wanted = set(given)
            unknown = sorted(str(given[code]) for code in wanted - set(known))
            if unknown:
                hint = " (give the language alone: 'pt', not 'pt-BR')" if any("-" in c or "_" in c for c in unknown) \
                    else ""
                raise UserError(f"language detection does not know {', '.join(unknown)}{hint}; it knows "
                                f"{', '.join(known)}")
        self._languages = tuple(sorted(wanted))
        # A copy shares the model's arrays; set_languages gives the copy its own columns of them.
        self._identifier = copy.copy(_full_model())
        self._identifier.set_languages(list(self._languages))
        # The model stores float16; numpy multiplies float32 much faster (the same scores: every
        # product is computed in float32 either way).
        self._identifier.nb_ptc = np.ascontiguousarray(self._identifier.nb_ptc, dtype=np.float32)

    @property
    def languages(self) -> tuple[str, ...]:
        """The candidate languages, sorted."""
        return self._languages

    def __repr__(self) -> str:
        return f"LanguageDetector({len(self._languages)} languages)" if len(self._languages) > 10 else \
            f"LanguageDetector({list(self._languages)!r})"

    def detect(self, text: str) -> list[Detection]:
        """Every candidate language with its probability, best first (the probabilities sum to 1);
        ``[Detection("und", 0.0)]`` for a text without a letter."""
        if not _has_letter(text):
            return [Detection(UNDETERMINED, 0.0)]
        return list(map(Detection._make, self._identifier.rank(text)))  # (code, float) pairs

    def best(self, text: str) -> Detection:
        """The most probable language; ``Detection("und", 0.0)`` for a text without a letter."""
        if not _has_letter(text):
            return Detection(UNDETERMINED, 0.0)
        code, p = self._identifier.classify(text)
        return Detection(code, float(p))

    def detect_sentences(self, text: str, *, lang_for_splitting: str | None = None) -> list[tuple[Span, Detection]]:
        """The language of each sentence of ``text``, for texts that mix languages.

        The sentences are those ``transformer.translate.segment.segment_text`` cuts (each line
        into sentences). A sentence of at most ``SHORT_WORDS`` words ("Yes.", "Merci !") is too
        short to tell its language from: it takes the detection of the nearest longer sentence
        on its line, the one before it first; on a line without one, of the nearest longer
        sentence before it in the text, or after it when none comes before; when no sentence is
        longer, each takes the detection of the whole text.

        Args:
            text: the text.
            lang_for_splitting: whose rules cut the sentences (abbreviations and the like); None:
                the language detected for the whole text.

        Returns:
            ``((start, end), Detection)`` for each sentence, in order: the sentence is
            ``text[start:end]``. Empty for a text without a sentence (blank).
        """
        if not isinstance(text, str):
            raise TypeError(f"text must be a str, got {type(text).__name__}")
        whole: Detection | None = None
        if lang_for_splitting is None:
            whole = self.best(text)
            lang_for_splitting = whole.language if whole.language != UNDETERMINED else None
        segments = segment_text(text, lang_for_splitting).segments
        found = [self.best(s.text) if count_words(s.text) > SHORT_WORDS else None for s in segments]
        if not any(found):
            whole = whole or self.best(text)
            return [((s.start, s.end), whole) for s in segments]
        before, after = _nearest(found, range(len(found))), _nearest(found, range(len(found) - 1, -1, -1))
        for i, segment in enumerate(segments):
            if found[i] is None:
                near = [j for j in (before[i], after[i]) if j is not None]
                on_line = [j for j in near if segments[j].line == segment.line]
                found[i] = found[(on_line or near)[0]]
        return [((s.start, s.end), d) for s, d in zip(segments, found)]


def _nearest(found: list, order: Iterable[int]) -> dict[int, int | None]:
    """For each position, the nearest earlier one in ``order`` whose item is not None (None if none)."""
    out, last = {}, None
    for i in order:
        out[i] = last
        if found[i] is not None:
            last = i
    return out


def _has_letter(text: str) -> bool:
    if not isinstance(text, str):
        raise TypeError(f"text must be a str, got {type(text).__name__}")
    return _LETTER.search(text) is not None

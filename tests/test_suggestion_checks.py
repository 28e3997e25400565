"""The checks of a suggested translation (``transformer/translate/suggestion_checks.py``): each
refusal, the order (the model last), and a good suggestion passing.

Two models: the random tiny model of ``tiny_run`` (fr -> en), whose translations are repeated
pieces, for the checks' logic, and the 40-step demo model (``short_demo_run``, barely trained
but already preferring English sentences to junk) for suggestions a person would send. The
language detector is py3langid's, offline.
"""

from __future__ import annotations

import math
import random

import pytest

from transformer.errors import UserError
from transformer.memory import TranslationMemory
from transformer.translate.detect import Detection
from transformer.decoding import Hypothesis
from transformer.translate.forced import ForcedScore
from transformer.translate.suggestion_checks import (
    Reason, Thresholds, check_suggestion, comparable, contrast_sources, length_ratio, model_views,
)
from transformer.translate.translator import Translator

SOURCE = "Les sœurs ont bu le café parce qu'elles avaient soif."
GOOD = "The sisters drank the coffee because they were thirsty."


class Target:
    """A detector that finds every text in one language (the checks after the language's)."""

    def __init__(self, language: str = "en") -> None:
        self.language = language

    def detect(self, text: str) -> list[Detection]:
        return [Detection(self.language, 1.0)]


class NoModel:
    """A translator that must not be called: the cheap checks refuse before the model runs."""

    def __getattr__(self, name):
        raise AssertionError(f"the model was asked ({name}) for a suggestion a cheap check refuses")


@pytest.fixture(scope="module")
def translator(tiny_run):
    # short outputs: the random model's translations then have a plausible length
    return Translator.from_run_dir(tiny_run()).with_decoding(strategy="greedy", max_len_a=0.0, max_len_b=24)


# The random tiny model's own translations are cut at their length limit, never ended: how sure it is of
# an end means nothing, and it has no memory to contrast with. Its tests are the absurd check's, at a
# margin for its scores (the default is a trained model's).
ABSURD_ONLY = Thresholds(min_end_log_prob=-math.inf, absurd_margin=3.0)


def _gap(translator, source: str, suggestion: str) -> float:
    return model_views(translator, [source], [suggestion], [()])[0].gap


def _junk(n: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz   ") for _ in range(n))


def test_implausible_lengths_are_refused_before_anything_else():
    for suggestion, what in (("", "empty"), ("   ", "empty"), ("Thirsty.", "too short"), (GOOD * 3, "too long")):
        refusal = check_suggestion(SOURCE, suggestion, "fr", "en", translator=NoModel(), detector=Target())
        assert refusal.reason is Reason.IMPLAUSIBLE_LENGTH and what in refusal.message, suggestion
    assert length_ratio(SOURCE, GOOD) == pytest.approx((len(GOOD) + 10) / (len(SOURCE) + 10))
    assert length_ratio("猫が寝ている。", "x") == pytest.approx(11 / (6 * 3 + 1 + 10))  # CJK counts 3


def test_a_copy_of_the_source_is_refused():
    for copy in (SOURCE, SOURCE.upper(), "les sœurs ont bu le café, parce qu'elles avaient soif"):
        refusal = check_suggestion(SOURCE, copy, "fr", "en", translator=NoModel(), detector=Target())
        assert refusal.reason is Reason.COPY_OF_SOURCE and refusal.measured >= 0.95
    assert comparable("Va !") == comparable("va") == "va"


def test_a_suggestion_pending_already_is_refused_until_reviewed(tmp_path):
    with TranslationMemory(tmp_path / "memory.db") as memory:
        entry = memory.add(SOURCE, GOOD, "fr", "en", origin="suggestion")
        again = GOOD.replace("coffee", "coffees")
        refusal = check_suggestion(SOURCE, again, "fr", "en", translator=NoModel(), detector=Target(), memory=memory)
        assert refusal.reason is Reason.NEAR_DUPLICATE_PENDING and f"entry {entry.id}" in refusal.message
        memory.reject(entry.id)  # no longer waiting: the next check (here: the model, which must not run) is reached
        with pytest.raises(AssertionError, match="the model was asked"):
            check_suggestion(SOURCE, again, "fr", "en", translator=NoModel(), detector=Target(), memory=memory)


def test_a_suggestion_in_another_language_is_refused_by_the_detector():
    for other in ("Les filles ont mangé le gâteau parce qu'elles avaient faim.",
                  "Die Schwestern tranken den Kaffee, weil sie durstig waren.", "12 345 678 9 10 11 12 13 14 15 ..."):
        refusal = check_suggestion(SOURCE, other, "fr", "en", translator=NoModel())
        assert refusal.reason is Reason.WRONG_LANGUAGE and refusal.measured < 0.1, other
    with pytest.raises(AssertionError, match="the model was asked"):  # English passes the detector (pt-BR as pt)
        check_suggestion("A casa é azul e o cachorro dorme.", "The house is blue and the dog sleeps.", "pt-BR", "en",
                         translator=NoModel())


def test_the_machines_own_translation_is_refused(translator):
    source = "Il n'y a pas de boîte derrière le bus."
    own = translator.translate([source])[0]
    for same in (own, own.upper() + " !"):
        refusal = check_suggestion(source, same, "fr", "en", translator=translator, detector=Target())
        assert refusal.reason is Reason.MACHINE_TRANSLATION


def test_what_the_model_finds_absurd_is_refused_and_what_it_likes_passes(translator):
    source = "Il n'y a pas de boîte derrière le bus."
    own = translator.translate([source])[0]
    liked = own[1:]  # the model's translation less its first letter: another text it finds probable
    assert comparable(liked) != comparable(own)
    assert check_suggestion(source, liked, "fr", "en", translator=translator, detector=Target(),
                            thresholds=ABSURD_ONLY) is None
    junk = _junk(len(source))
    refusal = check_suggestion(source, junk, "fr", "en", translator=translator, detector=Target(),
                               thresholds=ABSURD_ONLY)
    assert refusal.reason is Reason.ABSURD and refusal.measured == pytest.approx(_gap(translator, source, junk))
    assert refusal.measured > 3.0 > _gap(translator, source, liked)
    assert check_suggestion(source, junk, "fr", "en", translator=translator, detector=Target(),
                            thresholds=Thresholds(min_end_log_prob=-math.inf,
                                                  absurd_margin=refusal.measured + 0.1)) is None


def test_a_persons_translations_pass_and_junk_does_not_with_a_model_that_learned_a_little(short_demo_run):
    """The 40-step demo model gives real translations 2.5 to 3.8 nats per token less than its own
    (an empty line: it has learned when to stop, not yet what to say) and junk 4.6 or more: the
    margin for this barely trained model lies between (a trained one separates them more)."""
    run_dir, made = short_demo_run
    assert made.returncode == 0, made.stderr
    translator = Translator.from_run_dir(run_dir)
    thresholds = Thresholds(absurd_margin=4.2)
    pairs = [("Tu es entrée dans la rue.", "You entered the street."),
             ("tu ne vas pas perdre ta chaussure", "you are not going to lose your shoe"),
             ("Il n'y a pas de boîte derrière le bus.", "There is no box behind the bus."),
             (SOURCE, GOOD)]
    for source, good in pairs:
        assert check_suggestion(source, good, "fr", "en", translator=translator, thresholds=thresholds) is None, good
        junk = check_suggestion(source, _junk(len(good), seed=len(good)), "fr", "en", translator=translator,
                                detector=Target(), thresholds=thresholds)
        assert junk.reason in (Reason.UNFINISHED, Reason.ABSURD), junk


class Scripted:
    """A translator whose translation and forced scores are given (per token, one step each): the
    model checks' logic alone. ``given``: the suggestion after its source; ``contrast``: after any
    other source; ``end``: the log-probability of its end."""

    OWN = "The cat is asleep on the bed."

    def __init__(self, *, given=-1.0, contrast=-2.0, end=-0.05, own=-0.8):
        self.given, self.contrast, self.end, self.own = given, contrast, end, own
        self.scored: list[tuple[str, object]] = []

    def translate_n_best(self, sources):
        self.source = sources[0]
        return [[Hypothesis([7, 8, 9], self.own)] for _ in sources]

    def detokenize(self, hypothesis):
        return self.OWN

    def score_translations(self, sources, targets):
        self.scored += list(zip(sources, targets))
        return [ForcedScore(self.own, 1, self.own) if not isinstance(target, str)
                else ForcedScore(self.given, 1, self.given, True, self.end) if source == self.source
                else ForcedScore(self.contrast, 1, self.contrast, True, -0.05)
                for source, target in zip(sources, targets)]


def _check(model, contrast=None, memory=None, suggestion=GOOD):
    return check_suggestion(SOURCE, suggestion, "fr", "en", translator=model, detector=Target(), memory=memory,
                            contrast=contrast)


def test_a_suggestion_the_model_does_not_expect_to_end_there_is_unfinished():
    refusal = _check(Scripted(end=-5.0))
    assert refusal.reason is Reason.UNFINISHED and refusal.measured == -5.0
    assert "unfinished" in refusal.message and "-5.00" in refusal.message
    assert _check(Scripted(end=-2.0)) is None  # the threshold is -3.0 nats (docs/memory.md)


def test_a_suggestion_about_as_probable_after_other_sources_is_unrelated():
    refusal = _check(Scripted(given=-1.0, contrast=-1.1), contrast=["Il pleut.", "Le train part."])
    assert refusal.reason is Reason.UNRELATED and refusal.measured == pytest.approx(0.1)
    assert _check(Scripted(given=-1.0, contrast=-1.5), contrast=["Il pleut."]) is None  # 0.5 more: related
    assert _check(Scripted(given=-1.0, contrast=-1.1)) is None  # no other source to compare: not made


def test_the_other_sources_come_from_the_memorys_entries_of_the_pair(tmp_path):
    with TranslationMemory(tmp_path / "memory.db") as memory:
        assert _check(Scripted(given=-1.0, contrast=-1.1), memory=memory) is None  # empty: nothing to compare
        memory.add(SOURCE, "An earlier suggestion.", "fr", "en", status="rejected")  # the same source: not a contrast
        memory.add("Le chien court.", "The dog runs.", "fr", "en", status="accepted")
        memory.add("Der Hund läuft.", "The dog runs.", "de", "en", status="accepted")  # another pair
        memory.add("Il pleut.", "It is raining.", "fr", "en", status="pending")
        assert contrast_sources(memory, SOURCE, "fr", "en") == ["Le chien court.", "Il pleut."]
        model = Scripted(given=-1.0, contrast=-1.1)
        assert _check(model, memory=memory).reason is Reason.UNRELATED
        assert {source for source, target in model.scored if target == GOOD} == {SOURCE, "Le chien court.",
                                                                                 "Il pleut."}


def test_thresholds_out_of_range_are_one_line_errors():
    with pytest.raises(UserError, match="length ratios"):
        Thresholds(min_length_ratio=1.5)
    with pytest.raises(UserError, match="copy_similarity must be between 0 and 1"):
        Thresholds(copy_similarity=2)

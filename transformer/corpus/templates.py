"""Drawing random sentence plans: the sentence templates of the built-in corpus.

Each template draws one kind of sentence (``identity``: je suis étudiant, ``action``: le
chat mange le poisson, ``explanation``: ... parce qu'il était trop fatigué ...) as a plan of
:mod:`.plans`; :func:`sample_sentence` picks a template by weight. All randomness comes from
the ``random.Random`` passed in, so a seed fixes the whole corpus.

Two rules here keep the French -> English mapping a function (one French sentence, one
English): an adjective explains either the subject or the object of a "parce que" clause,
never both (:data:`SUBJECT_REASONS` vs :data:`OBJECT_REASONS`, :data:`PRAISES`), and
"son/sa/ses" (his or her?) is never drawn. The tests check the property on raw draws.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import lru_cache
from typing import Any, TypeVar

from transformer.corpus.lexicon import COMPANIONS, LOCATIONS, NOUNS, Noun, Preposition
from transformer.corpus.modifiers import ADJECTIVES, NUMBERS, PROFESSIONS, Adjective, adjective
from transformer.corpus.plans import (
    Attribute,
    Clause,
    Existential,
    Idiom,
    NounPhrase,
    Object,
    Place,
    Pronoun,
    Relative,
    Role,
    Sentence,
    Subject,
    name,
    pronoun,
)
from transformer.corpus.verbs import (
    AVOIR,
    AVOIR_AS_BE,
    ETRE,
    INTRANSITIVE_VERBS,
    MOVEMENT_VERBS,
    TRANSITIVE_VERBS,
    transitive_verb,
)

T = TypeVar("T")
# First names the same in both languages; none starts with a vowel sound, so none is elided (que marie).
FIRST_NAMES = (("marie", "f"), ("sophie", "f"), ("julie", "f"), ("claire", "f"), ("camille", "f"),
               ("paul", "m"), ("thomas", "m"), ("pierre", "m"), ("louis", "m"), ("nicolas", "m"))
PERSON, ANIMATE = frozenset({"person"}), frozenset({"person", "animal"})

# "parce que" clauses. Each adjective explains only the subject or only the object, so the
# English pronoun (he / she / it / they) follows from the French sentence alone.
SUBJECT_REASONS = ("fatigué", "malade", "faible", "occupé", "timide")
SUBJECT_IDIOMS = {"faim": "hungry", "soif": "thirsty", "peur": "afraid"}  # il avait faim -> it was hungry
OBJECT_REASONS = {  # ... n'a pas traversé la rue parce qu'elle était trop large
    "traverser": ("large", "dangereux", "long", "étroit"),
    "manger": ("chaud", "froid", "salé", "sucré"),
    "boire": ("chaud", "froid", "sucré"),
    "lire": ("long", "difficile", "ennuyeux"),
    "finir": ("long", "difficile"),
    "regarder": ("long", "ennuyeux"),
    "acheter": ("cher",),
    "porter": ("lourd",),
    "pousser": ("lourd",),
}
PRAISES = {"manger": ("bon",), "boire": ("bon",), "lire": ("intéressant",), "regarder": ("intéressant",)}


# --------------------------------------------------------------------------------------------
# Small helpers
# --------------------------------------------------------------------------------------------


def _weighted(rng: random.Random, options: tuple[tuple[T, float], ...]) -> T:
    """One of the values of ``options`` ((value, weight) pairs), drawn by weight."""
    values, cumulative = _cumulative_weights(options)
    return values[bisect.bisect(cumulative, rng.random() * cumulative[-1])]


@lru_cache(maxsize=None)
def _cumulative_weights(options: tuple[tuple[T, float], ...]) -> tuple[tuple[T, ...], tuple[float, ...]]:
    values, weights = zip(*options)
    return values, tuple(itertools.accumulate(weights))


def _chance(rng: random.Random, probability: float) -> bool:
    return rng.random() < probability


@lru_cache(maxsize=None)
def _nouns_with(tags: frozenset[str]) -> tuple[Noun, ...]:
    return tuple(noun for noun in NOUNS if not noun.tags.isdisjoint(tags))


@lru_cache(maxsize=None)
def _adjectives_for(tags: frozenset[str], *, attributive: bool = True) -> tuple[Adjective, ...]:
    return tuple(a for a in ADJECTIVES if a.describes(tags) and (a.attributive or not attributive))


def _tense(rng: random.Random, *weights: tuple[str, float]) -> str:
    return _weighted(rng, weights or (("present", 0.45), ("past", 0.35), ("future", 0.2)))


def _negation(rng: random.Random, tense: str, share: float = 0.3) -> str | None:
    """ne ... pas / jamais / plus; "jamais" and "plus" only where English stays natural."""
    if not _chance(rng, share):
        return None
    choices = {"present": ("pas", "pas", "jamais", "plus"), "past": ("pas", "pas", "jamais")}
    return rng.choice(choices.get(tense, ("pas",)))


def _question(rng: random.Random, negation: str | None, share: float = 0.2) -> bool:
    return negation is None and _chance(rng, share)


def _pronoun(rng: random.Random) -> Pronoun:
    person = rng.randrange(6)
    return pronoun(person, rng.choice("mf"), plural=_chance(rng, 0.5) if person == 4 else None)


def _person(rng: random.Random) -> Pronoun:
    """A pronoun, or (one time in five) a first name: marie est allée au marché."""
    if _chance(rng, 0.2):
        return name(*rng.choice(FIRST_NAMES))
    return _pronoun(rng)


# --------------------------------------------------------------------------------------------
# Noun phrases
# --------------------------------------------------------------------------------------------

_DETERMINERS = {"def": 5, "indef": 3, "poss": 2, "dem": 1}
_ANY, _DEFINITE = ("def", "indef", "poss", "dem"), ("def", "poss", "dem")


def noun_phrase(rng: random.Random, tags: frozenset[str], **options: Any) -> NounPhrase:
    """A random noun phrase whose noun has one of ``tags``; ``options`` as for :func:`phrase_of`."""
    return phrase_of(rng, rng.choice(_nouns_with(tags)), **options)


def phrase_of(
    rng: random.Random,
    noun: Noun,
    *,
    determiners: Sequence[str] = _ANY,
    numbers: float = 0.0,
    adjectives: float = 0.3,
    plural: float = 0.3,
) -> NounPhrase:
    """A random noun phrase around ``noun``: le chat, des chats, mes deux petits chats noirs.

    ``numbers``, ``adjectives`` and ``plural`` are the chances of a number (deux ... vingt et
    un), of adjectives, and of a plural.
    """
    allowed = determiners if noun.possessive else [d for d in determiners if d != "poss"]
    determiner = _weighted(rng, tuple((d, _DETERMINERS[d]) for d in allowed))
    is_plural, number = noun.countable and _chance(rng, plural), None
    if noun.countable and _chance(rng, numbers):
        determiner, is_plural, number = "num", True, rng.choice(NUMBERS)
    owner = rng.choice((0, 1, 3, 4, 5)) if determiner == "poss" else 0  # never son/sa/ses
    return NounPhrase(noun, determiner, is_plural, owner, number, _adjective_list(rng, noun, adjectives))


def _adjective_list(rng: random.Random, noun: Noun, share: float) -> tuple[Adjective, ...]:
    """None, one, or (rarely) one before the noun plus a colour: le petit chat noir."""
    candidates = _adjectives_for(noun.tags)
    if not candidates or not _chance(rng, share):
        return ()
    first = rng.choice(candidates)
    colors = [a for a in candidates if a.color]
    if first.before_noun and colors and _chance(rng, 0.25):
        return (first, rng.choice(colors))
    return (first,)


def _subject(rng: random.Random, tags: frozenset[str], *, pronouns: float = 0.5, adjectives: float = 0.2) -> Subject:
    if "person" in tags and _chance(rng, pronouns):
        return _person(rng)
    return noun_phrase(rng, tags, determiners=_DEFINITE, numbers=0.05, adjectives=adjectives)


def _place(rng: random.Random, prepositions: Sequence[Preposition], where: frozenset[str] = frozenset()) -> Place:
    """A prepositional phrase: dans le jardin, près de ma maison, avec des amis."""
    candidates = [p for p in prepositions if not where or p.tags & where]
    preposition = rng.choice(candidates)
    tags = preposition.tags & where if where else preposition.tags
    determiners = _ANY if preposition in COMPANIONS else _DEFINITE  # places are known: "sur la table"
    return Place(preposition, noun_phrase(rng, tags, determiners=determiners, adjectives=0.15))


def referent(np: Subject) -> Pronoun:
    """The pronoun taking up a noun phrase: l'animal -> il / it, la femme -> elle / she, marie -> elle / she."""
    if isinstance(np, Pronoun):
        return Pronoun(2, np.gender, False) if np.french else np
    english = "they" if np.plural else ("she" if np.gender == "f" else "he") if np.noun.human else "it"
    return Pronoun(np.person, np.gender, np.plural, english)


# --------------------------------------------------------------------------------------------
# Templates
# --------------------------------------------------------------------------------------------


_PROFESSIONS = tuple((p, p.weight) for p in PROFESSIONS)


def identity(rng: random.Random) -> Clause:
    """je suis étudiant, ma sœur n'est plus médecin, est-ce que vous êtes professeurs ?"""
    subject = _subject(rng, PERSON, pronouns=0.75, adjectives=0.0)
    tense = _tense(rng, ("present", 0.75), ("future", 0.1), ("imperfect", 0.15))
    negation = _negation(rng, tense, 0.25)
    if negation == "jamais":
        negation = "pas"
    profession = _weighted(rng, _PROFESSIONS)
    while isinstance(subject, NounPhrase) and profession.english == subject.noun.english:
        profession = _weighted(rng, _PROFESSIONS)  # not "l'étudiante est étudiante"
    return Clause(subject, ETRE, (Role(profession),), tense, negation, _question(rng, negation))


def description(rng: random.Random) -> Clause:
    """la maison est grande, elles sont très fatiguées, le chat noir n'était pas content."""
    if _chance(rng, 0.4):
        subject, tags = _pronoun(rng), PERSON
    else:
        subject = noun_phrase(rng, _DESCRIBABLE, determiners=_DEFINITE, adjectives=0.2)
        tags = subject.noun.tags
    candidates = [a for a in _adjectives_for(tags, attributive=False) if a not in getattr(subject, "adjectives", ())]
    chosen = rng.choice(candidates)
    adverb = None if chosen.color else _weighted(rng, ((None, 0.6), ("très", 0.25), ("trop", 0.15)))
    tense = _tense(rng, ("present", 0.7), ("imperfect", 0.15), ("future", 0.15))
    negation = _negation(rng, tense, 0.25)
    attribute = Attribute(chosen, adverb)
    return Clause(subject, ETRE, (attribute,), tense, negation, _question(rng, negation))


_DESCRIBABLE = frozenset(tag for a in ADJECTIVES for tag in a.applies_to)


def action(rng: random.Random) -> Clause:
    """le chat mange le poisson, je n'ai pas lu de livre, est-ce que tu vas acheter du pain ?"""
    verb = rng.choice(TRANSITIVE_VERBS)
    tense = _tense(rng)
    negation = _negation(rng, tense)
    numbers = 0.0 if negation else 0.1
    obj = noun_phrase(rng, verb.objects, numbers=numbers, adjectives=0.3)
    complements: tuple = (Object(obj),)
    if _chance(rng, 0.12):
        complements += (_place(rng, LOCATIONS, _SCENES),)  # je mange une pomme dans la cuisine
    return Clause(_subject(rng, verb.subjects), verb, complements, tense, negation, _question(rng, negation))


def activity(rng: random.Random) -> Clause:
    """les enfants jouent dans le jardin, il ne travaille jamais avec mon frère."""
    verb = rng.choice(INTRANSITIVE_VERBS)
    tense = _tense(rng)
    negation = _negation(rng, tense)
    complements: tuple = ()
    if verb.places:
        complements = (_place(rng, LOCATIONS, verb.places),)
    elif _chance(rng, 0.6):
        complements = (_place(rng, COMPANIONS if _chance(rng, 0.25) else LOCATIONS),)
    return Clause(_subject(rng, verb.subjects), verb, complements, tense, negation, _question(rng, negation))


def movement(rng: random.Random) -> Clause:
    """elle est allée au marché, nous ne sommes pas sortis de la maison, je vais aller à la gare."""
    verb = rng.choice(MOVEMENT_VERBS)
    tense = _tense(rng, ("present", 0.35), ("past", 0.45), ("future", 0.2))
    negation = _negation(rng, tense)
    place = _place(rng, verb.paths)
    return Clause(_subject(rng, verb.subjects), verb, (place,), tense, negation, _question(rng, negation))


def possession(rng: random.Random) -> Clause:
    """j'ai deux chiens, mon frère n'a plus de voiture, est-ce que tu avais un chat ?"""
    tense = _tense(rng, ("present", 0.7), ("imperfect", 0.15), ("future", 0.15))
    negation = _negation(rng, tense)
    if negation == "jamais":
        negation = "plus"
    numbers = 0.0 if negation else 0.35
    obj = noun_phrase(rng, AVOIR.objects, determiners=("indef", "def", "poss"), numbers=numbers)
    subject = _subject(rng, PERSON, pronouns=0.6)
    return Clause(subject, AVOIR, (Object(obj),), tense, negation, _question(rng, negation))


def existence(rng: random.Random) -> Existential:
    """il y a trois pommes sur la table, il n'y avait pas de chat dans le jardin."""
    negation = "pas" if _chance(rng, 0.2) else None
    place = _place(rng, LOCATIONS)
    tags = _SMALL if place.np.noun.tags & _SMALL_PLACES else _EXISTING  # no car in a cup
    np = noun_phrase(rng, tags, determiners=("indef",), numbers=0.0 if negation else 0.4)
    tense = "imperfect" if _chance(rng, 0.2) else "present"
    return Existential(np, place, tense, negation, _question(rng, negation, 0.15))


_EXISTING = frozenset({"animal", "thing", "food", "person", "vehicle", "readable", "plant"})
_SMALL, _SMALL_PLACES = frozenset({"food", "readable", "portable"}), frozenset({"container", "furniture"})
_SCENES = frozenset({"area", "venue"})


def relative(rng: random.Random) -> Clause:
    """le chat qui dort est noir, je vois le garçon qui mange une pomme, j'aime le gâteau que tu fais."""
    kind = rng.randrange(3)
    if kind == 0:
        return _relative_on_subject(rng)
    if kind == 1:  # je vois le chat qui dort
        verb = rng.choice([v for v in TRANSITIVE_VERBS if v.objects & ANIMATE])
        obj = _with_subject_relative(rng, noun_phrase(rng, verb.objects & ANIMATE, determiners=_DEFINITE))
    else:  # j'aime le gâteau que tu prépares
        verb = rng.choice(TRANSITIVE_VERBS)
        obj = _with_object_relative(rng, noun_phrase(rng, verb.objects, determiners=_DEFINITE, adjectives=0.1))
    tense = _tense(rng)
    negation = _negation(rng, tense, 0.2)
    subject = _subject(rng, verb.subjects, pronouns=1.0)
    return Clause(subject, verb, (Object(obj),), tense, negation, _question(rng, negation, 0.1))


def _relative_on_subject(rng: random.Random) -> Clause:
    """le chien qui court est fatigué, les enfants qui chantent jouent dans le jardin."""
    head = _with_subject_relative(rng, noun_phrase(rng, ANIMATE, determiners=_DEFINITE, adjectives=0.1))
    tags = head.noun.tags
    if _chance(rng, 0.5):
        candidates = [a for a in _adjectives_for(tags, attributive=False) if a not in head.adjectives]
        verb, complements = ETRE, (Attribute(rng.choice(candidates)),)
        tense = _tense(rng, ("present", 0.8), ("imperfect", 0.2))
    else:
        other = head.relative.verb.infinitive  # not "le chat qui dort dort"
        verbs = [v for v in INTRANSITIVE_VERBS if not v.places and v.subjects & tags and v.infinitive != other]
        verb = rng.choice(verbs)
        complements = (_place(rng, LOCATIONS),) if _chance(rng, 0.3) else ()
        tense = _tense(rng)
    negation = _negation(rng, tense, 0.2)
    return Clause(head, verb, complements, tense, negation, _question(rng, negation, 0.1))


def _with_subject_relative(rng: random.Random, head: NounPhrase) -> NounPhrase:
    """head + "qui" + verb (+ object): le chat qui dort, le garçon qui mange une pomme."""
    tags = head.noun.tags
    if _chance(rng, 0.6):
        verb = rng.choice([v for v in INTRANSITIVE_VERBS if v.subjects & tags and not v.places])
        return replace(head, relative=Relative(verb))
    verb = rng.choice([v for v in TRANSITIVE_VERBS if v.subjects & tags])
    obj = noun_phrase(rng, verb.objects, adjectives=0.0, plural=0.2)
    return replace(head, relative=Relative(verb, obj))


def _with_object_relative(rng: random.Random, head: NounPhrase) -> NounPhrase:
    """head + "que" + pronoun + verb: le livre que je lis, la soupe qu'elle prépare."""
    tags = head.noun.tags
    verbs = [v for v in TRANSITIVE_VERBS if v.objects & tags and "person" in v.subjects and not v.object_preposition]
    verb = rng.choice(verbs)
    return replace(head, relative=Relative(verb, subject=_pronoun(rng)))


def explanation(rng: random.Random) -> Clause:
    """l'animal n'a pas traversé la rue parce qu'il était trop fatigué (the pronoun refers back)."""
    kind = rng.random()
    if kind < 0.45:
        return _explained_by_subject(rng)
    if kind < 0.8:
        return _explained_by_object(rng, OBJECT_REASONS, negation="pas", adverb="trop")
    if kind < 0.9:
        return _explained_by_object(rng, PRAISES, negation=None, adverb="très")
    return _explained_by_need(rng)


_EXPLAINABLE = TRANSITIVE_VERBS + MOVEMENT_VERBS
_CROSS = transitive_verb("traverser")  # the lecture's example verb, drawn more often


def _explained_by_subject(rng: random.Random) -> Clause:
    """... n'a pas traversé la rue parce qu'il était trop fatigué / parce qu'il avait peur."""
    verb = _CROSS if _chance(rng, 0.25) else rng.choice(_EXPLAINABLE)
    if "animal" in verb.subjects and _chance(rng, 0.4):  # as often "it" as "he"/"she": l'animal ... parce qu'il -> it
        subject = noun_phrase(rng, frozenset({"animal"}), determiners=_DEFINITE, numbers=0.05, adjectives=0.0)
    else:
        subject = _subject(rng, verb.subjects, pronouns=0.35, adjectives=0.0)
    tense = "past" if _chance(rng, 0.75) else "present"
    if verb.transitive:
        complement = Object(noun_phrase(rng, verb.objects, determiners=_DEFINITE, adjectives=0.1))
    else:
        complement = _place(rng, verb.paths)
    tags = PERSON if isinstance(subject, Pronoun) else subject.noun.tags
    if _chance(rng, 0.2):
        because = Clause(referent(subject), AVOIR_AS_BE, (Idiom(("peur",), (SUBJECT_IDIOMS["peur"],)),))
    else:
        reasons = [a for a in map(adjective, SUBJECT_REASONS) if a.describes(tags)]
        because = Clause(referent(subject), ETRE, (Attribute(rng.choice(reasons), "trop"),))
    because = replace(because, tense="imperfect" if tense == "past" else "present")
    return Clause(subject, verb, (complement,), tense, "pas", reason=because)


def _explained_by_object(
    rng: random.Random, reasons: dict[str, tuple[str, ...]], *, negation: str | None, adverb: str
) -> Clause:
    """... n'a pas mangé la soupe parce qu'elle était trop chaude / ... parce qu'il était très bon."""
    verb = transitive_verb(rng.choice(list(reasons)))
    reason = adjective(rng.choice(reasons[verb.infinitive]))
    nouns = [n for n in _nouns_with(verb.objects) if reason.describes(n.tags)]
    obj = phrase_of(rng, rng.choice(nouns), determiners=_DEFINITE, adjectives=0.0)
    tense = "past" if _chance(rng, 0.75) else "present"
    because = Clause(referent(obj), ETRE, (Attribute(reason, adverb),), "imperfect" if tense == "past" else "present")
    subject = _subject(rng, verb.subjects, pronouns=0.4, adjectives=0.0)
    return Clause(subject, verb, (Object(obj),), tense, negation, reason=because)


def _explained_by_need(rng: random.Random) -> Clause:
    """le chat a mangé le poisson parce qu'il avait faim -> ... because it was hungry."""
    verb, need = rng.choice(((transitive_verb("manger"), "faim"), (transitive_verb("boire"), "soif")))
    subject = _subject(rng, verb.subjects, pronouns=0.35, adjectives=0.0)
    obj = noun_phrase(rng, verb.objects, adjectives=0.1)
    tense = "past" if _chance(rng, 0.75) else "present"
    idiom = Idiom((need,), (SUBJECT_IDIOMS[need],))
    if _chance(rng, 0.3):  # il avait très faim -> he was very hungry
        idiom = Idiom(("très", *idiom.french), ("very", *idiom.english))
    because = Clause(referent(subject), AVOIR_AS_BE, (idiom,), "imperfect" if tense == "past" else "present")
    return Clause(subject, verb, (Object(obj),), tense, reason=because)


# --------------------------------------------------------------------------------------------
# Choosing a template
# --------------------------------------------------------------------------------------------

TEMPLATES: tuple[tuple[Callable[[random.Random], Sentence], float], ...] = (
    (identity, 10),
    (description, 10),
    (action, 22),
    (activity, 11),
    (movement, 10),
    (possession, 7),
    (existence, 7),
    (relative, 10),
    (explanation, 10),
)


def sample_sentence(rng: random.Random) -> Sentence:
    """One random sentence plan, from a template drawn by weight."""
    return _weighted(rng, TEMPLATES)(rng)

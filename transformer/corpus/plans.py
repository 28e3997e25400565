"""Sentence plans of the built-in corpus: what a sentence says, before it is written out.

A plan names lexicon entries and grammatical choices (tense, negation, determiner, number);
:func:`transformer.corpus.grammar.realize` turns one plan into a French and an English sentence.
Plans are plain frozen dataclasses, so a test can build any sentence of the grammar by hand.

Persons are numbered 0..5: je, tu, il/elle, nous, vous, ils/elles.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer.corpus.lexicon import Noun, Preposition
from transformer.corpus.modifiers import Adjective, Number, Profession
from transformer.corpus.verbs import Verb

_FRENCH_PRONOUNS = (("je", "je"), ("tu", "tu"), ("il", "elle"), ("nous", "nous"), ("vous", "vous"), ("ils", "elles"))
_ENGLISH_PRONOUNS = (("i", "i"), ("you", "you"), ("he", "she"), ("we", "we"), ("you", "you"), ("they", "they"))


@dataclass(frozen=True)
class Pronoun:
    """A subject pronoun. ``english`` overrides the usual one ("it" for "il" = l'animal); a first
    name is a third-person "pronoun" with both sides set (:func:`name`)."""

    person: int  # 0..5: je, tu, il/elle, nous, vous, ils/elles
    gender: str = "m"
    plural: bool = False  # only free for "vous" (vous êtes allée / allés)
    english: str = ""
    french: str = ""

    def french_words(self) -> list[str]:
        return [self.french or _FRENCH_PRONOUNS[self.person][self.gender == "f"]]

    def english_words(self) -> list[str]:
        return [self.english or _ENGLISH_PRONOUNS[self.person][self.gender == "f"]]


def pronoun(person: int, gender: str = "m", *, plural: bool | None = None, english: str = "") -> Pronoun:
    """A pronoun; its number follows from the person except for "vous" (default: singular)."""
    return Pronoun(person, gender, person in (3, 5) if plural is None else plural, english)


def name(first_name: str, gender: str) -> Pronoun:
    """A person's first name as a subject: the same word in both languages (marie -> marie)."""
    return Pronoun(2, gender, False, english=first_name, french=first_name)


@dataclass(frozen=True)
class Relative:
    """A relative clause in the present: "qui dort" (no ``subject``) or "que je lis"."""

    verb: Verb
    object: NounPhrase | None = None  # qui mange une pomme
    subject: Pronoun | None = None  # que je lis (the noun phrase is the object)


@dataclass(frozen=True)
class NounPhrase:
    """Determiner + noun + adjectives (+ relative clause)."""

    noun: Noun
    determiner: str = "def"  # "def" le | "indef" un, des, du | "poss" mon | "dem" ce | "num" trois
    plural: bool = False
    owner: int = 0  # for "poss": the possessor's person (0 mon, 1 ton, 3 notre, 4 votre, 5 leur)
    number: Number | None = None  # for "num"
    adjectives: tuple[Adjective, ...] = ()
    relative: Relative | None = None

    @property
    def person(self) -> int:
        return 5 if self.plural else 2

    @property
    def gender(self) -> str:
        return self.noun.gender


Subject = Pronoun | NounPhrase


@dataclass(frozen=True)
class Object:
    """The direct object (or "à" object: obéir au professeur) of the clause's verb."""

    np: NounPhrase


@dataclass(frozen=True)
class Place:
    """A prepositional phrase: dans le jardin, au marché, avec mon frère."""

    preposition: Preposition
    np: NounPhrase


@dataclass(frozen=True)
class Attribute:
    """A predicate adjective after "être", agreeing with the subject: elle est (très) fatiguée."""

    adjective: Adjective
    adverb: str | None = None  # "très" | "trop"


@dataclass(frozen=True)
class Role:
    """A profession after "être": je suis étudiant -> i am a student."""

    profession: Profession


@dataclass(frozen=True)
class Idiom:
    """Fixed words on each side: avoir faim -> be hungry."""

    french: tuple[str, ...]
    english: tuple[str, ...]


Complement = Object | Place | Attribute | Role | Idiom


@dataclass(frozen=True)
class Clause:
    """Subject + verb + complements, in one tense, maybe negated, maybe a question."""

    subject: Subject
    verb: Verb
    complements: tuple[Complement, ...] = ()
    tense: str = "present"  # | "past" (passé composé) | "future" (futur proche) | "imperfect"
    negation: str | None = None  # "pas" | "jamais" | "plus"
    question: bool = False  # est-ce que ... ?
    reason: Clause | None = None  # ... parce que <reason>


@dataclass(frozen=True)
class Existential:
    """Il y a (il y avait) + noun phrase + place: there is / there are."""

    np: NounPhrase
    place: Place | None = None
    tense: str = "present"  # or "imperfect"
    negation: str | None = None  # only "pas": il n'y a pas de chat -> there is no cat
    question: bool = False


Sentence = Clause | Existential

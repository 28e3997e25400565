"""Writing a sentence plan (:mod:`.plans`) out twice: in French and in English.

The French side takes care of agreement (la petite maison, elle est allée), "pas de",
elision (l'arbre, j'ai, qu'il) and contraction (au, aux, du, des); the English side of word
order (the black cat), do-support (does not eat, did you eat?), "going to", third-person -s
and a/an. One plan gives exactly one French and one English sentence; the plans are drawn
(:mod:`.templates`) so that no French sentence ever gets two translations.
"""

from __future__ import annotations

from dataclasses import replace

from transformer.corpus.lexicon import english_plural, starts_with_vowel
from transformer.corpus.modifiers import Adjective
from transformer.corpus.plans import (
    Attribute,
    Clause,
    Complement,
    Existential,
    NounPhrase,
    Object,
    Place,
    Pronoun,
    Relative,
    Role,
    Sentence,
    Subject,
)
from transformer.corpus.verbs import (
    Verb,
    english_past,
    english_third_person,
    french_imperfect,
    french_participle,
    french_present,
)

NEGATIONS = {"pas": ("not",), "jamais": ("never",), "plus": ("no", "longer")}
ADVERBS = {"très": "very", "trop": "too"}

_POSSESSIVES = (  # owner person -> (masculine singular, feminine singular, plural), English
    ("mon", "ma", "mes", "my"),
    ("ton", "ta", "tes", "your"),
    None,  # son/sa/ses: "his" or "her"? ambiguous in English, so never used
    ("notre", "notre", "nos", "our"),
    ("votre", "votre", "vos", "your"),
    ("leur", "leur", "leurs", "their"),
)


def realize(sentence: Sentence) -> tuple[str, str]:
    """The (French, English) text of a sentence plan."""
    if isinstance(sentence, Existential):
        french, english = _french_existential(sentence), _english_existential(sentence)
    else:
        french, english = _french_clause(sentence), _english_clause(sentence)
    return french_text(french), english_text(english)


# --------------------------------------------------------------------------------------------
# French
# --------------------------------------------------------------------------------------------

_ELISIONS = {"je": "j'", "le": "l'", "la": "l'", "ne": "n'", "de": "d'", "que": "qu'"}
_CONTRACTIONS = {("à", "le"): "au", ("à", "les"): "aux", ("de", "le"): "du", ("de", "les"): "des"}


def french_text(words: list[str]) -> str:
    """Join French words, eliding (le arbre -> l'arbre) then contracting (à le -> au)."""
    elided: list[str] = []
    for word in words:
        if elided and elided[-1] in _ELISIONS and starts_with_vowel(word):
            elided[-1] = _ELISIONS[elided[-1]] + word
        else:
            elided.append(word)
    contracted: list[str] = []
    for word in elided:
        if contracted and (contracted[-1], word) in _CONTRACTIONS:
            contracted[-1] = _CONTRACTIONS[contracted[-1], word]
        else:
            contracted.append(word)
    return " ".join(contracted)


def french_verb_group(verb: Verb, subject: Subject, tense: str, negation: str | None) -> list[str]:
    """Conjugated verb with its negation: mange, n'a pas mangé, est allée, ne vais pas manger."""
    person = subject.person
    if tense == "present":
        words = [french_present(verb.infinitive, person)]
    elif tense == "imperfect":
        words = [french_imperfect(verb.infinitive, person)]
    elif tense == "past":
        agrees = verb.auxiliary == "être"  # elle est allée, but elle a mangé
        participle = french_participle(
            verb.infinitive, gender=subject.gender if agrees else "m", plural=subject.plural and agrees
        )
        words = [french_present(verb.auxiliary, person), participle]
    elif tense == "future":
        words = [french_present("aller", person), verb.infinitive]
    else:
        raise ValueError(f"unknown tense {tense!r}")
    if negation:
        words = ["ne", words[0], negation, *words[1:]]
    return words


def french_noun_phrase(np: NounPhrase, *, negated: bool = False) -> list[str]:
    """The French words of a noun phrase; ``negated`` turns un/une/des/du into "de"."""
    gender, plural = np.noun.gender, np.plural
    noun = np.noun.french_plural if plural else np.noun.french
    before = [a for a in np.adjectives if a.before_noun]
    after = [a.form(gender, plural) for a in np.adjectives if not a.before_noun]
    head = [*(_adjective_before(a, gender, plural, noun) for a in before), noun, *after]
    words = [*_french_determiner(np, head[0], negated, has_adjective_before=bool(before)), *head]
    if np.relative is not None:
        words += _french_relative(np.relative, np)
    return words


def _adjective_before(adjective: Adjective, gender: str, plural: bool, noun: str) -> str:
    if adjective.vowel_form and gender == "m" and not plural and starts_with_vowel(noun):
        return adjective.vowel_form  # un vieil homme, un bel arbre
    return adjective.form(gender, plural)


def _french_determiner(np: NounPhrase, next_word: str, negated: bool, *, has_adjective_before: bool) -> list[str]:
    feminine, plural = np.noun.gender == "f", np.plural
    kind = np.determiner
    if kind == "def":
        return ["les" if plural else "la" if feminine else "le"]  # le/la -> l' by elision
    if kind == "indef":
        if negated:
            return ["de"]  # je n'ai pas de chat
        if not np.noun.countable:
            return ["de", "la" if feminine else "le"]  # du pain, de la soupe, de l'eau
        if plural:
            return ["de" if has_adjective_before else "des"]  # de petits chats
        return ["une" if feminine else "un"]
    if kind == "poss":
        masculine_form, feminine_form, plural_form, _ = _POSSESSIVES[np.owner]
        if plural:
            return [plural_form]
        return [feminine_form if feminine and not starts_with_vowel(next_word) else masculine_form]  # mon amie
    if kind == "dem":
        if plural:
            return ["ces"]
        return ["cette" if feminine else "cet" if starts_with_vowel(next_word) else "ce"]
    if kind == "num":
        return np.number.form(np.noun.gender).split()
    raise ValueError(f"unknown determiner {kind!r}")


def _french_relative(relative: Relative, head: NounPhrase) -> list[str]:
    verb = relative.verb
    if relative.subject is not None:  # le livre que je lis
        return ["que", *relative.subject.french_words(), french_present(verb.infinitive, relative.subject.person)]
    words = ["qui", french_present(verb.infinitive, head.person)]  # le chat qui dort
    if relative.object is not None:
        words += _french_object(verb, relative.object, negated=False)
    return words


def _french_object(verb: Verb, np: NounPhrase, *, negated: bool) -> list[str]:
    if verb.object_preposition:  # obéir au professeur: no "pas de" after a preposition
        return [verb.object_preposition, *french_noun_phrase(np)]
    return french_noun_phrase(np, negated=negated)


def _french_complement(complement: Complement, clause: Clause) -> list[str]:
    subject = clause.subject
    if isinstance(complement, Object):
        return _french_object(clause.verb, complement.np, negated=clause.negation is not None)
    if isinstance(complement, Place):
        return [*complement.preposition.french.split(), *french_noun_phrase(complement.np)]
    if isinstance(complement, Attribute):
        adverb = [complement.adverb] if complement.adverb else []
        return [*adverb, complement.adjective.form(subject.gender, subject.plural)]
    if isinstance(complement, Role):
        return [complement.profession.form(subject.gender, subject.plural)]
    return list(complement.french)


def _french_subject(subject: Subject) -> list[str]:
    return subject.french_words() if isinstance(subject, Pronoun) else french_noun_phrase(subject)


def _french_clause(clause: Clause) -> list[str]:
    words = ["est-ce", "que"] if clause.question else []
    words += _french_subject(clause.subject)
    words += french_verb_group(clause.verb, clause.subject, clause.tense, clause.negation)
    for complement in clause.complements:
        words += _french_complement(complement, clause)
    if clause.reason is not None:
        words += ["parce", "que", *_french_clause(clause.reason)]
    if clause.question:
        words.append("?")
    return words


def _french_existential(sentence: Existential) -> list[str]:
    words = ["est-ce", "que"] if sentence.question else []
    verb = french_present("avoir", 2) if sentence.tense == "present" else french_imperfect("avoir", 2)
    words += ["il", "ne", "y", verb, sentence.negation] if sentence.negation else ["il", "y", verb]
    words += french_noun_phrase(sentence.np, negated=sentence.negation is not None)
    if sentence.place is not None:
        words += [*sentence.place.preposition.french.split(), *french_noun_phrase(sentence.place.np)]
    if sentence.question:
        words.append("?")
    return words


# --------------------------------------------------------------------------------------------
# English
# --------------------------------------------------------------------------------------------


def english_text(words: list[str]) -> str:
    """Join English words: "a" becomes "an" before a vowel sound, "?" sticks to the last word."""
    fixed = [
        "an" if word == "a" and index + 1 < len(words) and _vowel_sound(words[index + 1]) else word
        for index, word in enumerate(words)
    ]
    return " ".join(fixed).replace(" ?", "?")


def _vowel_sound(word: str) -> bool:
    return word[0] in "aeiou" and not word.startswith(("uni", "use", "eu", "one"))


def _be(person: int, *, past: bool) -> str:
    if past:
        return "was" if person in (0, 2) else "were"
    return "am" if person == 0 else "is" if person == 2 else "are"


def english_verb_group(verb: Verb, person: int, tense: str, negation: str | None) -> list[str]:
    """Declarative verb group: eats, does not eat, never ate, is going to eat, was not."""
    head, *particle = verb.english.split()
    negative = list(NEGATIONS[negation]) if negation else []
    if tense == "future":
        return [_be(person, past=False), *negative, "going", "to", head, *particle]
    if head == "be":
        return [_be(person, past=tense != "present"), *negative, *particle]
    if negation == "pas":  # do-support
        auxiliary = "did" if tense != "present" else "does" if person == 2 else "do"
        return [auxiliary, "not", head, *particle]
    if tense == "present":
        form = english_third_person(head) if person == 2 else head
    else:
        form = english_past(head)
    return [*negative, form, *particle]


def english_question_verb(verb: Verb, person: int, tense: str) -> tuple[list[str], list[str]]:
    """The verb group of a yes/no question, split around the subject: (does, eat), (are, going to eat)."""
    head, *particle = verb.english.split()
    if tense == "future":
        return [_be(person, past=False)], ["going", "to", head, *particle]
    if head == "be":
        return [_be(person, past=tense != "present")], particle
    auxiliary = "did" if tense != "present" else "does" if person == 2 else "do"
    return [auxiliary], [head, *particle]


def english_noun_phrase(np: NounPhrase, *, negated: bool = False) -> list[str]:
    """The English words of a noun phrase; ``negated`` replaces the determiner by "no"."""
    noun = np.noun.english_plural if np.plural else np.noun.english
    adjectives = [a.english for a in np.adjectives if a.before_noun] + [
        a.english for a in np.adjectives if not a.before_noun
    ]
    words = [*(["no"] if negated else _english_determiner(np)), *adjectives, *noun.split()]
    if np.relative is not None:
        words += _english_relative(np.relative, np)
    return words


def _english_determiner(np: NounPhrase) -> list[str]:
    kind = np.determiner
    if kind == "def":
        return ["the"]
    if kind == "indef":
        return ["a"] if np.noun.countable and not np.plural else []  # cats, bread
    if kind == "poss":
        return [_POSSESSIVES[np.owner][3]]
    if kind == "dem":
        return ["these" if np.plural else "this"]
    if kind == "num":
        return [np.number.english]
    raise ValueError(f"unknown determiner {kind!r}")


def _english_relative(relative: Relative, head: NounPhrase) -> list[str]:
    if relative.subject is not None:  # the book that i read
        person = relative.subject.person
        return ["that", *relative.subject.english_words(), *english_verb_group(relative.verb, person, "present", None)]
    words = ["that", *english_verb_group(relative.verb, head.person, "present", None)]  # the cat that sleeps
    if relative.object is not None:
        words += english_noun_phrase(relative.object)
    return words


def _english_complement(complement: Complement, clause: Clause) -> list[str]:
    if isinstance(complement, Object):
        negated = clause.negation is not None and not clause.verb.object_preposition
        return english_noun_phrase(_as_french_shows_it(complement.np, negated=negated))
    if isinstance(complement, Place):
        return [*complement.preposition.english.split(), *english_noun_phrase(complement.np)]
    if isinstance(complement, Attribute):
        adverb = [ADVERBS[complement.adverb]] if complement.adverb else []
        return [*adverb, complement.adjective.english]
    if isinstance(complement, Role):
        english = complement.profession.english
        return english_plural(english).split() if clause.subject.plural else ["a", *english.split()]
    return list(complement.english)


def _english_subject(subject: Subject) -> list[str]:
    return subject.english_words() if isinstance(subject, Pronoun) else english_noun_phrase(subject)


def _english_clause(clause: Clause) -> list[str]:
    subject, person = _english_subject(clause.subject), clause.subject.person
    complements = [word for complement in clause.complements for word in _english_complement(complement, clause)]
    if clause.question:
        if clause.negation:
            raise ValueError("negative questions are not part of the grammar")
        before, after = english_question_verb(clause.verb, person, clause.tense)
        words = [*before, *subject, *after, *complements]
    else:
        words = [*subject, *english_verb_group(clause.verb, person, clause.tense, clause.negation), *complements]
    if clause.reason is not None:
        words += ["because", *_english_clause(clause.reason)]
    if clause.question:
        words.append("?")
    return words


def _as_french_shows_it(np: NounPhrase, *, negated: bool) -> NounPhrase:
    """Singular where French cannot show the number: "pas de souris" -> "a mouse", never "mice"."""
    if negated and np.determiner == "indef" and np.plural and np.noun.french_plural == np.noun.french:
        return replace(np, plural=False)
    return np


def _english_existential(sentence: Existential) -> list[str]:
    negated = sentence.negation is not None
    subject = _as_french_shows_it(sentence.np, negated=negated)
    be = _be(subject.person, past=sentence.tense == "imperfect")
    np = english_noun_phrase(subject, negated=negated)
    place = []
    if sentence.place is not None:
        place = [*sentence.place.preposition.english.split(), *english_noun_phrase(sentence.place.np)]
    if sentence.question:
        return [be, "there", *np, *place, "?"]
    return ["there", be, *np, *place]

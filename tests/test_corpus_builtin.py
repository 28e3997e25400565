"""The built-in French -> English corpus: grammar (conjugation, agreement, elision, word
order, negation, questions, numbers, relative clauses, pronouns) and the slide sentences; the
generator's guarantees are in test_corpus_generator.py."""

from __future__ import annotations

import pytest

from transformer.corpus.builtin import SLIDE_EXAMPLES
from transformer.corpus.grammar import french_text, realize
from transformer.corpus.lexicon import COMPANIONS, LOCATIONS, noun
from transformer.corpus.modifiers import NUMBERS, PROFESSIONS, adjective
from transformer.corpus.plans import (
    Attribute,
    Clause,
    Existential,
    NounPhrase,
    Object,
    Place,
    Pronoun,
    Relative,
    Role,
    pronoun,
)
from transformer.corpus.templates import OBJECT_REASONS, PRAISES, SUBJECT_REASONS, referent
from transformer.corpus.verbs import (
    AVOIR,
    ETRE,
    english_past,
    english_third_person,
    french_participle,
    french_present,
    intransitive_verb,
    movement_verb,
    transitive_verb,
)

JE, TU, IL, ELLE, NOUS, VOUS, ILS, ELLES = (
    pronoun(0), pronoun(1), pronoun(2), pronoun(2, "f"), pronoun(3), pronoun(4), pronoun(5), pronoun(5, "f")
)  # fmt: skip
DANS, SUR, SOUS, PRES_DE, DEVANT, DERRIERE, A_COTE_DE, A = LOCATIONS
AVEC, SANS = COMPANIONS


def np(
    word: str, determiner: str = "def", *adjectives: str, plural: bool = False, owner: int = 0, number: str = ""
) -> NounPhrase:
    """A noun phrase from French words: np("chat", "def", "petit", "noir", plural=True), np("chat", number="trois")."""
    count = next(n for n in NUMBERS if n.masculine == number) if number else None
    if count is not None:
        determiner, plural = "num", True
    return NounPhrase(noun(word), determiner, plural, owner, count, tuple(adjective(a) for a in adjectives))


def role(masculine: str) -> Role:
    return Role(next(p for p in PROFESSIONS if p.masculine == masculine))


say = realize  # plan -> (french, english)


# --------------------------------------------------------------------------------------------
# Conjugation
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("infinitive", "forms"),
    [
        ("manger", "mange manges mange mangeons mangez mangent"),
        ("finir", "finis finis finit finissons finissez finissent"),
        ("vendre", "vends vends vend vendons vendez vendent"),
        ("acheter", "achète achètes achète achetons achetez achètent"),
        ("appeler", "appelle appelles appelle appelons appelez appellent"),
        ("être", "suis es est sommes êtes sont"),
        ("avoir", "ai as a avons avez ont"),
        ("aller", "vais vas va allons allez vont"),
        ("faire", "fais fais fait faisons faites font"),
    ],
)
def test_french_present(infinitive: str, forms: str) -> None:
    assert [french_present(infinitive, person) for person in range(6)] == forms.split()


def test_participles_and_their_agreement() -> None:
    assert french_participle("manger") == "mangé"
    assert french_participle("finir") == "fini"
    assert french_participle("vendre") == "vendu"
    assert french_participle("prendre") == "pris"
    assert french_participle("aller", gender="f") == "allée"
    assert french_participle("aller", plural=True) == "allés"
    assert french_participle("venir", gender="f", plural=True) == "venues"
    assert french_participle("prendre", plural=True) == "pris"  # no double s


def test_english_irregular_and_regular_forms() -> None:
    assert [english_past(w) for w in ("go", "eat", "see", "buy", "carry", "play", "prefer")] == [
        "went", "ate", "saw", "bought", "carried", "played", "preferred"
    ]  # fmt: skip
    assert [english_third_person(w) for w in ("eat", "go", "watch", "carry", "play", "have")] == [
        "eats", "goes", "watches", "carries", "plays", "has"
    ]  # fmt: skip


def test_tenses_present_past_future() -> None:
    eat = transitive_verb("manger")
    obj = (Object(np("pomme", "indef")),)
    assert say(Clause(IL, eat, obj)) == ("il mange une pomme", "he eats an apple")
    assert say(Clause(NOUS, eat, obj, tense="past")) == ("nous avons mangé une pomme", "we ate an apple")
    assert say(Clause(JE, eat, obj, tense="future")) == ("je vais manger une pomme", "i am going to eat an apple")
    assert say(Clause(ELLES, intransitive_verb("dormir"), tense="past")) == (
        "elles ont dormi",
        "they slept",
    )
    assert say(Clause(NOUS, transitive_verb("finir"), (Object(np("livre")),))) == (
        "nous finissons le livre",
        "we finish the book",
    )


def test_passe_compose_with_etre_agrees_with_the_subject() -> None:
    go = movement_verb("aller")
    to_market = (Place(go.paths[0], np("marché")),)
    assert say(Clause(ELLE, go, to_market, tense="past")) == ("elle est allée au marché", "she went to the market")
    assert say(Clause(ILS, go, to_market, tense="past"))[0] == "ils sont allés au marché"
    assert say(Clause(ELLES, go, to_market, tense="past"))[0] == "elles sont allées au marché"
    assert say(Clause(np("fille"), go, to_market, tense="past"))[0] == "la fille est allée au marché"
    assert say(Clause(pronoun(4, "f", plural=True), go, to_market, tense="past"))[0] == "vous êtes allées au marché"
    come = movement_verb("venir")
    assert say(Clause(np("chat", plural=True), come, (Place(come.paths[0], np("jardin")),), tense="past")) == (
        "les chats sont venus du jardin",
        "the cats came from the garden",
    )
    # with avoir there is no agreement with the subject
    assert say(Clause(ELLE, intransitive_verb("dormir"), tense="past"))[0] == "elle a dormi"


# --------------------------------------------------------------------------------------------
# Noun phrases: agreement, adjective order, elision, contraction
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("phrase", "french", "english"),
    [
        (np("maison", "def", "petit", "blanc"), "la petite maison blanche", "the small white house"),
        (np("maison", "def", "petit", "blanc", plural=True), "les petites maisons blanches", "the small white houses"),
        (np("chat", "indef", "noir"), "un chat noir", "a black cat"),
        (np("chat", "indef", "noir", plural=True), "des chats noirs", "black cats"),
        (np("chat", "indef", "petit", plural=True), "de petits chats", "small cats"),
        (np("homme", "indef", "vieux"), "un vieil homme", "an old man"),
        (np("femme", "indef", "vieux"), "une vieille femme", "an old woman"),
        (np("oiseau", "indef", "beau"), "un bel oiseau", "a beautiful bird"),
        (np("oiseau", "def", "beau", plural=True), "les beaux oiseaux", "the beautiful birds"),
        (np("arbre", "dem"), "cet arbre", "this tree"),
        (np("chien", "dem"), "ce chien", "this dog"),
        (np("maison", "dem"), "cette maison", "this house"),
        (np("arbre", "dem", plural=True), "ces arbres", "these trees"),
        (np("amie", "poss"), "mon amie", "my friend"),
        (np("sœur", "poss"), "ma sœur", "my sister"),
        (np("sœur", "poss", owner=3, plural=True), "nos sœurs", "our sisters"),
        (np("voiture", "poss", owner=5), "leur voiture", "their car"),
        (np("pain", "indef"), "du pain", "bread"),
        (np("soupe", "indef", "chaud"), "de la soupe chaude", "hot soup"),
        (np("eau", "indef"), "de l'eau", "water"),
        (np("hôpital", "def"), "l'hôpital", "the hospital"),
        (np("souris", "def", "gris", plural=True), "les souris grises", "the gray mice"),
        (np("cheval", "def", plural=True), "les chevaux", "the horses"),
    ],
)
def test_noun_phrase_agreement_and_order(phrase: NounPhrase, french: str, english: str) -> None:
    assert say(Clause(JE, transitive_verb("voir"), (Object(phrase),))) == (f"je vois {french}", f"i see {english}")


def test_numbers_agree_and_make_plurals() -> None:
    have = lambda phrase: say(Clause(JE, AVOIR, (Object(phrase),)))  # noqa: E731
    assert have(np("chat", number="trois")) == ("j'ai trois chats", "i have three cats")
    assert have(np("pomme", "num", "rouge", number="vingt et un")) == (
        "j'ai vingt et une pommes rouges",
        "i have twenty-one red apples",
    )
    assert have(np("chien", number="vingt et un")) == ("j'ai vingt et un chiens", "i have twenty-one dogs")
    assert have(np("chat", "num", "petit", number="deux")) == ("j'ai deux petits chats", "i have two small cats")
    assert say(Existential(np("livre", number="onze"), Place(SUR, np("table")))) == (
        "il y a onze livres sur la table",
        "there are eleven books on the table",
    )


def test_elision_and_contraction() -> None:
    assert french_text("je ai le arbre".split()) == "j'ai l'arbre"
    assert french_text("est-ce que il ne est pas la amie".split()) == "est-ce qu'il n'est pas l'amie"
    assert french_text("près de le parc à les enfants de les amis à le hôtel de la eau".split()) == (
        "près du parc aux enfants des amis à l'hôtel de l'eau"
    )
    assert french_text("parce que elle ne a pas de eau".split()) == "parce qu'elle n'a pas d'eau"
    assert french_text("est-ce que onze chats".split()) == "est-ce que onze chats"  # no elision before onze
    assert say(Clause(JE, transitive_verb("aimer"), (Object(np("école")),))) == (
        "j'aime l'école",
        "i like the school",
    )


def test_prepositions() -> None:
    sleep = intransitive_verb("dormir")
    cases = [
        (Place(DANS, np("jardin")), "dans le jardin", "in the garden"),
        (Place(SOUS, np("table")), "sous la table", "under the table"),
        (Place(PRES_DE, np("arbre", plural=True)), "près des arbres", "near the trees"),
        (Place(A_COTE_DE, np("lit")), "à côté du lit", "next to the bed"),
        (Place(DEVANT, np("gare")), "devant la gare", "in front of the station"),
        (Place(A, np("marché")), "au marché", "at the market"),
        (Place(AVEC, np("ami", "indef", plural=True)), "avec des amis", "with friends"),
    ]
    for place, french, english in cases:
        assert say(Clause(np("chat"), sleep, (place,))) == (f"le chat dort {french}", f"the cat sleeps {english}")
    obey = transitive_verb("obéir")
    assert say(Clause(ILS, obey, (Object(np("professeur", plural=True)),))) == (
        "ils obéissent aux professeurs",
        "they obey the teachers",
    )


# --------------------------------------------------------------------------------------------
# Negation, questions, relative clauses, pronouns that refer back
# --------------------------------------------------------------------------------------------


def test_negation_pas_jamais_plus_and_pas_de() -> None:
    eat, drink = transitive_verb("manger"), transitive_verb("boire")
    assert say(Clause(JE, eat, (Object(np("pomme", "indef")),), negation="pas")) == (
        "je ne mange pas de pomme",
        "i do not eat an apple",
    )
    assert say(Clause(IL, eat, (Object(np("pomme")),), negation="jamais")) == (
        "il ne mange jamais la pomme",
        "he never eats the apple",
    )
    assert say(Clause(ELLE, drink, (Object(np("eau", "indef")),), negation="plus")) == (
        "elle ne boit plus d'eau",
        "she no longer drinks water",
    )
    assert say(Clause(NOUS, eat, (Object(np("gâteau", "indef", plural=True)),), tense="past", negation="pas")) == (
        "nous n'avons pas mangé de gâteaux",
        "we did not eat cakes",
    )
    assert say(Clause(TU, ETRE, (Attribute(adjective("fatigué")),), negation="pas")) == (
        "tu n'es pas fatigué",
        "you are not tired",
    )
    assert say(Clause(ILS, intransitive_verb("dormir"), tense="future", negation="pas")) == (
        "ils ne vont pas dormir",
        "they are not going to sleep",
    )
    assert say(Existential(np("chat", "indef"), Place(DANS, np("jardin")), negation="pas")) == (
        "il n'y a pas de chat dans le jardin",
        "there is no cat in the garden",
    )


def test_pas_de_hides_the_number_of_invariable_nouns_so_english_says_singular() -> None:
    have = lambda phrase: say(Clause(NOUS, AVOIR, (Object(phrase),), negation="pas"))  # noqa: E731
    assert have(np("souris", "indef", plural=True)) == have(np("souris", "indef")) == (
        "nous n'avons pas de souris",
        "we do not have a mouse",
    )
    assert have(np("chat", "indef", plural=True)) == ("nous n'avons pas de chats", "we do not have cats")
    no_buses = Existential(np("bus", "indef", plural=True), negation="pas")
    assert say(no_buses) == ("il n'y a pas de bus", "there is no bus")


def test_est_ce_que_questions() -> None:
    eat = intransitive_verb("manger")
    assert say(Clause(TU, eat, question=True)) == ("est-ce que tu manges ?", "do you eat?")
    assert say(Clause(IL, eat, tense="past", question=True)) == ("est-ce qu'il a mangé ?", "did he eat?")
    assert say(Clause(ELLE, intransitive_verb("dormir"), tense="future", question=True)) == (
        "est-ce qu'elle va dormir ?",
        "is she going to sleep?",
    )
    assert say(Clause(TU, ETRE, (role("étudiant"),), question=True)) == (
        "est-ce que tu es étudiant ?",
        "are you a student?",
    )
    assert say(Clause(np("chat"), AVOIR, (Object(np("jouet", "indef")),), question=True)) == (
        "est-ce que le chat a un jouet ?",
        "does the cat have a toy?",
    )
    assert say(Existential(np("chat", "indef", plural=True), Place(DANS, np("jardin")), question=True)) == (
        "est-ce qu'il y a des chats dans le jardin ?",
        "are there cats in the garden?",
    )


def test_relative_clauses() -> None:
    sleeping_cat = np("chat")
    sleeping_cat = NounPhrase(sleeping_cat.noun, relative=Relative(intransitive_verb("dormir")))
    assert say(Clause(sleeping_cat, ETRE, (Attribute(adjective("noir")),))) == (
        "le chat qui dort est noir",
        "the cat that sleeps is black",
    )
    running_dogs = NounPhrase(noun("chien"), plural=True, relative=Relative(intransitive_verb("courir")))
    assert say(Clause(JE, transitive_verb("voir"), (Object(running_dogs),))) == (
        "je vois les chiens qui courent",
        "i see the dogs that run",
    )
    boy = NounPhrase(noun("garçon"), relative=Relative(transitive_verb("manger"), np("pomme", "indef")))
    assert say(Clause(boy, intransitive_verb("chanter"))) == (
        "le garçon qui mange une pomme chante",
        "the boy that eats an apple sings",
    )
    book = NounPhrase(noun("livre"), relative=Relative(transitive_verb("lire"), subject=IL))
    assert say(Clause(JE, transitive_verb("aimer"), (Object(book),))) == (
        "j'aime le livre qu'il lit",
        "i like the book that he reads",
    )


def test_pronouns_refer_back_to_subject_or_object() -> None:
    cross, eat = transitive_verb("traverser"), transitive_verb("manger")
    too_tired = Attribute(adjective("fatigué"), "trop")

    def explained(subject, verb, obj, because_of, attribute):
        reason = Clause(referent(because_of), ETRE, (attribute,), "imperfect")
        return say(Clause(subject, verb, (Object(obj),), "past", "pas", reason=reason))

    mouse, woman, street = np("souris"), np("femme"), np("rue")
    assert explained(mouse, cross, street, mouse, too_tired) == (
        "la souris n'a pas traversé la rue parce qu'elle était trop fatiguée",
        "the mouse did not cross the street because it was too tired",
    )
    assert explained(woman, cross, street, woman, too_tired)[1] == (
        "the woman did not cross the street because she was too tired"
    )
    assert explained(woman, cross, street, street, Attribute(adjective("large"), "trop"))[1] == (
        "the woman did not cross the street because it was too wide"
    )
    apples = np("pomme", plural=True)
    assert explained(JE, eat, apples, apples, Attribute(adjective("chaud"), "trop")) == (
        "je n'ai pas mangé les pommes parce qu'elles étaient trop chaudes",
        "i did not eat the apples because they were too hot",
    )
    assert explained(JE, eat, apples, JE, too_tired) == (
        "je n'ai pas mangé les pommes parce que j'étais trop fatigué",
        "i did not eat the apples because i was too tired",
    )
    # an adjective explains the subject or the object, never both: the English pronoun is fixed
    object_reasons = {a for reasons in (*OBJECT_REASONS.values(), *PRAISES.values()) for a in reasons}
    assert not object_reasons & set(SUBJECT_REASONS)


def test_identity_sentences() -> None:
    assert say(Clause(JE, ETRE, (role("étudiant"),))) == ("je suis étudiant", "i am a student")
    assert say(Clause(pronoun(0, "f"), ETRE, (role("étudiant"),))) == ("je suis étudiante", "i am a student")
    assert say(Clause(ELLE, ETRE, (role("professeur"),))) == ("elle est professeur", "she is a teacher")
    assert say(Clause(ILS, ETRE, (role("ingénieur"),))) == ("ils sont ingénieurs", "they are engineers")
    assert say(Clause(ELLE, ETRE, (role("acteur"),), negation="plus")) == (
        "elle n'est plus actrice",
        "she is no longer an actor",
    )
    assert say(Clause(VOUS, ETRE, (role("médecin"),))) == ("vous êtes médecin", "you are a doctor")


# --------------------------------------------------------------------------------------------
# The slide sentences
# --------------------------------------------------------------------------------------------

_SLIDE_PLANS = [
    Clause(JE, ETRE, (role("étudiant"),)),
    Clause(pronoun(0, "f"), ETRE, (role("étudiant"),)),
    Clause(ELLE, ETRE, (role("professeur"),)),
    Clause(
        np("animal"), transitive_verb("traverser"), (Object(np("rue")),), "past", "pas",
        reason=Clause(Pronoun(2, "m", english="it"), ETRE, (Attribute(adjective("fatigué"), "trop"),), "imperfect"),
    ),
    Clause(
        np("animal"), transitive_verb("traverser"), (Object(np("rue")),), "past", "pas",
        reason=Clause(Pronoun(2, "f", english="it"), ETRE, (Attribute(adjective("large"), "trop"),), "imperfect"),
    ),
    Clause(np("chat", "def", "noir"), transitive_verb("manger"), (Object(np("poisson")),)),
    Clause(ELLE, movement_verb("aller"), (Place(movement_verb("aller").paths[0], np("marché")),), "past"),
    Clause(JE, intransitive_verb("manger"), tense="future"),
    Clause(TU, intransitive_verb("manger"), question=True),
]  # fmt: skip


def test_slide_examples_are_sentences_of_the_grammar() -> None:
    assert ("je suis étudiant", "i am a student") in SLIDE_EXAMPLES
    assert (
        "l'animal n'a pas traversé la rue parce qu'il était trop fatigué",
        "the animal did not cross the street because it was too tired",
    ) in SLIDE_EXAMPLES
    assert [say(plan) for plan in _SLIDE_PLANS] == SLIDE_EXAMPLES

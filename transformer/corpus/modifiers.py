"""Words that agree with a noun: adjectives, professions and numbers of the built-in corpus.

Regular French feminine and plural forms are derived; irregular ones (vieux/vieille/vieil)
are spelled out. Each adjective says where it stands in French (petit chat / chat noir) and
which noun tags it may describe (see :mod:`.lexicon`).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer.corpus.lexicon import french_plural


# --------------------------------------------------------------------------------------------
# Adjectives
# --------------------------------------------------------------------------------------------

_FEMININE_ENDINGS = (
    ("eux", "euse"), ("if", "ive"), ("en", "enne"), ("on", "onne"), ("el", "elle"), ("er", "ère"), ("il", "ille")
)


def french_feminine(masculine: str) -> str:
    """Regular French feminine: noir -> noire, heureux -> heureuse, bon -> bonne, cher -> chère."""
    if masculine.endswith("e"):
        return masculine
    for ending, feminine_ending in _FEMININE_ENDINGS:
        if masculine.endswith(ending):
            return masculine[: -len(ending)] + feminine_ending
    return masculine + "e"


@dataclass(frozen=True)
class Adjective:
    """A French adjective: its four forms, where it stands, and what it can describe."""

    forms: tuple[str, str, str, str]  # masculine singular, feminine singular, masculine plural, feminine plural
    english: str
    before_noun: bool  # petit chat / chat noir (English always puts adjectives first)
    applies_to: frozenset[str]  # noun tags it may describe
    vowel_form: str | None = None  # bel arbre, vieil homme, nouvel ami
    color: bool = False
    attributive: bool = True  # False: only after "être" (il est prêt)

    @property
    def french(self) -> str:
        return self.forms[0]

    def form(self, gender: str, plural: bool) -> str:
        """The form agreeing with a noun of ``gender`` ("m"/"f") and number."""
        return self.forms[2 * plural + (gender == "f")]

    def describes(self, tags: frozenset[str]) -> bool:
        return not self.applies_to.isdisjoint(tags)


def _adjective(
    french: str,
    english: str,
    applies_to: str,
    *,
    before: bool = False,
    forms: tuple[str, str, str, str] | None = None,
    vowel_form: str | None = None,
    color: bool = False,
    attributive: bool = True,
) -> Adjective:
    if forms is None:
        feminine = french_feminine(french)
        forms = (french, feminine, french_plural(french), feminine + "s")
    return Adjective(forms, english, before, frozenset(applies_to.split()), vowel_form, color, attributive)


A = _adjective
_COLORED = "thing vehicle building plant fruit"
_FUR = _COLORED + " animal"  # no green tigers
_LIVING = "person animal"
ADJECTIVES: tuple[Adjective, ...] = (
    # before the noun in French
    A("petit", "small", "animal thing vehicle building food plant area", before=True),
    A("grand", "big", "animal thing vehicle building plant area", before=True),
    A("jeune", "young", _LIVING, before=True),
    A("vieux", "old", "person animal thing vehicle building plant", before=True,
      forms=("vieux", "vieille", "vieux", "vieilles"), vowel_form="vieil"),
    A("beau", "beautiful", "animal thing vehicle building plant area", before=True,
      forms=("beau", "belle", "beaux", "belles"), vowel_form="bel"),
    A("joli", "pretty", "thing plant building area", before=True),
    A("bon", "good", "food drink readable show person", before=True),
    A("mauvais", "bad", "food drink readable show", before=True),
    A("nouveau", "new", "thing vehicle building readable person", before=True,
      forms=("nouveau", "nouvelle", "nouveaux", "nouvelles"), vowel_form="nouvel"),
    A("gros", "fat", "animal", before=True, forms=("gros", "grosse", "gros", "grosses")),
    A("long", "long", "readable crossable show song", before=True, forms=("long", "longue", "longs", "longues")),
    # colours, after the noun
    A("noir", "black", _FUR, color=True),
    A("blanc", "white", _FUR, color=True, forms=("blanc", "blanche", "blancs", "blanches")),
    A("rouge", "red", _COLORED, color=True),
    A("vert", "green", _COLORED, color=True),
    A("bleu", "blue", _COLORED, color=True, forms=("bleu", "bleue", "bleus", "bleues")),
    A("jaune", "yellow", _COLORED, color=True),
    A("gris", "gray", _FUR, color=True),
    A("brun", "brown", _FUR, color=True),
    A("violet", "purple", _COLORED, color=True, forms=("violet", "violette", "violets", "violettes")),
    # other adjectives, after the noun
    A("lourd", "heavy", "thing vehicle furniture"),
    A("léger", "light", "thing"),
    A("chaud", "hot", "food drink"),
    A("froid", "cold", "food drink"),
    A("propre", "clean", "thing vehicle building area animal"),
    A("sale", "dirty", "thing vehicle building area animal"),
    A("cassé", "broken", "fragile device vehicle furniture toy"),
    A("vide", "empty", "container building"),
    A("plein", "full", "container"),
    A("rapide", "fast", "animal vehicle"),
    A("lent", "slow", "animal vehicle"),
    A("délicieux", "delicious", "food drink"),
    A("sucré", "sweet", "food drink"),
    A("salé", "salty", "food"),
    A("frais", "fresh", "food drink", forms=("frais", "fraîche", "frais", "fraîches")),
    A("intelligent", "intelligent", _LIVING),
    A("fatigué", "tired", _LIVING),
    A("malade", "sick", _LIVING),
    A("content", "happy", _LIVING),
    A("triste", "sad", _LIVING),
    A("riche", "rich", "person"),
    A("pauvre", "poor", "person"),
    A("fort", "strong", _LIVING),
    A("faible", "weak", _LIVING),
    A("drôle", "funny", "person animal readable show"),
    A("timide", "shy", _LIVING),
    A("gentil", "kind", _LIVING),
    A("sérieux", "serious", "person"),
    A("célèbre", "famous", "person building readable show song"),
    A("calme", "calm", "person animal area"),
    A("occupé", "busy", "person"),
    A("curieux", "curious", _LIVING),
    A("dangereux", "dangerous", "animal crossable vehicle"),
    A("large", "wide", "crossable"),
    A("étroit", "narrow", "crossable"),
    A("difficile", "difficult", "readable"),
    A("facile", "easy", "readable"),
    A("ennuyeux", "boring", "readable show"),
    A("intéressant", "interesting", "readable show"),
    A("moderne", "modern", "building vehicle device"),
    A("cher", "expensive", "thing vehicle"),
    A("mouillé", "wet", "animal thing"),
    A("ouvert", "open", "openable venue"),
    A("fermé", "closed", "openable venue"),
    A("prêt", "ready", "person dish", attributive=False),
)
del A

ADJECTIVE_BY_FRENCH: dict[str, Adjective] = {adjective.french: adjective for adjective in ADJECTIVES}


def adjective(french: str) -> Adjective:
    """The lexicon entry for a French adjective, by its masculine singular form."""
    return ADJECTIVE_BY_FRENCH[french]


# --------------------------------------------------------------------------------------------
# Professions ("je suis étudiant" -> "i am a student": no article in French, "a/an" in English)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Profession:
    masculine: str
    feminine: str
    english: str
    weight: int = 1  # how often it is drawn

    def form(self, gender: str, plural: bool) -> str:
        word = self.feminine if gender == "f" else self.masculine
        return french_plural(word) if plural else word


PROFESSIONS: tuple[Profession, ...] = (
    Profession("étudiant", "étudiante", "student", weight=6),
    Profession("professeur", "professeur", "teacher", weight=3),
    Profession("médecin", "médecin", "doctor", weight=2),
    Profession("avocat", "avocate", "lawyer"),
    Profession("infirmier", "infirmière", "nurse"),
    Profession("ingénieur", "ingénieur", "engineer"),
    Profession("acteur", "actrice", "actor"),
    Profession("chanteur", "chanteuse", "singer"),
    Profession("boulanger", "boulangère", "baker"),
    Profession("cuisinier", "cuisinière", "cook"),
    Profession("musicien", "musicienne", "musician"),
    Profession("pilote", "pilote", "pilot"),
    Profession("serveur", "serveuse", "waiter"),
    Profession("fermier", "fermière", "farmer"),
    Profession("architecte", "architecte", "architect"),
    Profession("artiste", "artiste", "artist"),
    Profession("journaliste", "journaliste", "journalist"),
    Profession("dentiste", "dentiste", "dentist"),
    Profession("danseur", "danseuse", "dancer"),
    Profession("policier", "policière", "police officer"),
)


# --------------------------------------------------------------------------------------------
# Numbers (2 to 21; "un/une" is always the article "a", never the number "one")
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Number:
    masculine: str
    english: str
    feminine: str = ""  # only "vingt et une" differs

    def form(self, gender: str) -> str:
        return self.feminine if gender == "f" and self.feminine else self.masculine


NUMBERS: tuple[Number, ...] = (
    Number("deux", "two"),
    Number("trois", "three"),
    Number("quatre", "four"),
    Number("cinq", "five"),
    Number("six", "six"),
    Number("sept", "seven"),
    Number("huit", "eight"),
    Number("neuf", "nine"),
    Number("dix", "ten"),
    Number("onze", "eleven"),
    Number("douze", "twelve"),
    Number("treize", "thirteen"),
    Number("quatorze", "fourteen"),
    Number("quinze", "fifteen"),
    Number("seize", "sixteen"),
    Number("dix-sept", "seventeen"),
    Number("dix-huit", "eighteen"),
    Number("dix-neuf", "nineteen"),
    Number("vingt", "twenty"),
    Number("vingt et un", "twenty-one", feminine="vingt et une"),
)

"""The verbs of the built-in corpus and how they conjugate, in French and in English.

French: the three regular groups (-er, -ir with -iss-, -re), spelling changes (mangeons,
achète, appelle), a table of irregular presents (être, avoir, aller, faire, voir ...), the
imparfait of être and avoir, past participles and their agreement after "être".
English: third-person -s (eats, goes, watches, carries) and simple pasts (ate, went, stopped).
Which tenses exist and how negation and questions are built is :mod:`.grammar`'s business.

Persons are numbered 0..5: je, tu, il/elle, nous, vous, ils/elles (and i, you, he/she/it,
we, you, they).
"""

from __future__ import annotations

from dataclasses import dataclass

from transformer.corpus.lexicon import Preposition

# --------------------------------------------------------------------------------------------
# The verb table
# --------------------------------------------------------------------------------------------

PERSON, ANIMATE, ANIMAL = "person", "person animal", "animal"


@dataclass(frozen=True)
class Verb:
    """A French verb, its English translation and what it combines with."""

    infinitive: str
    english: str  # base form, possibly with a particle: "look for", "go out"
    objects: frozenset[str]  # noun tags of the direct object; empty for intransitive verbs
    subjects: frozenset[str]  # noun tags of the subject (pronoun subjects count as "person")
    object_preposition: str = ""  # obéir à quelqu'un -> obey someone
    auxiliary: str = "avoir"  # "être" for movement verbs: elle est allée
    paths: tuple[Preposition, ...] = ()  # movement verbs: aller à / venir de ...
    places: frozenset[str] = frozenset()  # where an intransitive verb happens (empty: anywhere)

    @property
    def transitive(self) -> bool:
        return bool(self.objects)


def _verb(
    infinitive: str,
    english: str,
    objects: str = "",
    subjects: str = ANIMATE,
    *,
    preposition: str = "",
    places: str = "",
) -> Verb:
    return Verb(
        infinitive,
        english,
        frozenset(objects.split()),
        frozenset(subjects.split()),
        object_preposition=preposition,
        places=frozenset(places.split()),
    )


def _movement(infinitive: str, english: str, *paths: tuple[str, str, str]) -> Verb:
    routes = tuple(Preposition(fr, en, frozenset(tags.split())) for fr, en, tags in paths)
    return Verb(infinitive, english, frozenset(), frozenset(ANIMATE.split()), auxiliary="être", paths=routes)


V = _verb
TRANSITIVE_VERBS: tuple[Verb, ...] = (
    V("manger", "eat", "food"),
    V("boire", "drink", "drink"),
    V("acheter", "buy", "food drink thing vehicle readable plant", PERSON),
    V("vendre", "sell", "food thing vehicle readable plant animal", PERSON),
    V("voir", "see", "person animal thing vehicle building plant"),
    V("regarder", "watch", "person animal vehicle show", PERSON),
    V("aimer", "like", "person animal food drink readable sound show thing plant", PERSON),
    V("préférer", "prefer", "food drink readable show animal", PERSON),
    V("chercher", "look for", "person animal thing readable"),
    V("trouver", "find", "person animal thing readable"),
    V("perdre", "lose", "thing readable", PERSON),
    V("prendre", "take", "thing readable food", PERSON),
    V("lire", "read", "readable", PERSON),
    V("écrire", "write", "writable", PERSON),
    V("ouvrir", "open", "openable", PERSON),
    V("fermer", "close", "openable", PERSON),
    V("porter", "carry", "container furniture toy", PERSON),
    V("laver", "wash", "vehicle animal clothing fragile", PERSON),
    V("casser", "break", "fragile"),
    V("réparer", "fix", "device vehicle furniture", PERSON),
    V("préparer", "prepare", "dish", PERSON),
    V("faire", "make", "dish", PERSON),
    V("finir", "finish", "food drink readable", PERSON),
    V("choisir", "choose", "food thing readable animal", PERSON),
    V("remplir", "fill", "container", PERSON),
    V("nourrir", "feed", "animal", PERSON),
    V("punir", "punish", "person animal", PERSON),
    V("attendre", "wait for", "person animal vehicle"),
    V("entendre", "hear", "sound person animal"),
    V("écouter", "listen to", "sound person", PERSON),
    V("chanter", "sing", "song", PERSON),
    V("rencontrer", "meet", "person", PERSON),
    V("aider", "help", "person animal", PERSON),
    V("appeler", "call", "person animal", PERSON),
    V("visiter", "visit", "venue", PERSON),
    V("quitter", "leave", "venue area", PERSON),
    V("traverser", "cross", "crossable"),
    V("dessiner", "draw", "person animal thing vehicle building plant", PERSON),
    V("pousser", "push", "vehicle furniture", PERSON),
    V("mordre", "bite", "person animal", ANIMAL),
    V("oublier", "forget", "thing readable", PERSON),
    V("emprunter", "borrow", "thing readable vehicle", PERSON),
    V("cacher", "hide", "thing food readable"),
    V("garder", "keep", "thing animal", PERSON),
    V("montrer", "show", "thing readable animal", PERSON),
    V("apporter", "bring", "food drink thing readable", PERSON),
    V("envoyer", "send", "writable", PERSON),
    V("tenir", "hold", "portable animal", PERSON),
    V("construire", "build", "building", PERSON),
    V("conduire", "drive", "motor", PERSON),
    V("obéir", "obey", "person", preposition="à"),
    V("parler", "talk to", "person animal", PERSON, preposition="à"),
    V("répondre", "answer", "person", PERSON, preposition="à"),
    V("penser", "think about", "person animal thing", PERSON, preposition="à"),
)

INTRANSITIVE_VERBS: tuple[Verb, ...] = (
    V("dormir", "sleep"),
    V("courir", "run"),
    V("marcher", "walk"),
    V("nager", "swim", places="water"),
    V("danser", "dance", subjects=PERSON),
    V("chanter", "sing", subjects=PERSON),
    V("travailler", "work", subjects=PERSON),
    V("jouer", "play"),
    V("parler", "talk", subjects=PERSON),
    V("pleurer", "cry"),
    V("rire", "laugh", subjects=PERSON),
    V("crier", "shout"),
    V("sauter", "jump"),
    V("étudier", "study", subjects=PERSON),
    V("attendre", "wait"),
    V("réfléchir", "think", subjects=PERSON),
    V("voyager", "travel", subjects=PERSON),
    V("manger", "eat"),
    V("lire", "read", subjects=PERSON),
    V("écrire", "write", subjects=PERSON),
    V("cuisiner", "cook", subjects=PERSON),
)

MOVEMENT_VERBS: tuple[Verb, ...] = (
    _movement("aller", "go", ("à", "to", "venue"), ("dans", "into", "area")),
    _movement("venir", "come", ("de", "from", "venue area")),
    _movement("arriver", "arrive", ("à", "at", "venue"), ("dans", "in", "area")),
    _movement("retourner", "return", ("à", "to", "venue"), ("dans", "to", "area")),
    _movement("rester", "stay", ("à", "at", "venue"), ("dans", "in", "area")),
    _movement("entrer", "enter", ("dans", "", "venue area")),
    _movement("sortir", "go out", ("de", "of", "venue area")),
    _movement("tomber", "fall", ("dans", "into", "water")),
)

ETRE = V("être", "be")
AVOIR = V("avoir", "have", "animal thing vehicle readable kin food plant")
AVOIR_AS_BE = V("avoir", "be")  # avoir faim -> be hungry: French "avoir", English "be"
del V


def transitive_verb(infinitive: str) -> Verb:
    """The transitive entry for a French infinitive (KeyError if there is none)."""
    return _find(TRANSITIVE_VERBS, infinitive)


def intransitive_verb(infinitive: str) -> Verb:
    """The intransitive entry for a French infinitive: dormir, courir, manger ..."""
    return _find(INTRANSITIVE_VERBS, infinitive)


def movement_verb(infinitive: str) -> Verb:
    """The movement verb (passé composé with être) for a French infinitive: aller, venir ..."""
    return _find(MOVEMENT_VERBS, infinitive)


def _find(verbs: tuple[Verb, ...], infinitive: str) -> Verb:
    for verb in verbs:
        if verb.infinitive == infinitive:
            return verb
    raise KeyError(infinitive)


# --------------------------------------------------------------------------------------------
# French conjugation
# --------------------------------------------------------------------------------------------

_IRREGULAR_PRESENT: dict[str, tuple[str, ...]] = {
    infinitive: tuple(forms.split())
    for infinitive, forms in {
        "être": "suis es est sommes êtes sont",
        "avoir": "ai as a avons avez ont",
        "aller": "vais vas va allons allez vont",
        "faire": "fais fais fait faisons faites font",
        "voir": "vois vois voit voyons voyez voient",
        "boire": "bois bois boit buvons buvez boivent",
        "prendre": "prends prends prend prenons prenez prennent",
        "lire": "lis lis lit lisons lisez lisent",
        "écrire": "écris écris écrit écrivons écrivez écrivent",
        "ouvrir": "ouvre ouvres ouvre ouvrons ouvrez ouvrent",
        "dormir": "dors dors dort dormons dormez dorment",
        "courir": "cours cours court courons courez courent",
        "rire": "ris ris rit rions riez rient",
        "tenir": "tiens tiens tient tenons tenez tiennent",
        "construire": "construis construis construit construisons construisez construisent",
        "conduire": "conduis conduis conduit conduisons conduisez conduisent",
        "venir": "viens viens vient venons venez viennent",
        "sortir": "sors sors sort sortons sortez sortent",
    }.items()
}
_IRREGULAR_PARTICIPLE: dict[str, str] = {
    "être": "été", "avoir": "eu", "faire": "fait", "voir": "vu", "boire": "bu", "prendre": "pris",
    "lire": "lu", "écrire": "écrit", "ouvrir": "ouvert", "courir": "couru", "rire": "ri",
    "tenir": "tenu", "construire": "construit", "conduire": "conduit", "venir": "venu",
}  # fmt: skip
_IMPERFECT: dict[str, tuple[str, ...]] = {
    "être": ("étais", "étais", "était", "étions", "étiez", "étaient"),
    "avoir": ("avais", "avais", "avait", "avions", "aviez", "avaient"),
}
# -er verbs whose stem changes where the ending is silent (je, tu, il, ils): j'achète, nous achetons
_STRONG_STEMS = {"acheter": "achèt", "appeler": "appell", "envoyer": "envoi", "préférer": "préfèr"}
_ENDINGS = {
    "er": ("e", "es", "e", "ons", "ez", "ent"),
    "ir": ("is", "is", "it", "issons", "issez", "issent"),  # second group: finir, finissons
    "re": ("s", "s", "", "ons", "ez", "ent"),
}
_PARTICIPLE_ENDINGS = {"er": "é", "ir": "i", "re": "u"}


def french_present(infinitive: str, person: int) -> str:
    """Present tense: ("manger", 3) -> "mangeons", ("finir", 5) -> "finissent"."""
    if infinitive in _IRREGULAR_PRESENT:
        return _IRREGULAR_PRESENT[infinitive][person]
    stem, group = infinitive[:-2], infinitive[-2:]
    if group == "er" and person in (0, 1, 2, 5):
        stem = _STRONG_STEMS.get(infinitive, stem)
    if group == "er" and person == 3 and stem.endswith("g"):  # keep the soft g: mangeons, nageons
        stem += "e"
    return stem + _ENDINGS[group][person]


def french_imperfect(infinitive: str, person: int) -> str:
    """Imparfait; the corpus only needs être (était) and avoir (avait)."""
    return _IMPERFECT[infinitive][person]


def french_participle(infinitive: str, *, gender: str = "m", plural: bool = False) -> str:
    """Past participle, agreeing as after "être": allé, allée, allés, allées."""
    word = _IRREGULAR_PARTICIPLE.get(infinitive) or infinitive[:-2] + _PARTICIPLE_ENDINGS[infinitive[-2:]]
    if gender == "f":
        word += "e"
    if plural and not word.endswith("s"):
        word += "s"
    return word


# --------------------------------------------------------------------------------------------
# English inflection
# --------------------------------------------------------------------------------------------

_IRREGULAR_PAST = {
    "be": "was", "have": "had", "do": "did", "go": "went", "come": "came", "eat": "ate", "drink": "drank",
    "buy": "bought", "sell": "sold", "see": "saw", "find": "found", "lose": "lost", "take": "took",
    "read": "read", "write": "wrote", "break": "broke", "make": "made", "choose": "chose", "feed": "fed",
    "hear": "heard", "sing": "sang", "meet": "met", "leave": "left", "draw": "drew", "bite": "bit",
    "forget": "forgot", "hide": "hid", "keep": "kept", "bring": "brought", "send": "sent",
    "build": "built", "drive": "drove", "sleep": "slept", "run": "ran", "swim": "swam", "grow": "grew",
    "think": "thought", "fall": "fell", "hold": "held",
}  # fmt: skip
_DOUBLED_CONSONANT = {"prefer": "preferred", "stop": "stopped", "travel": "traveled"}
_IRREGULAR_THIRD = {"be": "is", "have": "has", "do": "does", "go": "goes"}


def english_third_person(word: str) -> str:
    """Third-person singular present of an English verb: eats, watches, carries, has."""
    if word in _IRREGULAR_THIRD:
        return _IRREGULAR_THIRD[word]
    if word.endswith(("s", "x", "z", "ch", "sh", "o")):
        return word + "es"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


def english_past(word: str) -> str:
    """Simple past of an English verb: ate, went, carried, played, arrived."""
    if word in _IRREGULAR_PAST:
        return _IRREGULAR_PAST[word]
    if word in _DOUBLED_CONSONANT:
        return _DOUBLED_CONSONANT[word]
    if word.endswith("e"):
        return word + "d"
    if word.endswith("y") and word[-2] not in "aeiou":
        return word[:-1] + "ied"
    return word + "ed"

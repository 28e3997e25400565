"""The nouns of the built-in French -> English corpus, and the spelling rules shared by all words.

Each entry is one row of a table. Regular forms (French feminine and plural, English plural)
are derived by small rules; a row spells out only what the rules get wrong.

Semantic *tags* (``"animal"``, ``"food"``, ``"container"`` ...) say which verbs, adjectives
and prepositions a noun goes with, so that generated sentences make sense ("le chat mange
le poisson", not "la table mange le poisson"). Adjectives, professions and numbers live in
:mod:`.modifiers`, verbs in :mod:`.verbs`.
"""

from __future__ import annotations

from dataclasses import dataclass

# Letters that make a French word "begin with a vowel" for elision (l'arbre, j'ai, cet homme).
# Every h in this lexicon is mute (l'hôpital, l'homme); words that block elision are listed.
FRENCH_VOWELS = frozenset("aeiouyhàâäéèêëîïôöûùüœæ")
NO_ELISION_BEFORE = frozenset({"onze", "huit"})


def starts_with_vowel(word: str) -> bool:
    """True if French ``word`` takes the elided / vowel form of the word before it."""
    return word[0] in FRENCH_VOWELS and word not in NO_ELISION_BEFORE


def french_plural(word: str) -> str:
    """Regular French plural: chat -> chats, gâteau -> gâteaux, cheval -> chevaux, souris -> souris."""
    if word.endswith(("s", "x", "z")):
        return word
    if word.endswith(("eau", "eu")):
        return word + "x"
    if word.endswith("al"):
        return word[:-2] + "aux"
    return word + "s"


def english_plural(word: str) -> str:
    """Regular English plural of a (possibly multi-word) noun: box -> boxes, baby -> babies."""
    *head, last = word.split(" ")
    if last.endswith(("s", "x", "z", "ch", "sh")):
        last += "es"
    elif last.endswith("y") and last[-2] not in "aeiou":
        last = last[:-1] + "ies"
    else:
        last += "s"
    return " ".join([*head, last])


# --------------------------------------------------------------------------------------------
# Nouns
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Noun:
    """A French noun with its gender, its English translation and semantic tags."""

    french: str
    gender: str  # "m" | "f"
    english: str
    tags: frozenset[str]
    french_plural: str
    english_plural: str
    possessive: bool = True  # False where "mon/ma ..." changes the meaning (ma femme = my wife)

    @property
    def countable(self) -> bool:
        """Mass nouns (du pain, de l'eau) have no plural, no number and no "a"."""
        return "mass" not in self.tags

    @property
    def human(self) -> bool:
        return "person" in self.tags


def _noun(
    french: str,
    gender: str,
    english: str,
    tags: str,
    *,
    fr_pl: str | None = None,
    en_pl: str | None = None,
    possessive: bool = True,
) -> Noun:
    return Noun(
        french=french,
        gender=gender,
        english=english,
        tags=frozenset(tags.split()),
        french_plural=fr_pl or french_plural(french),
        english_plural=en_pl or english_plural(english),
        possessive=possessive,
    )


N = _noun
NOUNS: tuple[Noun, ...] = (
    # people ("kin": people one can "have": j'ai deux frères)
    N("homme", "m", "man", "person", en_pl="men", possessive=False),
    N("femme", "f", "woman", "person", en_pl="women", possessive=False),
    N("garçon", "m", "boy", "person", possessive=False),
    N("fille", "f", "girl", "person", possessive=False),
    N("enfant", "m", "child", "person kin", en_pl="children"),
    N("bébé", "m", "baby", "person"),
    N("ami", "m", "friend", "person kin"),
    N("amie", "f", "friend", "person kin"),
    N("voisin", "m", "neighbor", "person kin"),
    N("voisine", "f", "neighbor", "person kin"),
    N("frère", "m", "brother", "person kin"),
    N("sœur", "f", "sister", "person kin"),
    N("père", "m", "father", "person"),
    N("mère", "f", "mother", "person"),
    N("oncle", "m", "uncle", "person kin"),
    N("tante", "f", "aunt", "person kin"),
    N("cousin", "m", "cousin", "person kin"),
    N("cousine", "f", "cousin", "person kin"),
    N("grand-père", "m", "grandfather", "person", fr_pl="grands-pères"),
    N("grand-mère", "f", "grandmother", "person", fr_pl="grands-mères"),
    N("professeur", "m", "teacher", "person"),
    N("médecin", "m", "doctor", "person"),
    N("étudiant", "m", "student", "person"),
    N("étudiante", "f", "student", "person"),
    N("roi", "m", "king", "person", possessive=False),
    N("reine", "f", "queen", "person", possessive=False),
    N("voleur", "m", "thief", "person", en_pl="thieves", possessive=False),
    N("fermier", "m", "farmer", "person", possessive=False),
    N("fermière", "f", "farmer", "person", possessive=False),
    N("touriste", "m", "tourist", "person", possessive=False),
    N("chanteur", "m", "singer", "person", possessive=False),
    N("chanteuse", "f", "singer", "person", possessive=False),
    # animals
    N("chat", "m", "cat", "animal"),
    N("chien", "m", "dog", "animal"),
    N("cheval", "m", "horse", "animal"),
    N("oiseau", "m", "bird", "animal"),
    N("souris", "f", "mouse", "animal", en_pl="mice"),
    N("lapin", "m", "rabbit", "animal"),
    N("poisson", "m", "fish", "animal food", en_pl="fish"),
    N("vache", "f", "cow", "animal"),
    N("cochon", "m", "pig", "animal"),
    N("mouton", "m", "sheep", "animal", en_pl="sheep"),
    N("canard", "m", "duck", "animal"),
    N("poule", "f", "hen", "animal"),
    N("lion", "m", "lion", "animal"),
    N("tigre", "m", "tiger", "animal"),
    N("éléphant", "m", "elephant", "animal"),
    N("singe", "m", "monkey", "animal"),
    N("ours", "m", "bear", "animal"),
    N("loup", "m", "wolf", "animal", en_pl="wolves"),
    N("renard", "m", "fox", "animal"),
    N("serpent", "m", "snake", "animal"),
    N("tortue", "f", "turtle", "animal"),
    N("grenouille", "f", "frog", "animal"),
    N("abeille", "f", "bee", "animal"),
    N("araignée", "f", "spider", "animal"),
    N("animal", "m", "animal", "animal"),
    # food that can be counted
    N("pomme", "f", "apple", "food fruit"),
    N("orange", "f", "orange", "food fruit"),
    N("banane", "f", "banana", "food fruit"),
    N("poire", "f", "pear", "food fruit"),
    N("fraise", "f", "strawberry", "food fruit"),
    N("cerise", "f", "cherry", "food fruit"),
    N("citron", "m", "lemon", "food fruit"),
    N("tomate", "f", "tomato", "food fruit", en_pl="tomatoes"),
    N("carotte", "f", "carrot", "food"),
    N("œuf", "m", "egg", "food"),
    N("gâteau", "m", "cake", "food dish"),
    N("tarte", "f", "pie", "food dish"),
    N("sandwich", "m", "sandwich", "food dish"),
    N("pizza", "f", "pizza", "food dish"),
    N("croissant", "m", "croissant", "food"),
    N("biscuit", "m", "cookie", "food"),
    # food and drink that cannot (du pain, de l'eau)
    N("pain", "m", "bread", "food dish mass"),
    N("fromage", "m", "cheese", "food mass"),
    N("riz", "m", "rice", "food mass"),
    N("viande", "f", "meat", "food mass"),
    N("soupe", "f", "soup", "food dish mass"),
    N("chocolat", "m", "chocolate", "food mass"),
    N("beurre", "m", "butter", "food mass"),
    N("confiture", "f", "jam", "food mass"),
    N("miel", "m", "honey", "food mass"),
    N("salade", "f", "salad", "food dish mass"),
    N("eau", "f", "water", "drink mass"),
    N("lait", "m", "milk", "drink mass"),
    N("café", "m", "coffee", "drink dish mass"),
    N("thé", "m", "tea", "drink dish mass"),
    N("jus", "m", "juice", "drink mass"),
    # things to read, write, hear and watch
    N("livre", "m", "book", "readable writable"),
    N("lettre", "f", "letter", "readable writable"),
    N("journal", "m", "newspaper", "readable"),
    N("histoire", "f", "story", "readable writable"),
    N("poème", "m", "poem", "readable writable"),
    N("message", "m", "message", "readable writable"),
    N("magazine", "m", "magazine", "readable"),
    N("carte", "f", "map", "readable"),
    N("chanson", "f", "song", "sound song"),
    N("musique", "f", "music", "sound mass"),
    N("bruit", "m", "noise", "sound"),
    N("film", "m", "movie", "show"),
    # things
    N("table", "f", "table", "furniture surface shelter"),
    N("chaise", "f", "chair", "furniture surface shelter thing portable"),
    N("lit", "m", "bed", "furniture surface shelter"),
    N("banc", "m", "bench", "furniture surface"),
    N("boîte", "f", "box", "thing portable container openable"),
    N("sac", "m", "bag", "thing portable container openable"),
    N("valise", "f", "suitcase", "thing portable container openable"),
    N("panier", "m", "basket", "thing portable container"),
    N("clé", "f", "key", "thing portable"),
    N("téléphone", "m", "phone", "thing portable device"),
    N("ordinateur", "m", "computer", "thing portable device"),
    N("stylo", "m", "pen", "thing portable"),
    N("crayon", "m", "pencil", "thing portable"),
    N("verre", "m", "glass", "thing portable container fragile"),
    N("tasse", "f", "cup", "thing portable container fragile"),
    N("assiette", "f", "plate", "thing portable fragile"),
    N("bouteille", "f", "bottle", "thing portable container fragile openable"),
    N("couteau", "m", "knife", "thing portable", en_pl="knives"),
    N("cuillère", "f", "spoon", "thing portable"),
    N("ballon", "m", "ball", "thing portable toy"),
    N("jouet", "m", "toy", "thing portable toy device"),
    N("lampe", "f", "lamp", "thing portable device fragile"),
    N("horloge", "f", "clock", "thing device"),
    N("montre", "f", "watch", "thing portable device fragile"),
    N("parapluie", "m", "umbrella", "thing portable"),
    N("photo", "f", "photo", "thing portable"),
    N("tableau", "m", "painting", "thing"),
    N("chapeau", "m", "hat", "thing portable clothing"),
    N("manteau", "m", "coat", "thing portable clothing"),
    N("chaussure", "f", "shoe", "thing portable clothing"),
    N("robe", "f", "dress", "thing portable clothing"),
    N("chemise", "f", "shirt", "thing portable clothing"),
    N("fleur", "f", "flower", "plant"),
    N("arbre", "m", "tree", "plant tree shelter"),
    N("fenêtre", "f", "window", "openable fragile"),
    N("porte", "f", "door", "openable"),
    # vehicles
    N("vélo", "m", "bike", "vehicle"),
    N("voiture", "f", "car", "vehicle motor"),
    N("camion", "m", "truck", "vehicle motor"),
    N("bateau", "m", "boat", "vehicle"),
    N("bus", "m", "bus", "vehicle motor"),
    N("train", "m", "train", "vehicle"),
    N("avion", "m", "plane", "vehicle"),
    # places one goes to ("venue": au marché, à la gare)
    N("école", "f", "school", "venue building"),
    N("gare", "f", "station", "venue building"),
    N("marché", "m", "market", "venue"),
    N("parc", "m", "park", "venue area crossable"),
    N("plage", "f", "beach", "venue surface"),
    N("bibliothèque", "f", "library", "venue building"),
    N("musée", "m", "museum", "venue building"),
    N("hôpital", "m", "hospital", "venue building"),
    N("église", "f", "church", "venue building"),
    N("banque", "f", "bank", "venue building"),
    N("restaurant", "m", "restaurant", "venue building"),
    N("cinéma", "m", "cinema", "venue building"),
    N("boulangerie", "f", "bakery", "venue building"),
    N("aéroport", "m", "airport", "venue"),
    N("hôtel", "m", "hotel", "venue building"),
    N("ferme", "f", "farm", "venue building"),
    N("bureau", "m", "office", "venue building"),
    N("magasin", "m", "store", "venue building"),
    # places one is in ("area": dans le jardin)
    N("jardin", "m", "garden", "area"),
    N("forêt", "f", "forest", "area crossable"),
    N("maison", "f", "house", "area building"),
    N("cuisine", "f", "kitchen", "area"),
    N("chambre", "f", "bedroom", "area"),
    N("ville", "f", "town", "area crossable"),
    N("village", "m", "village", "area"),
    N("champ", "m", "field", "area crossable"),
    N("rue", "f", "street", "area crossable"),
    N("route", "f", "road", "surface crossable"),
    N("pont", "m", "bridge", "surface shelter crossable"),
    N("rivière", "f", "river", "water crossable"),
    N("lac", "m", "lake", "water"),
    N("mer", "f", "sea", "water"),
    N("herbe", "f", "grass", "surface mass"),
    N("sol", "m", "floor", "surface"),
)
del N

NOUN_BY_FRENCH: dict[str, Noun] = {noun.french: noun for noun in NOUNS}


def noun(french: str) -> Noun:
    """The lexicon entry for a French noun (KeyError if it is not in the lexicon)."""
    return NOUN_BY_FRENCH[french]


# --------------------------------------------------------------------------------------------
# Prepositions
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Preposition:
    """A French preposition, its English translation and the noun tags it takes."""

    french: str  # may be two words: "près de" (contracted later: près du parc)
    english: str  # may be empty: "entrer dans la maison" -> "enter the house"
    tags: frozenset[str]


def _preposition(french: str, english: str, tags: str) -> Preposition:
    return Preposition(french, english, frozenset(tags.split()))


_LANDMARK = "building vehicle furniture tree"
LOCATIONS: tuple[Preposition, ...] = (
    _preposition("dans", "in", "area container vehicle water"),
    _preposition("sur", "on", "surface furniture"),
    _preposition("sous", "under", "shelter"),
    _preposition("près de", "near", _LANDMARK + " venue water"),
    _preposition("devant", "in front of", _LANDMARK),
    _preposition("derrière", "behind", _LANDMARK),
    _preposition("à côté de", "next to", _LANDMARK + " person animal"),
    _preposition("à", "at", "venue"),
)
COMPANIONS: tuple[Preposition, ...] = (
    _preposition("avec", "with", "person animal"),
    _preposition("sans", "without", "person"),
)

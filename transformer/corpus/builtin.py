"""The built-in French -> English corpus: endless sentence pairs from a small grammar.

No download needed: a grammar of a few hundred lemmas (:mod:`.lexicon`, :mod:`.modifiers`,
:mod:`.verbs`) and nine sentence templates (:mod:`.templates`) draw sentence plans
(:mod:`.plans`) that :mod:`.grammar` writes out in both languages, giving pairs such as

    je suis étudiant                                  -> i am a student
    elle est allée au marché                          -> she went to the market
    est-ce que tu vas manger le petit gâteau ?        -> are you going to eat the small cake?
    l'animal n'a pas traversé la rue parce qu'il était trop fatigué
        -> the animal did not cross the street because it was too tired

Each sentence comes in one of two forms, chosen by a stable hash of its words, so that a model
learns both what people type in a chat and what they write: by default about a third plain
(lowercase, no final period, as above; ``written_share=0`` makes them all plain), the rest written (a capital first letter, capitalised first names and
English "I", a final period, questions ending in " ?" or "?" in French): "Marie est allée au
marché." -> "Marie went to the market.". Words are separated by single spaces. Every French
sentence has exactly one English translation, so a small model can learn the mapping exactly. There are
far more distinct sentences than any run needs (over a million distinct ones in 1.5 million
draws).

Splits are made by a stable hash of the French sentence (:func:`split_of`), so a test
sentence never appears in training, however many pairs are drawn and whatever the seed.
"""

from __future__ import annotations

import hashlib
import itertools
import random
from collections.abc import Iterator

from transformer.corpus.grammar import realize
from transformer.corpus.templates import FIRST_NAMES, sample_sentence
from transformer.errors import UserError

MAX_WORDS = 20  # per side; longer draws are skipped (they are rare)
_MAX_MISSES = 100_000  # consecutive duplicate draws before giving up

SLIDE_EXAMPLES: list[tuple[str, str]] = [
    ("je suis étudiant", "i am a student"),
    ("je suis étudiante", "i am a student"),
    ("elle est professeur", "she is a teacher"),
    (
        "l'animal n'a pas traversé la rue parce qu'il était trop fatigué",
        "the animal did not cross the street because it was too tired",
    ),
    (
        "l'animal n'a pas traversé la rue parce qu'elle était trop large",
        "the animal did not cross the street because it was too wide",
    ),
    ("le chat noir mange le poisson", "the black cat eats the fish"),
    ("elle est allée au marché", "she went to the market"),
    ("je vais manger", "i am going to eat"),
    ("est-ce que tu manges ?", "do you eat?"),
]
"""Sentences the lectures quote; each is one the grammar itself generates."""


def generate_pairs(n: int, *, seed: int = 0, written_share: float | None = None) -> list[tuple[str, str]]:
    """``n`` distinct (french, english) pairs, the same ones for the same ``seed``; a share
    ``written_share`` of them written with capitals and punctuation (default :data:`WRITTEN_SHARE`).

    Raises ``UserError`` if ``n`` is not a positive integer or the share is not in [0, 1].
    """
    if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
        raise UserError(f"n must be a positive integer, got {n!r}")
    return list(itertools.islice(_distinct_pairs(seed, _share(written_share)), n))


def builtin_splits(*, n_train: int, n_valid: int, n_test: int, seed: int = 0,
                   written_share: float | None = None) -> dict[str, list[tuple[str, str]]]:
    """Train / validation / test pairs, split by :func:`split_of` (5% valid, 5% test).

    Pairs are distinct across and within splits, and no validation or test French sentence
    can ever occur in a training set. Raises ``UserError`` if ``n_train`` is not a positive
    integer or ``n_valid`` / ``n_test`` are negative.
    """
    sizes = {"train": n_train, "valid": n_valid, "test": n_test}
    for name, size in sizes.items():
        smallest = 1 if name == "train" else 0
        if isinstance(size, bool) or not isinstance(size, int) or size < smallest:
            raise UserError(f"n_{name} must be an integer >= {smallest}, got {size!r}")
    splits: dict[str, list[tuple[str, str]]] = {name: [] for name in sizes}
    missing = sum(sizes.values())
    for pair in _distinct_pairs(seed, _share(written_share)):
        name = split_of(pair[0])
        if len(splits[name]) < sizes[name]:
            splits[name].append(pair)
            missing -= 1
            if missing == 0:
                break
    return splits


def split_of(french: str, *, valid_fraction: float = 0.05, test_fraction: float = 0.05) -> str:
    """``"train"``, ``"valid"`` or ``"test"``, from a stable hash of the French sentence.

    BLAKE2b, not Python's ``hash()`` (salted per process), so the answer is the same on
    every machine and every run.
    """
    if valid_fraction < 0 or test_fraction < 0 or valid_fraction + test_fraction >= 1:
        raise UserError(f"bad fractions: valid {valid_fraction}, test {test_fraction} (need >= 0, sum < 1)")
    digest = hashlib.blake2b(french.encode("utf-8"), digest_size=8).digest()
    position = int.from_bytes(digest, "big") / 2**64  # uniform in [0, 1)
    if position < test_fraction:
        return "test"
    if position < test_fraction + valid_fraction:
        return "valid"
    return "train"


WRITTEN_SHARE = 0.65  # of sentences written with capitals and punctuation; the others stay plain
_NAMES = frozenset(first_name for first_name, _ in FIRST_NAMES)


def _share(written_share: float | None) -> float:
    share = WRITTEN_SHARE if written_share is None else written_share
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1:
        raise UserError(f"written_share must be a number from 0 to 1, got {written_share!r}")
    return float(share)


def written_form(french: str, english: str, written_share: float = WRITTEN_SHARE) -> tuple[str, str]:
    """A plain pair as people write it, or left plain: the choice is a stable hash of the French,
    so a sentence written at one share is written at every larger share.

    Written: the first letter a capital, first names capitalised and English "i" as "I", a period
    after a statement; a French question keeps its " ?" or (one time in three) loses the space.
    """
    position = int.from_bytes(hashlib.blake2b(french.encode("utf-8"), digest_size=8, person=b"form").digest(), "big")
    if position / 2**64 < 1 - written_share:
        return french, english
    question = english.endswith("?")
    if not question:
        french, english = french + ".", english + "."
    elif position % 3 == 0:
        french = french[:-2] + "?"
    french = " ".join(w.capitalize() if w in _NAMES else w for w in french.split(" "))
    english = " ".join("I" if w == "i" else w.capitalize() if w.rstrip(".?") in _NAMES else w
                       for w in english.split(" "))
    return french[0].upper() + french[1:], english[0].upper() + english[1:]


def _distinct_pairs(seed: int, written_share: float) -> Iterator[tuple[str, str]]:
    """An endless stream of pairs with distinct French sides, at most ``MAX_WORDS`` words each."""
    rng = random.Random(seed)
    seen: set[str] = set()
    misses = 0
    while True:
        french, english = written_form(*realize(sample_sentence(rng)), written_share)
        if french in seen or len(french.split()) > MAX_WORDS or len(english.split()) > MAX_WORDS:
            misses += 1
            if misses > _MAX_MISSES:
                raise RuntimeError(f"the grammar produced no new sentence in {_MAX_MISSES} draws")
            continue
        misses = 0
        seen.add(french)
        yield french, english

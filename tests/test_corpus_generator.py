"""The built-in corpus generator's guarantees: determinism, distinctness, one translation per
sentence, lengths, text format, variety, stable splits, bad arguments."""

from __future__ import annotations

import os
import random
import re
import statistics
import subprocess
import sys

import pytest

from transformer.corpus.builtin import WRITTEN_SHARE, builtin_splits, generate_pairs, split_of, written_form
from transformer.corpus.grammar import realize
from transformer.corpus.templates import FIRST_NAMES, sample_sentence


@pytest.fixture(scope="module")
def pairs() -> list[tuple[str, str]]:
    return generate_pairs(30_000, seed=0)


def test_the_generator_says_je_suis_etudiant(pairs: list[tuple[str, str]]) -> None:
    said = written_form("je suis étudiant", "i am a student")
    assert said == ("Je suis étudiant.", "I am a student.")  # the form the hash gives this sentence
    assert said in pairs
    assert said in generate_pairs(20_000, seed=1)


def test_generation_is_deterministic_and_seeded(pairs: list[tuple[str, str]]) -> None:
    assert generate_pairs(2_000, seed=0) == pairs[:2_000]
    other = generate_pairs(2_000, seed=1)
    assert other != pairs[:2_000]
    assert len(set(other) & set(pairs[:2_000])) < 200


def test_pairs_are_distinct(pairs: list[tuple[str, str]]) -> None:
    assert len(pairs) == 30_000
    assert len(set(pairs)) == len({french for french, _ in pairs}) == 30_000


def test_each_french_sentence_has_one_translation() -> None:
    rng, translations = random.Random(5), {}
    for _ in range(30_000):  # raw draws, duplicates included
        french, english = realize(sample_sentence(rng))
        assert translations.setdefault(french, english) == english, french


def test_lengths(pairs: list[tuple[str, str]]) -> None:
    for side in (0, 1):
        lengths = [len(pair[side].split()) for pair in pairs]
        assert 5 <= statistics.mean(lengths) <= 10
        assert max(lengths) <= 20


_FRENCH_CHARACTERS = re.compile(r"[a-zàâçéèêëîïôûùüœ' -]+( \?)?")
_ENGLISH_CHARACTERS = re.compile(r"[a-z -]+\??")


def plain(french: str, english: str) -> tuple[str, str]:
    """The plain form of a pair: lowercase, no final period, a French question ending in " ?"."""
    french, english = french.lower().removesuffix("."), english.lower().removesuffix(".")
    if french.endswith("?") and not french.endswith(" ?"):
        french = french[:-1] + " ?"
    return french, english


def test_text_format(pairs: list[tuple[str, str]]) -> None:
    plain_pairs = [plain(*pair) for pair in pairs]
    assert all(written_form(*p) == pair for p, pair in zip(plain_pairs, pairs))  # every pair is one of the two forms
    share = sum(p == pair for p, pair in zip(plain_pairs, pairs)) / len(pairs)
    assert abs(share - (1 - WRITTEN_SHARE)) < 0.02, share
    for french, english in plain_pairs:
        assert _FRENCH_CHARACTERS.fullmatch(french), french
        assert _ENGLISH_CHARACTERS.fullmatch(english), english
        for text in (french, english):
            assert text == text.strip() and "  " not in text and not text.endswith(".")
            assert " '" not in text and "' " not in text
        assert french.endswith(" ?") == english.endswith("?") == french.startswith("est-ce")
        assert not english.endswith(" ?")
        assert not re.search(r"\ba [aeiou]", english), english  # an apple


def test_the_written_share_is_a_setting() -> None:
    plain_only = generate_pairs(2_000, seed=0, written_share=0)
    assert all(plain(*pair) == pair for pair in plain_only)
    all_written = generate_pairs(2_000, seed=0, written_share=1)
    assert all(plain(*pair) != pair for pair in all_written)
    assert [plain(*pair) for pair in all_written] == plain_only  # the same sentences, written
    assert builtin_splits(n_train=50, n_valid=5, n_test=5, written_share=0)["test"] == [
        pair for pair in builtin_splits(n_train=50, n_valid=5, n_test=5, written_share=0)["test"] if plain(*pair) == pair]
    for bad in (-0.1, 1.5, "half", True):
        with pytest.raises(ValueError, match="written_share must be a number from 0 to 1"):
            generate_pairs(10, written_share=bad)


def test_the_written_form_is_what_people_type(pairs: list[tuple[str, str]]) -> None:
    assert written_form("marie est allée au marché", "marie went to the market") in (
        ("marie est allée au marché", "marie went to the market"), ("Marie est allée au marché.", "Marie went to the market."))
    written = [pair for pair in pairs if plain(*pair) != pair]
    for french, english in written:
        assert french[0].isupper() and english[0].isupper(), (french, english)
        assert french.endswith((".", "?")) and english.endswith((".", "?")), (french, english)
        assert " i " not in f" {english} " and not english.startswith("i ")  # English "I" is a capital
        for first_name, _ in FIRST_NAMES:
            assert f" {first_name} " not in f" {french} " and f" {first_name} " not in f" {english} "
    questions = [f for f, e in written if e.endswith("?")]
    attached = sum(not f.endswith(" ?") for f in questions) / len(questions)
    assert 0.25 < attached < 0.42, attached  # French questions typed "?" as well as " ?"
    names = {name for name, _ in FIRST_NAMES}
    assert sum(f.split()[0].lower() in names for f, _ in pairs) > 500  # first names as subjects, in both forms
    assert any(f.split()[0] in names for f, _ in pairs)


def test_variety(pairs: list[tuple[str, str]]) -> None:
    french = " ".join(plain(f, e)[0] for f, e in pairs)
    markers = ("est-ce que", " ?", "n'", " pas ", " jamais ", " plus ", "parce qu", " qui ", " que ", " au ", "aux ")
    for marker in (*markers, " du ", "il y a", " vais ", " sont allé", "était", "vingt et un"):
        assert marker in french, marker
    assert len({f.split()[0] for f, _ in pairs}) > 50


def test_builtin_splits_are_disjoint_and_stable() -> None:
    splits = builtin_splits(n_train=3_000, n_valid=150, n_test=150, seed=0)
    assert {name: len(part) for name, part in splits.items()} == {"train": 3_000, "valid": 150, "test": 150}
    french = {name: {f for f, _ in part} for name, part in splits.items()}
    assert len(french["train"]) == 3_000 and len(french["valid"]) == 150 and len(french["test"]) == 150
    assert not french["train"] & french["test"] and not french["train"] & french["valid"]
    assert not french["valid"] & french["test"]
    assert all(split_of(f) == name for name, part in french.items() for f in part)
    # another seed's (or a larger) training set still never contains this test set
    other = builtin_splits(n_train=5_000, n_valid=0, n_test=0, seed=1)
    assert not {f for f, _ in other["train"]} & (french["test"] | french["valid"])


def test_split_of_is_a_stable_hash() -> None:
    # Pinned: changing the hash would silently move sentences between splits.
    pinned = {"je suis étudiant": "train", "elle est professeur": "test", "phrase 18": "valid"}
    assert {french: split_of(french) for french in pinned} == pinned
    assert split_of("x", valid_fraction=0.0, test_fraction=0.0) == "train"
    assert split_of("x", valid_fraction=0.0, test_fraction=0.999) == "test"
    counts = {name: 0 for name in ("train", "valid", "test")}
    for i in range(20_000):
        counts[split_of(f"phrase {i}")] += 1
    assert 800 < counts["test"] < 1_200 and 800 < counts["valid"] < 1_200


def test_split_of_does_not_depend_on_the_process() -> None:
    """Python's hash() of a str changes with PYTHONHASHSEED; the split must not."""
    sentences = [f"phrase {i}" for i in range(300)]
    code = (
        "import sys; from transformer.corpus.builtin import split_of; "
        "print(''.join(split_of(s)[0] for s in sys.argv[1:]))"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code, *sentences], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "".join(split_of(s)[0] for s in sentences)


@pytest.mark.parametrize("n", [0, -1, 1.5, True])
def test_generate_pairs_rejects_bad_n(n) -> None:
    with pytest.raises(ValueError):
        generate_pairs(n)


@pytest.mark.parametrize(
    "sizes",
    [
        dict(n_train=0, n_valid=1, n_test=1),
        dict(n_train=10, n_valid=-1, n_test=1),
        dict(n_train=10, n_valid=1, n_test=2.0),
    ],
)
def test_builtin_splits_rejects_bad_sizes(sizes) -> None:
    with pytest.raises(ValueError):
        builtin_splits(**sizes)


def test_split_of_rejects_bad_fractions() -> None:
    with pytest.raises(ValueError):
        split_of("x", valid_fraction=0.6, test_fraction=0.5)
    with pytest.raises(ValueError):
        split_of("x", valid_fraction=-0.1)

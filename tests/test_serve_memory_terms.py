"""``transformer serve --tm PATH --tm-constraints``: the phrases a sentence shares with its best
fuzzy match are glossary terms of its beam search where the model is unsure of its own
translation, listed as ``memory_terms`` on both APIs; a request's own glossary wins, greedy
requests and sure translations go without them, and a server without the option gives the match
as an alternative only. The alignment is the word-for-word one of
conftest's ``word_for_word`` (a tiny random model's attention aligns nothing)."""

from __future__ import annotations

import math

import pytest
from fastapi.testclient import TestClient

from transformer.errors import UserError
from transformer.memory import TranslationMemory
from transformer.serve.app import create_app
from transformer.serve.memory import ServerMemory

ENTRY = ("Le petit chat dort dans la maison.", "The little cat sleeps in the house.")
SENTENCE = "Le petit chat dort dans la grande maison."
TERMS = [("Le petit chat dort dans la", "The little cat sleeps in the"), ("maison", "house")]


@pytest.fixture
def memory_path(tmp_path):
    path = tmp_path / "memory.db"
    with TranslationMemory(path) as store:
        store.add(*ENTRY, "fr", "en", origin="reviewer", status="accepted")
    return path


@pytest.fixture
def serve(pair_translators, memory_path):
    opened = []

    def client(**options):
        memory = ServerMemory(TranslationMemory(memory_path), **options)
        opened.append(memory)
        return TestClient(create_app(pair_translators["fr", "en"], src_lang="fr", tgt_lang="en", memory=memory))

    yield client
    for memory in opened:
        memory.close()


def native(client, text, **fields):
    answer = client.post("/v1/translate", json={"text": text, "beam_size": 4, **fields})
    assert answer.status_code == 200, answer.text
    return answer.json()["translations"][0]


def listed(sentence):
    return [(term["source"], term["target"]) for term in sentence.get("memory_terms", [])]


def test_the_memorys_terms_are_in_the_translation_on_both_apis(serve, word_for_word):
    with serve(constraints=True) as client:
        result = native(client, f"Il fait beau. {SENTENCE}")
        first, second = result["sentences"]
        assert "memory_terms" not in first and listed(second) == TERMS
        assert {term["id"] for term in second["memory_terms"]} == {second["memory_alternatives"][0]["id"]}
        assert all(target in result["translation"] for _, target in TERMS), result["translation"]
        assert word_for_word == [ENTRY]
        answer = client.post("/translate", json={"q": SENTENCE, "source": "fr", "target": "en"})
        assert answer.status_code == 200, answer.text
        [remembered] = answer.json()["memory"]
        assert listed(remembered) == TERMS and all(t in answer.json()["translatedText"] for _, t in TERMS)


def test_a_requests_glossary_wins_and_greedy_requests_search_without_terms(serve, word_for_word):
    with serve(constraints=True) as client:
        result = native(client, SENTENCE, glossary=[{"source": "maison", "target": "home"}])
        [sentence] = result["sentences"]
        assert listed(sentence) == TERMS[:1] and "home" in result["translation"] and TERMS[0][1] in result["translation"]
        assert "missing_terms" not in sentence or not sentence["missing_terms"]
        greedy = native(client, SENTENCE, beam_size=1)
        assert "memory_terms" not in greedy["sentences"][0] and greedy["sentences"][0]["memory_alternatives"]


def test_without_the_option_a_match_is_an_alternative_only(serve, word_for_word):
    with serve() as client:
        plain = native(client, SENTENCE)
    assert "memory_terms" not in plain["sentences"][0] and plain["sentences"][0]["memory_alternatives"]
    assert word_for_word == [] and TERMS[0][1] not in plain["translation"]


def test_constraints_need_fuzzy_matches(memory_path):
    with pytest.raises(UserError, match="--tm-constraints"):
        ServerMemory(TranslationMemory(memory_path), threshold=None, constraints=True)


def test_a_memory_term_the_search_cannot_place_is_not_a_missing_glossary_term(serve, word_for_word, pair_translators):
    tokens = pair_translators["fr", "en"]._term_tokens_of
    room = len(tokens(TERMS[0][1])) + 1  # the first term fits in an answer, not both
    assert room < len(tokens(TERMS[0][1])) + len(tokens(TERMS[1][1]))
    with serve(constraints=True) as client:
        result = native(client, SENTENCE, max_length=room)
    [sentence] = result["sentences"]
    assert listed(sentence) == TERMS and "missing_terms" not in sentence and not result["warnings"]
    assert sum(target in result["translation"] for _, target in TERMS) < 2, result["translation"]


def test_a_translation_the_model_is_sure_of_keeps_its_own_words(serve, word_for_word):
    with serve() as client:
        own = native(client, SENTENCE)
    with serve(constraints=True, unsure_below=-math.inf) as client:
        sure = native(client, SENTENCE)
    assert word_for_word == [] and sure["translation"] == own["translation"]
    assert "memory_terms" not in sure["sentences"][0] and sure["sentences"][0]["memory_alternatives"]

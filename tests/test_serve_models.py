"""One server, several models: routing by language pair, pivoting through English, ``source: auto``.

Three tiny runs (fr->en, en->de, de->en; random weights, so each translates differently) are
served together. A pivot translation must equal what the two models give one after the other
through the Python API; a direct pair must equal its own model's translation; and what the
server cannot translate is refused naming what it does.
"""

from __future__ import annotations

import subprocess
import sys
import os

import pytest
from clients_helpers import ENGLISH, FRENCH, GERMAN, LIMITS
from fastapi.testclient import TestClient
from serve_helpers import free_port, wait_until_up

from transformer.serve.app import create_app
from transformer.serve.model_set import ModelSet
from transformer.serve.service import TranslationService
from transformer.translate.document import translate_document
from transformer.translate.translator import Translator

@pytest.fixture(scope="module")
def runs(pair_runs):
    return pair_runs


@pytest.fixture(scope="module")
def translators(pair_translators):
    return pair_translators


@pytest.fixture(scope="module")
def client(translators):
    app = create_app(list(translators.values()), LIMITS)
    with TestClient(app) as c:
        yield c


def doc(translator: Translator, text: str) -> str:
    return translate_document(translator, text).text


def test_languages_list_direct_and_pivot_targets(client):
    assert client.get("/languages").json() == [
        {"code": "fr", "name": "French", "targets": ["en", "de"]},  # de through en
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": ["en"]},  # no en -> fr model: no fr
    ]
    models = client.get("/v1/models").json()
    assert [(m["src_lang"], m["tgt_lang"]) for m in models["models"]] == [("fr", "en"), ("en", "de"), ("de", "en")]
    assert {(p["source"], p["target"], p["via"]) for p in models["pairs"]} == {
        ("fr", "en", None), ("fr", "de", "en"), ("en", "de", None), ("de", "en", None)}
    assert models["pivot"] == "en"


def test_each_pair_is_translated_by_its_own_model(client, translators):
    for (src, tgt), translator in translators.items():
        text = {"fr": FRENCH, "en": ENGLISH, "de": GERMAN}[src]
        lt = client.post("/translate", json={"q": text, "source": src, "target": tgt})
        assert lt.status_code == 200, lt.text
        assert lt.json() == {"translatedText": doc(translator, text)}
        assert "x-translated-via" not in lt.headers
        native = client.post("/v1/translate", json={"text": text, "source": src, "target": tgt}).json()
        assert native["translations"][0]["translation"] == doc(translator, text)
        assert "via" not in native["translations"][0]


def test_a_pair_without_a_model_goes_through_english(client, translators):
    english = doc(translators["fr", "en"], FRENCH)
    want = doc(translators["en", "de"], english)
    lt = client.post("/translate", json={"q": [FRENCH, "  "], "source": "fr", "target": "de"})
    assert lt.status_code == 200, lt.text
    assert lt.json() == {"translatedText": [want, "  "]}
    assert lt.headers["x-translated-via"] == "en"
    native = client.post("/v1/translate", json={"text": FRENCH, "source": "fr", "target": "de", "n_best": 2}).json()
    result = native["translations"][0]
    assert result["translation"] == want
    assert result["via"] == {"language": "en", "translation": english}
    assert result["source"] == english  # the alignment's spans refer to the English text
    assert len(result["n_best"]) == 2
    assert native["timing"]["model_calls"] == 2


def test_a_request_naming_no_languages_gets_the_first_model(client, translators):
    native = client.post("/v1/translate", json={"text": FRENCH}).json()
    assert native["translations"][0]["translation"] == doc(translators["fr", "en"], FRENCH)


def test_what_is_not_served_is_refused_naming_what_is(client):
    for source, target, words in [("es", "en", ["es is not supported as the source language", "fr (French) to en"]),
                                  ("fr", "es", ["es is not supported as the target language"]),
                                  ("de", "fr", ["de -> fr is not supported", "into en only"])]:
        lt = client.post("/translate", json={"q": "x y", "source": source, "target": target})
        assert lt.status_code == 400 and all(w in lt.json()["error"] for w in words), lt.text
        native = client.post("/v1/translate", json={"text": "x y", "source": source, "target": target})
        assert native.status_code == 422 and all(w in native.json()["message"] for w in words), native.text
    bad = client.post("/v1/translate", json={"text": "x", "source": "fr!", "target": "en"})
    assert bad.status_code == 422 and "source" in bad.json()["message"]


def test_a_glossary_or_the_attention_through_the_pivot_is_refused(client):
    glossary = [{"source": "chat", "target": "Katze"}]
    native = client.post("/v1/translate", json={"text": FRENCH, "source": "fr", "target": "de", "glossary": glossary})
    assert native.status_code == 422 and "translated through en" in native.json()["message"]
    lt = client.post("/translate", json={"q": FRENCH, "source": "fr", "target": "de", "glossary": glossary})
    assert lt.status_code == 400 and "glossary" in lt.json()["error"]
    attention = client.post("/v1/attention", json={"text": FRENCH, "source": "fr", "target": "de"})
    assert attention.status_code == 422 and "fr -> en or en -> de" in attention.json()["message"]
    direct = client.post("/v1/attention", json={"text": GERMAN, "source": "de", "target": "en"})
    assert direct.status_code == 200, direct.text


def test_auto_detects_each_text_and_routes_it(client, translators):
    texts = [FRENCH, GERMAN, ENGLISH]
    lt = client.post("/translate", json={"q": texts, "source": "auto", "target": "en"})
    assert lt.status_code == 200, lt.text
    body = lt.json()
    assert [d["language"] for d in body["detectedLanguage"]] == ["fr", "de", "en"]
    assert all(0 < d["confidence"] <= 100 for d in body["detectedLanguage"])
    assert body["translatedText"] == [doc(translators["fr", "en"], FRENCH), doc(translators["de", "en"], GERMAN),
                                      ENGLISH]  # already English: given back as it is
    native = client.post("/v1/translate", json={"text": texts, "source": "auto", "target": "de"}).json()
    found = [t["detected_language"]["language"] for t in native["translations"]]
    assert found == ["fr", "de", "en"]
    assert [t["translation"] for t in native["translations"]] == [
        doc(translators["en", "de"], doc(translators["fr", "en"], FRENCH)), GERMAN,
        doc(translators["en", "de"], ENGLISH)]
    assert native["translations"][0]["via"]["language"] == "en"


def test_auto_into_a_language_nothing_translates_into_is_refused(client):
    """fr is only a source here: "detecting" among it alone would hand every text back unchanged."""
    lt = client.post("/translate", json={"q": ENGLISH, "source": "auto", "target": "fr"})
    assert lt.status_code == 400 and "fr is not supported as the target language" in lt.json()["error"], lt.text
    native = client.post("/v1/translate", json={"text": ENGLISH, "source": "auto", "target": "fr"})
    assert native.status_code == 422 and "fr is not supported as the target language" in native.json()["message"]


def test_detect_answers_in_libretranslates_shape(client):
    answer = client.post("/detect", data={"q": GERMAN}).json()
    assert answer[0]["language"] == "de" and 50 < answer[0]["confidence"] <= 100
    assert {d["language"] for d in answer} <= {"fr", "en", "de"}
    assert client.post("/detect", json={"q": [FRENCH, "1234"]}).json()[1] == [{"confidence": 0.0, "language": "fr"}]
    missing = client.post("/detect", json={})
    assert missing.status_code == 400 and missing.json() == {"error": "Invalid request: missing q parameter"}


def test_health_has_every_models_batcher(client):
    health = client.get("/health").json()
    assert set(health["models"]) == {"fr-en", "en-de", "de-en"}


def test_model_sets_refuse_what_they_cannot_serve(translators, runs, tmp_path):
    services = [TranslationService(t, src_lang=t.src_lang, tgt_lang=t.tgt_lang) for t in translators.values()]
    with pytest.raises(ValueError, match="two models translate fr -> en"):
        ModelSet([services[0], services[0]])
    anonymous = TranslationService(translators["fr", "en"])
    with pytest.raises(ValueError, match="needs each run's languages"):
        ModelSet([anonymous, services[1]])
    no_pivot = ModelSet(services, pivot=None)
    assert no_pivot.targets("fr") == ["en"]
    with pytest.raises(ValueError, match="several models report their own"):
        create_app(list(translators.values()), src_lang="fr")


def test_serve_process_with_several_run_dirs(runs, translators):
    """``transformer serve A B C`` loads each, says what it translates through the pivot, and answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    dirs = [str(runs[pair]) for pair in [("fr", "en"), ("en", "de"), ("de", "en")]]
    proc = subprocess.Popen([sys.executable, "-m", "transformer.cli", "serve", *dirs, "--port", str(port),
                             "--log-level", "warning"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        wait_until_up(proc, url)
        from libretranslatepy import LibreTranslateAPI

        lt = LibreTranslateAPI(url)
        assert [lang["code"] for lang in lt.languages(timeout=10)] == ["fr", "en", "de"]
        english = doc(translators["fr", "en"], FRENCH)
        assert lt.translate(FRENCH, "fr", "de", timeout=60) == doc(translators["en", "de"], english)
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
    assert "through en: fr -> de" in out
    twice = subprocess.run([sys.executable, "-m", "transformer.cli", "serve", dirs[0], dirs[0], "--port", "0"],
                           capture_output=True, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert twice.returncode != 0 and "given twice" in twice.stderr

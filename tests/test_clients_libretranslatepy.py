"""``libretranslatepy`` (LibreTranslate's own Python client, unchanged from the package index)
against a real ``transformer serve`` of three tiny runs (fr -> en, en -> de, de -> en) that
requires an API key.

What the client sends (libretranslatepy/api.py, 2.1.4): ``POST /translate`` and ``POST /detect``
with an urlencoded form (``q``, ``source``, ``target``; ``api_key`` when it has one), and
``GET /languages`` with the same kind of form as its body. ``translate`` returns
``translatedText`` alone: it has no ``alternatives`` or ``format`` parameter and drops
``detectedLanguage``. Errors come out as ``urllib.error.HTTPError`` with the server's JSON body.
"""

from __future__ import annotations

import json
import urllib.error

import pytest
from clients_helpers import ENGLISH, FRENCH, GERMAN, SAMPLES, expected, serve
from libretranslatepy import LibreTranslateAPI

from transformer.translate.translator import Translator

PAIRS = [("fr", "en"), ("en", "de"), ("de", "en")]
KEY = "client-test-key-2"
# a random model's translations run long; the server translates them in pieces just the same
pytestmark = pytest.mark.filterwarnings("ignore::transformer.translate.warning.TranslationWarning")


@pytest.fixture(scope="module")
def runs(pair_runs):
    return pair_runs


@pytest.fixture(scope="module")
def translators(pair_translators) -> dict[tuple[str, str], Translator]:
    return pair_translators


@pytest.fixture(scope="module")
def server(runs, tmp_path_factory):
    keys = tmp_path_factory.mktemp("keys") / "keys.txt"
    keys.write_text(f"{KEY}\n")
    with serve([runs[pair] for pair in PAIRS], "--api-keys", str(keys), "--require-api-key") as url:
        yield url


@pytest.fixture(scope="module")
def lt(server) -> LibreTranslateAPI:
    return LibreTranslateAPI(server, api_key=KEY)


def refused(call, status: int) -> str:
    """The server's error message for a request the client raised HTTPError on."""
    with pytest.raises(urllib.error.HTTPError) as raised:
        call()
    assert raised.value.code == status
    body = json.loads(raised.value.read())
    assert set(body) == {"error"}
    return body["error"]


def test_languages_with_a_key_in_the_get_body(lt):
    assert lt.languages(timeout=10) == [
        {"code": "fr", "name": "French", "targets": ["en", "de"]},
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": ["en"]},
    ]


@pytest.mark.parametrize("source, target", [*PAIRS, ("fr", "de")])
def test_translate_each_pair(lt, translators, source, target):
    text = SAMPLES[source]
    assert lt.translate(text, source, target, timeout=60) == expected(translators, source, target, text)


@pytest.mark.parametrize("target", ["en", "de"])
def test_translate_with_auto_source_routes_each_text(lt, translators, target):
    for source, text in [("fr", FRENCH), ("de", GERMAN), ("en", ENGLISH)]:
        assert lt.translate(text, "auto", target, timeout=60) == expected(translators, source, target, text), source


def test_detect_among_the_languages_served(lt):
    for language, text in [("fr", FRENCH), ("de", GERMAN), ("en", ENGLISH)]:
        found = lt.detect(text, timeout=10)
        assert found[0]["language"] == language, found
        assert 50 < found[0]["confidence"] <= 100
        assert {d["language"] for d in found} <= {"fr", "en", "de"}
        assert [d["confidence"] for d in found] == sorted((d["confidence"] for d in found), reverse=True)


def test_keys_and_pairs_not_served_are_refused(server, lt):
    anonymous = LibreTranslateAPI(server)
    assert [language["code"] for language in anonymous.languages(timeout=10)] == ["fr", "en", "de"]  # open to all
    message = refused(lambda: anonymous.translate(FRENCH, "fr", "en", timeout=10), 400)
    assert message == "Please contact the server operator to get an API key"
    refused(lambda: anonymous.detect(FRENCH, timeout=10), 400)
    assert refused(lambda: LibreTranslateAPI(server, api_key="unknown-key-9").translate(FRENCH, "fr", "en", timeout=10),
                   403) == "Invalid API key"
    assert "de -> fr is not supported" in refused(lambda: lt.translate(GERMAN, "de", "fr", timeout=10), 400)
    assert "es is not supported as the source language" in refused(lambda: lt.translate("Hola", "es", "en",
                                                                                         timeout=10), 400)


def test_auto_into_a_language_nothing_translates_into_is_refused(lt):
    """fr is served only as a source: an English text is not "detected" as French and handed back.
    (LibreTranslate's page offers every language as a target under Auto Detect, fr included.)"""
    message = refused(lambda: lt.translate(ENGLISH, "auto", "fr", timeout=10), 400)
    assert "fr is not supported as the target language" in message

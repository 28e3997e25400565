"""``alternatives`` on the server: distinct translations besides the translation, on
``/v1/translate`` and on LibreTranslate's ``/translate`` (its shape: ``{"translatedText",
"alternatives"}``), compared with the library (``translate_alternatives``) on the small random
model of the tiny_run fixture, whose n-best holds duplicates after detokenisation. Bad values are 422
(native) or 400 (LibreTranslate), and answers without alternatives are as before.
"""

from __future__ import annotations

import pytest
from fastapi.testclient import TestClient
from serve_helpers import assert_error

from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.alternatives import translate_alternatives
from transformer.translate.html import translate_html
from transformer.translate.translator import Translator

DUPLICATED = "je suis étudiant"  # its 4-best holds a text twice after detokenisation
PARAGRAPHS = "Je suis étudiant. Le chat noir dort.\n\nNous mangeons."
PAGE = "<p>Le <b>chat</b> noir dort. Il pleut.</p>"
MAX_ALTERNATIVES = 5
LIMITS = dict(max_chars=300, max_texts=4, max_output_tokens=20, max_body_bytes=4096,
              max_alternatives=MAX_ALTERNATIVES)
TRANSLATION_KEYS = {"source", "translation", "score", "n_best", "sentences", "warnings"}


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    return Translator.from_run_dir(tiny_run())


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(create_app(translator, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en")) as c:
        yield c


def library(translator: Translator, texts: list[str], n: int, max_length: int | None = None,
            **changes) -> list[list[str]]:
    lengths = {} if max_length is None else {"max_len_a": 0.0, "max_len_b": max_length}
    return translate_alternatives(translator.with_decoding(**lengths, **changes), texts, n)


def without_timing(body: dict) -> dict:
    return {key: value for key, value in body.items() if key != "timing"}


# --------------------------------------------------------------------------------------------- /v1/translate
def test_v1_alternatives_are_the_librarys_without_the_first(client, translator):
    texts = [DUPLICATED, PARAGRAPHS]
    response = client.post("/v1/translate", json={"text": texts, "max_length": 8, "alternatives": 3})
    assert response.status_code == 200, response.text
    got = response.json()["translations"]
    want = library(translator, texts, 4, max_length=8)
    assert [t["alternatives"] for t in got] == [w[1:] for w in want]
    assert [t["translation"] for t in got] == [w[0] for w in want]
    assert len(got[0]["alternatives"]) == 2  # four hypotheses, three distinct texts
    assert len(got[1]["alternatives"]) == 3 and all(a.count("\n\n") == 1 for a in got[1]["alternatives"])


def test_v1_the_rest_of_the_answer_is_as_without_alternatives(client):
    for extra in ({"n_best": 1}, {"n_best": 3}, {"beam_size": 2, "n_best": 2}):
        body = {"text": [DUPLICATED, PARAGRAPHS], "max_length": 8, **extra}
        plain = client.post("/v1/translate", json=body).json()
        asked = client.post("/v1/translate", json={**body, "alternatives": 2}).json()
        assert [set(t) for t in plain["translations"]] == [TRANSLATION_KEYS] * 2  # no alternatives key at all
        for t in asked["translations"]:
            assert set(t) == TRANSLATION_KEYS | {"alternatives"}
            del t["alternatives"]
        assert without_timing(asked) == without_timing(plain)
        zero = client.post("/v1/translate", json={**body, "alternatives": 0})
        assert without_timing(zero.json()) == without_timing(plain)


def test_v1_alternatives_are_capped_by_the_beam(client, translator):
    body = {"text": PARAGRAPHS, "max_length": 8, "alternatives": MAX_ALTERNATIVES}
    four = client.post("/v1/translate", json=body).json()["translations"][0]
    assert four["alternatives"] == library(translator, [PARAGRAPHS], 4, max_length=8)[0][1:]  # beam_size - 1
    wide = client.post("/v1/translate", json={**body, "beam_size": 8}).json()["translations"][0]
    assert wide["alternatives"] == library(translator, [PARAGRAPHS], 6, max_length=8, beam_size=8)[0][1:]
    assert len(wide["alternatives"]) == MAX_ALTERNATIVES
    greedy = client.post("/v1/translate", json={**body, "beam_size": 1}).json()["translations"][0]
    assert greedy["alternatives"] == []


def test_v1_html_alternatives_are_pages(client, translator):
    response = client.post("/v1/translate", json={"text": PAGE, "format": "html", "max_length": 6,
                                                  "alternatives": 3})
    assert response.status_code == 200, response.text
    page = response.json()["translations"][0]
    assert 1 <= len(page["alternatives"]) <= 3
    assert len({page["translation"], *page["alternatives"]}) == 1 + len(page["alternatives"])
    for alternative in page["alternatives"]:
        assert alternative.startswith("<p>") and alternative.endswith("</p>") and alternative.count("<b>") == 1
    # the first alternative page: each sentence's second distinct translation, placed in the markup
    wide = translator.with_decoding(n_best=4, max_len_a=0.0, max_len_b=6)
    options = [list(dict.fromkeys(wide.detokenize(h) for h in hyps))
               for hyps in wide.translate_n_best(["Le chat noir dort.", "Il pleut."])]
    second = translate_html(PAGE, lambda found: [o[min(1, len(o) - 1)] for o in options], lang="fr")
    assert page["alternatives"][0] == second


@pytest.mark.parametrize("value, words", [
    (-1, ["alternatives", "greater than or equal to 0"]),
    (MAX_ALTERNATIVES + 1, ["alternatives", f"less than or equal to {MAX_ALTERNATIVES}"]),
    ("2", ["alternatives", "valid integer"]),
    (2.5, ["alternatives", "valid integer"]),
    (2.0, ["alternatives", "valid integer"]),
    (True, ["alternatives", "valid integer"]),
    (None, ["alternatives", "valid integer"]),
])
def test_v1_bad_alternatives_are_422(client, value, words):
    assert_error(client.post("/v1/translate", json={"text": DUPLICATED, "alternatives": value}), 422,
                 "invalid_request", *words)


def test_v1_a_server_without_alternatives(translator):
    with TestClient(create_app(translator, ServeLimits(max_alternatives=0))) as c:
        assert_error(c.post("/v1/translate", json={"text": DUPLICATED, "alternatives": 1}), 422, "invalid_request",
                     "less than or equal to 0")
        assert c.post("/v1/translate", json={"text": DUPLICATED, "alternatives": 0}).status_code == 200
        assert c.get("/v1/model").json()["limits"]["max_alternatives"] == 0


def test_the_schema_carries_the_limit(client):
    schema = client.get("/openapi.json").json()["components"]["schemas"]
    assert schema["TranslateRequest"]["properties"]["alternatives"]["maximum"] == MAX_ALTERNATIVES
    assert "alternatives" in schema["Translation"]["properties"]
    assert "alternatives" not in schema["Translation"].get("required", [])


# --------------------------------------------------------------------------------------------- LibreTranslate
def test_libretranslate_alternatives_in_every_request_form(client, translator):
    want = library(translator, [PARAGRAPHS], 4)[0]  # the server's default decoding (beam 4)
    params = {"q": PARAGRAPHS, "source": "fr", "target": "en"}
    as_form = {**params, "alternatives": "3"}
    forms = {
        "json": client.post("/translate", json={**params, "alternatives": 3}),
        "json string": client.post("/translate", json=as_form),
        "urlencoded": client.post("/translate", data=as_form),
        "multipart": client.post("/translate", files={k: (None, v) for k, v in as_form.items()}),
        "query string": client.post("/translate", params=as_form),
    }
    for form, response in forms.items():
        assert response.status_code == 200, (form, response.text)
        assert response.json() == {"translatedText": want[0], "alternatives": want[1:]}, form
    assert len(want) == 4


def test_libretranslate_a_list_and_blank_texts(client, translator):
    q = [DUPLICATED, "  ", PARAGRAPHS]
    response = client.post("/translate", json={"q": q, "source": "fr", "target": "en", "alternatives": 2})
    assert response.status_code == 200, response.text
    want = library(translator, [DUPLICATED, PARAGRAPHS], 3)
    assert response.json() == {"translatedText": [want[0][0], "  ", want[1][0]],
                               "alternatives": [want[0][1:], [], want[1][1:]]}
    html = client.post("/translate", json={"q": [PAGE], "source": "fr", "target": "en", "format": "html",
                                           "alternatives": 2}).json()
    assert len(html["alternatives"][0]) >= 1 and html["alternatives"][0][0].startswith("<p>")


def test_libretranslate_answers_without_alternatives_are_as_before(client):
    params = {"q": DUPLICATED, "source": "fr", "target": "en"}
    plain = client.post("/translate", json=params)
    assert list(plain.json()) == ["translatedText"]
    for zero in (0, "0", ""):
        assert client.post("/translate", json={**params, "alternatives": zero}).content == plain.content
    assert client.post("/translate", data={**params, "alternatives": "0"}).content == plain.content


@pytest.mark.parametrize("kwargs, words", [
    ({"json": {"alternatives": -1}}, ["alternatives parameter must be >= 0, got -1"]),
    ({"data": {"alternatives": "-2"}}, ["alternatives parameter must be >= 0, got -2"]),
    ({"json": {"alternatives": MAX_ALTERNATIVES + 1}}, [f"parameter must be <= {MAX_ALTERNATIVES}, got 6"]),
    ({"data": {"alternatives": "9" * 40}}, [f"alternatives parameter must be <= {MAX_ALTERNATIVES}"]),
    ({"json": {"alternatives": "three"}}, ["alternatives parameter is not an integer"]),
    ({"data": {"alternatives": "2.5"}}, ["alternatives parameter is not an integer"]),
    ({"json": {"alternatives": 2.0}}, ["alternatives parameter is not an integer"]),
    ({"json": {"alternatives": True}}, ["alternatives parameter is not an integer"]),
    ({"json": {"alternatives": [2]}}, ["alternatives parameter is not an integer"]),
])
def test_libretranslate_bad_alternatives_are_400(client, kwargs, words):
    (kind, extra), = kwargs.items()
    response = client.post("/translate", **{kind: {"q": DUPLICATED, "source": "fr", "target": "en", **extra}})
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
    for word in words:
        assert word in response.json()["error"]

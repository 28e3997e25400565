"""``glossary`` on the server: terms a translation must use, on ``/v1/translate`` and
``/v1/attention`` (a list of ``{"source", "target"}`` objects), on LibreTranslate's ``/translate``
(the same list, in a JSON body: this server's extension) and in the web page's glossary box.

In-process (TestClient) against the small random model of the tiny_run fixture, compared with the
library (``translate_document(..., glossary=...)``) on the same model; the bad glossaries are 422
(native) or 400 (LibreTranslate), and requests without one are answered as before. The page's
box is checked in its HTML here and in headless Chromium in test_serve_browser.py.
"""

from __future__ import annotations

import asyncio
import warnings

import httpx
import pytest
from fastapi.testclient import TestClient
from serve_helpers import assert_error

from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.serve.page import index_html
from transformer.translate.document import translate_document
from transformer.translate.translator import Translator

TEXT = "Je suis étudiant. Le chat noir dort.\n\nNous mangeons."
TERMS = [{"source": "chat", "target": "cat"}, {"source": "étudiant", "target": "student"}]
PAIRS = [(t["source"], t["target"]) for t in TERMS]
MAX_TERMS = 4
LIMITS = dict(max_chars=300, max_texts=4, max_output_tokens=20, max_body_bytes=4096, max_glossary_terms=MAX_TERMS)


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    return Translator.from_run_dir(tiny_run())


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(create_app(translator, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en")) as c:
        yield c


def library(translator: Translator, text: str, max_length: int, glossary=PAIRS):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return translate_document(translator.with_decoding(max_len_a=0.0, max_len_b=max_length), text,
                                  glossary=glossary)


# --------------------------------------------------------------------------------------------- /v1/translate
def test_the_translation_uses_the_terms_as_the_library_does(client, translator):
    response = client.post("/v1/translate", json={"text": TEXT, "max_length": 12, "glossary": TERMS})
    assert response.status_code == 200, response.text
    got = response.json()["translations"][0]
    want = library(translator, TEXT, 12)
    assert got["translation"] == want.text
    assert "student" in got["translation"] and "cat" in got["translation"]
    assert got["translation"] != library(translator, TEXT, 12, glossary=None).text  # the terms changed it
    plain = client.post("/v1/translate", json={"text": TEXT, "max_length": 12}).json()["translations"][0]
    assert got["sentences"][2]["n_best"] == plain["sentences"][2]["n_best"]  # no term in it: as without
    assert [s["missing_terms"] for s in got["sentences"]] == [[], [], []] and got["warnings"] == []


def test_requests_without_a_glossary_are_answered_as_before(client):
    body = {"text": TEXT, "max_length": 12}
    plain = client.post("/v1/translate", json=body).json()
    assert all("missing_terms" not in s for s in plain["translations"][0]["sentences"])
    for none in ([], None):
        same = client.post("/v1/translate", json={**body, "glossary": none}).json()
        assert same["translations"] == plain["translations"]


def test_a_term_that_cannot_be_placed_is_named(client, translator):
    # "cat" (2 tokens) and "student" (3) do not both fit in 4 output tokens: one is left out
    text = "le chat noir est étudiant"
    response = client.post("/v1/translate", json={"text": [text, "Il pleut. " + text], "max_length": 4,
                                                  "glossary": TERMS})
    assert response.status_code == 200, response.text
    one, two = response.json()["translations"]
    assert one["sentences"][0]["missing_terms"] == [{"source": "chat", "target": "cat"}]
    assert one["warnings"] == [{"sentence": 0, "message": "text 0: the glossary's 'chat' -> 'cat' could not be "
                                "placed in the translation within its length limit (max_length)"}]
    assert library(translator, text, 4).sentences[0].missing_terms[0].target == "cat"
    assert [s["missing_terms"] for s in two["sentences"]] == [[], [{"source": "chat", "target": "cat"}]]
    assert [w["sentence"] for w in two["warnings"]] == [1] and "text 1, sentence 1 (line 1" in two["warnings"][0]["message"]


def test_html_pages_and_alternatives_with_a_glossary(client):
    page = "<p>Le <b>chat</b> noir dort.</p>"
    response = client.post("/v1/translate", json={"text": page, "format": "html", "max_length": 8, "glossary": TERMS,
                                                  "alternatives": 3})
    assert response.status_code == 200, response.text
    got = response.json()["translations"][0]
    assert got["translation"].startswith("<p>") and "cat" in got["translation"]
    assert all("cat" in alternative for alternative in got["alternatives"])  # every one holds the term
    assert got["sentences"][0]["missing_terms"] == []


@pytest.mark.parametrize("extra, words", [
    ({"glossary": TERMS * 2 + [{"source": "nous", "target": "we"}]}, ["glossary", f"at most {MAX_TERMS} items"]),
    ({"glossary": TERMS, "beam_size": 1}, ["a glossary needs beam search", "beam_size must be >= 2"]),
    ({"glossary": [{"source": "chat", "target": "cat"}, {"source": "CHAT", "target": "dog"}]},
     ["the source term 'CHAT' has two targets: 'cat'", "'dog'"]),
    ({"glossary": [{"source": "", "target": "cat"}]}, ["glossary.0.source", "at least 1 character"]),
    ({"glossary": [{"source": "  ", "target": "cat"}]}, ["glossary: pair 1: empty source term"]),
    ({"glossary": [{"source": "chat", "target": "c\tat"}]}, ["pair 1"]),
    ({"glossary": [{"source": "chat"}]}, ["glossary.0.target", "Field required"]),
    ({"glossary": [{"source": "chat", "target": "cat", "note": "x"}]}, ["glossary.0.note", "not permitted"]),
    ({"glossary": [["chat", "cat"]]}, ["glossary.0", "valid dictionary"]),
    ({"glossary": {"chat": "cat"}}, ["glossary", "valid list"]),
    ({"glossary": [{"source": "étudiant", "target": "a student of the old school"}], "max_length": 4},
     ["target term 'a student of the old school'", "longer than the longest output (4)"]),
])
def test_bad_glossaries_are_422(client, extra, words):
    assert_error(client.post("/v1/translate", json={"text": "je suis étudiant", **extra}), 422, "invalid_request",
                 *words)
    assert client.post("/v1/translate", json={"text": "le chat", "max_length": 4}).status_code == 200


def test_the_attention_is_that_of_the_translation_with_the_glossary(client):
    body = {"text": TEXT, "max_length": 12, "glossary": TERMS}
    translated = client.post("/v1/translate", json=body).json()["translations"][0]
    for index, sentence in enumerate(translated["sentences"]):
        doc = client.post("/v1/attention", json={**body, "sentence": index})
        assert doc.status_code == 200, doc.text
        assert doc.json()["translation"] == sentence["n_best"][0]["translation"]
    assert_error(client.post("/v1/attention", json={**body, "beam_size": 1}), 422, "invalid_request",
                 "a glossary needs beam search")


def test_requests_with_the_same_glossary_share_model_calls_and_others_do_not(translator):
    # Room for the four in one call, where a batcher blind to glossaries would put them as soon as
    # they are in; the right one waits 3 s (a slow machine's stall included) for a fourth text alike.
    app = create_app(translator, ServeLimits(batch_wait_ms=3000, max_batch_size=4))

    async def concurrently(bodies):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
            responses = await asyncio.gather(*(c.post("/v1/translate", json=b) for b in bodies))
        await app.state.batcher.close()
        return [r.json()["timing"]["batch_size"] for r in responses]

    same = {"text": "le chat dort", "max_length": 4, "glossary": TERMS}
    other = {**same, "glossary": TERMS[:1]}
    assert asyncio.run(concurrently([same, same, other, {"text": "le chat dort", "max_length": 4}])) == [2, 2, 1, 1]


# --------------------------------------------------------------------------------------------- LibreTranslate
def test_libretranslate_takes_the_glossary_in_a_json_body(client, translator):
    params = {"q": TEXT, "source": "fr", "target": "en"}
    response = client.post("/translate", json={**params, "glossary": TERMS})
    assert response.status_code == 200, response.text
    want = translate_document(translator, TEXT, glossary=PAIRS).text  # the server's default decoding
    assert response.json() == {"translatedText": want}
    batch = client.post("/translate", json={**params, "q": [TEXT, " "], "glossary": TERMS})
    assert batch.json() == {"translatedText": [want, " "]}
    plain = client.post("/translate", json=params)
    assert client.post("/translate", json={**params, "glossary": []}).content == plain.content


@pytest.mark.parametrize("kwargs, words", [
    ({"data": {"glossary": "chat = cat"}}, ["glossary is read from a JSON body only"]),
    ({"params": {"glossary": "chat = cat"}}, ["glossary is read from a JSON body only"]),
    ({"json": {"glossary": [["chat", "cat"]]}}, ['glossary must be a list of {"source": ..., "target": ...}']),
    ({"json": {"glossary": {"chat": "cat"}}}, ["glossary must be a list"]),
    ({"json": {"glossary": [{"source": "chat", "target": 3}]}}, ["with string values"]),
    ({"json": {"glossary": TERMS * 3}}, [f"glossary holds 6 terms; at most {MAX_TERMS}"]),
    ({"json": {"glossary": [{"source": "chat", "target": "cat"}, {"source": "Chat", "target": "dog"}]}},
     ["Invalid request: glossary: the source term 'Chat' has two targets"]),
])
def test_libretranslate_bad_glossaries_are_400(client, kwargs, words):
    (kind, extra), = kwargs.items()
    params = {"q": "je suis étudiant", "source": "fr", "target": "en"}
    body = {kind: {**params, **extra}} if kind != "params" else {"data": params, "params": extra}
    response = client.post("/translate", **body)
    assert response.status_code == 400, response.text
    assert set(response.json()) == {"error"}
    for word in words:
        assert word in response.json()["error"]


def test_libretranslate_glossary_on_a_greedy_server(translator):
    with TestClient(create_app(translator.with_decoding(beam_size=1), ServeLimits())) as c:
        response = c.post("/translate", json={"q": "le chat", "source": "fr", "target": "en", "glossary": TERMS})
    assert response.status_code == 400 and "a glossary needs beam search" in response.json()["error"]


# --------------------------------------------------------------------------------------------- the page
def test_the_page_has_a_glossary_box():
    page = index_html(src_lang="fr", tgt_lang="en")
    for hook in ('id="glossary"', 'id="glossary-box"', 'id="missing-terms"', "source = target"):
        assert hook in page
    script = page[page.index("function glossaryTerms"):]
    assert "split(/\\r\\n|\\r|\\n/)" in script and 'line.includes("\\t")' in script  # escapes survive Python

"""The LibreTranslate API of ``transformer serve`` (issue 24): existing clients work with our server.

In-process (TestClient) for the request forms LibreTranslate takes (JSON, urlencoded and
multipart forms, the query string), ``q`` as a string or a list, the html format, ``/languages``
and its error shape; then end to end with the ``libretranslatepy`` client from the package index
against a real ``transformer serve`` process on 127.0.0.1 (a free port; bounded requests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error

import pytest
from fastapi.testclient import TestClient
from serve_helpers import free_port, wait_until_up

from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.document import translate_document
from transformer.translate.translator import Translator

PARAGRAPH = "Je suis étudiant. Le chat noir dort sur la table.\n\nNous mangeons du pain."
LIMITS = dict(max_chars=300, max_texts=3, max_sentences=6, max_input_tokens=40, max_output_tokens=20,
              max_body_bytes=4096)


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


@pytest.fixture(scope="module")
def translator(run_dir) -> Translator:
    return Translator.from_run_dir(run_dir)


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(create_app(translator, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en")) as c:
        yield c


def error(response, status: int, *words: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str)
    for word in words:
        assert word in body["error"], body["error"]
    return body["error"]


# ---------------------------------------------------------------------------------------------
def test_translate_in_every_request_form(client, translator):
    want = translate_document(translator, PARAGRAPH).text  # the server's default decoding (beam 4)
    params = {"q": PARAGRAPH, "source": "fr", "target": "en"}
    forms = {
        "json": client.post("/translate", json={**params, "format": "text", "api_key": "ignored"}),
        "urlencoded": client.post("/translate", data={**params, "api_key": "x"}),
        "multipart": client.post("/translate", files={k: (None, v) for k, v in params.items()}),
        "query string": client.post("/translate", params=params),
        "auto source": client.post("/translate", json={**params, "source": "auto"}),
    }
    for form, response in forms.items():
        assert response.status_code == 200, (form, response.text)
        detected = response.json().pop("detectedLanguage", None)
        assert response.json() == {"translatedText": want, **({"detectedLanguage": detected} if detected else {})}, form
        assert (detected is not None) == (form == "auto source"), form
    assert forms["auto source"].json()["detectedLanguage"]["language"] == "fr"
    assert want.count("\n") == 2  # paragraphs kept


def test_a_list_of_texts_and_blank_texts(client, translator):
    q = ["Le chat dort. Il pleut.", "  ", "Nous mangeons."]
    response = client.post("/translate", json={"q": q, "source": "fr", "target": "en"})
    assert response.status_code == 200, response.text
    got = response.json()["translatedText"]
    assert got == [translate_document(translator, q[0]).text, "  ", translate_document(translator, q[2]).text]
    response = client.post("/translate", json={"q": ["", "Le chat."], "source": "fr", "target": "en"})
    assert response.json()["translatedText"][0] == ""


def test_languages(client):
    response = client.get("/languages")
    assert response.status_code == 200
    assert response.json() == [{"code": "fr", "name": "French", "targets": ["en"]},
                               {"code": "en", "name": "English", "targets": []}]


def test_languages_of_a_run_that_does_not_record_them(translator):
    with TestClient(create_app(translator, ServeLimits())) as c:
        assert c.get("/languages").json() == [{"code": "und", "name": "Undetermined (the run does not say)",
                                               "targets": ["und"]}]
        # nothing to check the codes against: any source and target are taken
        assert c.post("/translate", json={"q": "Le chat.", "source": "xx", "target": "yy"}).status_code == 200
        auto = c.post("/translate", json={"q": "Le chat.", "source": "auto", "target": "yy"})  # nothing to choose from
        assert auto.status_code == 200 and auto.json()["detectedLanguage"] == {"confidence": 0.0, "language": "und"}
        detect = c.post("/detect", json={"q": "Le chat."})
        assert detect.status_code == 400 and "does not record its languages" in detect.json()["error"]


@pytest.mark.parametrize("kwargs, status, words", [
    ({"json": {"source": "fr", "target": "en"}}, 400, ["Invalid request: missing q parameter"]),
    ({"json": {"q": "", "source": "fr", "target": "en"}}, 400, ["missing q parameter"]),
    ({"json": {"q": [], "source": "fr", "target": "en"}}, 400, ["missing q parameter"]),
    ({"json": {"q": "Le chat.", "target": "en"}}, 400, ["missing source parameter"]),
    ({"data": {"q": "Le chat.", "source": "fr"}}, 400, ["missing target parameter"]),
    ({"json": {"q": "Le chat.", "source": "de", "target": "en"}}, 400,
     ["de is not supported as the source language", "fr (French) to en (English)"]),
    ({"json": {"q": "Le chat.", "source": "fr", "target": "es"}}, 400, ["es is not supported as the target language"]),
    ({"json": {"q": "Le chat.", "source": "fr", "target": "en", "format": "markdown"}}, 400,
     ["markdown format is not supported"]),
    ({"json": {"q": 3, "source": "fr", "target": "en"}}, 400, ["q must be a string or a list of strings"]),
    ({"json": {"q": ["a", 3], "source": "fr", "target": "en"}}, 400, ["q must be a string or a list of strings"]),
    ({"json": {"q": "Le chat.", "source": 1, "target": "en"}}, 400, ["source must be a string"]),
    ({"json": {"q": ["a"] * 4, "source": "fr", "target": "en"}}, 400, ["q holds 4 texts; at most 3"]),
    ({"json": {"q": "x" * 301, "source": "fr", "target": "en"}}, 400, ["q is 301 characters long; at most 300"]),
    ({"json": {"q": ["Le chat.", "Il pleut. " * 7], "source": "fr", "target": "en"}}, 400,
     ["8 sentences", "at most 6"]),
    ({"json": {"q": ["Le chat.", "je\x00suis"], "source": "fr", "target": "en"}}, 400,
     ["q[1] contains the control character U+0000 at position 2"]),
    ({"content": b'{"q": "Le chat', "headers": {"content-type": "application/json"}}, 400, ["Invalid JSON"]),
    ({"content": b'["Le chat"]', "headers": {"content-type": "application/json"}}, 400, ["Invalid JSON format"]),
    ({"content": b"q=caf%E9&source=fr&target=en", "headers": {"content-type": "application/x-www-form-urlencoded"}},
     400, ["not valid UTF-8"]),
    ({"content": b'{"q": "caf\xe9"}', "headers": {"content-type": "application/json"}}, 400,
     ["request body is not valid UTF-8"]),
    ({"json": {"q": "a" * 5000, "source": "fr", "target": "en"}}, 413, ["larger than the limit of 4096 bytes"]),
])
def test_errors_have_libretranslates_shape(client, kwargs, status, words):
    error(client.post("/translate", **kwargs), status, *words)
    assert client.post("/translate", json={"q": "Le chat.", "source": "fr", "target": "en"}).status_code == 200


def test_wrong_method_is_json_in_the_same_shape(client):
    error(client.get("/translate"), 405, "Method Not Allowed")
    error(client.post("/languages"), 405)


def test_html_format_keeps_the_markup(client, translator):
    html = pytest.importorskip("transformer.translate.html", reason="transformer/translate/html.py has not landed")
    page = ('<!DOCTYPE html><html><head><title>Le chat</title><style>p { color: red }</style></head><body>'
            '<h1 class="t">Je suis étudiant</h1><p>Le <b>chat</b> noir dort. Il pleut &amp; il '
            '<a href="x.html" title="le chat">vente</a>.</p><pre>le chat</pre></body></html>')
    response = client.post("/translate", json={"q": [page, "<p>12</p>"], "source": "fr", "target": "en",
                                               "format": "html"})
    assert response.status_code == 200, response.text
    got = response.json()["translatedText"]
    assert got == [html.translate_html(page, translator.translate, lang="fr"), "<p>12</p>"]
    for kept in ('<h1 class="t">', "<b>", "</b>", '<a href="x.html" title="le chat">', "</a>", "<pre>le chat</pre>",
                 "<style>p { color: red }</style>"):
        assert kept in got[0]
    one = client.post("/translate", data={"q": "<p>Le chat.</p>", "source": "fr", "target": "en", "format": "html"})
    assert one.status_code == 200 and one.json()["translatedText"].startswith("<p>")
    error(client.post("/translate", json={"q": "<p>" + "Il pleut. " * 7 + "</p>", "source": "fr", "target": "en",
                                          "format": "html"}), 400, "7 sentences", "at most 6")


# ---------------------------------------------------------------------------------------------
def test_libretranslatepy_against_a_real_server(run_dir, translator):
    """The client from the package index, unchanged, against ``transformer serve`` on 127.0.0.1."""
    from libretranslatepy import LibreTranslateAPI

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer.cli", "serve", str(run_dir), "--port", str(port), "--log-level",
         "warning", "--max-texts", "3"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
    try:
        wait_until_up(proc, url)
        lt = LibreTranslateAPI(url, api_key="any key")
        assert lt.languages(timeout=10) == [{"code": "fr", "name": "French", "targets": ["en"]},
                                            {"code": "en", "name": "English", "targets": []}]
        assert lt.translate(PARAGRAPH, "fr", "en", timeout=60) == translate_document(translator, PARAGRAPH).text
        assert lt.translate("Le chat noir.", "auto", "en", timeout=60) == translator.translate(["Le chat noir."])[0]
        with pytest.raises(urllib.error.HTTPError) as bad:
            lt.translate("Le chat.", "fr", "de", timeout=10)
        assert bad.value.code == 400
        assert "de is not supported as the target language" in json.loads(bad.value.read())["error"]
        detected = lt.detect("Le chat noir dort sur la table.", timeout=10)  # among the server's languages
        assert detected[0]["language"] == "fr" and {d["language"] for d in detected} <= {"fr", "en"}
        assert 50 < detected[0]["confidence"] <= 100
        assert proc.poll() is None
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.mark.parametrize("content, words", [
    (b'{"q": ' + b"[" * 100_000 + b"]" * 100_000 + b', "source": "fr", "target": "en"}', ["nested too deeply"]),
    (b'{"q": "je suis", "source": "fr", "target": "en", "api_key": ' + b"9" * 5000 + b"}", ["5000 digits"]),
])
def test_json_that_python_cannot_read_is_a_400(translator, content, words):
    app = create_app(translator, ServeLimits(max_body_bytes=1_000_000), src_lang="fr", tgt_lang="en")
    with TestClient(app, raise_server_exceptions=False) as client:  # a server error is answered, not raised
        response = client.post("/translate", content=content, headers={"content-type": "application/json"})
    message = error(response, 400, "Invalid JSON", *words)
    assert "\n" not in message and "sys." not in message

"""The web page of a server of several models, in headless Chromium (Playwright) and without it.

Three tiny runs (fr->en, en->de, de->en, as in tests/test_serve_models.py) served together: the
page offers the languages served and the targets each reaches (fr -> de through English), sends
them with its requests, shows the language it detected, says when a text went through English
(and shows the English text), and offers the attention view only where one model translated the
text. The browser tests are skipped without Playwright or Chromium, unless CI is set (as in
tests/test_serve_browser.py).
"""

from __future__ import annotations

import html
import json
import re

import httpx
import pytest
from fastapi.testclient import TestClient
from browser_helpers import ARTIFACTS
from clients_helpers import FRENCH, GERMAN, LIMITS
from serve_helpers import live_server

from transformer.serve.app import create_app
from transformer.serve.page import index_html, page_csp
from transformer.visualize.csp import sha256_source


@pytest.fixture(scope="module")
def server(pair_translators):
    with live_server(create_app(list(pair_translators.values()), LIMITS)) as url:
        yield url


def embedded_languages(page: str):
    """The page's language data (the ``#languages`` JSON block)."""
    found = re.search(r'<script type="application/json" id="languages">(.*?)</script>', page, re.DOTALL)
    assert found, "no #languages block"
    return json.loads(found.group(1))


def open_page(browser, server):
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    errors: list[str] = []
    sent: list[tuple[str, dict]] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: sent.append((r.url.removeprefix(server), r.post_data_json))
            if r.method == "POST" else None)
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")
    return page, errors, sent


def options(page, select: str) -> list[tuple[str, str]]:
    return page.eval_on_selector_all(f"{select} option", "os => os.map(o => [o.value, o.textContent])")


def translate(page, text: str, source: str, target: str, state: str = "done") -> None:
    page.select_option("#source-lang", source)
    page.select_option("#target-lang", target)
    page.fill("#source", text)
    page.click("#translate")
    page.wait_for_selector(f"#result[data-state={state}]", timeout=60_000)


def shows_the_attention_of(page, server: str, body: dict) -> None:
    """The attention view holds the document the API gives for ``body``."""
    doc = httpx.post(server + "/v1/attention", json=body, timeout=60).json()
    frame = page.query_selector("#attention-frame").content_frame()
    frame.wait_for_selector("body[data-ready=true]")
    assert doc["source"] in frame.inner_text("#sentence-text")
    assert doc["translation"] in frame.inner_text("#sentence-text")
    assert page.is_visible("#attention-frame") and page.is_hidden("#attention-note")


def test_the_page_embeds_every_pair(pair_translators):
    with TestClient(create_app(list(pair_translators.values()), LIMITS)) as client:
        response = client.get("/")
        listed = client.get("/v1/models").json()["pairs"]
    data = embedded_languages(response.text)
    assert data["pairs"] == listed and len(listed) == 4
    assert {"source": "fr", "target": "de", "via": "en"} in data["pairs"]
    assert data["sources"] == ["fr", "en", "de"]
    assert data["names"] == {"fr": "French", "en": "English", "de": "German"}
    assert (data["source"], data["target"]) == ("fr", "en")  # the first model's pair, as a request naming none
    assert "fr \u2192 en" in response.text
    # The policy still allows exactly the page's own code: the data block is not code.
    main_script = re.findall(r"<script>(.*?)</script>", response.text, re.DOTALL)
    assert len(main_script) == 1 and sha256_source(main_script[0]) in response.headers["content-security-policy"]
    assert response.headers["content-security-policy"] == page_csp(response.text)


def test_one_model_embeds_no_languages():
    assert embedded_languages(index_html(src_lang="fr", tgt_lang="en")) is None


def test_languages_from_run_configs_are_escaped():
    nasty = "</script><script>alert(1)</script>"
    page = index_html(pairs=[(nasty, "en", None), ("en", "__MAX_CHARS__", None), (nasty, "__MAX_CHARS__", "en")])
    assert "<script>alert" not in page and "</script><script>" not in page
    data = embedded_languages(page)
    assert data["sources"] == [nasty, "en"] and data["names"]["__MAX_CHARS__"] == "__MAX_CHARS__"
    assert html.escape(nasty) in page  # the heading names the first pair, escaped
    assert page.count("<script") == 5  # four data blocks and the page's code, nothing added


def test_translate_through_english_and_directly(browser, server):
    page, errors, sent = open_page(browser, server)
    assert page.is_visible("#language-pickers")
    assert options(page, "#source-lang") == [["auto", "Detect language"], ["fr", "French"], ["en", "English"],
                                             ["de", "German"]]
    assert page.input_value("#source-lang") == "fr" and page.input_value("#target-lang") == "en"
    assert options(page, "#target-lang") == [["en", "English"], ["de", "German (through English)"]]
    page.select_option("#source-lang", "de")
    assert options(page, "#target-lang") == [["en", "English"]]

    translate(page, FRENCH, "fr", "de")
    assert "French \u2192 German (through English)" in page.inner_text("h1")
    api = httpx.post(server + "/v1/translate", json={"text": FRENCH, "source": "fr", "target": "de"},
                     timeout=60).json()["translations"][0]
    assert page.eval_on_selector("#translation", "e => e.textContent") == api["translation"]
    assert page.eval_on_selector("#source-view", "e => e.textContent") == FRENCH
    assert sent == [("/v1/translate", {"text": FRENCH, "source": "fr", "target": "de"})]  # no attention asked
    assert page.is_visible("#pivot-note") and "Translated through English" in page.inner_text("#pivot-summary")
    page.click("#pivot-summary")
    assert page.inner_text("#pivot-text") == api["via"]["translation"]
    assert "No attention view" in page.inner_text("#attention-note")
    assert page.is_hidden("#attention-frame") and page.is_hidden("#sentence-picker")
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "serve_page_pivot.png"), full_page=True)
    page.click("#translation")  # nothing to pick: no request
    assert len(sent) == 1 and page.is_hidden("#error")

    sent.clear()
    translate(page, FRENCH, "fr", "en")  # a model of its own: its attention, as before
    page.wait_for_selector("#result[data-state=done][data-sentence='0']", timeout=60_000)
    want = {"text": FRENCH, "source": "fr", "target": "en"}
    assert sent == [("/v1/translate", want), ("/v1/attention", {"text": FRENCH, "sentence": 0, "source": "fr",
                                                                  "target": "en"})]
    assert page.eval_on_selector("#translation", "e => e.textContent") == httpx.post(
        server + "/v1/translate", json=want, timeout=60).json()["translations"][0]["translation"]
    assert page.is_hidden("#pivot-note") and page.is_hidden("#attention-note")
    shows_the_attention_of(page, server, {"text": FRENCH, "sentence": 0, "source": "fr", "target": "en"})

    page.click("#glossary-box summary")  # a glossary through the pivot: the server's message
    page.fill("#glossary", "chat = Katze")
    translate(page, FRENCH, "fr", "de", state="error")
    assert "a glossary cannot be used for fr -> de" in page.inner_text("#error")
    assert errors == []
    page.close()


def test_detect_the_source_language(browser, server):
    page, errors, sent = open_page(browser, server)
    translate(page, GERMAN, "auto", "en")
    page.wait_for_selector("#result[data-state=done][data-sentence='0']", timeout=60_000)
    api = httpx.post(server + "/v1/translate", json={"text": GERMAN, "source": "auto", "target": "en"},
                     timeout=60).json()["translations"][0]
    assert api["detected_language"]["language"] == "de"
    assert page.inner_text("#detected") == f"Detected: German ({round(api['detected_language']['confidence'] * 100)}%)"
    assert page.eval_on_selector("#translation", "e => e.textContent") == api["translation"]
    # the attention of the model that translated it: the detected language is sent
    assert sent[1] == ("/v1/attention", {"text": GERMAN, "sentence": 0, "source": "de", "target": "en"})
    shows_the_attention_of(page, server, {"text": GERMAN, "sentence": 0, "source": "de", "target": "en"})
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "serve_page_detected.png"))

    sent.clear()
    translate(page, GERMAN, "auto", "de")  # already German: given back, nothing to draw
    assert "already in German" in page.inner_text("#detected")
    assert page.eval_on_selector("#translation", "e => e.textContent") == GERMAN
    assert [url for url, _ in sent] == ["/v1/translate"] and page.is_hidden("#attention-frame")
    assert errors == []
    page.close()

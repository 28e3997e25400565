"""The server's web page in a real headless Chromium (Playwright) against a live uvicorn server.

Type a sentence, press Translate, wait for the translation, then switch the attention kind, layer
and heads in the embedded attention view and check that the lines drawn are the weights the API
returns for that very translation. Paste paragraphs: the translation keeps their structure, each
sentence (source and translation) is a span cut at the API's code point offsets, and picking a
sentence (click on either side, the list, the keyboard) shows that sentence's attention. Skipped without Playwright or Chromium, unless CI is set (then
the test fails), like tests/test_visualize_browser.py.
"""

from __future__ import annotations

import httpx
import pytest
from browser_helpers import ARTIFACTS
from serve_helpers import live_server

from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.translator import Translator
from transformer.visualize.data import TokenAxis

SENTENCE = "je suis étudiant"


@pytest.fixture(scope="module")
def server(tiny_run):
    translator = Translator.from_run_dir(tiny_run())
    with live_server(create_app(translator, ServeLimits(), src_lang="fr", tgt_lang="en")) as url:
        yield url


def lines_drawn(frame) -> dict[tuple, float]:
    """{(kind, layer, head, row, col): stroke-opacity} of the lines in the attention view."""
    rows = frame.eval_on_selector_all(
        "#attention-svg line.attn-line",
        "els => els.map(e => [e.dataset.kind, +e.dataset.layer, +e.dataset.head, +e.dataset.row, +e.dataset.col,"
        " +e.getAttribute('stroke-opacity')])")
    drawn = {tuple(r[:5]): r[5] for r in rows}
    assert len(drawn) == len(rows)  # no line drawn twice
    return drawn


def lines_expected(doc: dict, kind: str, layer: int, heads: list[int], min_weight: float = 0.01) -> dict[tuple, float]:
    """The same map computed from the API's attention document."""
    scale = doc["weight_scale"]
    return {(kind, layer, h, i, j): value / scale
            for h in heads for i, row in enumerate(doc["kinds"][kind]["weights"][layer][h])
            for j, value in enumerate(row) if value / scale >= min_weight}


def test_type_translate_and_explore_the_attention(browser, server):
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")
    assert "fr \u2192 en" in page.inner_text("h1")

    page.fill("#source", SENTENCE)
    page.click("#translate")
    page.wait_for_selector("#result[data-state=done]", timeout=60_000)
    shown = page.inner_text("#translation")
    api = httpx.post(server + "/v1/translate", json={"text": SENTENCE}, timeout=60).json()
    assert shown == api["translations"][0]["translation"] and shown
    doc = httpx.post(server + "/v1/attention", json={"text": SENTENCE}, timeout=60).json()
    assert doc["translation"] == shown

    frame = page.query_selector("#attention-frame").content_frame()
    frame.wait_for_selector("body[data-ready=true]")
    assert SENTENCE in frame.inner_text("#sentence-text") and shown in frame.inner_text("#sentence-text")
    last = doc["model"]["layers"]["decoder"] - 1  # the view opens on encoder-decoder attention, the last layer
    assert frame.input_value("#kind-select") == "cross"
    assert lines_drawn(frame) == pytest.approx(lines_expected(doc, "cross", last, [0, 1, 2, 3]))

    frame.select_option("#kind-select", "encoder")
    assert lines_drawn(frame) == pytest.approx(lines_expected(doc, "encoder", last, [0, 1, 2, 3]))
    frame.select_option("#kind-select", "cross")
    frame.select_option("#layer-select", "0")
    frame.dblclick(".head-toggle[data-head='2']")  # only head 2
    got = lines_drawn(frame)
    assert {key[:3] for key in got} == {("cross", 0, 2)}
    assert got == pytest.approx(lines_expected(doc, "cross", 0, [2]))
    assert frame.get_attribute("#status", "data-lines") == str(len(got))
    labels = TokenAxis.from_dict(doc["tokens"]["target_output"]).labels
    assert frame.locator("#attention-svg text.token-row").all_text_contents() == labels
    assert frame.locator("#attention-svg text.token-col").all_text_contents() == \
        TokenAxis.from_dict(doc["tokens"]["source"]).labels

    frame.click(".head-toggle[data-head='0']")  # heads 0 and 2
    assert frame.get_attribute(".head-toggle[data-head='0']", "aria-pressed") == "true"
    assert lines_drawn(frame) == pytest.approx(lines_expected(doc, "cross", 0, [0, 2]))
    frame.select_option("#layer-select", "1")
    assert lines_drawn(frame) == pytest.approx(lines_expected(doc, "cross", 1, [0, 2]))
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "serve_page.png"), full_page=True)

    page.fill("#source", "   ")  # the server's message is shown, the page keeps working
    page.click("#translate")
    page.wait_for_selector("#result[data-state=error]")
    assert "whitespace" in page.inner_text("#error") and page.inner_text("#translation") == ""
    page.fill("#source", "le chat")
    page.click("#translate")
    page.wait_for_selector("#result[data-state=done]", timeout=60_000)
    assert page.inner_text("#translation") == httpx.post(
        server + "/v1/translate", json={"text": "le chat"}, timeout=60).json()["translations"][0]["translation"]

    assert errors == []
    assert all(u.startswith((server + "/", "about:", "data:")) for u in requests), requests
    page.close()


# Two paragraphs, a line break inside the first, and an emoji (two UTF-16 units, one code point)
# before the sentences whose spans the page must still cut right.
PARAGRAPHS = "Je suis étudiant. Le chat 🍎 noir dort sur la table.\nIl pleut.\n\nNous mangeons du pain. Elle lit."


def test_paste_a_paragraph_and_pick_a_sentence(browser, server):
    page = browser.new_page(viewport={"width": 1280, "height": 1300})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")

    page.fill("#source", PARAGRAPHS)
    page.click("#translate")
    page.wait_for_selector("#result[data-state=done][data-sentence='0']", timeout=60_000)
    api = httpx.post(server + "/v1/translate", json={"text": PARAGRAPHS}, timeout=60).json()["translations"][0]
    sentences = api["sentences"]
    assert len(sentences) == 5
    # the translation in the text's structure, each sentence a span cut at the API's code point offsets
    assert page.eval_on_selector("#translation", "e => e.textContent") == api["translation"]
    assert page.locator("#translation .sentence").all_text_contents() == \
        [api["translation"][slice(*s["target_span"])] for s in sentences]
    assert page.locator("#source-view .sentence").all_text_contents() == \
        [PARAGRAPHS[slice(*s["source_span"])] for s in sentences]
    assert page.eval_on_selector("#source-view", "e => e.textContent") == PARAGRAPHS
    assert page.locator("#sentence-select option").count() == 5

    def shown_attention(index: int) -> None:
        """The attention view holds sentence ``index``'s document, drawn as the API gives it."""
        doc = httpx.post(server + "/v1/attention", json={"text": PARAGRAPHS, "sentence": index}, timeout=60).json()
        assert doc["source"] == PARAGRAPHS[slice(*sentences[index]["source_span"])]
        assert page.locator(".sentence.picked").all_text_contents() == \
            [doc["source"], api["translation"][slice(*sentences[index]["target_span"])]]
        assert page.input_value("#sentence-select") == str(index)
        frame = page.query_selector("#attention-frame").content_frame()
        frame.wait_for_selector("body[data-ready=true]")
        assert doc["source"] in frame.inner_text("#sentence-text")
        assert doc["translation"] in frame.inner_text("#sentence-text")
        last = doc["model"]["layers"]["decoder"] - 1
        assert lines_drawn(frame) == pytest.approx(lines_expected(doc, "cross", last, [0, 1, 2, 3]))

    shown_attention(0)
    page.click("#translation .sentence[data-index='3']")  # a click on the translation
    page.wait_for_selector("#result[data-state=done][data-sentence='3']", timeout=60_000)
    shown_attention(3)
    page.click("#source-view .sentence[data-index='1']")  # on the source (after the emoji)
    page.wait_for_selector("#result[data-state=done][data-sentence='1']", timeout=60_000)
    shown_attention(1)
    page.select_option("#sentence-select", "4")  # the list
    page.wait_for_selector("#result[data-state=done][data-sentence='4']", timeout=60_000)
    shown_attention(4)
    page.focus("#translation .sentence[data-index='2']")  # the keyboard
    page.keyboard.press("Enter")
    page.wait_for_selector("#result[data-state=done][data-sentence='2']", timeout=60_000)
    shown_attention(2)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "serve_page_paragraphs.png"), full_page=True)

    page.fill("#source", "Le chat. " * 300)  # too many sentences: the server's message, no stale result
    page.click("#translate")
    page.wait_for_selector("#result[data-state=error]")
    assert "at most 256 are translated per request" in page.inner_text("#error")
    assert page.locator(".sentence").count() == 0 and page.is_hidden("#attention-frame")
    assert errors == []
    page.close()


def test_the_glossary_box(browser, server):
    """Terms typed in the glossary box go with the translation and the attention requests; a line
    that is not a term is refused naming it, before anything is sent."""
    page = browser.new_page(viewport={"width": 1280, "height": 1100})
    errors: list[str] = []
    sent: list[tuple[str, dict]] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: sent.append((r.url, r.post_data_json)) if r.method == "POST" else None)
    page.goto(server + "/")
    page.wait_for_selector("body[data-ready=true]")
    text = "Je suis étudiant. Le chat noir dort."
    terms = [{"source": "chat", "target": "cat"}, {"source": "étudiant", "target": "student"}]

    page.click("#glossary-box summary")
    page.fill("#glossary", "chat = cat\n# a comment\n\n  étudiant\tstudent  \n")
    page.fill("#source", text)
    page.click("#translate")
    page.wait_for_selector("#result[data-state=done][data-sentence='0']", timeout=60_000)
    api = httpx.post(server + "/v1/translate", json={"text": text, "glossary": terms}, timeout=60).json()
    assert page.eval_on_selector("#translation", "e => e.textContent") == api["translations"][0]["translation"]
    assert sent[0] == (server + "/v1/translate", {"text": text, "glossary": terms})
    assert sent[1] == (server + "/v1/attention", {"text": text, "sentence": 0, "glossary": terms})
    assert page.is_hidden("#missing-terms")  # every term placed

    sent.clear()
    page.fill("#glossary", "chat = cat\nétudiant student")  # no separator on line 2
    page.click("#translate")
    page.wait_for_selector("#result[data-state=error]")
    assert "glossary line 2: write source = target" in page.inner_text("#error") and sent == []

    page.fill("#glossary", "")  # an empty box: the request as without a glossary
    page.click("#translate")
    page.wait_for_selector("#result[data-state=done]", timeout=60_000)
    assert sent[0] == (server + "/v1/translate", {"text": text})
    assert errors == []
    page.close()

"""Confidence on the server: ``"confidence": true`` on ``/v1/translate`` gives each sentence the
confidence of its best translation (and each text the lowest of its sentences') where the served
run is calibrated; ``/v1/model`` says whether it is and the page's threshold; the web page shows
the confidences and marks the sentences below ``--confidence-threshold``.

In-process (TestClient) against the small random model of the tiny_run fixture, with a calibration
written for it here (no fitting), compared with the library
(``translate_n_best(..., confidence=True)``, ``translate_document(..., confidence=True)``) on the
same model; the page in headless Chromium as in test_serve_browser.py.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient
from browser_helpers import ARTIFACTS
from serve_helpers import assert_error, live_server

from transformer.cli import main
from transformer.run.layout import WEIGHTS_FILE
from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.serve.page import index_html
from transformer.translate.calibration import Calibration, file_sha256
from transformer.translate.document import translate_document
from transformer.translate.pipeline import fitting_spans
from transformer.translate.segment import segment_text
from transformer.translate.translator import TranslationWarning, Translator

TEXT = "Je suis étudiant. Le chat noir dort.\n\nNous mangeons."
SENTENCES = ["Je suis étudiant.", "Le chat noir dort.", "Nous mangeons."]
OTHER = "le chat dort sur la table"
LIMITS = dict(max_chars=600, max_texts=4, max_output_tokens=20, max_body_bytes=4096)
LENGTH = 12  # output tokens per sentence in the requests here
# A sentence of about 100 tokens, with commas to cut at: over LIMIT it is translated in pieces.
LONG = ("Le chat noir, le chien blanc et la souris grise, les deux oiseaux du jardin, la vieille dame du "
        "troisième étage, le facteur et son vélo rouge, tous dorment sur la grande table.")
LIMIT = 40


def calibrate(run_dir: Path, sentences: list[str], **decoding) -> Translator:
    """Write a calibration for the run (the default features, no fitting) centred on the mean
    log-probability of ``sentences``' translations, so that their confidences spread over (0, 1);
    returns the run's translator, which loads it."""
    plain = Translator.from_run_dir(run_dir).with_decoding(**decoding)
    values = [hyps[0].log_prob / (len(hyps[0].tokens) + 1) for hyps in plain.translate_n_best(sentences)]
    Calibration(("mean_log_prob", "coverage_penalty"), (float(np.mean(values)), -1.0),
                (float(np.std(values)) or 1.0, 1.0), (2.0, 0.5), 0.0,
                model_sha256=file_sha256(run_dir / WEIGHTS_FILE)).save(run_dir)
    translator = Translator.from_run_dir(run_dir)
    assert translator.calibration is not None
    return translator


@pytest.fixture(scope="module")
def run_dir(tiny_run) -> Path:
    return tiny_run()


@pytest.fixture(scope="module")
def translator(run_dir) -> Translator:
    return calibrate(run_dir, SENTENCES + [OTHER], max_len_a=0.0, max_len_b=LENGTH)


@pytest.fixture(scope="module")
def client(translator):
    with TestClient(create_app(translator, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en")) as c:
        yield c


@pytest.fixture(scope="module")
def uncalibrated(run_dir, translator):
    """The same model served without its calibration."""
    plain = Translator.from_run_dir(run_dir, calibration=None)
    with TestClient(create_app(plain, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en")) as c:
        yield c


def library(translator: Translator, sentences: list[str], **changes) -> list[float]:
    """The confidence of each sentence's best translation, as the library gives it, to 4 decimals."""
    chosen = translator.with_decoding(**{"max_len_a": 0.0, "max_len_b": LENGTH, **changes})
    return [round(hyps[0].confidence, 4) for hyps in chosen.translate_n_best(sentences, confidence=True)]


def confidences(translation: dict) -> list[float | None]:
    return [s.get("confidence") for s in translation["sentences"]]


def without_timing(body: dict) -> dict:
    return {key: value for key, value in body.items() if key != "timing"}


# --------------------------------------------------------------------------------------------- /v1/translate
def test_each_sentence_gets_the_confidence_the_library_gives(client, translator):
    response = client.post("/v1/translate", json={"text": [TEXT, OTHER], "max_length": LENGTH, "confidence": True})
    assert response.status_code == 200, response.text
    paragraphs, one = response.json()["translations"]
    want = library(translator, SENTENCES + [OTHER])
    assert confidences(paragraphs) + confidences(one) == want
    assert all(0.0 <= value <= 1.0 for value in want) and len(set(want)) > 2  # numbers, not one constant
    assert paragraphs["confidence"] == min(want[:3]) and one["confidence"] == want[3]


def test_it_is_the_best_translations_whatever_else_is_asked(client, translator):
    want = library(translator, SENTENCES)
    for extra in ({"n_best": 3}, {"alternatives": 2}, {"n_best": 2, "alternatives": 3}):
        got = client.post("/v1/translate", json={"text": TEXT, "max_length": LENGTH, "confidence": True, **extra})
        assert confidences(got.json()["translations"][0]) == want, extra
        assert all("confidence" not in h for h in got.json()["translations"][0]["sentences"][0]["n_best"])
    greedy = client.post("/v1/translate", json={"text": TEXT, "max_length": LENGTH, "confidence": True,
                                                "beam_size": 1}).json()["translations"][0]
    assert confidences(greedy) == library(translator, SENTENCES, strategy="greedy", n_best=1)
    page = client.post("/v1/translate", json={"text": "<p>Le <b>chat</b> noir dort.</p><p>Nous mangeons.</p>",
                                              "format": "html", "max_length": LENGTH, "confidence": True})
    assert page.status_code == 200, page.text
    assert confidences(page.json()["translations"][0]) == want[1:]
    empty = client.post("/v1/translate", json={"text": "<p>42</p>", "format": "html", "confidence": True})
    assert "confidence" not in empty.json()["translations"][0]  # a page without text has no sentence


def test_a_sentence_in_pieces_gets_the_lowest_of_its_pieces(translator):
    text = "Il pleut. " + LONG
    pieces = [LONG[a:b] for a, b in fitting_spans(LONG, lambda piece: len(translator.vocab.src.encode(piece)), LIMIT)]
    with TestClient(create_app(translator, ServeLimits(**{**LIMITS, "max_input_tokens": LIMIT}))) as c:
        got = c.post("/v1/translate", json={"text": text, "max_length": 6, "confidence": True}).json()
    got = got["translations"][0]
    assert [s["pieces"] for s in got["sentences"]] == [1, len(pieces)] and len(pieces) >= 3
    limited = translator.with_decoding(max_len_a=0.0, max_len_b=6)
    limited.max_input_tokens = LIMIT
    per_piece = [round(hyps[0].confidence, 4) for hyps in limited.translate_n_best(pieces, confidence=True)]
    assert len(set(per_piece)) == len(pieces)  # the lowest is one of different numbers
    assert got["sentences"][1]["confidence"] == min(per_piece) and got["confidence"] == min(confidences(got))
    with pytest.warns(TranslationWarning, match="pieces"):
        want = translate_document(limited, text, confidence=True)  # the library's document
    assert confidences(got) == [round(a.confidence, 4) for a in want.sentences]


def test_a_translation_that_fills_the_position_table_gets_its_confidence(client, translator):
    """A translation cut at the end of the learned position table (64 here; the random model never
    ends a sentence) gets the confidence the library gives it, beside the request's others."""
    got = client.post("/v1/translate", json={"text": f"{OTHER}. Il pleut.", "confidence": True}).json()
    first, second = got["translations"][0]["sentences"]
    assert len(translator.vocab.tgt.encode(first["n_best"][0]["translation"])) >= 60
    assert first["confidence"] == library(translator, [f"{OTHER}."], max_len_a=1.0, max_len_b=50)[0]
    assert second["confidence"] == library(translator, ["Il pleut."], max_len_a=1.0, max_len_b=50)[0]
    assert got["translations"][0]["confidence"] == min(first["confidence"], second["confidence"])


def test_answers_without_confidence_are_as_before(client, uncalibrated):
    for extra in ({}, {"n_best": 2, "alternatives": 2}, {"format": "html", "text": "<p>Le chat dort.</p>"}):
        body = {"text": [TEXT, OTHER], "max_length": LENGTH, **extra}
        plain = uncalibrated.post("/v1/translate", json=body)
        assert "confidence" not in plain.text
        # an uncalibrated server answers a request asking for confidence as one that does not ask
        asked = uncalibrated.post("/v1/translate", json={**body, "confidence": True})
        assert without_timing(asked.json()) == without_timing(plain.json())
        # a calibrated server answers one that does not ask as it did before (the same model here)
        for answer in (client.post("/v1/translate", json=body), client.post("/v1/translate",
                                                                            json={**body, "confidence": False})):
            assert without_timing(answer.json()) == without_timing(plain.json())


@pytest.mark.parametrize("value", ["true", 1, None, [True]])
def test_a_confidence_that_is_not_a_boolean_is_422(client, value):
    assert_error(client.post("/v1/translate", json={"text": TEXT, "confidence": value}), 422, "invalid_request",
                 "confidence", "valid boolean")


def test_requests_asking_for_confidence_share_model_calls_with_each_other(translator, run_dir):
    asked = {"text": "le chat dort", "max_length": 4, "confidence": True}
    plain = {"text": "le chat dort", "max_length": 4}

    def batch_sizes(model: Translator, bodies: list[dict]) -> list[int]:
        # Room for the three in one call: alike, they start it as soon as they are in; kept apart,
        # they wait 3 s (a slow machine's stall included) for a third text like the first one's.
        app = create_app(model, ServeLimits(batch_wait_ms=3000, max_batch_size=3))

        async def concurrently():
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
                responses = await asyncio.gather(*(c.post("/v1/translate", json=b) for b in bodies))
            await app.state.batcher.close()
            return [r.json()["timing"]["batch_size"] for r in responses]

        return asyncio.run(concurrently())

    assert batch_sizes(translator, [asked, asked, plain]) == [2, 2, 1]
    # without a calibration nothing is computed: the requests are alike
    assert batch_sizes(Translator.from_run_dir(run_dir, calibration=None), [asked, asked, plain]) == [3, 3, 3]


# --------------------------------------------------------------------------------------------- /v1/model, options
def test_the_model_info_says_whether_it_is_calibrated(client, uncalibrated, translator):
    assert client.get("/v1/model").json()["confidence"] == {"calibrated": True, "threshold": 0.5, "chrf": 50.0}
    assert uncalibrated.get("/v1/model").json()["confidence"] == {"calibrated": False, "threshold": 0.5,
                                                                  "chrf": None}
    with TestClient(create_app(translator, ServeLimits(confidence_threshold=0.25))) as c:
        info = c.get("/v1/model").json()
        assert info["confidence"]["threshold"] == 0.25 and info["limits"]["confidence_threshold"] == 0.25
        assert '"threshold":0.25' in c.get("/").text


def test_the_threshold_is_a_probability(run_dir, capsys):
    for bad in (-0.1, 1.5, float("nan")):
        with pytest.raises(ValueError, match="confidence_threshold must be"):
            ServeLimits(confidence_threshold=bad)
    assert ServeLimits(confidence_threshold=0).confidence_threshold == 0
    assert main(["serve", str(run_dir), "--confidence-threshold", "2"]) == 2
    assert "confidence_threshold must be in [0, 1], got 2.0" in capsys.readouterr().err


def test_the_page_asks_for_confidence_only_from_a_calibrated_model(client, uncalibrated):
    assert '<script type="application/json" id="confidence-settings">{"threshold":0.5}</script>' in client.get("/").text
    assert '<script type="application/json" id="confidence-settings">null</script>' in uncalibrated.get("/").text
    page = index_html(confidence_threshold=0.3)
    for hook in ('id="confidence-note"', ".sentence.doubtful", "if (CONFIDENCE) request.confidence = true",
                 "check this sentence"):
        assert hook in page


# --------------------------------------------------------------------------------------------- the page
PARAGRAPHS = "Je suis étudiant. Le chat noir dort sur la table.\nIl pleut.\n\nNous mangeons du pain. Elle lit."


def test_the_page_shows_confidences_and_marks_those_below_the_threshold(browser, tmp_path, tiny_run):
    sentences = [s.text for s in segment_text(PARAGRAPHS, "fr").segments]
    short = {"max_len_a": 0.0, "max_len_b": LENGTH}  # the server's default decoding here
    translator = calibrate(tiny_run(tmp_path / "run"), sentences, **short).with_decoding(**short)
    values = sorted(round(hyps[0].confidence, 4) for hyps in translator.translate_n_best(sentences, confidence=True))
    assert len(set(values)) == len(values) == 5
    threshold = round((values[1] + values[2]) / 2, 4)  # two sentences below it, three above
    app = create_app(translator, ServeLimits(confidence_threshold=threshold), src_lang="fr", tgt_lang="en")
    with live_server(app) as server:
        page = browser.new_page(viewport={"width": 1280, "height": 1100})
        errors: list[str] = []
        sent: list[dict] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.on("request", lambda r: sent.append(r.post_data_json) if r.url.endswith("/v1/translate") else None)
        page.goto(server + "/")
        page.wait_for_selector("body[data-ready=true]")
        page.fill("#source", PARAGRAPHS)
        page.click("#translate")
        page.wait_for_selector("#result[data-state=done][data-sentence='0']", timeout=60_000)
        assert sent == [{"text": PARAGRAPHS, "confidence": True}]
        api = httpx.post(server + "/v1/translate", json=sent[0], timeout=60).json()["translations"][0]
        want = confidences(api)
        assert sorted(want) == values
        low = [i for i, value in enumerate(want) if value < threshold]
        assert len(low) == 2

        for side in ("#translation", "#source-view"):
            spans = page.locator(f"{side} .sentence")
            assert [float(v) for v in spans.evaluate_all("els => els.map(e => e.dataset.confidence)")] == want
            assert spans.evaluate_all("els => els.map(e => e.classList.contains('doubtful'))") == \
                [i in low for i in range(5)]
            styles = spans.evaluate_all("els => els.map(e => getComputedStyle(e).textDecorationStyle)")
            assert [style == "dotted" for style in styles] == [i in low for i in range(5)]
        titles = page.locator("#translation .sentence").evaluate_all("els => els.map(e => e.title)")
        for i, title in enumerate(titles):
            assert f"confidence {want[i]}" in title and ("check this sentence" in title) == (i in low), title
        options = page.locator("#sentence-select option").all_text_contents()
        assert [("check this sentence" in o) for o in options] == [i in low for i in range(5)]
        note = page.inner_text("#confidence-note")
        assert note == (f"Confidence below {threshold:g} for sentences {low[0] + 1}, {low[1] + 1} (dotted underline): "
                        "check these sentences.")
        page.hover(f"#translation .sentence[data-index='{low[0]}']")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "serve_page_confidence.png"), full_page=True)

        page.fill("#source", "   ")  # an error clears the note with the rest
        page.click("#translate")
        page.wait_for_selector("#result[data-state=error]")
        assert page.is_hidden("#confidence-note")
        assert errors == []
        page.close()

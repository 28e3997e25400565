"""The requests LibreTranslate's web page sends, replayed in headless Chromium from a page on
another origin than the server's (so every answer must pass the browser's CORS checks).

``tests/data/libretranslate_replay.html`` sends what ``app.js.template`` of LibreTranslate 1.9.6
sends, the same way (XMLHttpRequest, FormData): ``GET /frontend/settings`` and ``/languages``,
``POST /translate`` with the page's starting languages (``auto`` into the first model's target),
``format`` (text, then html for markup), ``alternatives=3`` and an empty ``api_key``; ``POST
/suggest``; ``POST /translate_file`` with a file made in the page, then a GET of
``translatedFileUrl``; and besides,
``POST /detect`` and the JSON request the page shows as its code example (which the browser
preflights). The page is served by a small static server on 127.0.0.1 and the API by uvicorn on
another port, over two tiny runs (fr -> en, en -> de). Skipped without Playwright or Chromium,
unless CI is set, like the other browser tests.

The real LibreTranslate page, rendered by the libretranslate package, is driven against the
server by ``benchmarks/libretranslate_frontend.py`` (a slow test below).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import subprocess
import sys
import threading
from pathlib import Path
from urllib.parse import urlencode

import pytest
from clients_helpers import ENGLISH, FRENCH, expected, make_runs
from serve_helpers import live_server

from transformer.serve.app import create_app
from transformer.serve.libretranslate import LibreTranslateOptions
from transformer.serve.limits import ServeLimits
from transformer.serve.libretranslate.suggestions import SuggestionStore
from transformer.translate.alternatives import translate_alternatives
from transformer.translate.files import translate_file
from transformer.translate.html import translate_html
from transformer.translate.translator import Translator

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
PAIRS = [("fr", "en"), ("en", "de")]
SRT = ("1\r\n00:00:01,000 --> 00:00:02,500\r\nLe chat noir dort.\r\n\r\n"
       "2\r\n00:00:03,000 --> 00:00:05,000\r\nNous mangeons du pain.\r\nIl pleut.\r\n\r\n")
pytestmark = pytest.mark.filterwarnings("ignore::transformer.translate.warning.TranslationWarning")


@pytest.fixture(scope="module")
def translators(tmp_path_factory, tiny_run) -> dict[tuple[str, str], Translator]:
    root = tmp_path_factory.mktemp("page-runs")
    runs = make_runs(tiny_run(root / "base"), root, PAIRS)
    return {pair: Translator.from_run_dir(path) for pair, path in runs.items()}


@pytest.fixture(scope="module")
def suggestions_file(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("suggestions") / "suggestions.jsonl"


@pytest.fixture(scope="module")
def server(translators, suggestions_file):
    with SuggestionStore(suggestions_file) as store:
        app = create_app([translators[pair] for pair in PAIRS], ServeLimits(),
                         libretranslate_options=LibreTranslateOptions(suggestions=store))
        with live_server(app) as url:
            yield url


@pytest.fixture(scope="module")
def page_origin():
    """tests/data served on another port of 127.0.0.1: another origin than the server's."""
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(DATA))
    handler.log_message = lambda *args: None
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def replay(browser, server, page_origin) -> dict:
    page = browser.new_page()
    try:
        page.goto(f"{page_origin}/libretranslate_replay.html?" + urlencode({"api": server, "q": FRENCH, "file": SRT}))
        page.wait_for_function("window.replay && window.replay.done", timeout=120_000)
        result = page.evaluate("window.replay")
    finally:
        page.close()
    assert "error" not in result, result.get("error")
    return result["steps"]


def test_settings_and_languages(replay):
    settings = replay["settings"]
    assert settings["status"] == 200
    assert settings["body"]["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                            "target": {"code": "en", "name": "English"}}
    assert settings["body"]["suggestions"] is True and settings["body"]["filesTranslation"] is True
    assert ".srt" in settings["body"]["supportedFilesFormat"]
    assert replay["languages"] == {"status": 200, "body": [
        {"code": "fr", "name": "French", "targets": ["en", "de"]},
        {"code": "en", "name": "English", "targets": ["de"]},
        {"code": "de", "name": "German", "targets": []}]}


def test_translate_as_the_page_sends_it(replay, translators):
    answer = replay["translate"]
    assert answer["status"] == 200, answer
    body = answer["body"]
    assert body["translatedText"] == expected(translators, "fr", "en", FRENCH)
    assert body["detectedLanguage"]["language"] == "fr" and 0 < body["detectedLanguage"]["confidence"] <= 100
    want = translate_alternatives(translators["fr", "en"], [FRENCH], 4)[0]  # the server's beam of 4
    assert [body["translatedText"], *body["alternatives"]] == want and 1 <= len(body["alternatives"]) <= 3
    assert replay["example"] == answer  # the JSON request answers the same


def test_translate_markup_as_html(replay, translators):
    answer = replay["translateHtml"]
    assert answer["status"] == 200, answer
    page = f"<p>{FRENCH} <b>Il pleut.</b></p>"
    got = answer["body"]["translatedText"]
    assert got == translate_html(page, translators["fr", "en"].translate, lang="fr")
    assert got.startswith("<p>") and got.count("<b>") == 1 and got.endswith("</b></p>")
    assert answer["body"]["detectedLanguage"]["language"] == "fr"


def test_detect(replay):
    assert replay["detect"]["status"] == 200
    found = replay["detect"]["body"]
    assert found[0]["language"] == "fr" and {d["language"] for d in found} <= {"fr", "en", "de"}


def stored_suggestions(path: Path) -> list[tuple[str, str, str]]:
    return [(s["s"], s["source"], s["target"]) for s in map(json.loads, path.read_text(encoding="utf-8").splitlines())
            if s["q"] == FRENCH]


def test_suggest_is_stored(replay, suggestions_file):
    assert replay["suggest"] == {"status": 200, "body": {"success": True}}
    assert ("The black cat sleeps.", "fr", "en") in stored_suggestions(suggestions_file)


def test_suggest_with_the_pages_default_source_auto_is_stored(replay, suggestions_file):
    """LibreTranslate's page sends its source as shown: ``auto`` in its default state (Auto Detect)."""
    assert replay["suggestAuto"] == {"status": 200, "body": {"success": True}}
    assert ("The black cat sleeps.", "auto", "en") in stored_suggestions(suggestions_file)


def test_translate_file_and_download_it(replay, server, translators):
    answer = replay["translateFile"]
    assert answer["status"] == 200, answer
    url = answer["body"]["translatedFileUrl"]
    assert url.startswith(server + "/download_file/") and url.endswith("subtitles_en.srt")
    download = replay["download"]
    assert download["status"] == 200
    want = translate_file(SRT.encode(), "subtitles.srt", translators["fr", "en"], target_lang="en").decode()
    assert download["body"] == want  # the source was detected (auto): French


def test_routes_outside_libretranslates_api_are_refused_by_the_browser(replay):
    """The replay can see a missing CORS header: ``/health`` has none, and the request fails."""
    assert replay["health"] == {"networkError": True}


def test_text_already_in_the_target_language(browser, server, page_origin):
    """An English text with source auto into English comes back as it is, detected as English."""
    page = browser.new_page()
    try:
        page.goto(f"{page_origin}/libretranslate_replay.html?" + urlencode({"api": server, "q": ENGLISH, "file": SRT}))
        page.wait_for_function("window.replay && window.replay.steps.translate", timeout=120_000)
        body = page.evaluate("window.replay.steps.translate.body")
    finally:
        page.close()
    assert body["translatedText"] == ENGLISH and body["detectedLanguage"]["language"] == "en"
    assert body["alternatives"] == []


@pytest.mark.slow
def test_the_real_libretranslate_page_in_front_of_the_server(tmp_path, tiny_run):
    """benchmarks/libretranslate_frontend.py: the libretranslate package's own page (its virtual
    environment made when missing), driven in Chromium against ``transformer serve``."""
    runs = make_runs(tiny_run(tmp_path / "runs" / "base"), tmp_path / "runs", PAIRS)
    report = tmp_path / "report.json"
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "libretranslate_frontend.py"),
                           *map(str, runs.values()), "--json", str(report)],
                          capture_output=True, text=True, timeout=1800, env=dict(os.environ, OMP_NUM_THREADS="1"))
    if done.returncode == 3:
        pytest.skip(f"LibreTranslate's virtual environment cannot be made: {done.stderr.strip()[-300:]}")
    checks = json.loads(report.read_text(encoding="utf-8"))["checks"]
    assert len(checks) == 8 and all(c["ok"] for c in checks), done.stdout

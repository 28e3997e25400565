"""The rest of LibreTranslate's API on ``transformer serve``: files, API keys and limits,
``/suggest``, ``/frontend/settings``, ``/spec``, its error shape (404 included) and CORS.

A translated file must equal what :func:`transformer.translate.files.translate_file` gives with
the same model through the Python API (the server's own pipeline, fed through its batcher, is
checked against it), and everything else against LibreTranslate's answers as its clients read them.
"""

from __future__ import annotations

import json

import pytest
from cli_helpers import run_cli
from fastapi.testclient import TestClient

from transformer.serve.access import AccessPolicy, KeyLimits, KeyRing
from transformer.serve.app import create_app
from transformer.serve.libretranslate import LibreTranslateOptions
from transformer.serve.limits import ServeLimits
from transformer.serve.libretranslate.suggestions import SuggestionStore
from transformer.translate.files import translate_file
from transformer.translate.translator import Translator

LIMITS = dict(max_chars=300, max_texts=3, max_sentences=6, max_input_tokens=64, max_output_tokens=20,
              max_body_bytes=4096, max_file_bytes=20_000, max_file_sentences=40, file_ttl_s=60)
SRT = ("1\r\n00:00:01,000 --> 00:00:02,500\r\nLe chat noir dort.\r\n\r\n"
       "2\r\n00:00:03,000 --> 00:00:05,000\r\nNous mangeons du pain.\r\nIl pleut.\r\n\r\n").encode()
TEXT = "Le chat dort. Il pleut.\n\n  Nous mangeons du pain.\n".encode()
HTML = b'<!doctype html><html lang="fr"><body><p>Le <b>chat</b> noir dort.</p><pre>x = 1</pre></body></html>'


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    return Translator.from_run_dir(tiny_run())


def make_client(translator, **options) -> TestClient:
    app = create_app(translator, ServeLimits(**LIMITS), src_lang="fr", tgt_lang="en",
                     libretranslate_options=LibreTranslateOptions(**options))
    return TestClient(app)


@pytest.fixture(scope="module")
def client(translator):
    with make_client(translator) as c:
        yield c


def error(response, status: int, *words: str) -> str:
    assert response.status_code == status, response.text
    body = response.json()
    assert set(body) == {"error"} and isinstance(body["error"], str), body
    for word in words:
        assert word in body["error"], body["error"]
    return body["error"]


def upload(client, name: str, data: bytes, source: str = "fr", target: str = "en", **fields):
    return client.post("/translate_file", data={"source": source, "target": target, **fields},
                       files={"file": (name, data)})


# -- files ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("name, data", [("subtitles.srt", SRT), ("notes.txt", TEXT), ("page.html", HTML)])
def test_a_file_is_translated_as_the_python_api_translates_it(client, translator, name, data):
    response = upload(client, name, data)
    assert response.status_code == 200, response.text
    url = response.json()["translatedFileUrl"]
    assert url.startswith("http://testserver/download_file/") and url.endswith(name.replace(".", "_en."))
    download = client.get(url)
    assert download.status_code == 200
    assert download.content == translate_file(data, name, translator, target_lang="en")
    stem, ext = name.rsplit(".", 1)
    assert f'filename="{stem}_en.{ext}"' in download.headers["content-disposition"]
    assert download.headers["access-control-allow-origin"] == "*"


def test_structure_is_kept_in_the_file(client):
    srt = client.get(upload(client, "a.srt", SRT).json()["translatedFileUrl"]).content.decode()
    assert "00:00:01,000 --> 00:00:02,500\r\n" in srt and "00:00:03,000 --> 00:00:05,000\r\n" in srt
    page = client.get(upload(client, "p.html", HTML).json()["translatedFileUrl"]).content.decode()
    assert page.startswith('<!doctype html><html lang="en"><body><p>') and "<pre>x = 1</pre>" in page
    assert page.count("<b>") == 1 and page.count("</b>") == 1


def test_auto_source_for_a_file(client, translator):
    response = upload(client, "notes.txt", TEXT, source="auto")
    assert response.status_code == 200, response.text
    assert client.get(response.json()["translatedFileUrl"]).content == translate_file(TEXT, "notes.txt", translator,
                                                                                      target_lang="en")


def test_bad_files_are_refused_in_libretranslates_shape(client):
    error(upload(client, "report.exe", b"MZ..."), 400, "file format not supported", ".docx")
    error(upload(client, "report.docx", b"not a zip at all"), 400, "Invalid request", "report.docx")
    error(upload(client, "big.txt", b"a " * 20_000), 413, "larger than the limit")
    many = ("Le chat dort. " * 50).encode()
    error(upload(client, "many.txt", many), 400, "50 sentences", "at most 40")
    error(upload(client, "notes.txt", TEXT, target="de"), 400, "de is not supported as the target language")
    error(client.post("/translate_file", files={"source": (None, "fr"), "target": (None, "en")}), 400,
          "missing file parameter")
    error(client.post("/translate_file", data={"source": "fr", "target": "en"}), 400, "multipart/form-data")
    error(client.post("/translate_file", json={"source": "fr"}), 400, "multipart/form-data")
    error(upload(client, "notes.txt", TEXT, source=""), 400, "missing source parameter")


def test_downloads_expire_and_unknown_names_are_404(translator):
    with make_client(translator) as c:
        store = c.app.state.files
        now = [1000.0]
        store.clock = lambda: now[0]
        url = upload(c, "a.txt", TEXT).json()["translatedFileUrl"]
        assert c.get(url).status_code == 200
        now[0] += LIMITS["file_ttl_s"] + 1
        error(c.get(url), 404, "expired")
        assert len(store) == 0
        error(c.get("/download_file/../../etc/passwd"), 404)
        error(c.get("/download_file/" + "0" * 32 + ".a_en.txt"), 404, "does not exist")


def test_files_can_be_turned_off(translator):
    with make_client(translator, files=False) as c:
        error(upload(c, "a.txt", TEXT), 403, "Files translation are disabled on this server.")
        error(c.get("/download_file/" + "0" * 32 + ".a.txt"), 400, "disabled")
        settings = c.get("/frontend/settings").json()
        assert settings["filesTranslation"] is False and settings["supportedFilesFormat"] == []


# -- keys and limits -----------------------------------------------------------------------------
def test_api_keys_and_limits(translator):
    keys = KeyRing({"good-key-123": KeyLimits(req_limit=50, char_limit=20)},
                   AccessPolicy(req_limit=2, require_key=False))
    with make_client(translator, keys=keys) as c:
        ask = {"q": "Le chat.", "source": "fr", "target": "en"}
        error(c.post("/translate", json={**ask, "api_key": "wrong-key-999"}), 403, "Invalid API key")
        error(c.post("/translate", json={**ask, "q": "x" * 25, "api_key": "good-key-123"}), 400,
              "request (25) exceeds text limit (20)")
        assert c.post("/translate", json={**ask, "api_key": "good-key-123"}).status_code == 200
        assert c.post("/translate", json=ask).status_code == 200  # the address's 2 per minute: the refused key
        limited = c.post("/detect", json={"q": "Le chat."})   # guess above counted as one
        error(limited, 429, "Slowdown: 2 per 1 minute")
        assert int(limited.headers["retry-after"]) >= 1
        assert c.get("/languages").status_code == 200  # exempt, as in LibreTranslate
        settings = c.get("/frontend/settings").json()
        assert settings["apiKeys"] is True and settings["keyRequired"] is False
    required = KeyRing({"good-key-123": KeyLimits()}, AccessPolicy(require_key=True), )
    with make_client(translator, keys=required) as c:
        error(c.post("/translate", json={"q": "Le chat.", "source": "fr", "target": "en"}), 400,
              "Please contact the server operator to get an API key")
        error(upload(c, "a.txt", TEXT), 400, "get an API key")
        assert upload(c, "a.txt", TEXT, api_key="good-key-123").status_code == 200
        assert c.get("/frontend/settings").json()["keyRequired"] is True


# -- suggestions, settings, spec -----------------------------------------------------------------
def test_suggest_off_and_on(translator, tmp_path):
    with make_client(translator) as c:
        error(c.post("/suggest", data={"q": "a", "s": "b", "source": "fr", "target": "en"}), 403,
              "Suggestions are disabled on this server.")
    path = tmp_path / "suggestions.jsonl"
    with SuggestionStore(path) as store, make_client(translator, suggestions=store) as c:
        ok = c.post("/suggest", data={"q": "Le chat.", "s": "The cat.", "source": "fr", "target": "en"})
        assert ok.status_code == 200 and ok.json() == {"success": True}
        error(c.post("/suggest", json={"q": "Le chat.", "source": "fr", "target": "en"}), 400, "missing s parameter")
        assert c.get("/frontend/settings").json()["suggestions"] is True
    [line] = path.read_text(encoding="utf-8").splitlines()
    assert {k: v for k, v in json.loads(line).items() if k != "time"} == {
        "source": "fr", "target": "en", "q": "Le chat.", "s": "The cat."}


def test_frontend_settings_and_spec(client):
    settings = client.get("/frontend/settings").json()
    assert set(settings) == {"charLimit", "frontendTimeout", "apiKeys", "keyRequired", "suggestions",
                             "filesTranslation", "supportedFilesFormat", "language"}
    assert settings["charLimit"] == LIMITS["max_chars"] and settings["frontendTimeout"] == 500
    assert {".docx", ".srt", ".po", ".epub", ".md", ".txt"} <= set(settings["supportedFilesFormat"])
    assert settings["language"] == {"source": {"code": "auto", "name": "Auto Detect"},
                                    "target": {"code": "en", "name": "English"}}
    spec = client.get("/spec").json()
    assert spec["swagger"] == "2.0"
    assert {"/translate", "/detect", "/languages", "/translate_file", "/frontend/settings"} <= set(spec["paths"])


# -- error shape and CORS ------------------------------------------------------------------------
def test_errors_have_libretranslates_shape_outside_the_native_api(client):
    error(client.get("/no/such/route"), 404)
    error(client.get("/translate"), 405)
    native = client.get("/v1/missing")
    assert native.status_code == 404 and native.json()["error"] == "not_found" and "message" in native.json()


def test_cors_on_libretranslates_routes_only(client):
    preflight = client.options("/translate", headers={"Origin": "http://elsewhere.example",
                                                      "Access-Control-Request-Method": "POST"})
    assert preflight.status_code == 204
    assert preflight.headers["access-control-allow-origin"] == "*"
    assert "POST" in preflight.headers["access-control-allow-methods"]
    answer = client.post("/translate", json={"q": "Le chat.", "source": "fr", "target": "en"})
    assert answer.headers["access-control-allow-origin"] == "*"
    assert "access-control-allow-origin" not in client.get("/health").headers


def test_serve_refuses_bad_libretranslate_options(tmp_path):
    """Refused in one line before the port is bound or a model loaded."""
    for extra, words in [(["--require-api-key"], "need --api-keys FILE"),
                         (["--api-keys", str(tmp_path / "missing.txt")], "--api-keys"),
                         (["--req-limit", "0"], "--req-limit must be a positive number or -1")]:
        done = run_cli("serve", tmp_path, "--port", "0", *extra)
        assert done.returncode != 0 and words in done.stderr, (extra, done.stderr)

"""Fuzzing LibreTranslate's routes with their upload forms (Hypothesis): never a 500, never a traceback.

LibreTranslate's routes are not in ``/openapi.json`` (their contract is LibreTranslate's), so the
schema fuzz of test_serve_fuzz.py does not reach them. Here Hypothesis sends, in-process, to the
tiny random model of the tiny_run fixture (decoding cut to a few tokens):

* ``/translate_file``: multipart forms of arbitrary bytes, or a small real file of a supported
  format with some bytes changed, under arbitrary names, with arbitrary source and target codes,
  fields left out or repeated;
* ``/translate``, ``/detect`` and ``/suggest``: urlencoded and multipart forms, JSON bodies of any
  shape, and raw bytes declared as JSON.

Every answer is JSON; a 4xx is LibreTranslate's ``{"error": message}``, a 503 the same shape;
nothing is a 5xx otherwise, and no answer holds a traceback. A translated file can be downloaded.
"""

from __future__ import annotations

import json

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer.serve.app import create_app
from transformer.serve.libretranslate import LibreTranslateOptions
from transformer.serve.limits import ServeLimits
from transformer.serve.libretranslate.suggestions import SuggestionStore
from transformer.translate.translator import Translator

# Damaged files are read with their bad bytes replaced, and say so: expected here.
pytestmark = pytest.mark.filterwarnings("ignore::transformer.translate.warning.TranslationWarning")
FUZZ = settings(max_examples=50, deadline=None, derandomize=True, database=None,
                suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def client(tmp_path_factory, tiny_run):
    directory = tmp_path_factory.mktemp("lt-fuzz")
    # Outputs of at most 6 tokens from a beam of 2: an example costs milliseconds of model time.
    translator = Translator.from_run_dir(tiny_run(directory / "run")).with_decoding(
        beam_size=2, max_len_a=0.0, max_len_b=6)
    limits = ServeLimits(max_chars=200, max_texts=3, max_sentences=8, max_input_tokens=32, max_output_tokens=6,
                         max_body_bytes=4096, max_file_bytes=8192, max_file_sentences=8, batch_wait_ms=0,
                         max_stored_files=20, max_stored_bytes=1 << 20)
    options = LibreTranslateOptions(suggestions=SuggestionStore(directory / "suggestions.jsonl", max_bytes=1 << 20))
    with TestClient(create_app(translator, limits, src_lang="fr", tgt_lang="en", libretranslate_options=options),
                    raise_server_exceptions=False) as test_client:
        yield test_client


def check(response) -> None:
    """JSON always; LibreTranslate's error shape for every error; no 5xx but a 503 (busy); no traceback."""
    assert "Traceback" not in response.text, response.text
    assert response.headers["content-type"].startswith("application/json"), (response.status_code, response.text)
    body = response.json()
    if response.status_code >= 400:
        assert response.status_code < 500 or response.status_code in (503, 507), (response.status_code, body)
        assert isinstance(body, dict) and set(body) == {"error"} and isinstance(body["error"], str), body
        assert body["error"], body
    else:
        assert response.status_code == 200, response.status_code


text = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=40)
codes = st.one_of(st.sampled_from(["fr", "en", "auto", "FR", "En", "de", "", " fr", "fr-FR", "zz", "../x"]), text)
# Half the time the pair served (or detected), so that requests reach the model too.
pairs = st.one_of(st.just(("fr", "en")), st.just(("auto", "en")), st.tuples(codes, codes))
fields = st.sampled_from(["q", "source", "target", "format", "alternatives", "api_key", "glossary", "s", "x"])
values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                                st.floats(allow_nan=False, allow_infinity=False), text, codes),
                      lambda inner: st.one_of(st.lists(inner, max_size=4),
                                              st.dictionaries(st.sampled_from(["source", "target", "q"]) | text,
                                                              inner, max_size=3)),
                      max_leaves=8)
# A request that makes sense, with parts of it replaced: reaches the model as well as the checks.
sensible = st.builds(lambda pair, rest: {"source": pair[0], "target": pair[1], **rest}, pairs, st.fixed_dictionaries(
    {"q": st.one_of(st.sampled_from(["Le chat dort.", "Il pleut. Nous restons."]), text)},
    optional={"format": st.sampled_from(["text", "html", "xml"]) | text,
              "alternatives": st.one_of(st.integers(-1, 20), text), "s": text, "glossary": values}))

# Small real files of the text formats, and names with and without a supported extension.
FILES = {
    "a.txt": b"Le chat dort.\nIl pleut.\n",
    "a.html": b"<html><head><meta charset='utf-8'></head><body><p>Il pleut <b>fort</b>.</p></body></html>",
    "a.md": b"# Titre\n\n> Une **citation**.\n\n- Un point\n",
    "a.srt": b"1\n00:00:01,000 --> 00:00:03,500\nIl pleut.\n\n",
    "a.po": b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "Le chat"\nmsgstr ""\n',
}
EXTENSIONS = [".txt", ".html", ".htm", ".md", ".srt", ".po", ".docx", ".odt", ".pptx", ".epub", ".pdf", ".exe", ""]


# Bytes that break encodings and markup more often than any byte does.
BYTES = st.one_of(st.sampled_from([0x00, 0x0D, 0x1B, ord("<"), ord(">"), ord("&"), ord('"'), 0x80, 0xC3, 0xE2, 0xEF,
                                   0xFE, 0xFF]), st.integers(0, 255))


@st.composite
def uploads(draw):
    name = draw(st.sampled_from(sorted(FILES)))
    if draw(st.booleans()):
        data = bytearray(FILES[name])
        for _ in range(draw(st.integers(0, 4))):  # a few bytes changed
            data[draw(st.integers(0, len(data) - 1))] = draw(BYTES)
        data = bytes(data)
    else:  # any bytes, or a real file's start with any bytes after it
        data = draw(st.sampled_from([b"", FILES[name][:40]])) + bytes(draw(st.lists(BYTES, max_size=600)))
    if draw(st.booleans()):
        stem = draw(st.one_of(st.just("a"), text, st.text(max_size=230)))
        name = stem + draw(st.sampled_from(EXTENSIONS))
    return name, data


def fuzz(strategy, send) -> list[int]:
    """Send ``send(example)`` for the examples of ``strategy``; each answer checked; their statuses."""
    statuses: list[int] = []

    @FUZZ
    @given(strategy)
    def run(example):
        response = send(example)
        check(response)
        statuses.append(response.status_code)

    run()
    return statuses


LEAVE_OUT = st.sampled_from([(), (), (), ("source",), ("target",), ("source", "target")])  # mostly none


def test_translate_file_forms(client):
    def send(example):
        upload, (source, target), leave_out = example
        form = {k: v for k, v in {"source": source, "target": target}.items() if k not in leave_out}
        response = client.post("/translate_file", data=form, files={"file": upload})
        if response.status_code == 200:
            url = response.json()["translatedFileUrl"]
            assert client.get(url).status_code == 200, url
        return response

    statuses = fuzz(st.tuples(uploads(), pairs, LEAVE_OUT), send)
    assert 200 in statuses and 400 in statuses  # files translated as well as refused


ROUTES = st.sampled_from(["/translate", "/detect", "/suggest"])


def test_form_bodies(client):
    def send(example):
        route, params, multipart = example
        form = {k: v if isinstance(v, str) else json.dumps(v) for k, v in params.items()}
        if multipart:  # a multipart form without a file
            return client.post(route, files={k: (None, v.encode()) for k, v in form.items()})
        return client.post(route, data=form)

    statuses = fuzz(st.tuples(ROUTES, sensible | st.dictionaries(fields, text | codes, max_size=5), st.booleans()),
                    send)
    assert 200 in statuses and 400 in statuses


def test_json_bodies(client):
    statuses = fuzz(st.tuples(ROUTES, sensible | st.dictionaries(fields, values, max_size=5) | values),
                    lambda example: client.post(example[0], json=example[1]))
    assert 200 in statuses and 400 in statuses


def test_raw_bodies(client):
    content_types = st.sampled_from(["application/json", "application/x-www-form-urlencoded",
                                     "multipart/form-data; boundary=x", "multipart/form-data", "text/plain"])
    fuzz(st.tuples(st.sampled_from(["/translate", "/detect", "/suggest", "/translate_file"]), st.binary(max_size=300),
                   content_types),
         lambda example: client.post(example[0], content=example[1], headers={"Content-Type": example[2]}))

"""transformer serve: the HTTP API in-process (httpx / TestClient) against a small random model.

Covers translation and attention answers, dynamic batching (observable in the timing and in
/health), the limits and bad input (each a 4xx JSON error naming the problem, the server
serving on), timeouts and overload (503), the OpenAPI schema and the command's errors.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import httpx
import jsonschema
import pytest
from fastapi.testclient import TestClient
from serve_helpers import SCHEMA, assert_error

from transformer.cli import main
from transformer.errors import UserError
from transformer.serve.app import create_app
from transformer.translate.translator import run_languages as languages
from transformer.serve.limits import ServeLimits
from transformer.translate.translator import Translator


@pytest.fixture(scope="module")
def run_dir(tiny_run) -> Path:
    return tiny_run()  # a random tiny model: learned positions stop its outputs at 64 tokens


@pytest.fixture(scope="module")
def translator(run_dir) -> Translator:
    return Translator.from_run_dir(run_dir)


@pytest.fixture(scope="module")
def client(translator):
    app = create_app(translator, ServeLimits(max_chars=300, max_texts=4, max_input_tokens=40, max_output_tokens=20,
                                             max_body_bytes=4096), src_lang="fr", tgt_lang="en")
    with TestClient(app) as c:
        yield c


def post(client, path: str, body: dict) -> httpx.Response:
    return client.post(path, json=body)


# ---------------------------------------------------------------------------------------------
def test_translate_one_text_and_a_list_in_order(client, translator):
    one = post(client, "/v1/translate", {"text": "je suis étudiant", "max_length": 8})
    assert one.status_code == 200
    body = one.json()
    assert [t["source"] for t in body["translations"]] == ["je suis étudiant"]
    assert body["decoding"] == {"strategy": "beam", "beam_size": 4, "n_best": 1, "alpha": 0.6, "max_length": 8}
    timing = body["timing"]
    assert timing["batch_size"] == 1 and timing["total_ms"] >= timing["compute_ms"] > 0

    texts = ["le chat noir dort", "je suis étudiant", "nous mangeons"]
    many = post(client, "/v1/translate", {"text": texts, "beam_size": 3, "n_best": 2, "max_length": 6}).json()
    want = translator.with_decoding(beam_size=3, n_best=2, max_len_a=0.0, max_len_b=6).translate_n_best(texts)
    assert [t["source"] for t in many["translations"]] == texts
    for got, hyps in zip(many["translations"], want):
        assert [h["translation"] for h in got["n_best"]] == [translator.detokenize(h) for h in hyps]
        assert [h["score"] for h in got["n_best"]] == pytest.approx([h.score for h in hyps], abs=1e-5)
        assert got["translation"] == got["n_best"][0]["translation"] and got["score"] == got["n_best"][0]["score"]
        assert got["n_best"][0]["score"] >= got["n_best"][1]["score"]

    greedy = post(client, "/v1/translate", {"text": "je suis étudiant", "beam_size": 1, "max_length": 8}).json()
    assert greedy["decoding"]["strategy"] == "greedy"
    assert greedy["translations"][0]["translation"] == translator.with_decoding(
        strategy="greedy", max_len_a=0.0, max_len_b=8).translate(["je suis étudiant"])[0]


def test_attention_is_the_schema_document_of_the_same_translation(client):
    response = post(client, "/v1/attention", {"text": "je suis étudiant", "max_length": 8})
    assert response.status_code == 200 and "compute;dur=" in response.headers["server-timing"]
    doc = response.json()
    jsonschema.validate(doc, SCHEMA)
    translated = post(client, "/v1/translate", {"text": "je suis étudiant", "max_length": 8}).json()
    assert doc["source"] == "je suis étudiant"
    assert doc["translation"] == translated["translations"][0]["translation"]
    assert len(doc["kinds"]["cross"]["weights"]) == 2 and len(doc["kinds"]["cross"]["weights"][0]) == 4
    assert len(doc["tokens"]["target_output"]["pieces"]) <= 8 + 1


def test_health_model_and_page(client):
    health = client.get("/health").json()
    assert health["status"] == "ok" and health["batching"]["max_batch_size"] == 32
    info = client.get("/v1/model").json()
    assert (info["src_lang"], info["tgt_lang"]) == ("fr", "en")
    assert info["src_vocab_size"] == info["tgt_vocab_size"] == info["config"]["src_vocab_size"]
    assert info["shared_vocabulary"] is True and info["parameters"] > 0
    assert info["limits"]["max_chars"] == 300 and info["decoding"]["beam_size"] == 4
    page = client.get("/")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert 'id="translate"' in page.text and "attention-frame" in page.text
    assert "http://" not in page.text.replace("http://www.w3.org/2000/svg", "")  # nothing fetched from elsewhere
    assert client.get("/docs").status_code == 404  # Swagger UI would load its scripts from a CDN


def test_openapi_schema_carries_the_endpoints_and_limits(client):
    schema = client.get("/openapi.json").json()
    assert {"/v1/translate", "/v1/attention", "/health", "/v1/model"} <= set(schema["paths"])
    request = schema["components"]["schemas"]["TranslateRequest"]
    assert request["additionalProperties"] is False
    assert request["properties"]["beam_size"]["maximum"] == 16
    forms = json.dumps(request["properties"]["text"])
    assert '"maxLength": 300' in forms and '"maxItems": 4' in forms
    attention_200 = schema["paths"]["/v1/attention"]["post"]["responses"]["200"]["content"]["application/json"]
    assert attention_200["schema"]["title"] == "transformer-attention"
    for code in ("413", "422", "503"):
        assert code in schema["paths"]["/v1/translate"]["post"]["responses"]


@pytest.mark.parametrize("body, status, error, words", [
    ({"text": ""}, 422, "invalid_request", ["text", "empty"]),
    ({"text": " \t\n "}, 422, "invalid_request", ["text", "whitespace"]),
    ({"text": ["le chat", "   "]}, 422, "invalid_request", ["text.1", "whitespace"]),
    ({"text": "je\x00suis"}, 422, "invalid_request", ["U+0000", "position 2"]),
    ({"text": "je \x1b[31m suis"}, 422, "invalid_request", ["U+001B"]),
    ({"text": "je\x85suis"}, 422, "invalid_request", ["U+0085"]),
    ({"text": "x" * 301}, 422, "invalid_request", ["text", "300 characters"]),
    ({"text": ["a"] * 5}, 422, "invalid_request", ["text", "4 items"]),
    ({"text": 3}, 422, "invalid_request", ["text must be a string or a list of strings"]),
    ({"text": [1, 2]}, 422, "invalid_request", ["text.0", "string"]),
    ({"text": "chat", "beam_size": "4"}, 422, "invalid_request", ["beam_size", "integer"]),
    ({"text": "chat", "beam_size": True}, 422, "invalid_request", ["beam_size"]),
    ({"text": "chat", "beam_size": 17}, 422, "invalid_request", ["beam_size", "16"]),
    ({"text": "chat", "beam_size": 2, "n_best": 3}, 422, "invalid_request", ["n_best (3) cannot exceed beam_size (2)"]),
    ({"text": "chat", "max_length": 21}, 422, "invalid_request", ["max_length", "20"]),
    ({"text": "chat", "model": "other"}, 422, "invalid_request", ["model", "Extra inputs are not permitted"]),
    ({"texts": ["chat"]}, 422, "invalid_request", ["texts", "not permitted"]),
])
def test_bad_input_is_a_4xx_naming_the_problem(client, body, status, error, words):
    assert_error(post(client, "/v1/translate", body), status, error, *words)
    if set(body) <= {"text"} and isinstance(body.get("text"), str):
        assert_error(post(client, "/v1/attention", body), status, error, *words)
    assert post(client, "/v1/translate", {"text": "le chat", "max_length": 4}).status_code == 200  # still serving


@pytest.mark.parametrize("content, status, error, words", [
    (b'{"text": "je suis', 400, "invalid_json", ["not valid JSON"]),
    (b"", 422, "invalid_request", ["body is missing"]),
    (b'["je suis"]', 422, "invalid_request", ["body"]),
    (b'{"text": "caf\xe9"}', 400, "invalid_utf8", ["not valid UTF-8", "0xe9", "offset 13"]),
    (b'{"text": "\\ud800"}', 422, "invalid_request", ["text", "unicode"]),
    (json.dumps({"text": "a" * 1_000_000}).encode(), 413, "payload_too_large", ["4096 bytes"]),
])
def test_bad_bodies(client, content, status, error, words):
    response = client.post("/v1/translate", content=content, headers={"content-type": "application/json"})
    assert_error(response, status, error, *words)


@pytest.fixture(scope="module")
def roomy_client(translator):
    """A server whose body limit lets through JSON that Python's parser cannot read (its errors must
    still be the API's, so server exceptions are answered, not raised into the test)."""
    app = create_app(translator, ServeLimits(max_body_bytes=1_000_000), src_lang="fr", tgt_lang="en")
    with TestClient(app, raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("content, words", [
    (b'{"text": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", ["nested too deeply"]),
    (b'{"text": "je suis", "beam_size": ' + b"7" * 5000 + b"}", ["5000 digits"]),
    (b'{"text": "je suis", "n_best": -' + b"1" * 4301 + b"}", ["4301 digits"]),
])
def test_json_that_python_cannot_read_is_invalid_json(roomy_client, content, words):
    for path in ("/v1/translate", "/v1/attention"):
        response = roomy_client.post(path, content=content, headers={"content-type": "application/json"})
        message = assert_error(response, 400, "invalid_json", "request body is not valid JSON", *words)
        assert "\n" not in message and "sys." not in message  # one line, and about the request, not Python


def test_body_limit_without_content_length(client):
    def chunks():  # chunked transfer: the size is only known while reading
        yield b'{"text": "'
        for _ in range(10):
            yield b"a" * 1000
        yield b'"}'
    response = client.post("/v1/translate", content=chunks(), headers={"content-type": "application/json"})
    assert_error(response, 413, "payload_too_large")


def test_unknown_paths_and_methods_are_json(client):
    assert_error(client.get("/v1/missing"), 404, "not_found")
    assert_error(client.get("/v1/translate"), 405, "method_not_allowed")


def test_tab_and_newline_are_ordinary_whitespace(client):
    assert post(client, "/v1/translate", {"text": "je suis\tétudiant\n", "max_length": 4}).status_code == 200


# ---------------------------------------------------------------------------------------------
async def _concurrently(app, bodies: list[dict]) -> tuple[list[httpx.Response], dict]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test", timeout=60) as c:
        responses = await asyncio.gather(*(c.post("/v1/translate", json=b) for b in bodies))
        health = (await c.get("/health")).json()
    await app.state.batcher.close()
    return list(responses), health


def test_dynamic_batching_merges_concurrent_requests(translator):
    texts = ["je suis étudiant", "le chat noir", "nous mangeons du pain", "il pleut", "elle lit", "tu dors"]
    # The call starts when all six are in (a full batch), not when a wait runs out: a slow machine
    # cannot split them; the 10 s wait only ends a test whose batcher fails to count them.
    app = create_app(translator, ServeLimits(batch_wait_ms=10_000, max_batch_size=6))
    responses, health = asyncio.run(_concurrently(app, [{"text": t, "max_length": 6} for t in texts]))
    assert all(r.status_code == 200 for r in responses)
    assert [r.json()["timing"]["batch_size"] for r in responses] == [6] * 6
    assert [r.json()["timing"]["batch_requests"] for r in responses] == [6] * 6
    assert health["batching"]["batches"] == 1 and health["batching"]["largest_batch"] == 6
    # merged, each request still gets its own translation: the same as one call with all six texts
    want = translator.with_decoding(max_len_a=0.0, max_len_b=6).translate(texts)
    assert [r.json()["translations"][0]["translation"] for r in responses] == want


def test_batch_size_one_and_different_settings_are_not_merged(translator):
    # A batch of one is full at once: the long wait is never waited, and nothing shares a call.
    app = create_app(translator, ServeLimits(batch_wait_ms=10_000, max_batch_size=1))
    responses, health = asyncio.run(_concurrently(app, [{"text": "le chat", "max_length": 4}] * 3))
    assert [r.json()["timing"]["batch_size"] for r in responses] == [1, 1, 1]
    assert health["batching"]["batches"] == 3

    # Room for all three in one call, and 3 s for them to arrive (a slow machine's stall included):
    # a batcher that ignored the settings would run them together as soon as they are in; the right
    # one waits the 3 s out (no settings have three texts), then runs one call per settings.
    app = create_app(translator, ServeLimits(batch_wait_ms=3000, max_batch_size=3))
    bodies = [{"text": "le chat", "max_length": 4}, {"text": "le chat", "max_length": 5},
              {"text": "le chien", "max_length": 4}]
    responses, health = asyncio.run(_concurrently(app, bodies))
    assert [r.json()["timing"]["batch_size"] for r in responses] == [2, 1, 2]
    assert health["batching"]["batches"] == 2


def test_overload_gets_503_at_once(translator):
    # The two taken wait 3 s for company while the other three arrive (a slow machine's stall included).
    limits = ServeLimits(batch_wait_ms=3000, max_queue=2, timeout_s=20)
    app = create_app(translator, limits)
    start = time.perf_counter()
    responses, health = asyncio.run(_concurrently(app, [{"text": "le chat", "max_length": 4}] * 5))
    codes = [r.status_code for r in responses]
    assert codes.count(200) == 2 and codes.count(503) == 3
    for r in responses:
        if r.status_code == 503:
            assert_error(r, 503, "overloaded", "busy", "at most 2")
            assert r.headers["retry-after"] == "1"
    assert health["batching"]["rejected_overload"] == 3
    # A refusal that waited would wait for room or for the 20 s timeout: half of it bounds the whole
    # exchange (the two requests served included) with room to spare on a slow machine.
    assert time.perf_counter() - start < limits.timeout_s / 2


def test_a_request_that_does_not_finish_in_time_gets_503(translator):
    app = create_app(translator, ServeLimits(batch_wait_ms=10_000, timeout_s=0.2))
    start = time.perf_counter()
    responses, health = asyncio.run(_concurrently(app, [{"text": "le chat", "max_length": 4}]))
    # Answered at its 0.2 s timeout, not when the 10 s batch wait ends: half of that wait tells them apart
    # with room to spare on a slow machine.
    assert time.perf_counter() - start < 5
    assert_error(responses[0], 503, "timeout", "did not finish within 0.2 s")
    assert health["batching"]["timed_out"] == 1 and health["batching"]["batches"] == 0  # dropped, never run


# ---------------------------------------------------------------------------------------------
def test_serve_command_errors_are_one_line(tmp_path, capsys, run_dir):
    assert main(["serve", str(tmp_path / "missing")]) == 2
    assert "run directory not found" in capsys.readouterr().err
    assert main(["serve", str(run_dir), "--max-batch-size", "0"]) == 2
    assert "max_batch_size must be >= 1" in capsys.readouterr().err
    assert main(["serve", str(run_dir), "--port", "70000"]) == 2
    assert "--port" in capsys.readouterr().err
    assert main(["serve", str(run_dir), "--beam", "20"]) == 2
    assert "--beam must be in 1..16" in capsys.readouterr().err
    assert main(["serve", str(run_dir), "--precision", "fp16", "--device", "cpu"]) == 2
    assert "fp16 is for CUDA devices, not cpu" in capsys.readouterr().err


def test_serve_int8_loads_an_int8_translator(run_dir, monkeypatch, capsys):
    import transformer.translate.translator as translator_module

    seen = {}

    def loaded(directory, **options):
        seen.update(options)
        raise UserError("stopped before serving")  # a mistake: exit 2 after the options were read

    monkeypatch.setattr(translator_module, "load_translator", loaded)
    assert main(["serve", str(run_dir), "--precision", "int8"]) == 2
    assert seen["precision"] == "int8" and "stopped before serving" in capsys.readouterr().err


def test_languages_come_from_the_run_config(run_dir, tmp_path):
    assert languages(run_dir) == ("fr", "en")
    assert languages(tmp_path) == (None, None)
    (tmp_path / "run_config.json").write_text("not json")
    assert languages(tmp_path) == (None, None)

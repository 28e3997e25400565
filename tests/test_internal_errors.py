"""A bug is never answered as the user's mistake: the server and ``transformer translate``.

Bugs are planted (an internal function replaced by one raising a plain ``ValueError`` or a
``KeyError``) behind the native API (``/v1/translate``), LibreTranslate's routes (``/translate``,
whose errors go through a ladder of ``except`` clauses, and ``/translate_file``) and the
``translate`` command. The server answers 500 with an error id in the route's own error shape
(and the security headers of any answer), its log holds the traceback under that id; the command
prints the traceback and exits 1. A real mistake in the request or the command still gets its
4xx or exit status 2.
"""

from __future__ import annotations

import logging
import re

import pytest
from cli_helpers import run_cli
from fastapi.testclient import TestClient

from transformer.errors import UserError
from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.translator import Translator

ERROR_ID = re.compile(r"[0-9a-f]{12}")


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


@pytest.fixture(scope="module")
def app(run_dir):
    translator = Translator.from_run_dir(run_dir)
    return create_app(translator, ServeLimits(max_chars=300, max_texts=3, max_input_tokens=40, max_output_tokens=8,
                                              max_body_bytes=4096), src_lang="fr", tgt_lang="en")


@pytest.fixture(scope="module")
def client(app):
    with TestClient(app, raise_server_exceptions=False) as c:  # a bug is answered, not raised into the test
        yield c


@pytest.fixture
def server_log(caplog, monkeypatch):
    """The records of the server's log (``uvicorn.error``), each once, whether or not uvicorn's logging
    set-up stopped it from propagating to the root logger."""
    logger = logging.getLogger("uvicorn.error")
    monkeypatch.setattr(logger, "propagate", False)
    logger.addHandler(caplog.handler)
    try:
        yield caplog
    finally:
        logger.removeHandler(caplog.handler)


def planted(exception: BaseException):
    def fail(*args, **kwargs):
        raise exception
    return fail


def assert_logged(log, error_id: str, exception: BaseException) -> None:
    """One ERROR record names ``error_id`` and carries the planted exception's traceback."""
    records = [r for r in log.records if error_id in r.getMessage()]
    assert len(records) == 1, [r.getMessage() for r in log.records]
    record = records[0]
    assert record.levelno == logging.ERROR and record.exc_info is not None
    assert record.exc_info[1] is exception and record.exc_info[2] is not None


def assert_secured(response) -> None:
    assert response.headers["x-content-type-options"] == "nosniff"
    assert response.headers["x-frame-options"] == "DENY"
    assert "default-src 'none'" in response.headers["content-security-policy"]


def native_500(response) -> str:
    assert response.status_code == 500, response.text
    body = response.json()
    assert body["error"] == "internal_error" and body["details"] == []
    assert ERROR_ID.fullmatch(body["error_id"]) and body["error_id"] in body["message"]
    assert "bug" in body["message"]
    assert_secured(response)
    return body["error_id"]


def libretranslate_500(response) -> str:
    assert response.status_code == 500, response.text
    body = response.json()
    assert set(body) == {"error", "error_id"}
    assert ERROR_ID.fullmatch(body["error_id"]) and body["error_id"] in body["error"]
    assert_secured(response)
    assert response.headers["access-control-allow-origin"] == "*"  # a web page can read the id too
    return body["error_id"]


# ---------------------------------------------------------------------------------------------
# The native API
@pytest.mark.parametrize("exception", [ValueError("planted"), KeyError("planted")], ids=["ValueError", "KeyError"])
def test_a_bug_behind_v1_translate_is_a_500_with_an_id(client, server_log, monkeypatch, exception):
    monkeypatch.setattr("transformer.serve.service.segment_texts", planted(exception))
    response = client.post("/v1/translate", json={"text": "Le chat dort."})
    assert_logged(server_log, native_500(response), exception)


def test_a_bug_in_the_batchers_model_call_is_a_500(app, client, server_log, monkeypatch):
    exception = ValueError("planted in the model call")
    monkeypatch.setattr(app.state.service.batcher, "run_batch", planted(exception))
    response = client.post("/v1/translate", json={"text": "Le chat dort."})
    assert_logged(server_log, native_500(response), exception)
    assert client.post("/v1/translate", json={"text": "Le chat dort."}).status_code == 500  # the server serves on


def test_mistakes_in_a_v1_request_are_still_422(client, monkeypatch):
    response = client.post("/v1/translate", json={"text": ""})
    assert response.status_code == 422 and response.json()["error"] == "invalid_request"
    monkeypatch.setattr("transformer.serve.service.segment_texts", planted(UserError("a planted mistake")))
    response = client.post("/v1/translate", json={"text": "Le chat dort."})
    assert response.status_code == 422
    assert response.json() == {"error": "invalid_request", "message": "a planted mistake", "details": []}


# ---------------------------------------------------------------------------------------------
# LibreTranslate's API
TRANSLATE = {"q": "Le chat dort.", "source": "fr", "target": "en"}


@pytest.mark.parametrize("target, exception", [
    ("transformer.serve.libretranslate.params.alternatives", ValueError("planted")),  # inside a LibreTranslate route
    ("transformer.serve.service.segment_texts", ValueError("planted")),  # deep in the translation
    ("transformer.serve.service.segment_texts", KeyError("planted")),
], ids=["ladder-ValueError", "service-ValueError", "service-KeyError"])
def test_a_bug_behind_libretranslates_translate_is_a_500_in_its_shape(client, server_log, monkeypatch, target,
                                                                       exception):
    monkeypatch.setattr(target, planted(exception))
    response = client.post("/translate", json=TRANSLATE)
    assert_logged(server_log, libretranslate_500(response), exception)


def test_mistakes_in_a_libretranslate_request_are_still_400_in_its_shape(client, monkeypatch):
    response = client.post("/translate", json={"source": "fr", "target": "en"})
    assert response.status_code == 400 and response.json() == {"error": "Invalid request: missing q parameter"}
    # a mistake the route's ladder does not name is answered 400 in LibreTranslate's shape too
    monkeypatch.setattr("transformer.serve.libretranslate.params.alternatives", planted(UserError("a planted mistake")))
    response = client.post("/translate", json=TRANSLATE)
    assert response.status_code == 400 and response.json() == {"error": "a planted mistake"}


def upload(client, name: str, data: bytes):
    return client.post("/translate_file", data={"source": "fr", "target": "en"}, files={"file": (name, data)})


@pytest.mark.parametrize("target, exception", [
    ("transformer.serve.libretranslate.read_file", ValueError("planted")),
    ("transformer.serve.libretranslate.files.FileSentences", ValueError("planted")),
    ("transformer.serve.libretranslate.files.FileSentences", KeyError("planted")),
], ids=["read-ValueError", "translate-ValueError", "translate-KeyError"])
def test_a_bug_behind_translate_file_is_a_500_in_libretranslates_shape(client, server_log, monkeypatch, target,
                                                                        exception):
    monkeypatch.setattr(target, planted(exception))
    response = upload(client, "notes.txt", "Le chat dort.\n".encode())
    assert_logged(server_log, libretranslate_500(response), exception)


def test_mistakes_in_a_file_are_still_400(client):
    assert upload(client, "notes.txt", "Le chat dort.\n".encode()).status_code == 200
    response = upload(client, "notes.exe", b"MZ")
    assert response.status_code == 400 and "file format not supported" in response.json()["error"]
    response = upload(client, "report.docx", b"not a zip archive")  # a FileFormatError: the format's own refusal
    assert response.status_code == 400 and "does not start like one" in response.json()["error"]


# ---------------------------------------------------------------------------------------------
# The command line
def test_a_bug_behind_transformer_translate_is_a_traceback_and_exit_1(run_dir, monkeypatch):
    monkeypatch.setattr("transformer.translate.document.translate_lines", planted(ValueError("planted")))
    result = run_cli("translate", run_dir, "Le chat dort.", "--no-progress")
    assert result.returncode == 1, result.stderr
    assert "Traceback (most recent call last)" in result.stderr and "ValueError: planted" in result.stderr
    assert "transformer translate: internal error" in result.stderr
    assert "transformer translate: error:" not in result.stderr  # never the line that says the command was wrong


def test_a_mistake_in_transformer_translate_is_still_exit_2(run_dir):
    result = run_cli("translate", run_dir, "Le chat dort.", "--chunk-lines", "0")
    assert result.returncode == 2
    assert result.stderr == "transformer translate: error: --chunk-lines and --max-line-chars must be >= 1\n"

"""A client that closes its connection mid-request stops the work done for it.

uvicorn serves the app of the tiny_run fixture's random model on 127.0.0.1 in this process (a
thread of its own), its decoder steps slowed to 50 ms so that a search takes seconds. A raw
socket sends a request, waits until ``/health`` shows its model call running, and closes: the
model call must stop (``cancelled_calls``, ``cancelled_requests``) within a few decoder steps
of a search of about 60, and the next request is answered. On each route that translates:
``/v1/translate`` (a glossary beam search), LibreTranslate's ``/translate`` and ``/translate_file``.
"""

from __future__ import annotations

import json
import socket
import threading
import time

import httpx
import pytest
import uvicorn
from serve_helpers import free_port

from transformer.decoding import beam
from transformer.serve.app import create_app
from transformer.serve.limits import ServeLimits
from transformer.translate.translator import Translator

TERMS = [{"source": "chat", "target": "cat"}, {"source": "étudiant", "target": "student"}]
STEP_S = 0.05  # a decoder step, slowed: a search of ~60 steps takes 3 s


@pytest.fixture(scope="module")
def server(tiny_run):
    """The app on a free port, its decoder steps counted (``steps``: their times) and slowed."""
    translator = Translator.from_run_dir(tiny_run())
    steps: list[float] = []
    logits = beam._Rows.logits

    def slow(self):
        steps.append(time.monotonic())
        time.sleep(STEP_S)
        return logits(self)

    patch = pytest.MonkeyPatch()
    patch.setattr(beam._Rows, "logits", slow)
    app = create_app(translator, ServeLimits(timeout_s=60, max_output_tokens=60), src_lang="fr", tgt_lang="en")
    port = free_port()
    uv = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while not uv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    yield url, app, steps
    uv.should_exit = True
    thread.join(timeout=30)
    patch.undo()


def batching(url: str) -> dict:
    return httpx.get(url + "/health", timeout=10).json()["batching"]


def wait_for(condition, what: str, seconds: float = 60) -> None:
    """Poll ``condition()`` until it holds (the bound only keeps a broken server from hanging the test)."""
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)


def raw_request(port: int, path: str, body: bytes, content_type: str) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode() + body


def multipart(fields: dict[str, str], name: str, data: bytes) -> tuple[bytes, str]:
    boundary = "disconnect-test-boundary"
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode()
             for k, v in fields.items()]
    parts.append(f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="{name}"\r\n'
                 f"Content-Type: text/plain\r\n\r\n".encode() + data + b"\r\n")
    return b"".join(parts) + f"--{boundary}--\r\n".encode(), f"multipart/form-data; boundary={boundary}"


TEXT = "le chat noir est étudiant"
REQUESTS = {
    "/v1/translate": (json.dumps({"text": TEXT, "beam_size": 4, "max_length": 60, "glossary": TERMS}).encode(),
                      "application/json"),
    "/translate": (json.dumps({"q": TEXT, "source": "fr", "target": "en", "glossary": TERMS}).encode(),
                   "application/json"),
    "/translate_file": multipart({"source": "fr", "target": "en"}, "page.txt", TEXT.encode()),
}


@pytest.mark.parametrize("path", list(REQUESTS))
def test_a_client_that_disconnects_stops_its_translation(server, path):
    url, app, steps = server
    port = int(url.rsplit(":", 1)[1])
    before = batching(url)
    body, content_type = REQUESTS[path]
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(raw_request(port, path, body, content_type))
        wait_for(lambda: batching(url)["running_texts"] > 0, "the request's model call started")
        started = len(steps)
    closed = time.monotonic()  # the socket is closed: the client has gone
    wait_for(lambda: batching(url)["running_texts"] == 0, "the model call ended")
    after = batching(url)
    assert after["cancelled_requests"] == before["cancelled_requests"] + 1
    assert after["cancelled_calls"] == before["cancelled_calls"] + 1  # stopped, not run to its end
    after_close = [t for t in steps if t > closed]
    # A search of this request runs ~60 steps; it stopped within a few of the client going.
    assert len(after_close) <= 5, f"{len(after_close)} decoder steps after the client went ({started} before)"
    # The model is free: a short request is answered (1 step of the slowed beam per token).
    short = httpx.post(url + "/v1/translate", json={"text": "le chat", "beam_size": 2, "max_length": 3}, timeout=60)
    assert short.status_code == 200, short.text
    assert app.state.uploads.in_flight == 0  # a file's upload gave its share of the budget back

"""What the server's tests share: the attention document's schema, the check of a native error
answer, and a server to talk to (a free port, waiting for a process to answer, uvicorn in a thread)."""

from __future__ import annotations

import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import uvicorn

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "transformer/visualize/schema.json").read_text())


def assert_error(response: httpx.Response, status: int, error: str, *words: str) -> str:
    """``response`` is the native API's error ``error`` with ``status``, its message naming ``words``;
    returns the message."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["error"] == error and isinstance(body["details"], list)
    for word in words:
        assert word in body["message"], body["message"]
    return body["message"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_up(proc: subprocess.Popen, url: str, seconds: float = 90) -> None:
    """Wait until the server process ``proc`` answers /health at ``url``; fail if it exits or takes longer."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"the server exited with {proc.returncode}: {proc.stderr.read()}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.TransportError:
            time.sleep(0.2)
    pytest.fail(f"the server did not answer within {seconds} s")


@contextmanager
def live_server(app) -> Iterator[str]:
    """``app`` served by uvicorn on a free port of 127.0.0.1, in a thread; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()

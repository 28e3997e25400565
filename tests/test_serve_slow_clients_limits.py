"""``transformer serve``'s limits and headers, as real processes on 127.0.0.1.

* A request head over --max-header-bytes gets 431 (a 200 KB one too); connections beyond
  --max-connections get 503 at once; a busy port is one line on stderr, exit 3, and no
  "listening" line; every response, the page's and the API's, carries the security headers, and
  the page's Content-Security-Policy allows exactly its own inline code (checked in Chromium too).
* On the same server with small limits, a slow head or body gets 408 (--header-timeout,
  --body-timeout) and a silent connection is closed.

Only 127.0.0.1 is contacted; every count and wait is bounded. Slow-client floods and SIGTERM are
in test_serve_slow_clients.py.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import socket
import subprocess
import sys
import time

import httpx
import pytest
from slow_clients_helpers import BODY_HEAD, Served, connect, read_answer
from slow_clients_helpers import run_dir  # noqa: F401 (run_dir: the shared module-scoped fixture)

SECURITY = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}


# ------------------------------------------------------------------------------------------------
# Limits on one server
# ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def guarded(run_dir, tmp_path_factory):
    """A server with small limits; its log is checked when the module's tests are done."""
    server = Served(run_dir, tmp_path_factory.mktemp("guarded"), "--max-connections", "8", "--max-header-bytes",
                    "8192", "--header-timeout", "1.5", "--body-timeout", "1.5", "--keep-alive-timeout", "1")
    try:
        yield server
        status, took = server.stop()
        assert status == 0 and took < 10
        server.assert_clean_log()
    finally:
        server.kill()


def test_a_request_head_over_the_limit_gets_431(guarded):
    head = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: %s\r\nConnection: close\r\n\r\n"
    data, _ = read_answer(connect(guarded.port, head % (b"a" * 6000)), timeout=5)
    assert data.startswith(b"HTTP/1.1 200 ")
    for size in (9000, 60_000):  # 60 KB arrives in one read: h11's own limit sees a complete head
        data, _ = read_answer(connect(guarded.port, head % (b"a" * size)), timeout=5)
        assert data.startswith(b"HTTP/1.1 431 "), (size, data[:100])
        assert b'"error": "headers_too_large"' in data and b"x-content-type-options: nosniff" in data
    sock = connect(guarded.port)
    try:
        sock.sendall(head % (b"a" * 200_000))
    except (BrokenPipeError, ConnectionResetError):
        pass  # refused and closed while it was still sending
    data, _ = read_answer(sock, timeout=5)
    assert data == b"" or data.startswith(b"HTTP/1.1 431 "), data[:100]
    assert httpx.get(guarded.url + "/health", timeout=5).status_code == 200


def test_slow_heads_and_bodies_get_408_and_a_silent_connection_is_closed(guarded):
    head = connect(guarded.port, b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    body = connect(guarded.port, BODY_HEAD + b'{"text": "je')
    silent = connect(guarded.port)
    for sock, timed_out in ((head, True), (body, True), (silent, False)):
        data, waited = read_answer(sock, timeout=6)
        if timed_out:
            assert data.startswith(b"HTTP/1.1 408 ") and b'"error": "request_timeout"' in data, data[:100]
        else:
            assert data == b""
        assert waited < 3.5
        sock.close()
    answer = httpx.post(guarded.url + "/v1/translate", json={"text": "je suis étudiant", "max_length": 5}, timeout=10)
    assert answer.status_code == 200


def test_connections_beyond_the_cap_get_503_at_once(guarded):
    held = [connect(guarded.port) for _ in range(8)]
    try:
        time.sleep(0.3)
        # At once: answered on connecting, before the client sends a byte, so before the 1.5 s header
        # deadline, which a refusal that waited for anything would meet first (then taking >= 1.5 s).
        start = time.monotonic()
        data, _ = read_answer(connect(guarded.port), timeout=5)
        took = time.monotonic() - start
        assert data.startswith(b"HTTP/1.1 503 ") and took < 1.5, (took, data[:100])
        head = data.split(b"\r\n\r\n")[0].lower()
        assert b'"error": "overloaded"' in data and b"\r\nretry-after: 1\r\n" in head + b"\r\n"
        assert b"\r\nx-content-type-options: nosniff" in head
    finally:
        for sock in held:
            sock.close()
    time.sleep(0.3)
    assert httpx.get(guarded.url + "/health", timeout=5).status_code == 200


def _inline_hashes(page: str) -> set[str]:
    found = set()
    for tag, attrs, content in re.findall(r"<(script|style)([^>]*)>(.*?)</\1>", page, re.DOTALL):
        if "application/json" in attrs:
            continue
        found.add("'sha256-" + base64.b64encode(hashlib.sha256(content.encode()).digest()).decode() + "'")
    return found


def test_security_headers_on_the_page_and_the_api(guarded):
    from transformer.serve.page import attention_view_template

    with httpx.Client(base_url=guarded.url, timeout=10) as client:
        page = client.get("/")
        assert page.status_code == 200
        csp = page.headers["content-security-policy"]
        directives = dict((d.strip().split(" ", 1) + [""])[:2] for d in csp.split(";"))
        assert directives["default-src"] == "'none'" and directives["frame-ancestors"] == "'none'"
        assert "unsafe" not in csp
        # exactly the page's own inline code, and the attention view's (an srcdoc frame inherits the policy)
        allowed = set(directives["script-src"].split()) | set(directives["style-src"].split())
        assert allowed == _inline_hashes(page.text) | _inline_hashes(attention_view_template())
        answers = [page, client.get("/health"), client.get("/v1/model"), client.get("/openapi.json"),
                   client.post("/v1/translate", json={"text": "je suis étudiant", "max_length": 5}),
                   client.post("/v1/translate", json={"text": ""}), client.get("/nowhere"),
                   client.post("/translate", data={"q": "je suis étudiant", "source": "fr", "target": "en"})]
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 200, 422, 404, 200]
    for answer in answers:
        for name, value in SECURITY.items():
            assert answer.headers.get(name) == value, (answer.request.url, name)
        assert "frame-ancestors 'none'" in answer.headers["content-security-policy"]
    for answer in answers[1:]:
        assert answer.headers["content-security-policy"].startswith("default-src 'none';")


def test_the_page_runs_under_its_policy_in_chromium(guarded):
    from browser_helpers import ARGS, CHROMIUM, require

    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        require(False, "playwright is not installed (pip install playwright)")
    require(os.path.exists(CHROMIUM), f"{CHROMIUM} not found (apt-get install chromium)")

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        try:
            page = browser.new_page()
            messages: list[str] = []
            page.on("console", lambda m: messages.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: messages.append(str(e)))
            page.goto(guarded.url + "/")
            page.wait_for_selector("body[data-ready=true]")
            page.fill("#source", "je suis étudiant. le chat dort.")
            page.click("#translate")
            page.wait_for_selector("#result[data-state=done]", timeout=30000)
            assert page.frame_locator("#attention-frame").locator("line.attn-line").count() > 0
            assert messages == []  # no violation of the policy by the page's own code
            page.evaluate("() => { const s = document.createElement('script'); s.textContent = 'window.injected = 1';"
                          " document.body.append(s); }")
            assert page.evaluate("() => window.injected") is None  # code the page did not ship is blocked
            assert any("Content Security Policy" in m for m in messages)
        finally:
            browser.close()


# ------------------------------------------------------------------------------------------------
# A busy port
# ------------------------------------------------------------------------------------------------

def test_a_busy_port_is_one_line_and_no_listening_line(run_dir):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "transformer.cli", "serve", str(run_dir), "--port", str(port)],
                              capture_output=True, text=True, timeout=120, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert done.returncode == 3
    assert "listening" not in done.stdout and "http://" not in done.stdout, done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    assert f"127.0.0.1:{port}" in lines[0] and "already in use" in lines[0] and "--port" in lines[0]

"""``transformer serve`` under slow, idle and abusive clients, as real processes on 127.0.0.1.

* A bounded flood of slow clients (raw sockets sending a request head, or a body, a byte at a
  time) while normal requests keep coming: every normal request is answered within 1 s, every
  slow client is answered 408 within its deadline (--header-timeout, --body-timeout) and
  closed; then SIGTERM: the server exits 0 well within --shutdown-grace, with no traceback in
  its log, and its stop message counts exactly the connections it dropped.
* SIGTERM with a request in flight and idle and stalled connections: the stalled and idle ones
  are closed at once, the request in flight is answered, and the message says so, number by number;
  a request still running at the end of the grace is answered 503 and the server exits 0.
* A request head over --max-header-bytes gets 431 (a 200 KB one too); connections beyond
  --max-connections get 503 at once; a busy port is one line on stderr, exit 3, and no
  "listening" line; every response, the page's and the API's, carries the security headers, and
  the page's Content-Security-Policy allows exactly its own inline code (checked in Chromium too).

Only 127.0.0.1 is contacted; every count and wait is bounded (the flood: 240 sockets for 8 s).
"""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest
from test_serve import make_run_dir
from test_serve_process import free_port

FORBIDDEN_IN_LOG = ("Traceback", "Exception in ASGI application", "timeout graceful shutdown exceeded")
STOP = re.compile(r"stopped by SIGTERM in [0-9.]+ s: finished (\d+) requests? in flight, "
                  r"dropped (\d+) idle and (\d+) stalled connections?(.*)")
SECURITY = {"x-content-type-options": "nosniff", "x-frame-options": "DENY", "referrer-policy": "no-referrer"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return make_run_dir(tmp_path_factory.mktemp("slow-clients-run"))


class Served:
    """``transformer serve RUN_DIR --port P OPTIONS`` with its output in files (a flood of log lines
    never fills a pipe); ``stop()`` sends SIGTERM and returns the exit status and the time taken."""

    def __init__(self, run_dir: Path, log_dir: Path, *options: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        log_dir.mkdir(parents=True, exist_ok=True)
        self.out_path, self.err_path = log_dir / "stdout.txt", log_dir / "stderr.txt"
        self._out, self._err = open(self.out_path, "w"), open(self.err_path, "w")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "transformer.cli", "serve", str(run_dir), "--port", str(self.port),
             "--log-level", "info", *options],
            stdout=self._out, stderr=self._err, text=True, env=dict(os.environ, OMP_NUM_THREADS="1"))
        deadline = time.monotonic() + 90
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"the server exited with {self.proc.returncode}: {self.stderr}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "the server did not answer within 90 s"
            time.sleep(0.2)

    @property
    def stdout(self) -> str:
        return self.out_path.read_text()

    @property
    def stderr(self) -> str:
        return self.err_path.read_text()

    def stop(self, timeout: float = 30) -> tuple[int, float]:
        start = time.monotonic()
        self.proc.send_signal(signal.SIGTERM)
        try:
            status = self.proc.wait(timeout=timeout)
        finally:
            self.kill()
        return status, time.monotonic() - start

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._out.close()
        self._err.close()

    def assert_clean_log(self) -> None:
        log = self.stdout + self.stderr
        for bad in FORBIDDEN_IN_LOG:
            assert bad not in log, f"{bad!r} in the server's log:\n{log[-3000:]}"


def read_answer(sock: socket.socket, timeout: float) -> tuple[bytes, float]:
    """What the server sends until it closes (b"" for a close without an answer; a reset after
    an answer keeps the answer), and the seconds until then."""
    sock.settimeout(timeout)
    start = time.monotonic()
    data = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    except ConnectionResetError:
        pass
    except socket.timeout:
        pytest.fail(f"the server kept the connection open for {timeout} s (got {data[:80]!r})")
    return data, time.monotonic() - start


def connect(port: int, data: bytes = b"") -> socket.socket:
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    if data:
        sock.sendall(data)
    return sock


HEAD_START = b"POST /v1/translate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
BODY_HEAD = HEAD_START + b"Content-Length: 4000\r\n\r\n"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


# ------------------------------------------------------------------------------------------------
# The flood
# ------------------------------------------------------------------------------------------------

async def flood(port: int, url: str, *, slots: int, seconds: float, interval: float) -> dict:
    """``slots`` slow clients (half sending a head, half a body, a byte every ``interval`` s; each
    reconnects when the server closes it) and one normal client (a translation every 50 ms) for
    ``seconds``. Returns what each side saw; the slow connections still open at the end are
    returned open (``"open"``: (socket writer, pending read, opened at)) for the shutdown check."""
    loop = asyncio.get_running_loop()
    until = loop.time() + seconds
    closed: list[tuple[str, float, bytes]] = []  # (kind, seconds open, first bytes of the answer)
    still_open: list[tuple[asyncio.StreamWriter, asyncio.Future, str]] = []
    connect_errors: list[str] = []
    latencies: list[float] = []
    statuses: list[int] = []

    async def slow(kind: str, start_delay: float) -> None:
        await asyncio.sleep(start_delay)
        while loop.time() < until:
            opened = loop.time()
            try:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            except OSError as err:
                connect_errors.append(repr(err))
                await asyncio.sleep(interval)
                continue
            if kind == "body":
                writer.write(BODY_HEAD)
                trickle = b'{"text": "' + b"a" * 8000
            else:
                trickle = HEAD_START + b"X-Slow: " + b"a" * 8000
            answer = asyncio.ensure_future(reader.read(200))
            i = 0
            while not answer.done() and loop.time() < until:
                try:
                    writer.write(trickle[i:i + 1])
                    await writer.drain()
                except ConnectionError:
                    break
                i += 1
                await asyncio.wait([answer], timeout=interval)
            if not answer.done():
                still_open.append((writer, answer, kind))
                return
            try:
                data = answer.result()
            except ConnectionError:
                data = b"<reset>"
            closed.append((kind, loop.time() - opened, data))
            writer.close()

    async def normal() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            n = 0
            while loop.time() < until:
                n += 1
                sent = time.perf_counter()
                if n % 5:
                    r = await client.post("/v1/translate", json={"text": f"je suis étudiant {n}.", "max_length": 5})
                else:
                    r = await client.get("/health")
                latencies.append(time.perf_counter() - sent)
                statuses.append(r.status_code)
                await asyncio.sleep(0.05)

    tasks = [asyncio.ensure_future(slow("body" if k % 2 else "head", k * 0.004)) for k in range(slots)]
    await normal()
    await asyncio.gather(*tasks)
    return {"closed": closed, "open": still_open, "connect_errors": connect_errors, "latencies": latencies,
            "statuses": statuses}


def test_slow_client_flood_normal_requests_answered_then_sigterm_exits_clean(run_dir, tmp_path):
    header_timeout, body_timeout, grace = 2.0, 3.0, 5.0
    server = Served(run_dir, tmp_path / "flood", "--header-timeout", str(header_timeout), "--body-timeout",
                    str(body_timeout), "--shutdown-grace", str(grace))
    try:
        async def scenario() -> tuple[dict, list[tuple[bytes, str]], float, float]:
            seen = await flood(server.port, server.url, slots=240, seconds=8.0, interval=0.25)
            await asyncio.sleep(0.4)  # every connection accepted; some stalled ones may time out (408) now
            server.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            ends = []
            for writer, answer, kind in seen["open"]:
                try:
                    data = await asyncio.wait_for(answer, timeout=grace)
                except ConnectionError:
                    data = b"<reset>"
                ends.append((data, kind))
                writer.close()
            return seen, ends, time.monotonic() - signalled, signalled

        seen, ends, drop_s, signalled = asyncio.run(scenario())
        status = server.proc.wait(timeout=grace + 5)
        exit_s = time.monotonic() - signalled
    finally:
        server.kill()

    # normal requests: all answered, within 1 s
    latencies = seen["latencies"]
    assert len(latencies) >= 50 and set(seen["statuses"]) == {200}, seen["statuses"]
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    print(f"\nflood: {len(seen['closed']) + len(seen['open'])} slow connections, normal requests "
          f"{len(latencies)}: p50 {p50 * 1000:.0f} ms, p99 {p99 * 1000:.0f} ms, max {max(latencies) * 1000:.0f} ms; "
          f"open at SIGTERM {len(ends)}, all closed {drop_s:.2f} s after it, exit {exit_s:.2f} s after it")
    assert max(latencies) < 1.0, f"a normal request took {max(latencies):.2f} s during the flood"
    assert not seen["connect_errors"]
    # slow clients: each one answered 408 within its deadline (+ slack for a loaded machine) and closed
    assert len(seen["closed"]) >= 240
    for kind, open_s, data in seen["closed"]:
        deadline = header_timeout if kind == "head" else header_timeout + body_timeout
        assert data.startswith(b"HTTP/1.1 408 "), (kind, open_s, data)
        assert open_s < deadline + 1.5, (kind, open_s)
    # SIGTERM: the stalled connections are dropped at once, quietly, and counted truthfully
    assert status == 0
    assert drop_s < 1.5
    dropped_by_shutdown = sum(1 for data, _ in ends if not data.startswith(b"HTTP/1.1 408"))
    assert dropped_by_shutdown >= 1
    match = STOP.search(server.stdout)
    assert match, server.stdout
    finished, idle, stalled = (int(match.group(i)) for i in (1, 2, 3))
    assert (finished, idle + stalled) == (0, dropped_by_shutdown), (match.group(0), dropped_by_shutdown)
    assert float(re.search(r"in ([0-9.]+) s", match.group(0)).group(1)) < grace and exit_s < grace
    print(match.group(0))
    server.assert_clean_log()


# ------------------------------------------------------------------------------------------------
# The shutdown
# ------------------------------------------------------------------------------------------------

def _in_flight(url: str, result: dict) -> threading.Thread:
    def post() -> None:
        try:
            result["response"] = httpx.post(url + "/v1/translate", json={"text": "je suis étudiant", "max_length": 5},
                                            timeout=30)
        except httpx.HTTPError as err:
            result["error"] = err

    thread = threading.Thread(target=post)
    thread.start()
    deadline = time.monotonic() + 10
    while httpx.get(url + "/health", timeout=2).json()["batching"]["queued_texts"] != 1:
        assert time.monotonic() < deadline, "the request never reached the queue"
        time.sleep(0.05)
    return thread


def test_sigterm_finishes_the_request_in_flight_and_drops_idle_and_stalled_connections(run_dir, tmp_path):
    server = Served(run_dir, tmp_path / "drain", "--batch-wait-ms", "2500", "--header-timeout", "60",
                    "--body-timeout", "60", "--shutdown-grace", "15")
    try:
        idle = [connect(server.port) for _ in range(5)]
        stalled = [connect(server.port, HEAD_START) for _ in range(7)]  # a head, unfinished
        stalled += [connect(server.port, BODY_HEAD + b'{"text": "je') for _ in range(9)]  # a body, unfinished
        result: dict = {}
        client = _in_flight(server.url, result)
        time.sleep(0.3)  # the health checks' connections are closed
        start = time.monotonic()
        server.proc.send_signal(signal.SIGTERM)
        for sock in idle + stalled:  # closed at once, without an answer
            data, _ = read_answer(sock, timeout=2)
            assert data == b""
            sock.close()
        dropped_s = time.monotonic() - start
        client.join(timeout=30)
        assert result["response"].status_code == 200, result
        status = server.proc.wait(timeout=20)
        took = time.monotonic() - start
    finally:
        server.kill()
    assert status == 0 and dropped_s < 1.5 and took < 15
    match = STOP.search(server.stdout)
    assert match, server.stdout
    assert match.group(0).startswith("stopped by SIGTERM")
    assert [int(match.group(i)) for i in (1, 2, 3)] == [1, 5, 16], match.group(0)
    assert match.group(4) == "", match.group(0)  # nothing cut, no client gone
    server.assert_clean_log()


def test_a_request_still_running_after_the_grace_gets_503_and_the_server_exits_0(run_dir, tmp_path):
    server = Served(run_dir, tmp_path / "grace", "--batch-wait-ms", "20000", "--shutdown-grace", "1")
    try:
        result: dict = {}
        client = _in_flight(server.url, result)
        status, took = server.stop(timeout=15)
        client.join(timeout=10)
    finally:
        server.kill()
    assert status == 0 and took < 4, took
    response = result["response"]
    assert response.status_code == 503 and response.json()["error"] == "shutting_down"
    assert response.headers["retry-after"] == "1"
    match = STOP.search(server.stdout)
    assert match and [int(match.group(i)) for i in (1, 2, 3)] == [0, 0, 0], server.stdout
    assert "answered 503 to 1 request still running after the 1 s grace" in match.group(4)
    server.assert_clean_log()


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
        start = time.monotonic()
        refused = httpx.get(guarded.url + "/health", timeout=5)
        assert refused.status_code == 503 and time.monotonic() - start < 0.5
        assert refused.json()["error"] == "overloaded" and refused.headers["retry-after"] == "1"
        assert refused.headers["x-content-type-options"] == "nosniff"
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
    from test_visualize_browser import ARGS, CHROMIUM, require

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

"""The server process and raw-socket clients shared by test_serve_slow_clients.py and
test_serve_slow_clients_limits.py: ``transformer serve`` as a real process on 127.0.0.1 (``Served``),
the module-scoped ``run_dir`` fixture (a tiny random model, made once per test file), and helpers
that open a connection, send part of a request and read what the server answers."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from serve_helpers import free_port

FORBIDDEN_IN_LOG = ("Traceback", "Exception in ASGI application", "timeout graceful shutdown exceeded")


@pytest.fixture(scope="module")
def run_dir(tiny_run) -> Path:
    return tiny_run()


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


"""``transformer serve`` as a real process (uvicorn on 127.0.0.1, a free port): SIGTERM is graceful.

A request is held in flight by a long batching window (--batch-wait-ms); SIGTERM then makes the
server stop accepting connections at once, finish that request (200 with its translation) and
exit with status 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from serve_helpers import free_port, wait_until_up


def test_sigterm_finishes_the_request_in_flight_and_exits_0(tmp_path, tiny_run):
    run_dir = tiny_run(tmp_path / "run")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = dict(os.environ, OMP_NUM_THREADS="1")
    proc = subprocess.Popen(
        [sys.executable, "-m", "transformer.cli", "serve", str(run_dir), "--port", str(port),
         "--batch-wait-ms", "4000", "--log-level", "info"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        wait_until_up(proc, url)
        assert httpx.get(url + "/v1/model", timeout=5).json()["src_lang"] == "fr"
        result: dict = {}

        def in_flight() -> None:
            result["response"] = httpx.post(url + "/v1/translate", json={"text": "je suis étudiant", "max_length": 5},
                                            timeout=30)

        client = threading.Thread(target=in_flight)
        client.start()
        deadline = time.monotonic() + 10
        while httpx.get(url + "/health", timeout=2).json()["batching"]["queued_texts"] != 1:
            assert time.monotonic() < deadline, "the request never reached the queue"
            time.sleep(0.05)

        proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        with pytest.raises(httpx.TransportError):  # no new connections once shutting down
            httpx.get(url + "/health", timeout=2)
        assert proc.poll() is None  # still finishing the request in flight

        client.join(timeout=30)
        response = result["response"]
        assert response.status_code == 200
        assert response.json()["translations"][0]["source"] == "je suis étudiant"
        assert proc.wait(timeout=30) == 0
        stdout, stderr = proc.communicate(timeout=5)
        assert f"http://127.0.0.1:{port}/" in stdout and "stopped by SIGTERM" in stdout
        assert "Shutting down" in stderr and "Traceback" not in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# A server whose file parse outlives any grace: read_file waits ten minutes on its thread (a
# non-daemon worker, which the interpreter would wait for at exit), after saying it started.
_STUCK_SERVER = """
import os, sys, threading
import transformer.serve.libretranslate as lt

def stuck(data, name):
    open(os.environ["STUCK_MARK"], "w").close()
    threading.Event().wait(600)

lt.read_file = stuck
from transformer.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("signum, status, name", [(signal.SIGTERM, 0, "SIGTERM"), (signal.SIGINT, 130, "SIGINT")])
def test_a_parse_that_outlives_the_grace_does_not_keep_the_process(tmp_path, signum, status, name, tiny_run):
    run_dir = tiny_run(tmp_path / "run")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    mark = tmp_path / "parsing"
    env = dict(os.environ, OMP_NUM_THREADS="1", STUCK_MARK=str(mark))
    # SIGINT's default action restored: a shell's background job (how a test run may be started)
    # inherits SIGINT ignored, and Python then never turns it into KeyboardInterrupt.
    proc = subprocess.Popen(
        [sys.executable, "-c", _STUCK_SERVER, "serve", str(run_dir), "--port", str(port), "--shutdown-grace", "1"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        wait_until_up(proc, url)
        client = threading.Thread(target=lambda: httpx.post(
            url + "/translate_file", data={"source": "fr", "target": "en"},
            files={"file": ("a.txt", b"Le chat dort.")}, timeout=60), daemon=True)
        client.start()
        deadline = time.monotonic() + 30
        while not mark.exists():
            assert time.monotonic() < deadline, "the upload's parse never started"
            time.sleep(0.05)
        proc.send_signal(signum)
        # Without the hard exit the process lives until the parse's ten minutes are over.
        assert proc.wait(timeout=120) == status
        stdout, stderr = proc.communicate(timeout=5)
        assert f"stopped by {name}" in stdout and "Traceback" not in stderr, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()

"""``transformer serve`` in a subprocess on a free port of 127.0.0.1, for the benchmarks that
measure a real server (serve_load.py, serve_hostile.py, tm_learning.py).

The server runs in a temporary folder of its own (its working directory and TMPDIR, where its
download store goes), so that ``python -m transformer.cli`` imports the installed package or
``PYTHONPATH``'s, not a checkout's from the caller's working directory, and its log is a file
there rather than a pipe nobody reads (a full pipe would stall the server).
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def folder_bytes(folder: Path) -> int:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


class ServerProcess:
    """``transformer serve RUN_DIR... OPTIONS``, started and answering /health when built.

    ``env`` adds to the environment (``OMP_NUM_THREADS``, ``PYTHONPATH``); ``startup`` is the
    seconds to wait for /health before giving up.
    """

    def __init__(self, run_dirs: str | Path | list[str | Path], options: list[str] = (), *,
                 env: dict[str, str] | None = None, startup: float = 180.0) -> None:
        runs = [run_dirs] if isinstance(run_dirs, (str, Path)) else list(run_dirs)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.tmp = Path(tempfile.mkdtemp(prefix="transformer-serve-bench-"))
        self.log_path = self.tmp / "server.log"
        self._log = open(self.log_path, "w")
        self._final_log: str | None = None
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "transformer.cli", "serve", *(str(Path(r).resolve()) for r in runs),
             "--host", "127.0.0.1", "--port", str(self.port), *options],
            stdout=self._log, stderr=subprocess.STDOUT, cwd=self.tmp,
            env=dict(os.environ, TMPDIR=str(self.tmp), **(env or {})))
        deadline = time.monotonic() + startup
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited with {self.proc.returncode}: {self.log()[-2000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                self.proc.kill()
                raise RuntimeError(f"the server did not answer within {startup:.0f} s: {self.log()[-2000:]}")
            time.sleep(0.25)

    def log(self) -> str:
        """The server's output so far (all of it once stopped)."""
        return self._final_log if self._final_log is not None else self.log_path.read_text(errors="replace")

    def health(self) -> dict:
        return httpx.get(self.url + "/health", timeout=10).json()

    def peak_rss_mb(self) -> float:
        """The server's peak resident memory so far (VmHWM), in MB."""
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmHWM for process {self.proc.pid}")

    def store_bytes(self) -> int:
        """Bytes in the server's download store (its temporary folder, the log left out)."""
        return sum(folder_bytes(p) for p in self.tmp.glob("transformer-serve-files-*"))

    def stop(self, grace: float = 90.0) -> int:
        """SIGTERM (SIGKILL after ``grace`` seconds), then the folder goes; the exit status."""
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        self._log.close()
        self._final_log = self.log()
        shutil.rmtree(self.tmp, ignore_errors=True)
        return code

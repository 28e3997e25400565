"""A tiny trained run directory, and a worker process that runs the ``transformer`` command on
it under a memory cap and a time limit: shared by the tests of hostile run directories.

The worker is one Python process started once: it imports the package, runs a command of each
kind once (so their imports and first-use memory are counted), then caps its address space at
what that took plus ``HEADROOM_MB``. Each request is a command line; the answer is its exit
status, its standard error, any traceback that escaped, and how far its peak memory grew. A
request that runs past its time limit kills the worker (a fresh one answers the next).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
HEADROOM_MB = 512  # a crafted file may not make a command take more than this on top of its usual needs
GROWTH_MB = 300  # peak resident memory a command may add over the warm-up's
# the settings of the tiny run, repeated on resume (a run is resumed only with its own recipe)
TRAIN = ["data.builtin_train=300", "data.builtin_valid=10", "data.builtin_test=10", "data.vocab_size=300",
         "data.max_tokens=600", "model.preset=tiny", "train.warmup=4", "train.precision=fp32", "train.threads=1",
         "train.log_every=1", "train.eval_sentences=0", "train.eval_every=100", "train.alignment_sentences=2",
         "train.tensorboard=false", "train.max_steps=2", "train.save_every=1"]


def build_run(run_dir: Path) -> Path:
    """Train the tiny run (two steps, a checkpoint at each) into ``run_dir``."""
    from transformer.cli import main

    assert main(["train", "--run-dir", str(run_dir), "--quiet", *TRAIN]) == 0
    return run_dir


def translate_argv(run_dir: Path) -> list[str]:
    return ["translate", str(run_dir), "le chat dort .", "--greedy", "--max-len-b", "1", "--no-progress"]


def resume_argv(run_dir: Path) -> list[str]:
    return ["train", "--run-dir", str(run_dir), "--quiet", *TRAIN]


def copy_run(run_dir: Path, to: Path) -> Path:
    if to.exists():
        shutil.rmtree(to)
    shutil.copytree(run_dir, to, symlinks=True)
    return to


_WORKER = r"""
import contextlib, io, json, os, resource, sys, traceback
sys.setrecursionlimit(1000)
from transformer.cli import main
out = os.fdopen(os.dup(1), "w")

def run(argv):
    err, rc, tb = io.StringIO(), None, None
    try:
        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
            rc = main(argv)
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else 2
    except BaseException:
        tb = traceback.format_exc()[-3000:]
    return {"rc": rc, "err": err.getvalue()[-3000:], "traceback": tb,
            "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}

def vm(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024

for warm in json.loads(sys.argv[1]):
    result = run(warm)
    assert result["rc"] == 0 and not result["traceback"], result
cap = vm("VmPeak:") + int(sys.argv[2]) * 2**20
resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
out.write(json.dumps({"ready": True, "rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}) + "\n")
out.flush()
for line in sys.stdin:
    out.write(json.dumps(run(json.loads(line))) + "\n")
    out.flush()
"""


class Worker:
    """The ``transformer`` command in a capped process; ``run(argv)`` gives its answer as a dict."""

    def __init__(self, warm_up: list[list[str]], cwd: Path) -> None:
        self.warm_up, self.cwd, self.proc, self.base_rss = warm_up, cwd, None, 0.0

    def _start(self) -> None:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
        self.proc = subprocess.Popen([sys.executable, "-c", _WORKER, json.dumps(self.warm_up), str(HEADROOM_MB)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, cwd=self.cwd, env=env)
        self.base_rss = self._answer(600)["rss_mb"]

    def _answer(self, timeout: float) -> dict:
        import selectors

        with selectors.DefaultSelector() as sel:
            sel.register(self.proc.stdout, selectors.EVENT_READ)
            if not sel.select(timeout):
                self.close()
                return {"rc": None, "err": "", "traceback": f"no answer within {timeout} s (a hang?)", "rss_mb": 0}
        line = self.proc.stdout.readline()
        if not line:
            code = self.proc.wait()
            self.proc = None
            return {"rc": None, "err": "", "traceback": f"the worker died (exit status {code}: out of memory?)",
                    "rss_mb": 0}
        return json.loads(line)

    def run(self, argv: list[str], timeout: float = 120) -> dict:
        if self.proc is None:
            self._start()
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        answer = self._answer(timeout)
        answer["growth_mb"] = answer["rss_mb"] - self.base_rss if answer["rss_mb"] else 0
        if answer["traceback"] or answer["growth_mb"] >= GROWTH_MB:
            self.close()  # the peak stays in the process: the next command gets a fresh one
        return answer

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


def check_answer(answer: dict, argv: list[str], what: str) -> None:
    """A command either works or ends in one line naming the problem with exit status 2; never a
    traceback, a hang, or more than ``GROWTH_MB`` of memory."""
    assert answer["traceback"] is None, f"{what}: {' '.join(argv[:2])}: {answer['traceback']}"
    assert answer["growth_mb"] < GROWTH_MB, f"{what}: peak memory grew by {answer['growth_mb']:.0f} MB"
    if answer["rc"] != 0:
        lines = answer["err"].strip().splitlines()
        assert answer["rc"] == 2 and len(lines) >= 1, f"{what}: exit {answer['rc']}: {answer['err']}"
        assert lines[-1].startswith(f"transformer {argv[0]}: error: "), f"{what}: {answer['err']}"

"""``transformer train`` for tests/test_multinode.py, launched by torchrun (or python) as a script,
with the failures and records the tests need, chosen by environment variables:

* ``STOP_AFTER_SAVE=K``: every process SIGKILLs itself once the checkpoint of step K is written
  (a job stopped there: pre-empted, or moved to another number of processes);
* ``KILL_RANK=R`` and ``KILL_AT_STEP=K``: on torchrun's first attempt only, the process of rank R
  sends itself ``KILL_SIGNAL`` (default SIGKILL) as it starts step K, writing its pid to ``$PID_FILE`` first;
* ``BATCH_LOG=DIR``: each process appends, for each step, the step and a digest of each of its
  batches to ``DIR/rank-R.jsonl`` (the data order, compared across runs).
"""

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

from transformer.cli import main
from transformer.training.trainer import Trainer

_save, _step = Trainer._save, Trainer._step


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def save(self: Trainer) -> None:
    _save(self)
    if self.state.step == int(os.environ.get("STOP_AFTER_SAVE", "0")):
        os.kill(os.getpid(), signal.SIGKILL)


def step(self: Trainer, model, group):
    number = self.state.step + 1
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    chosen = _rank() == int(os.environ.get("KILL_RANK", "-1")) and number == int(os.environ.get("KILL_AT_STEP", "0"))
    if first_attempt and chosen:
        if pid_file := os.environ.get("PID_FILE"):
            Path(pid_file).write_text(str(os.getpid()))
        os.kill(os.getpid(), getattr(signal, os.environ.get("KILL_SIGNAL", "SIGKILL")))
    if log := os.environ.get("BATCH_LOG"):
        digests = [hashlib.sha1(b.src.numpy().tobytes() + b.tgt_out.numpy().tobytes()).hexdigest()[:12] for b in group]
        with open(Path(log) / f"rank-{_rank()}.jsonl", "a") as f:
            f.write(json.dumps({"step": number, "epoch": self.state.epoch, "batches": digests}) + "\n")
    return _step(self, model, group)


Trainer._save, Trainer._step = save, step

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))

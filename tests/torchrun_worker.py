"""``transformer train`` for tests/test_multinode.py, launched by torchrun (or python) as a script,
with the failures and records the tests need, chosen by environment variables:

* ``STOP_AFTER_SAVE=K``: every process SIGKILLs itself once the checkpoint of step K is written
  (a job stopped there: pre-empted, or moved to another number of processes);
* ``KILL_RANK=R`` and ``KILL_AT_STEP=K``: on torchrun's first attempt only, the process of rank R
  sends itself ``KILL_SIGNAL`` (default SIGKILL) as it starts step K, writing its pid to ``$PID_FILE`` first;
* ``BATCH_LOG=DIR``: each process appends, for each step, the step and a digest of each of its
  batches to ``DIR/rank-R.jsonl`` (the data order, compared across runs);
* ``SYNC_LOG=DIR``: each process writes to ``DIR/rank-R.json``, for each step, the values read back
  (``.item()``, ``.tolist()``) and the collectives called from Python, inside the step and after it
  until the next one (DDP's gradient all-reduce, from C++, is not among them).
"""

import hashlib
import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist

from transformer.cli import main
from transformer.training.trainer import Trainer

_save, _step, _train = Trainer._save, Trainer._step, Trainer._train


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
    if os.environ.get("SYNC_LOG"):
        return _logged_step(self, model, group)
    return _step(self, model, group)


# ------------------------------------------------------------------------------------------- SYNC_LOG
_events: list[tuple[int, str, str]] = []  # (step, "in step" or "after", what)
_trainer: list[Trainer] = []  # the one training now
_phase = ["after"]


def _note(what: str) -> None:
    if _trainer:
        step = _trainer[0].state.step + (1 if _phase[0] == "in step" else 0)
        _events.append((step, _phase[0], what))


def _logged_step(self: Trainer, model, group):
    _phase[0] = "in step"
    try:
        return _step(self, model, group)
    finally:
        _phase[0] = "after"


def _counted(name: str, function):
    def call(*args, **kwargs):
        _note(name)
        return function(*args, **kwargs)
    return call


def _train_logged(self: Trainer):
    for name in ("all_reduce", "broadcast", "all_gather", "all_gather_object", "broadcast_object_list", "barrier",
                 "reduce", "gather", "scatter"):
        setattr(dist, name, _counted(name, getattr(dist, name)))
    torch.Tensor.tolist = _counted("tolist", torch.Tensor.tolist)
    torch.Tensor.item = _counted("item", torch.Tensor.item)
    _trainer.append(self)
    try:
        return _train(self)
    finally:
        _trainer.clear()
        path = Path(os.environ["SYNC_LOG"]) / f"rank-{_rank()}.json"
        path.write_text(json.dumps(_events))


Trainer._save, Trainer._step = save, step
if os.environ.get("SYNC_LOG"):
    Trainer._train = _train_logged

if __name__ == "__main__":
    sys.exit(main(["train", *sys.argv[1:]]))

"""A tiny Trainer run on the built-in corpus, driven by a clock the test controls, and its logged
steps: shared by the tests of the learning-rate cooldown and of the optimizer settings."""

import json
from pathlib import Path

from transformer.config import PRESETS
from transformer.run.config import RunConfig
from transformer.training.trainer import Trainer

TINY = [
    "data.builtin_train=600", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=300",
    "data.max_tokens=600", "model.preset=tiny", "train.warmup=4", "train.lr_scale=2", "train.precision=fp32",
    "train.threads=1", "train.log_every=1", "train.eval_sentences=0", "train.eval_every=100",
    "train.alignment_sentences=0", "train.tensorboard=false", "model.dropout=0.1",
]
D_MODEL = PRESETS["tiny"]["d_model"]


class Clock:
    """A clock that moves one second each time it is read (the trainer reads it once per step)."""

    def __init__(self, start: float = 0.0, fail_at: float | None = None):
        self.now, self.fail_at = start - 1.0, fail_at

    def __call__(self) -> float:
        self.now += 1.0
        if self.fail_at is not None and self.now >= self.fail_at:
            raise KeyboardInterrupt("the run was stopped")
        return self.now


def records(run_dir: Path) -> dict[int, dict]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return {r["step"]: r for r in map(json.loads, lines) if r["kind"] == "train"}


def train(run_dir: Path, *settings: str, clock: Clock | None = None) -> Trainer:
    trainer = Trainer(RunConfig().with_overrides(TINY + list(settings)), run_dir, show_progress=False)
    if clock is not None:
        trainer.clock = clock
    trainer.train()
    return trainer

"""The trainer's optimizer steps (issue 23): the learning rate it logs is the one the step used."""

import json

import pytest
import torch

from transformer.training.config import RunConfig
from transformer.training.schedule import noam_lr
from transformer.training.trainer import Trainer

TINY = [
    "data.builtin_train=300", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=300",
    "data.max_tokens=600", "model.preset=tiny", "train.warmup=20", "train.lr_scale=2", "train.precision=fp32",
    "train.device=cpu", "train.threads=1", "train.log_every=1", "train.eval_sentences=0",
]


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def make_trainer(run_dir, *overrides):
    return Trainer(RunConfig().with_overrides(TINY + list(overrides)), run_dir, show_progress=False)


def test_logged_learning_rate_is_the_one_the_step_used(tmp_path):
    trainer = make_trainer(tmp_path / "run", "train.max_steps=4", "train.eval_every=100")
    used = []
    trainer.optimizer.register_step_pre_hook(lambda opt, args, kwargs: used.append(opt.param_groups[0]["lr"]))
    trainer.train()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = {r["step"]: r["lr"] for r in records if r["kind"] == "train"}
    schedule = [noam_lr(step, d_model=32, warmup=20, scale=2) for step in (1, 2, 3, 4)]
    assert used == pytest.approx(schedule)
    assert list(logged) == [1, 2, 3, 4]
    assert list(logged.values()) == pytest.approx(schedule)  # step s logs lr(s), not lr(s + 1)

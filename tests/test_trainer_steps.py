"""The trainer's optimizer steps (issue 23): the learning rate it logs is the one the step used, and
with fp16 loss scaling the schedule moves on only for steps the scaler did not skip."""

import json

import pytest
import torch

from transformer.run.config import RunConfig
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


class OverflowingScaler(torch.amp.GradScaler):
    """A real GradScaler on the CPU standing in for the CUDA one of train.precision=fp16: on the given
    (1-based) steps every gradient is inf, as when fp16 gradients overflow, so the scaler skips the step."""

    def __init__(self, overflow_steps):
        super().__init__("cpu")
        self.overflow_steps, self.calls = set(overflow_steps), 0

    def unscale_(self, optimizer):
        self.calls += 1
        if self.calls in self.overflow_steps:
            for group in optimizer.param_groups:
                for p in group["params"]:
                    if p.grad is not None:
                        p.grad.fill_(float("inf"))
        super().unscale_(optimizer)


def test_schedule_advances_only_on_steps_the_scaler_took(tmp_path):
    trainer = make_trainer(tmp_path / "run", "train.max_steps=5", "train.eval_every=100")
    trainer.scaler = OverflowingScaler(overflow_steps={2, 3})
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    result = trainer.train()
    assert result.steps == 5 and trainer.scaler.calls == 5
    assert trainer.scaler.get_scale() == 2.0**16 / 4  # backed off twice: two steps were skipped
    assert trainer.scheduler.last_epoch == 3  # steps 1, 4 and 5 were taken
    adam_steps = {float(s["step"]) for s in trainer.optimizer.state.values()}
    assert adam_steps == {3.0}
    assert any(not torch.equal(p, before[name]) for name, p in trainer.model.named_parameters())
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    logged = [r["lr"] for r in records if r["kind"] == "train"]
    lr = [noam_lr(step, d_model=32, warmup=20, scale=2) for step in (1, 2, 3)]
    assert logged == pytest.approx([lr[0], lr[1], lr[1], lr[1], lr[2]])  # skipped steps 2, 3 leave it at lr(2)
    assert trainer.optimizer.param_groups[0]["lr"] == pytest.approx(noam_lr(4, d_model=32, warmup=20, scale=2))


class StubScaler:
    """Only the GradScaler methods the trainer calls: every step is reported skipped (inf/nan gradients)."""

    def __init__(self):
        self.scale_factor = 1024.0

    def scale(self, loss):
        return loss * self.scale_factor

    def unscale_(self, optimizer):
        for group in optimizer.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.grad.div_(self.scale_factor)

    def step(self, optimizer):
        pass  # found inf: optimizer.step() is not called

    def update(self):
        self.scale_factor /= 2  # GradScaler backs off after a skipped step

    def get_scale(self):
        return self.scale_factor


def test_a_skipped_step_leaves_the_learning_rate_where_it_was(tmp_path):
    trainer = make_trainer(tmp_path / "run", "train.max_steps=2", "train.eval_every=100")
    trainer.scaler = StubScaler()
    lr = trainer.optimizer.param_groups[0]["lr"]
    group = next(iter(trainer.batches.iter_from(0, 0)))
    trainer._step(trainer.model, [group])
    assert trainer.scheduler.last_epoch == 0
    assert trainer.optimizer.param_groups[0]["lr"] == lr == pytest.approx(noam_lr(1, d_model=32, warmup=20, scale=2))

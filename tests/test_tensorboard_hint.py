"""The one-line notice that tensorboard is missing: training says it, the demo does not (the demo
is not where anyone watches TensorBoard, and it printed the notice on every first run)."""

import io
import sys

import pytest

import transformer.demo as demo
from transformer.run.config import RunConfig
from transformer.training.tensorboard_log import HINT, TENSORBOARD_DIR
from transformer.training.trainer import Trainer

TINY = ["data.builtin_train=200", "data.builtin_valid=8", "data.builtin_test=4", "data.vocab_size=300",
        "data.max_tokens=600", "model.preset=tiny", "train.warmup=2", "train.precision=fp32", "train.threads=1",
        "train.max_steps=2", "train.eval_every=0", "train.eval_sentences=0", "train.alignment_sentences=0"]


@pytest.fixture
def no_tensorboard(monkeypatch):
    # tensorboard not installed: torch.utils.tensorboard's import of it fails
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    monkeypatch.delitem(sys.modules, "torch.utils.tensorboard", raising=False)


@pytest.mark.parametrize("hint", [True, False])
def test_the_trainer_says_the_notice_only_when_asked(hint, tmp_path, no_tensorboard):
    stream = io.StringIO()
    trainer = Trainer(RunConfig().with_overrides(TINY), tmp_path / "run", stream=stream, tensorboard_hint=hint)
    trainer.train()
    assert stream.getvalue().count(HINT) == (1 if hint else 0)
    assert trainer.state.step == 2 and not (tmp_path / "run" / TENSORBOARD_DIR).exists()


class Stop(Exception):
    pass


def test_the_demo_asks_its_trainer_for_no_notice(tmp_path, monkeypatch):
    asked = {}

    def trainer(cfg, run_dir, **options):
        asked.update(options)
        raise Stop  # what the demo asked for is all this test needs

    monkeypatch.setattr(demo, "Trainer", trainer)
    with pytest.raises(Stop):
        demo.run_demo(tmp_path / "demo", max_steps=1)
    assert asked.get("tensorboard_hint") is False

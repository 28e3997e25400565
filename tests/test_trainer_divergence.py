"""Training that diverges stops: a loss or gradient norm that is not finite ends the run with one line
naming the step (exit status 2), before any checkpoint or model is written from such weights, so the
latest checkpoint stays the last finite one. fp16's skipped steps (the loss scaler's business) are not
divergence. The check reads the device only on the logging cadence and before saving
(tests/test_cuda_engine.py checks that a step itself reads nothing back)."""

import torch
from safetensors.torch import load_file, save_file
from trainer_helpers import TINY

from transformer.cli import main
from transformer.run.config import RunConfig
from transformer.run.checkpoints import latest_checkpoint, list_checkpoints
from transformer.training.trainer import FINITE, Trainer

# A constant rate of 1e12 (after a 4-step warmup): the loss is finite at step 1 and NaN from step 2.
DIVERGING = ["train.schedule=constant", "train.lr=1e12", "train.max_steps=10", "train.save_every=1",
             "train.log_every=5"]


def finite(path) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in load_file(str(path)).values())


def train_command(capsys, *argv: str) -> tuple[int, str]:
    capsys.readouterr()
    code = main(["train", "--quiet", *argv])
    return code, capsys.readouterr().err.strip()


def test_a_diverging_run_stops_naming_the_step_and_keeps_the_last_finite_checkpoint(tmp_path, capsys):
    run = tmp_path / "run"
    code, err = train_command(capsys, "--run-dir", str(run), *TINY, *DIVERGING)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("transformer train: error: training diverged: "), err
    assert "not finite at step 2" in err and "step-00000001" in err
    assert [p.name for p in list_checkpoints(run)] == ["step-00000001"]
    assert latest_checkpoint(run).name == "step-00000001" and finite(run / "checkpoints/step-00000001/model.safetensors")
    assert not (run / "model.safetensors").exists() or finite(run / "model.safetensors")


def test_fine_tuning_from_weights_that_are_not_finite_is_refused_or_stopped(tmp_path, capsys):
    base = tmp_path / "base"
    Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=1"]), base, show_progress=False).train()
    weights = load_file(str(base / "model.safetensors"))
    save_file({k: torch.full_like(v, float("nan")) for k, v in weights.items()}, str(base / "model.safetensors"))
    run = tmp_path / "ft"
    settings = [s for s in TINY if not s.startswith(("model.", "data.vocab_size"))]
    code, err = train_command(capsys, "--init-from", str(base), "--run-dir", str(run), *settings, "train.max_steps=3",
                              "train.save_every=1")
    assert code == 2, err
    assert len(err.splitlines()) == 1 and err.startswith("transformer train: error: "), err
    # refused as the weights are read, or stopped at the first step's loss: either way named, nothing written
    assert "training diverged: the loss or the gradient norm is not finite at step 1" in err or "NaN" in err, err
    assert not list_checkpoints(run) and not (run / "model.safetensors").exists()


def test_steps_the_fp16_loss_scaler_skips_are_not_divergence(tmp_path):
    """A gradient that overflowed (inf, as a too-large loss scale gives in fp16): GradScaler skips the step
    and lowers the scale, and the run goes on (CPU tensors here, with a CPU scaler standing in for CUDA's)."""
    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=3"]), tmp_path / "run", show_progress=False)
    try:
        trainer.scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
        next(trainer.model.parameters()).register_hook(lambda grad: grad * float("inf"))
        before = {k: v.clone() for k, v in trainer.model.state_dict().items()}
        group = [next(trainer.batches.iter_from(0, 0))]
        loss, _ = trainer._step(trainer.model, group)
        assert torch.isfinite(loss) and trainer.scaler.get_scale() == 2.0**15  # the step was skipped
        assert all(torch.equal(before[k], v) for k, v in trainer.model.state_dict().items())
        assert int(trainer.nonfinite_step) == FINITE
        trainer._check_finite(weights=True)  # does not raise
    finally:
        trainer.close()

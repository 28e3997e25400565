"""train.ema: the moving average of the weights, against one recomputed from each step's
checkpoint, across a resume, and its bad settings."""

import copy
import json

import pytest
import torch
from safetensors.torch import load_file

from trainer_helpers import TINY, train
from transformer.run.model import CheckpointError, unique_state_dict
from transformer.run.config import RunConfig
from transformer.run.layout import EMA_FILE
from transformer.training.ema import WeightAverage
from transformer.run.checkpoints import list_checkpoints
from transformer.training.trainer import Trainer


def test_the_average_follows_its_formula_on_a_small_layer():
    layer = torch.nn.Linear(3, 2)
    average = WeightAverage(layer, decay=0.5)
    expected = {n: t.detach().clone() for n, t in layer.state_dict().items()}
    for n in range(4):
        with torch.no_grad():
            for p in layer.parameters():
                p.add_(1.0)
        rate = min(0.5, (1 + n) / (10 + n))  # 0.1, 0.18.., 0.25, 0.3: the warm-up's rates, under 0.5
        expected = {k: rate * v + (1 - rate) * layer.state_dict()[k] for k, v in expected.items()}
        average.update(layer)
    for name, value in expected.items():
        assert torch.allclose(average.tensors[name], value), name
    own = {n: t.clone() for n, t in layer.state_dict().items()}
    with average.swapped_into(layer):
        assert torch.allclose(layer.weight, expected["weight"])
    assert all(torch.equal(layer.state_dict()[n], t) for n, t in own.items())  # given back


def test_the_runs_model_is_the_average_of_its_steps_weights(tmp_path):
    run = tmp_path / "run"
    trainer = train(run, "train.ema=0.8", "train.max_steps=12", "train.save_every=1", "train.keep_last=20")
    steps = list_checkpoints(run)
    assert len(steps) == 12
    fresh = Trainer(RunConfig().with_overrides(TINY + ["train.ema=0.8"]), tmp_path / "fresh", show_progress=False)
    initial = {k: v.detach().float().clone() for k, v in unique_state_dict(fresh.model).items()}  # the same seed
    fresh.close()
    expected = dict(initial)
    for n, step in enumerate(steps):
        weights = load_file(str(step / "model.safetensors"))
        rate = min(0.8, (1 + n) / (10 + n))
        expected = {k: rate * v + (1 - rate) * weights[k].float() for k, v in expected.items()}
    final = load_file(str(run / "model.safetensors"))
    assert final.keys() == expected.keys()
    for name, value in expected.items():
        assert torch.allclose(final[name].float(), value, atol=1e-5), name
    last = load_file(str(steps[-1] / "model.safetensors"))
    assert any(not torch.allclose(final[k], last[k]) for k in last)  # the average, not the last weights
    model = {n: t for n, t in trainer.model.state_dict().items() if n in last}
    assert all(torch.equal(model[k], last[k]) for k in model)  # the trainer's model kept its own weights


def test_a_resumed_run_has_the_uninterrupted_runs_average(tmp_path):
    settings = ("train.ema=0.9", "train.save_every=4", "model.dropout=0.1")
    train(tmp_path / "straight", *settings, "train.max_steps=12")
    train(tmp_path / "resumed", *settings, "train.max_steps=8")
    train(tmp_path / "resumed", *settings, "train.max_steps=12")
    a = load_file(str(tmp_path / "straight" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_checkpoint_with_damaged_records_of_the_average_or_the_log_is_refused_by_name(tmp_path):
    """Values of the wrong kind in trainer_state.json's extra entries: a CheckpointError naming the
    file (the command line's exit status 2), not a plain ValueError or TypeError later in training."""
    run = tmp_path / "run"
    train(run, "train.ema=0.9", "train.save_every=2", "train.max_steps=2")
    state = list_checkpoints(run)[-1] / "trainer_state.json"
    doc = json.loads(state.read_text())
    for key, value, message in (("ema_updates", "3", "ema_updates must be an integer >= 0, got '3'"),
                                ("log_window", {"loss": "abc"}, "bad 'log_window' entry")):
        damaged = copy.deepcopy(doc)
        damaged["trainer"]["extra"][key] = value
        state.write_text(json.dumps(damaged))
        with pytest.raises(CheckpointError, match=f"trainer_state.json: {message}"):
            train(run, "train.ema=0.9", "train.save_every=2", "train.max_steps=4")


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="train.ema"):
        RunConfig().with_overrides(TINY + ["train.ema=1.0"])
    with pytest.raises(ValueError, match="train.ema .* and train.average_last .* each make the run's final model"):
        RunConfig().with_overrides(TINY + ["train.ema=0.99", "train.average_last=2"])
    with pytest.raises(ValueError, match="decay must lie in"):
        WeightAverage(torch.nn.Linear(2, 2), decay=0.0)

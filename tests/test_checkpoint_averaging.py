"""Averaging the last N checkpoints (issue 23): only the newest step checkpoints that ``train.keep_last``
keeps, never the best one kept besides them; ``train.average_last > train.keep_last`` is a config error."""

import pytest
import torch
from safetensors.torch import load_file

from transformer.cli import main
from transformer.config import preset
from transformer.model import Transformer
from transformer.training.averaging import average_checkpoints, average_last
from transformer.run.config import RunConfig
from transformer.run.checkpoints import list_checkpoints
from transformer.training.state import TrainerState, save_checkpoint


@pytest.fixture(autouse=True)
def _one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def save_steps(run_dir, steps, *, keep_last, best_step):
    """Checkpoints at ``steps`` with distinct weights (each step adds 1 to every weight), best at ``best_step``."""
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=20))
    opt = torch.optim.Adam(model.parameters())
    for step in steps:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        state = TrainerState(step=step, best_metric=1.0, best_step=best_step)
        save_checkpoint(run_dir, model=model, optimizer=opt, scheduler=None, state=state, keep_last=keep_last)


def test_average_last_over_keep_last_is_refused_when_the_config_is_read():
    with pytest.raises(ValueError, match=r"train\.average_last \(3\).*train\.keep_last \(2\)"):
        RunConfig().with_overrides(["train.keep_last=2", "train.average_last=3"])
    with pytest.raises(ValueError, match=r"train\.average_last.*train\.keep_last"):
        RunConfig.from_dict({"train": {"average_last": 6}})  # keep_last defaults to 5
    ok = RunConfig().with_overrides(["train.keep_last=2", "train.average_last=2"])
    assert (ok.train.keep_last, ok.train.average_last) == (2, 2)


def test_average_last_never_takes_the_best_checkpoint_kept_besides_keep_last(tmp_path):
    save_steps(tmp_path, range(1, 5), keep_last=2, best_step=1)
    checkpoints = list_checkpoints(tmp_path)
    assert [p.name for p in checkpoints] == ["step-00000001", "step-00000003", "step-00000004"]  # 1: the best
    out = tmp_path / "avg.safetensors"
    with pytest.raises(ValueError, match=r"cannot average the last 3 checkpoints: 2 exist.*best"):
        average_last(tmp_path, 3, out)
    assert not out.exists()
    assert average_last(tmp_path, 2, out) == checkpoints[1:]
    expected = average_checkpoints(checkpoints[1:])
    assert all(torch.equal(t, expected[k]) for k, t in load_file(out).items())


def test_average_command_leaves_out_the_best_checkpoint(tmp_path, capsys):
    save_steps(tmp_path, range(1, 5), keep_last=2, best_step=1)
    out = tmp_path / "avg.safetensors"
    assert main(["average", str(tmp_path), "--last", "3", "--output", str(out)]) == 2
    assert "cannot average the last 3 checkpoints: 2 exist" in capsys.readouterr().err
    assert not out.exists()
    assert main(["average", str(tmp_path), "--last", "2", "--output", str(out)]) == 0
    assert "step-00000003, step-00000004" in capsys.readouterr().out


def test_best_checkpoint_inside_the_kept_window_is_averaged_like_any_other(tmp_path):
    save_steps(tmp_path, range(1, 4), keep_last=3, best_step=2)
    assert average_last(tmp_path, 3, tmp_path / "avg.safetensors") == list_checkpoints(tmp_path)
    save_steps(tmp_path / "b", range(1, 6), keep_last=3, best_step=4)  # best among the newest 3
    assert [p.name for p in average_last(tmp_path / "b", 3, tmp_path / "avg.safetensors")] == [
        "step-00000003", "step-00000004", "step-00000005"]

"""The command line: help, info, and clean errors."""

import shutil
import subprocess
import sys
from pathlib import Path

from transformer import __version__
from transformer.cli import main


def test_info_prints_parameter_count_and_runs_a_forward_pass(capsys):
    assert main(["info", "--preset", "tiny", "--vocab", "100", "--batch", "2", "--length", "5"]) == 0
    out = capsys.readouterr().out
    assert "encoder.layers.1" in out and "decoder.layers.1" in out
    assert "parameters:" in out and "forward pass: batch 2 x 5 -> logits (2, 5, 100)" in out


def test_bad_arguments_exit_non_zero_with_a_message(capsys):
    assert main(["info", "--vocab", "0"]) == 2
    assert "--vocab must be >= 1" in capsys.readouterr().err


def test_console_script_help():
    """The installed ``transformer`` command (the console script of pyproject.toml, beside this
    Python) runs and lists every subcommand; ``python -m transformer.cli`` prints the same."""
    script = shutil.which("transformer", path=str(Path(sys.executable).parent))
    assert script is not None, f"no 'transformer' console script in {Path(sys.executable).parent}: pip install -e ."
    result = subprocess.run([script, "--help"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("usage: transformer ")
    for command in ("demo", "train", "translate", "evaluate", "attend", "report", "average", "data", "serve", "info",
                    "import-hf", "export"):
        assert f"    {command} " in result.stdout or f"    {command}\n" in result.stdout, command
    assert "exit status: 0 success" in " ".join(result.stdout.split())
    module = subprocess.run([sys.executable, "-m", "transformer.cli", "--help"], capture_output=True, text=True)
    assert module.returncode == 0 and module.stdout == result.stdout
    version = subprocess.run([script, "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == f"transformer {__version__}"


# ------------------------------------------------------------------------------------- average --output
def _checkpoints(run_dir, steps=(1, 2)):
    """Checkpoints at ``steps`` of a tiny model, each with different weights."""
    import torch

    from transformer.config import preset
    from transformer.model import Transformer
    from transformer.training.state import TrainerState, save_checkpoint

    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=20))
    optimizer = torch.optim.Adam(model.parameters())
    for step in steps:
        with torch.no_grad():
            for p in model.parameters():
                p.add_(1.0)
        save_checkpoint(run_dir, model=model, optimizer=optimizer, scheduler=None,
                        state=TrainerState(step=step, best_metric=1.0, best_step=step), keep_last=len(steps))


def test_average_refuses_an_existing_output_unless_overwrite(tmp_path, capsys):
    """``average --output FILE`` never replaces an existing file unless told to (issue 27): a file
    that is not a checkpoint was silently replaced. With --overwrite it is replaced through a
    temporary file (nothing left beside it)."""
    import torch
    from safetensors.torch import load_file

    from transformer.training.averaging import average_checkpoints
    from transformer.run.checkpoints import list_checkpoints

    run = tmp_path / "run"
    _checkpoints(run)
    out = tmp_path / "notes.txt"
    out.write_text("not a checkpoint\n")
    assert main(["average", str(run), "--last", "2", "--output", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"{out} already exists" in err[0] and "--overwrite" in err[0], err
    assert out.read_text() == "not a checkpoint\n"
    assert main(["average", str(run), "--last", "2", "--output", str(out), "--overwrite"]) == 0
    expected = average_checkpoints(list_checkpoints(run))
    assert all(torch.equal(t, expected[k]) for k, t in load_file(out).items())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "run"]  # no temporary file left
    fresh = tmp_path / "new" / "avg.safetensors"  # a new file needs no --overwrite
    assert main(["average", str(run), "--last", "2", "--output", str(fresh)]) == 0 and fresh.is_file()

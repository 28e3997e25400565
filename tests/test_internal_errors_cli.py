"""A bug is never printed as the user's mistake: ``transformer train``, ``info`` and ``average``.

A bug is planted behind each command (an internal function replaced by one raising a plain
``ValueError`` or a ``KeyError``): the command prints the traceback and an "internal error" line
and exits 1, never the one line ``transformer CMD: error: ...`` with exit status 2 that a mistake
in the command gets (which a plain ``ValueError`` got before ``transformer.errors.UserError``).
Real mistakes (a setting out of range, a missing config file) still get that line and exit 2. One
case runs in a real ``python -m transformer.cli`` process, the bug planted by a ``sitecustomize``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from cli_helpers import run_cli

# A few seconds of training data; the bug stops the run long before any training step.
TINY = ["data.builtin_train=200", "data.builtin_valid=10", "data.builtin_test=4", "data.vocab_size=300",
        "model.preset=tiny", "train.max_steps=1", "train.threads=1"]
INFO = ["info", "--preset", "tiny", "--vocab", "100", "--batch", "1", "--length", "4"]
BUGS = [ValueError("planted"), KeyError("planted")]


def planted(exception: BaseException):
    """A function (or method) that raises ``exception`` whatever it is given."""
    def raise_it(*args, **kwargs):
        raise exception
    return raise_it


def assert_a_bug(result, command: str, exception: BaseException) -> None:
    """Exit status 1, the traceback ending in ``exception`` and the internal error line, no usage line."""
    assert result.returncode == 1, result.stderr
    assert "Traceback (most recent call last)" in result.stderr
    assert f"{type(exception).__name__}: {exception}" in result.stderr  # KeyError: 'planted'
    assert f"transformer {command}: internal error (a bug, not a mistake in the command)" in result.stderr
    assert f"transformer {command}: error:" not in result.stderr  # never the line that says the command was wrong


def assert_a_mistake(result, command: str, message: str) -> None:
    """Exit status 2 and exactly one line naming the mistake, no traceback."""
    assert result.returncode == 2, result.stderr
    assert result.stderr == f"transformer {command}: error: {message}\n"


@pytest.mark.parametrize("exception", BUGS, ids=["ValueError", "KeyError"])
def test_a_bug_behind_transformer_train_is_a_traceback_and_exit_1(tmp_path, monkeypatch, exception):
    from transformer.text.tokenizer import BPETokenizer

    monkeypatch.setattr(BPETokenizer, "train", classmethod(planted(exception)))  # training's tokenizer
    result = run_cli("train", "--run-dir", tmp_path / "run", "--quiet", *TINY)
    assert_a_bug(result, "train", exception)


@pytest.mark.parametrize("exception", BUGS, ids=["ValueError", "KeyError"])
def test_a_bug_behind_transformer_info_is_a_traceback_and_exit_1(monkeypatch, exception):
    from transformer.model.transformer import Transformer

    monkeypatch.setattr(Transformer, "num_parameters", planted(exception))
    assert_a_bug(run_cli(*INFO), "info", exception)


@pytest.mark.parametrize("exception", BUGS, ids=["ValueError", "KeyError"])
def test_a_bug_behind_transformer_average_is_a_traceback_and_exit_1(tmp_path, monkeypatch, exception):
    monkeypatch.setattr("transformer.training.averaging.average_last", planted(exception))
    result = run_cli("average", tmp_path, "--last", "2")
    assert_a_bug(result, "average", exception)


def test_mistakes_in_transformer_train_are_still_exit_2(tmp_path):
    assert_a_mistake(run_cli("train", "--run-dir", tmp_path / "run", *TINY, "train.lr_scale=nan"), "train",
                     "train.lr_scale must be > 0 and finite, got nan")
    missing = tmp_path / "missing.yaml"
    assert_a_mistake(run_cli("train", "--run-dir", tmp_path / "run", "--config", missing), "train",
                     f"config file not found: {missing}")
    assert not (tmp_path / "run").exists()  # refused before anything was written


def test_mistakes_in_transformer_info_and_average_are_still_exit_2(tmp_path):
    assert_a_mistake(run_cli("info", "--preset", "tiny", "--vocab", "0"), "info", "--vocab must be >= 1, got 0")
    assert_a_mistake(run_cli("average", tmp_path, "--last", "2"), "average",
                     f"cannot average the last 2 checkpoints: 0 exist in {tmp_path / 'checkpoints'}")


def test_a_bug_in_a_real_process_is_a_traceback_and_exit_1(tmp_path):
    """``python -m transformer.cli``: the status reaches the process, the traceback its stderr."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        from transformer.model.transformer import Transformer

        def num_parameters(self):
            raise ValueError("planted")

        Transformer.num_parameters = num_parameters
    """), encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "transformer.cli", *INFO], capture_output=True, text=True, env=env,
                          timeout=300)
    assert_a_bug(done, "info", ValueError("planted"))

"""The command line: help, info, and clean errors."""

import subprocess
import sys

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
    result = subprocess.run([sys.executable, "-m", "transformer.cli", "--help"], capture_output=True, text=True)
    assert result.returncode == 0
    assert "info" in result.stdout

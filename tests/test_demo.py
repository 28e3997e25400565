"""The main job: `transformer demo` end to end."""

import json
import subprocess
import sys

import pytest

from transformer.demo import free_run_dir


def run_demo(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer.cli", "demo", "--run-dir", str(tmp_path / "demo"), *extra],
                          capture_output=True, text=True, timeout=900)


def test_demo_pipeline_writes_a_run_directory_and_a_json_summary(tmp_path):
    result = run_demo(tmp_path, "--steps", "10", "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary) >= {"bleu", "exact_match", "wall_seconds", "run_dir", "translations", "bleu_signature"}
    assert "je suis étudiant" in summary["translations"]
    assert summary["test_sentences"] == 500
    run = tmp_path / "demo"
    for name in ("config.json", "model.safetensors", "tokenizer.json", "metrics.jsonl", "demo_summary.json",
                 "training_curve.png"):
        assert (run / name).exists(), name
    assert "held-out test (500 sentences never seen in training)" in result.stdout
    # a second demo never overwrites the first
    assert free_run_dir(run) == tmp_path / "demo-2"


def test_bad_time_limit(tmp_path):
    result = run_demo(tmp_path, "--time-limit", "0")
    assert result.returncode == 2 and "--time-limit must be > 0" in result.stderr


@pytest.mark.slow
def test_demo_meets_its_targets(tmp_path):
    """Issue target on a 2-core CPU: under 5 minutes, held-out BLEU >= 90, exact match >= 70%."""
    result = run_demo(tmp_path, "--json")
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["wall_seconds"] < 300
    assert summary["bleu"] >= 90 and summary["exact_match"] >= 0.70
    assert summary["translations"]["je suis étudiant"] == "i am a student"

"""The main job: `transformer demo` end to end.

The default run checks a short demo (40 steps, ``short_demo_run`` in conftest.py) end to end; the
full demo's figures and translations, as docs/getting-started.md shows them, are checked against the
900-step model (``demo_run``) by the test marked ``slow`` (``pytest -m slow tests/test_demo.py``).
"""

import json
import subprocess
from pathlib import Path

import pytest
from cli_helpers import run_cli

from transformer.demo import DEMO_SENTENCES, free_run_dir

ROOT = Path(__file__).resolve().parents[1]


def run_demo(tmp_path, *extra: str) -> subprocess.CompletedProcess:
    """``transformer demo --run-dir TMP/demo EXTRA`` in this process (tests/cli_helpers.py)."""
    return run_cli("demo", "--run-dir", tmp_path / "demo", *extra)


def test_demo_pipeline_writes_a_run_directory_and_a_json_summary(short_demo_run):
    run, result = short_demo_run  # `transformer demo --steps 40 --json`
    assert result.returncode == 0, result.stderr[-2000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert set(summary) >= {"bleu", "exact_match", "wall_seconds", "run_dir", "translations", "bleu_signature"}
    assert "je suis étudiant" in summary["translations"]
    assert summary["test_sentences"] == 500
    assert summary["complete"] and summary["train_steps"] == summary["steps_planned"] == 40
    assert summary["stopped_by"] is None and summary["continue_with"] is None
    assert "trained 40 of 40 steps" in result.stdout and "NOT FINISHED" not in result.stdout
    for name in ("config.json", "model.safetensors", "tokenizer.json", "metrics.jsonl", "demo_summary.json",
                 "training_curve.png"):
        assert (run / name).exists(), name
    assert "held-out test (500 sentences never seen in training)" in result.stdout
    # a second demo never overwrites the first
    assert free_run_dir(run) == run.parent / "demo-2"


def test_bad_time_limit(tmp_path):
    result = run_demo(tmp_path, "--time-limit", "0")
    assert result.returncode == 2 and "--time-limit must be > 0" in result.stderr


def test_a_demo_stopped_by_its_time_limit_says_so_and_resumes_where_it_stopped(tmp_path):
    run = tmp_path / "demo"
    stopped = run_demo(tmp_path, "--steps", "30", "--time-limit", "0.5", "--json")
    assert stopped.returncode == 0, stopped.stderr[-2000:]
    summary = json.loads(stopped.stdout.strip().splitlines()[-1])
    assert not summary["complete"] and 1 <= summary["train_steps"] < 30 and summary["steps_planned"] == 30
    assert summary["stopped_by"] == "the time limit (0.5 s)"
    assert summary["continue_with"] == f"transformer demo --resume --run-dir {run}"
    last_lines = stopped.stdout.strip().splitlines()[-3:]
    assert any(line.startswith("NOT FINISHED: training stopped at the time limit (0.5 s) after "
                               f"{summary['train_steps']} of 30 steps") and summary["continue_with"] in line
               for line in last_lines)
    assert json.loads((run / "demo_summary.json").read_text())["complete"] is False

    resumed = run_demo(tmp_path, "--resume", "--json")  # the same --run-dir: no demo-2
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["complete"] and summary["train_steps"] == 30 and summary["run_dir"] == str(run)
    assert not (tmp_path / "demo-2").exists()
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    steps = [m["step"] for m in metrics if m.get("kind") == "train"]
    assert steps == sorted(set(steps)), "the resumed run repeated or skipped logged steps"


def test_resume_needs_a_demo_run_and_keeps_its_steps(tmp_path):
    missing = run_demo(tmp_path, "--resume")
    assert missing.returncode == 2
    assert "holds no demo run to continue" in missing.stderr and "without --resume" in missing.stderr
    (tmp_path / "demo").mkdir()
    steps = run_demo(tmp_path, "--resume", "--steps", "5")
    assert steps.returncode == 2 and "--steps does not go with --resume" in steps.stderr


def shown_translations() -> list[list[str]]:
    """The ``source  ->  translation`` pairs docs/getting-started.md shows under "The demo prints:"."""
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    shown = page[page.index("The demo prints:"):]
    shown = shown[shown.index("```text") + 8:shown.index("```", shown.index("```text") + 8)]
    return [line.split("  ->  ") for line in shown.strip().splitlines()]


def test_the_page_shows_a_translation_of_each_demo_sentence(short_demo_run):
    """The sentences docs/getting-started.md shows are the ones the demo translates, in its order
    (their translations by the trained model: the slow test below)."""
    run_dir, result = short_demo_run
    pairs = shown_translations()
    assert len(pairs) == len(DEMO_SENTENCES) and [src for src, _ in pairs] == DEMO_SENTENCES
    assert all(len(pair) == 2 and pair[1] for pair in pairs)
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert list(summary["translations"]) == DEMO_SENTENCES
    assert (run_dir / "attention" / "attention.html").is_file()


@pytest.mark.slow  # trains the demo's 900 steps (a few minutes); the default run checks a 40-step demo
def test_the_demo_model_meets_the_documented_figures(demo_run):
    """The model the demo trains (900 steps): held-out sacreBLEU within 2 of the documented 97.6, and
    the translations docs/getting-started.md shows."""
    run_dir, summary = demo_run
    assert summary["complete"] and summary["train_steps"] == 900
    assert summary["bleu"] >= 95.6 and summary["exact_match"] >= 0.90, summary
    pairs = shown_translations()
    assert len(pairs) == len(DEMO_SENTENCES) and [src for src, _ in pairs] == DEMO_SENTENCES
    assert summary["translations"] == dict(pairs)
    assert (run_dir / "attention" / "attention.html").is_file()

"""benchmarks/gpu_check.py, the one command a lent GPU machine runs: its dry run (every stage on the
CPU at tiny sizes) with the packages that machine lacks hidden (tests/gpu_machine/), and its stage
runner (a stage past its limit is stopped with its children, and the next one runs)."""

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import gpu_check  # noqa: E402


def test_the_dry_run_runs_every_stage_without_the_packages_the_gpu_machine_lacks(tmp_path):
    out = tmp_path / "out"
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(ROOT / "tests" / "gpu_machine"), str(ROOT)]))
    done = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--dry-run", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-3000:]
    assert sorted(p.name for p in out.iterdir()) == ["gpu_check.json", "gpu_check.log"]  # flat, two files
    results = json.loads((out / "gpu_check.json").read_text())
    assert results["dry_run"] and results["machine"]["bf16_matmul_peak_tflops"] > 0
    assert results["machine"]["packages"]["ctranslate2"] is None  # hidden, as on the GPU machine
    stages = {s["name"]: s for s in results["stages"]}
    assert list(stages) == list(gpu_check.STAGES)

    tests = stages["tests"]["result"]  # every selected test exists and skips here (no CUDA)
    assert stages["tests"]["status"] == "done" and tests["skipped"] == len(tests["tests"]) == 5
    assert all("no CUDA device" in t["message"] for t in tests["tests"].values())

    step = stages["train_step"]["result"]["sizes"]["tiny, random 256 tokens/step, fp32"]
    assert set(step) == set(gpu_check.CONTENDERS)
    compiled = step["ours (compiled)"]
    assert compiled["compiled"] and compiled["recompiles"] == 0 and compiled["compile_seconds"] > 0

    tables = stages["decoding"]["result"]["tables"]
    assert [t["strategy"] for t in tables] == ["greedy", "beam"]
    assert all({"ours fp32", "generate fp32"} <= set(t["rows"]) and not any("CT2" in n for n in t["rows"])
               for t in tables)
    assert "CTranslate2 is not installed" in (out / "gpu_check.log").read_text()

    assert stages["serve"]["status"] == "skipped" and "fastapi" in stages["serve"]["reason"]
    assert stages["multi30k"]["status"] == "done" and stages["multi30k"]["result"]["train_steps"] >= 1


def test_a_stage_past_its_limit_is_stopped_with_its_children_and_the_next_one_runs(tmp_path):
    check = gpu_check.Check(tmp_path, dry_run=True, budget=120)
    pid_file = tmp_path / "child.pid"
    slow = ("import subprocess, sys, time\n"
            "child = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(child.pid))\n"
            "print('waiting', flush=True)\n"
            "time.sleep(120)\n")
    started = time.monotonic()
    stopped = check.run("slow", [sys.executable, "-c", slow], cap=3)
    assert stopped["status"] == "timed out" and stopped["exit_code"] is None and time.monotonic() - started < 60
    child = int(pid_file.read_text())
    for _ in range(50):  # the child was killed with the stage; wait until it is reaped by init
        if not Path(f"/proc/{child}").exists() or "Z" in Path(f"/proc/{child}/stat").read_text().split()[2]:
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"the stage's child {child} still runs")
    nxt = check.run("next", [sys.executable, "-c", "print('{\"figure\": 1}')"], cap=60, read=gpu_check.last_json_line)
    assert nxt["status"] == "done" and nxt["result"] == {"figure": 1}
    failed = check.run("failing", [sys.executable, "-c", "raise SystemExit(3)"], cap=60)
    assert failed["status"] == "failed" and failed["exit_code"] == 3
    saved = json.loads((tmp_path / gpu_check.RESULTS).read_text())  # written after each stage
    assert [(s["name"], s["status"]) for s in saved["stages"]] == [("slow", "timed out"), ("next", "done"),
                                                                    ("failing", "failed")]
    log = (tmp_path / gpu_check.LOG).read_text()
    assert "  waiting" in log and "== slow: timed out" in log

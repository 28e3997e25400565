"""Training end to end: exact resume after SIGKILL, torchrun data parallelism, run directories, bad input.

The commands run through ``transformer.cli.main`` in the test's process (starting a process costs
seconds of imports), except the run killed with SIGKILL and the torchrun launch. The torchrun test
is marked slow: tests/test_multinode.py's default test of two processes against one (two torchrun
nodes against one process accumulating twice) checks the same.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import run_cli
from safetensors.torch import load_file

from transformer.run.model import load_model
from transformer.run.config import RunConfig
from transformer.run.checkpoints import list_checkpoints
from transformer.run.directory import RunDirectoryError
from transformer.training.trainer import Trainer

TINY = [
    "data.builtin_train=1500", "data.builtin_valid=40", "data.builtin_test=40", "data.vocab_size=400",
    "data.max_tokens=800", "model.preset=tiny", "train.warmup=20", "train.lr_scale=2", "train.precision=fp32",
    "train.threads=1", "train.log_every=1", "train.eval_sentences=10",
]


cli = run_cli  # the commands through transformer.cli.main in this process (tests/cli_helpers.py)


def cli_process(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "transformer.cli", *args], capture_output=True, text=True, **kwargs)


def train_losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}


def test_killed_run_resumes_with_identical_losses(tmp_path):
    settings = TINY + ["train.max_steps=24", "train.save_every=4", "train.eval_every=100", "model.dropout=0.1"]
    straight = tmp_path / "straight"
    done = cli("train", "--run-dir", str(straight), "--quiet", *settings)
    assert done.returncode == 0, done.stderr
    reference = train_losses(straight)
    assert sorted(reference) == list(range(1, 25))

    killed = tmp_path / "killed"
    proc = subprocess.Popen([sys.executable, "-m", "transformer.cli", "train", "--run-dir", str(killed), "--quiet", *settings],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while time.time() < deadline:  # wait until a checkpoint exists and training has moved past it
        if list_checkpoints(killed) and len(train_losses(killed) if (killed / "metrics.jsonl").exists() else {}) >= 10:
            break
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    stopped_at = max(train_losses(killed))
    assert stopped_at < 24, "the run finished before it could be killed"

    resumed = cli("train", "--run-dir", str(killed), "--quiet", "--json", *settings)
    assert resumed.returncode == 0, resumed.stderr
    summary = json.loads(resumed.stdout.strip().splitlines()[-1])
    assert summary["resumed_from"] is not None and summary["resumed_from"] <= stopped_at
    assert train_losses(killed) == reference  # the same loss, step for step
    a = load_file(str(straight / "checkpoints" / "step-00000024" / "model.safetensors"))
    b = load_file(str(killed / "checkpoints" / "step-00000024" / "model.safetensors"))
    assert a.keys() == b.keys() and all((a[k] == b[k]).all() for k in a)


def test_a_finished_run_goes_on_with_a_longer_run_length_as_one_run_would(tmp_path):
    """epochs, max_steps and time_limit only say how long to train: a resume may set them anew."""
    settings = TINY + ["train.save_every=3", "train.eval_every=100", "model.dropout=0.1"]
    straight = cli("train", "--run-dir", str(tmp_path / "straight"), "--quiet", "--json", *settings, "train.max_steps=12")
    assert straight.returncode == 0, straight.stderr
    first = cli("train", "--run-dir", str(tmp_path / "two"), "--quiet", *settings, "train.max_steps=6")
    assert first.returncode == 0, first.stderr
    longer = cli("train", "--run-dir", str(tmp_path / "two"), "--quiet", "--json", *settings, "train.max_steps=12",
                 "train.epochs=50", "train.time_limit=3600")
    assert longer.returncode == 0, longer.stderr
    one, two = (json.loads(r.stdout.strip().splitlines()[-1]) for r in (straight, longer))
    assert two["resumed_from"] == 6 and two["steps"] == 12
    assert train_losses(tmp_path / "two") == train_losses(tmp_path / "straight")
    assert two["target_tokens"] == one["target_tokens"] > 0  # counted across the resume
    recipe = cli("train", "--run-dir", str(tmp_path / "two"), "--quiet", *settings, "train.max_steps=12",
                 "train.label_smoothing=0.2")
    assert recipe.returncode == 2 and "train.label_smoothing" in recipe.stderr  # the recipe itself may not change


@pytest.mark.slow  # two torch processes and a third; test_multinode.py's default test checks the same
def test_two_process_gloo_run_equals_one_process_with_the_same_global_batch(tmp_path):
    settings = TINY + ["train.max_steps=6", "train.eval_every=100", "train.eval_sentences=0", "model.dropout=0.0"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    ddp = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m", "transformer.cli",
         "train", "--run-dir", str(tmp_path / "ddp"), "--quiet", *settings],
        capture_output=True, text=True, env=env, timeout=300,
    )
    assert ddp.returncode == 0, ddp.stderr[-3000:]
    single = cli_process("train", "--run-dir", str(tmp_path / "single"), "--quiet", *settings, "train.accumulate=2",
                         env=env)
    assert single.returncode == 0, single.stderr
    a = load_file(str(tmp_path / "ddp" / "checkpoints" / "step-00000006" / "model.safetensors"))
    b = load_file(str(tmp_path / "single" / "checkpoints" / "step-00000006" / "model.safetensors"))
    assert a.keys() == b.keys()
    for name in a:
        assert (a[name] - b[name]).abs().max() < 1e-5, name
    assert train_losses(tmp_path / "ddp").keys() == train_losses(tmp_path / "single").keys()
    for step, loss in train_losses(tmp_path / "ddp").items():
        assert loss == pytest.approx(train_losses(tmp_path / "single")[step], rel=1e-5)


def test_run_directory_of_another_configuration_is_refused_untouched(tmp_path):
    run = tmp_path / "run"
    cfg = RunConfig().with_overrides(TINY + ["train.max_steps=2", "train.eval_sentences=0"])
    Trainer(cfg, run, show_progress=False).train()
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()}
    other = cfg.with_overrides(["model.d_ff=128"])
    with pytest.raises(RunDirectoryError, match=r"different configuration \(model.d_ff: None there, 128 now"):
        Trainer(other, run, show_progress=False)
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.is_file()} == before
    result = cli("train", "--run-dir", str(run), *TINY, "train.max_steps=2", "model.d_ff=128")
    assert result.returncode == 2 and "different configuration" in result.stderr and "Traceback" not in result.stderr


def test_training_writes_progress_metrics_plot_and_keeps_checkpoints(tmp_path):
    run = tmp_path / "run"
    result = cli("train", "--run-dir", str(run), *TINY, "train.max_steps=12", "train.eval_every=3", "train.keep_last=2",
                 "train.log_every=4", "train.average_last=2")
    assert result.returncode == 0, result.stderr
    lines = [l for l in result.stderr.splitlines() if l.startswith("step ")]
    assert len(lines) == 3 and "loss" in lines[0] and "tok/s" in lines[0] and "eta" in lines[0]  # plain lines, not a bar
    assert "validation at step 3" in result.stderr and "averaged the last 2 checkpoints" in result.stderr
    assert (run / "training_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    kinds = [json.loads(l)["kind"] for l in (run / "metrics.jsonl").read_text().splitlines()]
    assert kinds.count("valid") == 4 and kinds.count("train") == 3
    names = [p.name for p in list_checkpoints(run)]
    state = json.loads((run / "checkpoints" / names[-1] / "trainer_state.json").read_text())
    best = state["trainer"]["best_step"]
    assert names[-2:] == ["step-00000009", "step-00000012"]
    assert f"step-{best:08d}" in names
    model = load_model(run)  # the run directory is a model directory
    assert model.config.d_model == 32
    avg = cli("average", str(run), "--last", "2", "--output", str(tmp_path / "avg.safetensors"))
    assert avg.returncode == 0 and "averaged 2 checkpoints" in avg.stdout
    too_many = cli("average", str(run), "--last", "9")
    assert too_many.returncode == 2 and "Traceback" not in too_many.stderr


@pytest.mark.parametrize(
    "files, message",
    [
        ({"a.fr": "un\ndeux\n", "a.en": "one\n"}, "a.fr.*2.*a.en.*1|2.*1"),
        ({"a.fr": b"bon\n\xff\xfe\n", "a.en": "good\nbad\n"}, r"a.fr: line 2: invalid UTF-8"),
        ({"a.fr": "\n\n", "a.en": "\n\n"}, "empty"),
    ],
)
def test_bad_corpus_files_give_clear_errors(tmp_path, files, message):
    for name, content in files.items():
        path = tmp_path / name
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    result = cli("train", "--run-dir", str(tmp_path / "run"), "data.corpus=files", f"data.train_src={tmp_path / 'a.fr'}",
                 f"data.train_tgt={tmp_path / 'a.en'}", "train.max_steps=1")
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    import re

    assert re.search(message, result.stderr), result.stderr


def test_missing_file_and_bad_config_key(tmp_path):
    result = cli("train", "--run-dir", str(tmp_path / "run"), "data.corpus=files", "data.train_src=/nope.fr",
                 "data.train_tgt=/nope.en")
    assert result.returncode == 2 and "/nope.fr" in result.stderr
    result = cli("train", "--run-dir", str(tmp_path / "run"), "train.epoch=3")
    assert result.returncode == 2 and "unknown config key 'train.epoch'" in result.stderr and "epochs" in result.stderr
    assert not (tmp_path / "run").exists()

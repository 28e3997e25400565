"""Past one machine with torchrun: two "nodes" on 127.0.0.1, a run moved between 2 processes and 1,
a worker killed (or hung) mid-run, and a resume on a number of processes that cannot share a step.

Every run here is checked against one independent reference: a single process that accumulates
2 batches per step (no torch.distributed at all), for its losses, its final weights and the
batches of each step (``tests/torchrun_worker.py`` logs a digest of every batch a process uses).
Each launch starts torch in every process (a few seconds of CPU each); the tests that launch
three times or restart are marked slow (``pytest -m slow tests/test_multinode.py``).
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli
from safetensors.torch import load_file

from transformer.model import build_model
from transformer.training import distributed as D
from transformer.run.model import load_config
from transformer.run.checkpoints import latest_checkpoint
from transformer.training.state import TrainerState, load_checkpoint, save_checkpoint

WORKER = str(Path(__file__).with_name("torchrun_worker.py"))
STEPS = 12
# 340 pairs in batches of 1600 padded tokens: 11 batches an epoch, so a step of 2 batches leaves one
# over at each epoch's end and the 12 steps cross two epoch boundaries.
TINY = [
    "data.builtin_train=340", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=400",
    "data.max_tokens=1600", "model.preset=tiny", "model.dropout=0.0", "train.warmup=20", "train.lr_scale=2",
    "train.precision=fp32", "train.threads=1", "train.log_every=1", "train.eval_sentences=0", "train.eval_every=100",
    "train.save_every=2", f"train.max_steps={STEPS}", "train.tensorboard=false",
]
SHORT = [s for s in TINY if not s.startswith("train.max_steps=")] + ["train.max_steps=2"]
# Two processes and one end with the same numbers to the last bit here (a sum of two terms does not depend
# on its order, and the gradient scale 2 / tokens is exact); the tolerance allows another reduction order.
TOLERANCE = 1e-6


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def environment(**extra: str) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS="1", **extra)


def standalone(run_dir: Path, *args: str, processes: int = 2, restarts: int = 0, env=None, timeout: float = 300):
    """One torchrun on this machine."""
    return subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(processes),
         "--max-restarts", str(restarts), WORKER, "--run-dir", str(run_dir), *args],
        capture_output=True, text=True, env=env or environment(), timeout=timeout)


def two_nodes(run_dir: Path, *args: str, env=None) -> list[subprocess.Popen]:
    """Two torchrun agents, one process each, meeting through a c10d rendezvous on 127.0.0.1, as two machines would."""
    port = free_port()
    command = [sys.executable, "-m", "torch.distributed.run", "--nnodes", "2", "--nproc-per-node", "1",
               "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", f"test-{port}",
               WORKER, "--run-dir", str(run_dir), *args]
    return [subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=env or environment(), start_new_session=True) for _ in range(2)]


def finish(agents: list[subprocess.Popen], timeout: float = 300) -> list[tuple[int, str]]:
    """Wait for the agents; any still running after ``timeout`` seconds (a hang) is killed and reported."""
    deadline, results = time.monotonic() + timeout, []
    try:
        for agent in agents:
            out, _ = agent.communicate(timeout=max(deadline - time.monotonic(), 1))
            results.append((agent.returncode, out))
    finally:
        for agent in agents:
            if agent.poll() is None:
                os.killpg(agent.pid, signal.SIGKILL)  # the agent and its workers: their own session
                agent.communicate()
    return results


def train_losses(run_dir: Path) -> dict[int, float]:
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss"] for r in records if r["kind"] == "train"}


def step_batches(log_dir: Path) -> dict[int, list[str]]:
    """The batches every step used, all processes together (a step redone after a failure counts once)."""
    steps: dict[int, list[str]] = {}
    for path in log_dir.glob("rank-*.jsonl"):
        latest = {r["step"]: r["batches"] for r in map(json.loads, path.read_text().splitlines())}
        for step, batches in latest.items():
            steps.setdefault(step, []).extend(batches)
    return {step: sorted(batches) for step, batches in sorted(steps.items())}


def assert_same_run(run_dir: Path, log_dir: Path, reference: tuple[Path, Path]) -> None:
    ref_dir, ref_log = reference
    assert step_batches(log_dir) == step_batches(ref_log)  # the same batches at every step
    losses, expected = train_losses(run_dir), train_losses(ref_dir)
    assert sorted(losses) == list(range(1, STEPS + 1))
    for step in expected:
        assert losses[step] == pytest.approx(expected[step], rel=TOLERANCE, abs=0), step
    name = f"checkpoints/step-{STEPS:08d}/model.safetensors"
    a, b = load_file(str(run_dir / name)), load_file(str(ref_dir / name))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=TOLERANCE) for k in a)


@pytest.fixture(scope="module", autouse=True)
def data_cache(tmp_path_factory):
    """The runs of this module share a tokenized-data cache of their own."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TRANSFORMER_DATA_CACHE", str(tmp_path_factory.mktemp("data-cache")))
        yield


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> tuple[Path, Path]:
    """One process, 2 batches accumulated per step, uninterrupted."""
    run_dir, log = tmp_path_factory.mktemp("reference") / "run", tmp_path_factory.mktemp("reference-batches")
    done = subprocess.run([sys.executable, WORKER, "--run-dir", str(run_dir), "--quiet", *TINY, "train.accumulate=2"],
                          capture_output=True, text=True, env=environment(BATCH_LOG=str(log)), timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    batches = step_batches(log)
    assert len(batches) == STEPS and all(len(b) == 2 for b in batches.values())
    return run_dir, log


def test_two_nodes_train_like_one_process_accumulating_twice(tmp_path, reference):
    log = tmp_path / "batches"
    log.mkdir()
    results = finish(two_nodes(tmp_path / "run", "--quiet", *TINY, env=environment(BATCH_LOG=str(log))))
    assert [code for code, _ in results] == [0, 0], results[0][1][-3000:] + results[1][1][-3000:]
    assert sum(out.count(f"trained {STEPS} steps") for _, out in results) == 1  # the first process reports
    assert sorted(p.name for p in log.iterdir()) == ["rank-0.jsonl", "rank-1.jsonl"]
    assert_same_run(tmp_path / "run", log, reference)


def test_two_processes_step_without_reading_back_or_a_collective_of_their_own(tmp_path, reference):
    """Between the log records (every 3 steps) and checkpoints (every 6), a process neither reads a value
    back nor calls a collective: the step's token count comes from the batch plan both share, the clock is
    agreed only where they meet anyway, and DDP's gradient all-reduce is the only exchange. The weights
    and token counts are still those of one process accumulating two batches."""
    run, log = tmp_path / "run", tmp_path / "syncs"
    log.mkdir()
    settings = [s for s in TINY if not s.startswith(("train.log_every=", "train.save_every="))]
    done = standalone(run, "--quiet", *settings, "train.log_every=3", "train.save_every=6",
                      env=environment(SYNC_LOG=str(log)))
    assert done.returncode == 0, done.stderr[-3000:]
    for rank in (0, 1):
        events = json.loads((log / f"rank-{rank}.json").read_text())
        assert not [e for e in events if e[1] == "in step"], events  # a step reads nothing back, meets no one
        met = {step for step, _, _ in events}
        assert met <= {0, 3, 6, 9, 12}, events  # only the records, checkpoints (and setting up) meet
        assert {3, 6, 12} <= met  # the hooks see the meetings there are
    name = f"checkpoints/step-{STEPS:08d}"
    a, b = load_file(str(run / name / "model.safetensors")), load_file(str(reference[0] / name / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.allclose(a[k], b[k], rtol=0, atol=TOLERANCE) for k in a)
    tokens = [json.loads((d / name / "trainer_state.json").read_text())["trainer"]["target_tokens"]
              for d in (run, reference[0])]
    assert tokens[0] == tokens[1] > 0


@pytest.mark.slow  # three launches of torch (or a restart): 15 s on 2 cores at load 4, 35 s at load 10
def test_a_run_moves_from_two_processes_to_one_and_back(tmp_path, reference):
    run, log = tmp_path / "run", tmp_path / "batches"
    log.mkdir()
    first = standalone(run, "--quiet", *TINY, env=environment(BATCH_LOG=str(log), STOP_AFTER_SAVE="4"))
    assert first.returncode != 0 and latest_checkpoint(run).name == "step-00000004", first.stderr[-3000:]
    one = subprocess.run([sys.executable, WORKER, "--run-dir", str(run), *TINY], capture_output=True, text=True,
                         env=environment(BATCH_LOG=str(log), STOP_AFTER_SAVE="8"), timeout=300)
    assert one.returncode == -signal.SIGKILL, one.stderr[-3000:]
    assert "1 process(es) accumulating 2 batches each (the run's 2 per step); resumed at step 4" in one.stderr
    last = standalone(run, "--quiet", *TINY, env=environment(BATCH_LOG=str(log)))
    assert last.returncode == 0, last.stderr[-3000:]
    assert_same_run(run, log, reference)


@pytest.mark.slow  # three launches of torch (or a restart): 15 s on 2 cores at load 4, 35 s at load 10
def test_a_killed_worker_stops_the_other_with_a_message_and_a_rerun_resumes(tmp_path, reference):
    run, log = tmp_path / "run", tmp_path / "batches"
    log.mkdir()
    kill = environment(BATCH_LOG=str(log), KILL_RANK="1", KILL_AT_STEP="5")
    (code0, out0), (code1, out1) = finish(two_nodes(run, "--quiet", *TINY, env=kill), timeout=120)
    assert code0 != 0 and code1 != 0
    message = next(line for line in (out0 + out1).splitlines() if line.startswith("transformer train: error:"))
    assert "process 0 of 2: another process of this run died or stopped answering" in message
    assert "the last checkpoint, step-00000004, is intact: run the same command again to resume" in message
    model = build_model(load_config(run))  # every file of the checkpoint reads back whole
    assert load_checkpoint(latest_checkpoint(run), model=model, restore_rng=False).step == 4
    rerun = standalone(run, "--quiet", "--json", *TINY, env=environment(BATCH_LOG=str(log)))
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert json.loads(rerun.stdout.strip().splitlines()[-1])["resumed_from"] == 4
    assert_same_run(run, log, reference)


@pytest.mark.slow  # three launches of torch (or a restart): 15 s on 2 cores at load 4, 35 s at load 10
def test_torchrun_max_restarts_resumes_a_killed_worker(tmp_path, reference):
    run, log = tmp_path / "run", tmp_path / "batches"
    log.mkdir()
    # Without TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1 the restarted processes may read the previous attempt's
    # addresses from torchrun's store and fail to connect (pytorch/pytorch#135712; 1 restart in 3 here).
    done = standalone(run, "--quiet", "--json", *TINY, restarts=1,
                      env=environment(BATCH_LOG=str(log), KILL_RANK="1", KILL_AT_STEP="5",
                                      TORCH_DISABLE_SHARE_RDZV_TCP_STORE="1"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "(exitcode: -9) local_rank: 1" in done.stderr  # torchrun saw the worker die, then restarted both
    summaries = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert {s["resumed_from"] for s in summaries} == {4}  # both restarted processes resumed from step 4
    assert_same_run(run, log, reference)


def test_a_hung_worker_times_the_others_out(tmp_path):
    run, pid_file = tmp_path / "run", tmp_path / "pid"
    hang = environment(KILL_RANK="1", KILL_AT_STEP="3", KILL_SIGNAL="SIGSTOP", PID_FILE=str(pid_file),
                       **{D.TIMEOUT_ENV: "3"})
    agents = two_nodes(run, "--quiet", *TINY, env=hang)
    try:
        deadline = time.monotonic() + 120
        while all(agent.poll() is None for agent in agents) and time.monotonic() < deadline:
            time.sleep(0.2)
        gave_up = [agent for agent in agents if agent.poll() is not None]
        assert gave_up, "both nodes still wait after 120 s: a hang"
        out = gave_up[0].communicate()[0]  # the node whose process still ran
        assert gave_up[0].returncode != 0
        assert "another process of this run died or stopped answering (Timed out waiting 3000ms" in out, out[-3000:]
        assert "the last checkpoint, step-00000002, is intact" in out
    finally:
        if pid_file.exists():
            os.kill(int(pid_file.read_text()), signal.SIGKILL)  # the stopped process (the test started it)
        finish([agent for agent in agents if agent.returncode is None], timeout=60)


def test_a_resume_on_processes_that_cannot_share_a_step_is_refused_untouched(tmp_path):
    run = tmp_path / "run"
    one = run_cli("train", "--run-dir", run, "--quiet", *SHORT)  # one process: this one (tests/cli_helpers.py)
    assert one.returncode == 0, one.stderr[-3000:]
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    refused = standalone(run, "--quiet", *SHORT)
    assert refused.returncode != 0
    # each rank prints the same line; two writes to the shared stderr can land on one line, so split on the prefix
    prefix = "transformer train: error:"
    errors = {prefix + part.splitlines()[0] for part in refused.stderr.split(prefix)[1:]}
    assert errors == {
        f"transformer train: error: {run} takes 1 batch(es) per step (1 process(es) x 1 accumulated), which 2 "
        "processes cannot share: resume it on 1 process(es), or start a new --run-dir with train.accumulate set "
        "for 2 processes"}, refused.stderr[-3000:]
    codes = set(re.findall(r"exitcode\s*:\s*(-?\d+)", refused.stderr))  # torchrun's report of its processes
    assert "2" in codes and codes <= {"2", "-15"}  # the usage status (or stopped by torchrun once one had failed)
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


# ---------------------------------------------------------------------------- without processes
def test_the_batches_of_a_step_depend_only_on_batches_per_step():
    """23 batches an epoch, 6 per step: whatever processes x accumulation make 6, every step of three
    epochs takes the same batches, and the 5 left at each epoch's end wait for the next epoch."""
    from transformer.data import TokenBudgetBatches
    from transformer.training.trainer import _groups

    examples = [([1] * (1 + i % 7), [2] * (1 + i % 5)) for i in range(230)]

    def steps(world: int, accumulate: int) -> list[list[list[int]]]:
        by_rank = []
        for rank in range(world):
            batches = TokenBudgetBatches(examples, max_tokens=92, pad_id=0, bos_id=1, eos_id=2, seed=3,
                                         rank=rank, world_size=world)
            assert batches.num_batches_total == 23
            by_rank.append([g for epoch in range(3) for g in _groups(iter(batches.batch_indices(epoch)), accumulate)])
        return [sorted(sum(groups, [])) for groups in zip(*by_rank)]

    one = steps(1, 6)
    assert len(one) == 3 * (23 // 6)
    for world, accumulate in ((2, 3), (3, 2), (6, 1)):
        assert steps(world, accumulate) == one


@pytest.mark.parametrize("segmented", [False, True], ids=["plain", "segmented"])
def test_every_process_knows_the_target_tokens_of_the_others_batches(segmented):
    """A step's normalizer without a collective: each rank's count of every rank's batches (``target_tokens_by_rank``)
    is what that rank's own batches hold, with a segmenter too (it segments the others' batches as they do)."""
    import numpy as np

    from transformer.data import TokenBudgetBatches

    examples = [([1] * (1 + i % 7), [2] * (1 + i % 5)) for i in range(230)]

    def segment(indices, rng):  # a few target tokens more or fewer, drawn per batch
        return [(examples[i][0], examples[i][1] + [3] * int(rng.integers(0, 3))) for i in indices]

    def batches(rank):
        return TokenBudgetBatches(examples, max_tokens=92, pad_id=0, bos_id=1, eos_id=2, seed=3, rank=rank,
                                  world_size=3, segment=segment if segmented else None,
                                  lengths=(np.array([len(s) for s, _ in examples]),
                                           np.array([len(t) + 1 for _, t in examples])) if segmented else None)

    ranks = [batches(rank) for rank in range(3)]
    for epoch in (0, 2):
        served = [[b.n_tgt_tokens for b in r.iter_from(epoch, 0)] for r in ranks]
        for index, count in ((0, 1), (2, 3), (len(ranks[0]) - 2, 2)):
            want = [sum(tokens[index:index + count]) for tokens in served]
            assert all(r.target_tokens_by_rank(epoch, index, count) == want for r in ranks)


def test_resume_accumulation_keeps_the_batches_per_step(tmp_path):
    assert D.resume_accumulation(tmp_path, 3, D.DistInfo(0, 4)) == 3  # a new run: the configured accumulation
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.Adam(model.parameters())
    state = TrainerState(step=3, batch_in_epoch=3)  # 3 steps of 1 batch on each of 4 processes
    D.adopt_layout(state, D.DistInfo(0, 4), 1)
    save_checkpoint(tmp_path, model=model, optimizer=optimizer, scheduler=None, state=state)
    assert [D.resume_accumulation(tmp_path, 1, D.DistInfo(0, n)) for n in (1, 2, 4)] == [4, 2, 1]
    with pytest.raises(D.LayoutError, match=r"takes 4 batch\(es\) per step \(4 process\(es\) x 1 accumulated\), "
                                            r"which 3 processes cannot share: resume it on 1 or 2 or 4 process"):
        D.resume_accumulation(tmp_path, 1, D.DistInfo(0, 3))
    D.adopt_layout(state, D.DistInfo(0, 1), 4)  # 12 batches of the epoch's order were used: 12 on one process
    assert state.batch_in_epoch == 12 and state.extra[D.LAYOUT_KEY] == {"world_size": 1, "accumulate": 4}
    D.adopt_layout(state, D.DistInfo(0, 2), 2)
    assert state.batch_in_epoch == 6


def test_a_step_needs_a_whole_step_of_batches():
    assert D.steps_per_epoch(11, 2) == 5
    with pytest.raises(ValueError, match="an epoch has 1 batch.* fewer than the 2 a step accumulates: lower train.acc"):
        D.steps_per_epoch(1, 2)


def test_a_failed_collective_becomes_one_line_naming_the_checkpoint(tmp_path):
    gloo = RuntimeError("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:78] Timed out waiting "
                        "3000ms for recv operation to complete")
    with pytest.raises(D.PeerLostError) as caught, D.peer_failures(D.DistInfo(1, 2), tmp_path):
        raise gloo
    assert str(caught.value) == (
        "process 1 of 2: another process of this run died or stopped answering (Timed out waiting 3000ms for recv "
        "operation to complete); no checkpoint was written yet: run the same command again to resume (torchrun "
        "--max-restarts N does it by itself)")
    assert isinstance(caught.value, OSError) and caught.value.errno is None  # the CLI's exit status 3
    save_checkpoint(tmp_path, model=torch.nn.Linear(1, 1), optimizer=torch.optim.SGD([torch.zeros(1)], lr=1),
                    scheduler=None, state=TrainerState(step=7))
    with pytest.raises(D.PeerLostError, match="the last checkpoint, step-00000007, is intact"):
        with D.peer_failures(D.DistInfo(0, 2), tmp_path):
            raise gloo
    for info, error in ((D.DistInfo(0, 1), gloo), (D.DistInfo(0, 2), RuntimeError("mat1 and mat2 shapes differ"))):
        with pytest.raises(RuntimeError) as caught, D.peer_failures(info, tmp_path):
            raise error  # one process, or not a collective: left as it is
        assert caught.value is error


def test_timeout_setting_and_failure_messages(monkeypatch):
    monkeypatch.delenv(D.TIMEOUT_ENV, raising=False)
    assert D.collective_timeout().total_seconds() == D.DEFAULT_TIMEOUT_S
    monkeypatch.setenv(D.TIMEOUT_ENV, "2.5")
    assert D.collective_timeout().total_seconds() == 2.5
    for bad in ("0", "-1", "nan", "soon"):
        monkeypatch.setenv(D.TIMEOUT_ENV, bad)
        with pytest.raises(ValueError, match=rf"^\$TRANSFORMER_DIST_TIMEOUT must be a number of seconds > 0, got '{bad}'"):
            D.collective_timeout()
    gloo = RuntimeError("[/__w/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:5504: "
                        "Connection reset by peer. This is typically caused by a remote worker hanging. GLHF!")
    assert D.is_collective_failure(gloo) and not D.is_collective_failure(RuntimeError("shape mismatch"))
    assert D.failure_cause(gloo) == "Read error [127.0.0.1]:5504: Connection reset by peer"
    assert D.describe_layout(D.DistInfo(0, 2), 1, 1) == "2 process(es)"

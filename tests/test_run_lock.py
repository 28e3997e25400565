"""One writer per run directory (issue 27): an exclusive OS lock held by the trainer for the whole
run, a second writer refused at once naming the holder, no stale lock after SIGKILL, readers never
blocked; work files of killed runs removed; a read-only or full disk ends in one line, exit 3."""

import contextlib
import errno
import fcntl
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cli_helpers import run_cli

from transformer import cli as transformer_cli
from transformer.training import trainer_setup
from transformer.run.config import RunConfig
from transformer.run.lock import LOCK_FILE, RunLock, RunLockedError, RunStorageError
from transformer.run.checkpoints import latest_checkpoint, list_checkpoints
from transformer.training.state import load_checkpoint
from transformer.training.trainer import Trainer

TINY = [
    "data.builtin_written=0", "data.builtin_train=300", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=300",
    "data.max_tokens=600", "model.preset=tiny", "train.warmup=20", "train.lr_scale=2", "train.precision=fp32",
    "train.device=cpu", "train.threads=1", "train.log_every=1", "train.eval_sentences=0",
]
HOLD = """
import sys, time
from transformer.run.lock import RunLock
lock = RunLock(sys.argv[1], command="hold").acquire()  # held while the object lives
print("locked", flush=True)
time.sleep(600)
"""


def read_holder(run_dir: Path) -> dict:
    """What the lock file of ``run_dir`` says about its holder (pid, host, started, command)."""
    return json.loads((Path(run_dir) / LOCK_FILE).read_text(encoding="utf-8"))


@pytest.fixture(autouse=True)
def _restore_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


cli = run_cli  # the commands through transformer.cli.main in this process (tests/cli_helpers.py)


@contextlib.contextmanager
def held_by_another_process(run_dir: Path):
    """A separate process holding ``run_dir``'s lock until the block ends (then killed)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(run_dir)], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "locked"
        yield proc
    finally:
        proc.kill()
        proc.wait()


def metric_keys(run_dir: Path) -> list[tuple[str, int]]:
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    return [(r["kind"], r["step"]) for r in map(json.loads, lines)]


def work_files(run_dir: Path) -> list[str]:
    """Temporary files and directories anywhere in the run directory."""
    return sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if "tmp" in p.name)


@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    """A finished tiny run with two checkpoints (steps 2 and 4)."""
    threads = torch.get_num_threads()
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=4", "train.eval_every=2"]), run_dir,
            show_progress=False).train()
    torch.set_num_threads(threads)
    return run_dir


# ------------------------------------------------------------------------------------------------ the lock
def test_a_second_training_on_the_same_directory_is_refused_and_the_first_finishes_cleanly(tmp_path):
    run_dir = tmp_path / "run"
    settings = TINY + ["train.max_steps=150", "train.eval_every=50"]
    first = subprocess.Popen([sys.executable, "-m", "transformer.cli", "train", "--run-dir", str(run_dir), "--quiet",
                              *settings], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while not (run_dir / "metrics.jsonl").exists():  # the first is training
        assert first.poll() is None and time.time() < deadline, first.communicate()
        time.sleep(0.02)
    second = cli("train", "--run-dir", str(run_dir), "--quiet", *settings)  # while the first trains
    out, err = first.communicate(timeout=300)
    assert second.returncode == 2, second.stderr
    assert first.returncode == 0, err
    message = second.stderr.strip()
    assert len(message.splitlines()) == 1 and "Traceback" not in second.stderr
    assert message.startswith(f"transformer train: error: {run_dir} is in use by another run")
    assert f"pid {first.pid} on host {socket.gethostname()}, started " in message and "--run-dir" in message
    assert second.stdout == ""

    keys = metric_keys(run_dir)
    assert len(keys) == len(set(keys)), "metrics.jsonl records written twice"
    assert [step for kind, step in keys if kind == "train"] == list(range(1, 151))
    assert [step for kind, step in keys if kind == "valid"] == [50, 100, 150]
    assert [p.name for p in list_checkpoints(run_dir)] == ["step-00000050", "step-00000100", "step-00000150"]
    assert work_files(run_dir) == [] and not (run_dir / LOCK_FILE).exists()


def test_a_trainer_is_refused_at_once_naming_the_holder_and_touches_nothing(trained_run, monkeypatch):
    before = {p: p.stat().st_mtime_ns for p in trained_run.rglob("*")}
    monkeypatch.setattr(trainer_setup, "prepare_data", lambda *a, **k: pytest.fail("refused only after reading data"))
    # At once: one non-blocking try, no wait for the holder (which holds it for ten minutes), counted
    # rather than timed; a blocking try fails here at once instead of hanging the test.
    tries, flock = [], fcntl.flock

    def one_try(fd: int, operation: int) -> None:
        tries.append(operation)
        assert operation & fcntl.LOCK_NB, "a blocking flock: it would wait for the holder to end"
        flock(fd, operation)

    monkeypatch.setattr(fcntl, "flock", one_try)
    cfg = RunConfig().with_overrides(TINY + ["train.max_steps=4", "train.eval_every=2"])
    with held_by_another_process(trained_run) as holder:
        with pytest.raises(RunLockedError) as err:
            Trainer(cfg, trained_run, show_progress=False)
        info = read_holder(trained_run)
    assert tries == [fcntl.LOCK_EX | fcntl.LOCK_NB]
    assert f"pid {holder.pid} on host {socket.gethostname()}, started {info['started']}, transformer hold" in str(err.value)
    after = {p: p.stat().st_mtime_ns for p in trained_run.rglob("*")}
    assert {p: t for p, t in after.items() if p.name != LOCK_FILE} == before


def test_a_sigkilled_holder_leaves_no_stale_lock(tmp_path):
    run_dir = tmp_path / "run"
    with held_by_another_process(run_dir) as holder:
        with pytest.raises(RunLockedError, match=f"pid {holder.pid} "):
            RunLock(run_dir).acquire()
        holder.send_signal(signal.SIGKILL)
        holder.wait()
        assert holder.returncode == -signal.SIGKILL
    assert (run_dir / LOCK_FILE).exists()  # the file stays, its lock died with the process
    with RunLock(run_dir) as lock:
        assert lock.held and read_holder(run_dir)["pid"] == os.getpid()
        with pytest.raises(RunLockedError, match=f"pid {os.getpid()} "):
            RunLock(run_dir).acquire()  # one holder at a time, in one process too
    assert not (run_dir / LOCK_FILE).exists()
    RunLock(run_dir).acquire().release()


def test_the_lock_is_released_when_training_ends_and_when_setting_up_fails(tmp_path):
    run_dir = tmp_path / "run"
    trainer = Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=2"]), run_dir, show_progress=False)
    assert trainer.lock.held and read_holder(run_dir)["pid"] == os.getpid()
    trainer.train()
    assert not trainer.lock.held and not (run_dir / LOCK_FILE).exists()
    with pytest.raises(ValueError, match="different configuration"):  # refused after taking the lock
        Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=3", "train.lr_scale=3"]), run_dir,
                show_progress=False)
    RunLock(run_dir).acquire().release()  # ... and released
    fresh = tmp_path / "a" / "b"
    with pytest.raises(ValueError, match="nope.fr"):
        Trainer(RunConfig().with_overrides(TINY + ["data.corpus=files", "data.train_src=/nope.fr",
                                                   "data.train_tgt=/nope.en"]), fresh, show_progress=False)
    assert not (tmp_path / "a").exists()  # refused before writing anything: no trace, not even the directory


def test_work_files_of_killed_runs_are_removed(trained_run, tmp_path):
    run_dir = tmp_path / "run"
    shutil.copytree(trained_run, run_dir)
    leftovers = [".tokenizer.json.k3x_9ab2.tmp", ".config.json.tmp-4242", ".run_config.json.tmp-4242",
                 ".model.safetensors.tmp-4242", ".metrics.jsonl.tmp-4242", ".training_curve.png.tmp-4242.png",
                 "checkpoints/.latest.json.tmp-4242"]
    for name in leftovers:
        (run_dir / name).write_text("half written")
    (run_dir / "checkpoints" / ".tmp-step-00000006-4242").mkdir()
    keep = run_dir / "notes.tmp"  # not a work file of the run: kept
    keep.write_text("mine")
    result = Trainer(RunConfig().with_overrides(TINY + ["train.max_steps=4", "train.eval_every=2"]), run_dir,
                     show_progress=False).train()  # the finished run again: resumed, validated and saved again
    assert result.resumed_from == 4 and result.steps == 4
    assert work_files(run_dir) == ["notes.tmp"]


def test_readers_work_while_a_run_is_locked(trained_run, tmp_path):
    from fastapi.testclient import TestClient

    from transformer.serve.app import create_app
    from transformer.translate.translator import Translator, load_translator

    (tmp_path / "src.txt").write_text("je suis petit .\nil est grand .\n")
    (tmp_path / "ref.txt").write_text("i am small .\nhe is tall .\n")
    with held_by_another_process(trained_run):
        translated = cli("translate", str(trained_run), "je suis petit .", "--greedy")
        # one line for the one input (a 4-step model's translation may be blank: the line is what counts here)
        assert translated.returncode == 0 and len(translated.stdout.splitlines()) == 1, translated.stderr
        evaluated = cli("evaluate", str(trained_run), "--src", str(tmp_path / "src.txt"), "--ref",
                        str(tmp_path / "ref.txt"), "--greedy", "--json")
        assert evaluated.returncode == 0 and "bleu" in evaluated.stdout.splitlines()[-1], evaluated.stderr
        translator = Translator.from_run_dir(trained_run)
        assert len(translator.translate(["je suis petit ."])) == 1
        translator.close()
        with TestClient(create_app(load_translator(trained_run))) as client:
            answer = client.post("/v1/translate", json={"text": "je suis petit .", "max_length": 8})
            assert answer.status_code == 200, answer.text
        assert read_holder(trained_run)["command"] == "transformer hold"  # still the holder's


def test_average_into_a_locked_run_is_refused(trained_run, tmp_path, capsys):
    model = trained_run / "model.safetensors"
    before = model.read_bytes()
    with held_by_another_process(trained_run) as holder:
        assert transformer_cli.main(["average", str(trained_run), "--last", "2"]) == 2
        err = capsys.readouterr().err
        assert f"is in use by another run (pid {holder.pid} " in err and len(err.strip().splitlines()) == 1
        assert model.read_bytes() == before
        out = tmp_path / "avg" / "averaged.safetensors"  # elsewhere: reading the run is fine
        assert transformer_cli.main(["average", str(trained_run), "--last", "2", "--output", str(out)]) == 0
        assert out.is_file()


# ------------------------------------------------------------------------------------- a failing disk
def unshare_works() -> bool:
    if shutil.which("unshare") is None or shutil.which("mount") is None:
        return False
    probe = subprocess.run(["unshare", "-rm", "sh", "-c", "mount -t tmpfs none /mnt 2>/dev/null || "
                            "mount --bind / /mnt"], capture_output=True)
    return probe.returncode == 0


def read_only_cli(tmp_path: Path, source: Path, run_name: str, *args: str) -> subprocess.CompletedProcess:
    """``transformer train`` in a private mount namespace where ``tmp_path/ro`` is ``source``, read-only."""
    target = tmp_path / "ro"
    target.mkdir(exist_ok=True)
    command = " ".join([sys.executable, "-m", "transformer.cli", "train", "--run-dir", str(target / run_name), *args])
    script = f"mount --bind {source} {target} && mount -o remount,bind,ro {target} && cd {os.getcwd()} && {command}"
    return subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True, text=True, timeout=300)


@pytest.mark.skipif(not unshare_works(), reason="needs unshare and mount (user and mount namespaces)")
def test_a_read_only_run_directory_ends_in_one_line_exit_3(trained_run, tmp_path):
    source = tmp_path / "source"
    shutil.copytree(trained_run, source / "run")
    for name, settings in (("new", TINY + ["train.max_steps=2"]), ("run", TINY + ["train.max_steps=4", "train.eval_every=2"])):
        done = read_only_cli(tmp_path, source, name, "--quiet", *settings)
        assert done.returncode == 3, done.stderr
        assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "[Errno 30]" not in done.stderr
        assert f"transformer train: error: cannot write to {tmp_path / 'ro' / name}" in done.stderr
        assert "the file system is read-only; choose a --run-dir on a writable disk" in done.stderr


def test_a_read_only_file_system_is_named_with_its_fix(tmp_path, monkeypatch, capsys):
    """The same without namespaces: the file system refuses every write under tmp_path/run."""
    run_dir = tmp_path / "run"
    real_open, real_mkdir = os.open, os.mkdir

    def refuse(real):
        def call(path, *args, **kwargs):
            if str(path).startswith(str(run_dir)):
                raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(path))
            return real(path, *args, **kwargs)
        return call

    monkeypatch.setattr(os, "open", refuse(real_open))
    monkeypatch.setattr(os, "mkdir", refuse(real_mkdir))
    assert transformer_cli.main(["train", "--run-dir", str(run_dir), "--quiet", *TINY, "train.max_steps=2"]) == 3
    err = capsys.readouterr().err
    assert err == (f"transformer train: error: cannot write to {run_dir}: the file system is read-only; choose a "
                   "--run-dir on a writable disk (to continue a run, copy its directory there first)\n")


def enospc_safetensors():
    from safetensors import SafetensorError

    return SafetensorError('Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: '
                           '"No space left on device" })')


@pytest.mark.parametrize("error", [lambda: OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)), enospc_safetensors],
                         ids=["OSError", "SafetensorError"])
def test_a_full_disk_while_saving_ends_in_one_line_and_leaves_nothing_half_written(tmp_path, monkeypatch, capsys,
                                                                                     error):
    import safetensors.torch

    from transformer.run import model as checkpoint
    from transformer.training import state

    real = safetensors.torch.save_file
    calls = {"n": 0}

    def save_file(tensors, filename, metadata=None):
        calls["n"] += 1
        if calls["n"] > 4:  # the best model and the step-2 checkpoint's three files fit; then the disk is full
            Path(filename).write_bytes(b"\0" * 100)  # what a writer leaves when it fails half-way
            raise error()
        return real(tensors, filename, metadata=metadata)

    monkeypatch.setattr(checkpoint, "save_file", save_file)
    monkeypatch.setattr(state, "save_file", save_file)
    run_dir = tmp_path / "run"
    args = ["train", "--run-dir", str(run_dir), "--quiet", *TINY, "train.max_steps=4", "train.eval_every=2"]
    assert transformer_cli.main(args) == 3
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith(f"transformer train: error: cannot write to {run_dir}: the disk is full; free some space")
    assert "run the same command again" in err
    assert work_files(run_dir) == [] and not (run_dir / LOCK_FILE).exists()
    assert latest_checkpoint(run_dir).name == "step-00000002"  # intact, and what a resume starts from
    load_checkpoint(latest_checkpoint(run_dir), model=_tiny_model(run_dir), restore_rng=False)

    monkeypatch.setattr(checkpoint, "save_file", real)  # space freed: the same command resumes
    monkeypatch.setattr(state, "save_file", real)
    assert transformer_cli.main(args + ["--json"]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["resumed_from"] == 2 and summary["steps"] == 4


def _tiny_model(run_dir: Path):
    from transformer.model import build_model
    from transformer.run.model import load_config

    return build_model(load_config(run_dir))


def test_storage_errors_elsewhere_pass_unchanged(tmp_path):
    from transformer.run.lock import storage_errors

    with pytest.raises(PermissionError):  # a data file you may not read is not the run directory's business
        with storage_errors(tmp_path / "run"):
            raise PermissionError(errno.EACCES, "Permission denied", "/data/train.fr")
    with pytest.raises(RunStorageError, match=r"^cannot write to .*run/x: the disk is full"):
        with storage_errors(tmp_path / "run"):
            raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "run" / "x"))
    with pytest.raises(KeyError):
        with storage_errors(tmp_path / "run"):
            raise KeyError("x")


def test_a_run_dir_that_is_a_file_is_a_usage_error(tmp_path, capsys):
    path = tmp_path / "notes.txt"
    path.write_text("mine")
    assert transformer_cli.main(["train", "--run-dir", str(path), "--quiet", *TINY]) == 2
    assert capsys.readouterr().err == (f"transformer train: error: {path} is a file, not a directory; "
                                       "choose another --run-dir\n")
    assert path.read_text() == "mine"

"""Trainer checkpoints: exact resume, round trips, atomicity, pruning, averaging, clear errors, no pickle."""

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file

import transformer.training.state as st
from transformer.run.model import CheckpointError, load_weights, unique_state_dict
from transformer.config import preset
from transformer.model import Transformer
from transformer.training.averaging import average_checkpoints, average_last
from transformer.run.checkpoints import latest_checkpoint, list_checkpoints
from transformer.run.layout import CHECKPOINT_FILES
from transformer.training.state import (
    TrainerState, capture_rng_state, load_checkpoint, restore_rng_state, save_checkpoint)

VOCAB = 20


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny tensors: one intra-op thread keeps the tests fast even on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build(seed=0, dropout=0.1):
    """Tiny model, Adam and a LambdaLR warmup, as a trainer would build them."""
    torch.manual_seed(seed)
    model = Transformer(preset("tiny", src_vocab_size=VOCAB, dropout=dropout))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min((s + 1) / 4, 1.0))
    return model, opt, sched


def train_step(model, opt, sched):
    """One step; the batch comes from the global torch RNG, dropout too, so RNG state matters."""
    model.train()
    src, tgt = torch.randint(1, VOCAB, (3, 7)), torch.randint(1, VOCAB, (3, 6))
    logits = model(src, tgt[:, :-1])
    loss = F.cross_entropy(logits.reshape(-1, VOCAB), tgt[:, 1:].reshape(-1))
    opt.zero_grad()
    loss.backward()
    opt.step()
    sched.step()
    return loss.item()


def saved_run(run_dir, steps=(1, 2, 3), **kwargs):
    model, opt, sched = build()
    for step in steps:
        train_step(model, opt, sched)
        save_checkpoint(run_dir, model=model, optimizer=opt, scheduler=sched, state=TrainerState(step=step), **kwargs)
    return model, opt, sched


def test_exact_resume_matches_uninterrupted_run(tmp_path):
    model, opt, sched = build()
    for _ in range(3):
        train_step(model, opt, sched)
    state = TrainerState(step=3, epoch=1, batch_in_epoch=2, best_metric=0.5, best_step=3, extra={"note": "x"})
    path = save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=state)
    reference = [train_step(model, opt, sched) for _ in range(4)]

    fresh, fopt, fsched = build(seed=123)  # other init, other RNG position
    assert load_checkpoint(path, model=fresh, optimizer=fopt, scheduler=fsched) == state
    assert [train_step(fresh, fopt, fsched) for _ in range(4)] == reference  # bitwise
    for a, b in zip(model.state_dict().values(), fresh.state_dict().values()):
        assert torch.equal(a, b)

    # Without the RNG the batches and dropout masks differ: the test above can fail.
    other, oopt, osched = build(seed=123)
    load_checkpoint(path, model=other, optimizer=oopt, scheduler=osched, restore_rng=False)
    assert [train_step(other, oopt, osched) for _ in range(4)] != reference


def test_optimizer_and_scheduler_round_trip(tmp_path):
    model, opt, sched = saved_run(tmp_path)
    fresh, fopt, fsched = build(seed=5)
    load_checkpoint(latest_checkpoint(tmp_path), model=fresh, optimizer=fopt, scheduler=fsched)
    saved, loaded = opt.state_dict(), fopt.state_dict()
    assert saved["state"].keys() == loaded["state"].keys()
    for idx, entries in saved["state"].items():
        for key, value in entries.items():
            assert torch.equal(value, loaded["state"][idx][key]) and value.dtype == loaded["state"][idx][key].dtype
    assert saved["param_groups"] == loaded["param_groups"]
    assert isinstance(loaded["param_groups"][0]["betas"], tuple)
    assert fsched.last_epoch == sched.last_epoch == 3
    assert fsched.get_last_lr() == sched.get_last_lr()
    assert [g["lr"] for g in fopt.param_groups] == [g["lr"] for g in opt.param_groups]


class Warmup:
    """A callable-object lr lambda: LambdaLR saves its __dict__ (JSON) and restores it."""

    def __init__(self, steps):
        self.steps = steps

    def __call__(self, step):
        return min((step + 1) / self.steps, 1.0)


@pytest.mark.parametrize("make_opt", [
    lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, nesterov=True),
    lambda p: torch.optim.AdamW(p, lr=torch.tensor(0.01), amsgrad=True),  # tensor lr: scalar tensors in JSON state
    lambda p: torch.optim.Adafactor(p, lr=0.01),  # factored (non-parameter-shaped) state
], ids=["sgd", "adamw-tensor-lr", "adafactor"])
def test_other_optimizers_resume_exactly(tmp_path, make_opt):
    def make():
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        opt = make_opt(model.parameters())
        return model, opt, torch.optim.lr_scheduler.LambdaLR(opt, Warmup(3))

    def step(model, opt, sched):
        loss = model(torch.randn(2, 4)).pow(2).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        return loss.item()

    model, opt, sched = make()
    for _ in range(2):
        step(model, opt, sched)
    sched.lr_lambdas[0].steps = 7
    path = save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=TrainerState(step=2))
    reference = [step(model, opt, sched) for _ in range(6)]
    fresh, fopt, fsched = make()
    load_checkpoint(path, model=fresh, optimizer=fopt, scheduler=fsched)
    assert fsched.lr_lambdas[0].steps == 7
    assert [step(fresh, fopt, fsched) for _ in range(6)] == reference
    assert fsched.state_dict() == sched.state_dict() and torch.equal(fresh.weight, model.weight)


def test_rng_capture_restore_round_trip():
    state = capture_rng_state()
    first = (torch.rand(5), random.random(), np.random.rand(3))
    restore_rng_state(json.loads(json.dumps({k: v for k, v in state.items() if k in ("python", "numpy")}))
                      | {"torch": state["torch"]})
    second = (torch.rand(5), random.random(), np.random.rand(3))
    assert torch.equal(first[0], second[0]) and first[1] == second[1] and np.array_equal(first[2], second[2])
    assert state["torch"].dtype == torch.uint8


def test_crash_while_writing_keeps_previous_checkpoint(tmp_path, monkeypatch):
    model, opt, sched = saved_run(tmp_path, steps=(1,))
    train_step(model, opt, sched)

    def crash(*args, **kwargs):
        raise OSError("disk full (simulated)")

    monkeypatch.setattr(st, "save_file", crash)  # dies writing optimizer.safetensors
    with pytest.raises(OSError, match="simulated"):
        save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=TrainerState(step=2))
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path).name == "step-00000001"
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001"]
    assert sorted(p.name for p in (tmp_path / "checkpoints").iterdir()) == ["latest.json", "step-00000001"]
    assert load_checkpoint(latest_checkpoint(tmp_path), model=build()[0]).step == 1

    monkeypatch.setattr(st, "_write_latest", crash)  # dies after the rename, before latest.json moves
    with pytest.raises(OSError):
        save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=TrainerState(step=2))
    monkeypatch.undo()
    assert latest_checkpoint(tmp_path).name == "step-00000001"  # still points at a complete checkpoint
    assert load_checkpoint(latest_checkpoint(tmp_path), model=build()[0]).step == 1


def test_half_written_directories_are_ignored_and_cleaned(tmp_path):
    model, opt, sched = saved_run(tmp_path, steps=(1,))
    root = tmp_path / "checkpoints"
    stale = root / ".tmp-step-00000009-999999999"  # what a SIGKILLed save leaves behind
    reused_pid = root / f".tmp-step-00000004-{os.getpid()}"  # ... a killed run that had our pid
    for path in (stale, reused_pid):
        path.mkdir()
        (path / "model.safetensors").write_bytes(b"partial")
    (root / ".latest.json.tmp-999999999").write_text("{")
    half = root / "step-00000008"  # a hand-made incomplete step directory
    half.mkdir()
    (half / "model.safetensors").write_bytes(b"partial")
    (root / "latest.json").write_text('{"step": 8, "path": "step-00000008"}')
    assert latest_checkpoint(tmp_path).name == "step-00000001"
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001"]
    with pytest.raises(CheckpointError, match="optimizer.safetensors is missing"):
        load_checkpoint(half, model=model)
    save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=TrainerState(step=2))
    assert sorted(p.name for p in root.iterdir()) == ["latest.json", "step-00000001", "step-00000002", "step-00000008"]


def test_sigkill_during_saves_leaves_a_loadable_checkpoint(tmp_path):
    script = textwrap.dedent(f"""
        import sys; sys.path.insert(0, {str(Path(__file__).parents[1])!r})
        from tests.test_training_state import build, train_step
        from transformer.training.state import TrainerState, save_checkpoint
        model, opt, sched = build()
        step = 0
        while True:
            step += 1
            train_step(model, opt, sched)
            save_checkpoint({str(tmp_path)!r}, model=model, optimizer=opt, scheduler=sched,
                            state=TrainerState(step=step), keep_last=2)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 60
        while (latest_checkpoint(tmp_path) or Path("step-0")).name < "step-00000003" and time.monotonic() < deadline:
            assert proc.poll() is None, "the saving process died on its own"
            time.sleep(0.005)
        time.sleep(random.uniform(0.0, 0.2))  # somewhere inside a later save
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    path = latest_checkpoint(tmp_path)
    assert path is not None
    model, opt, sched = build()
    state = load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    assert state.step >= 3 and path.name == f"step-{state.step:08d}"
    state.step += 1  # the resumed run saves again: leftovers of the killed save are cleaned up
    save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=state, keep_last=2)
    assert not [p for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith(".")]


def test_keep_last_keeps_newest_plus_best(tmp_path):
    model, opt, sched = build()
    for step in range(1, 8):
        state = TrainerState(step=step, best_metric=1.0, best_step=2)
        save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=state, keep_last=3)
    assert [p.name for p in list_checkpoints(tmp_path)] == [f"step-0000000{i}" for i in (2, 5, 6, 7)]
    assert json.loads((tmp_path / "checkpoints" / "latest.json").read_text()) == {"step": 7, "path": "step-00000007"}


def test_saving_the_same_step_again_replaces_it(tmp_path):
    model, opt, sched = saved_run(tmp_path, steps=(1, 2))
    train_step(model, opt, sched)
    save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched, state=TrainerState(step=2, epoch=9))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001", "step-00000002"]
    fresh = build(seed=1)[0]
    assert load_checkpoint(latest_checkpoint(tmp_path), model=fresh).epoch == 9
    assert torch.equal(fresh.output.weight, model.output.weight)


def test_corrupt_latest_json_falls_back_to_newest(tmp_path):
    assert latest_checkpoint(tmp_path) is None
    saved_run(tmp_path)
    (tmp_path / "checkpoints" / "latest.json").write_text("{not json")
    assert latest_checkpoint(tmp_path).name == "step-00000003"
    (tmp_path / "checkpoints" / "latest.json").unlink()
    assert latest_checkpoint(tmp_path).name == "step-00000003"


def test_average_checkpoints_is_the_mean(tmp_path):
    saved_run(tmp_path)
    paths = list_checkpoints(tmp_path)
    files = [load_file(p / "model.safetensors") for p in paths]
    averaged = average_checkpoints(paths)
    assert averaged.keys() == files[0].keys()
    for name, value in averaged.items():
        by_hand = sum(f[name].double() for f in files) / 3
        assert value.dtype == files[0][name].dtype
        assert torch.equal(value, by_hand.to(value.dtype))

    out = tmp_path / "avg" / "model.safetensors"
    assert average_last(tmp_path, 2, out) == paths[1:]
    model = build()[0]
    load_weights(model, out)  # tied tensors stored once, names fit the model
    expected = average_checkpoints(paths[1:])
    assert all(torch.equal(t, expected[k]) for k, t in unique_state_dict(model).items())
    assert model.output.weight is model.decoder.embed.tokens.weight
    with pytest.raises(ValueError, match="3 exist"):
        average_last(tmp_path, 4, out)
    with pytest.raises(ValueError, match="3 exist"):
        average_last(tmp_path, 0, out)


def test_average_mismatched_checkpoints_fails(tmp_path):
    saved_run(tmp_path / "a", steps=(1,))
    model = Transformer(preset("tiny", src_vocab_size=VOCAB + 1))
    opt = torch.optim.Adam(model.parameters())
    save_checkpoint(tmp_path / "b", model=model, optimizer=opt, scheduler=None, state=TrainerState(step=1))
    a, b = list_checkpoints(tmp_path / "a")[0], list_checkpoints(tmp_path / "b")[0]
    with pytest.raises(CheckpointError, match="cannot average .*a/checkpoints.* and .*b/checkpoints"):
        average_checkpoints([a, b])


@pytest.mark.parametrize("name", ["model.safetensors", "optimizer.safetensors", "rng.safetensors",
                                  "trainer_state.json"])
def test_truncated_or_missing_file_is_named(tmp_path, name):
    saved_run(tmp_path, steps=(1,))
    path = latest_checkpoint(tmp_path)
    model, opt, sched = build()
    data = (path / name).read_bytes()
    (path / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(CheckpointError, match=name):
        load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    (path / name).unlink()
    with pytest.raises(CheckpointError, match=f"{name} is missing"):
        load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)
    assert path not in list_checkpoints(tmp_path)
    with pytest.raises(CheckpointError, match="not found"):
        load_checkpoint(tmp_path / "nope", model=model)


def test_mismatched_optimizer_or_scheduler_fails(tmp_path):
    saved_run(tmp_path, steps=(1,))
    path = latest_checkpoint(tmp_path)
    model = build()[0]
    params = list(model.parameters())
    two_groups = torch.optim.Adam([{"params": params[:3]}, {"params": params[3:]}])
    with pytest.raises(CheckpointError, match="param groups do not match"):
        load_checkpoint(path, model=model, optimizer=two_groups)
    with pytest.raises(CheckpointError, match="param groups do not match"):
        load_checkpoint(path, model=model, optimizer=torch.optim.Adam(params[:-1]))
    save_checkpoint(tmp_path, model=model, optimizer=torch.optim.Adam(params), scheduler=None,
                    state=TrainerState(step=5))
    _, opt, sched = build()
    with pytest.raises(CheckpointError, match="no scheduler state"):
        load_checkpoint(latest_checkpoint(tmp_path), model=model, optimizer=opt, scheduler=sched)


@pytest.mark.parametrize("entry, value, message", [
    ("rng", {"python": [1]}, "bad 'rng' entry"),
    ("rng", {"numpy": ["MT19937", [1, 2], 0, 0, 0.0]}, "bad 'rng' entry"),
    ("optimizer", {"state_values": {"abc": {}}}, "bad 'optimizer' entry"),
    ("optimizer", {"state_values": {"0": {"step": {"__tensor__": 1, "dtype": "nope"}}}}, "bad 'optimizer' entry"),
])
def test_values_of_the_wrong_kind_in_the_state_file_are_named(tmp_path, entry, value, message):
    """Values a hand or a bad disk changed: a CheckpointError naming the file, never a plain
    ValueError or AttributeError from deep inside the restore (the command line takes those for bugs)."""
    saved_run(tmp_path, steps=(1,))
    path = latest_checkpoint(tmp_path)
    doc = json.loads((path / "trainer_state.json").read_text())
    doc[entry].update(value)
    (path / "trainer_state.json").write_text(json.dumps(doc))
    model, opt, sched = build()
    with pytest.raises(CheckpointError, match=f"trainer_state.json: {message}"):
        load_checkpoint(path, model=model, optimizer=opt, scheduler=sched)


def test_files_are_safetensors_and_json_only(tmp_path):
    saved_run(tmp_path, steps=(1,), rng=capture_rng_state())
    path = latest_checkpoint(tmp_path)
    assert sorted(p.name for p in path.iterdir()) == sorted(CHECKPOINT_FILES)
    headers = {}
    for file in path.iterdir():
        raw = file.read_bytes()
        assert not raw.startswith(b"PK") and not raw.startswith(b"\x80")  # no zip (torch.save), no pickle
        if file.suffix == ".json":
            json.loads(raw)
        else:
            headers[file.name] = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
            assert headers[file.name]["__metadata__"]["format"] == "pt"
    assert "output.weight" not in headers["model.safetensors"]  # tied weight stored once
    assert any(k.startswith("state.") and k.endswith(".exp_avg") for k in load_file(path / "optimizer.safetensors"))
    model, opt, sched = build()
    with pytest.raises(TypeError, match="JSON-serialisable"):
        save_checkpoint(tmp_path, model=model, optimizer=opt, scheduler=sched,
                        state=TrainerState(step=2, extra={"x": object()}))
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001"]

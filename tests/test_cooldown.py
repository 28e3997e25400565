"""train.cooldown: the learning rate decays linearly to zero over the last part of the run, whose
length is counted in steps or in seconds over all invocations (train.time_limit), and a resumed
run cools down exactly as the uninterrupted one."""

import math

import pytest

from trainer_helpers import D_MODEL, TINY, Clock, records, train
from transformer.run.config import RunConfig
from transformer.training.schedule import cooldown_factor, noam_lr, run_progress
from transformer.training.trainer import Trainer


def test_factor_and_progress():
    assert cooldown_factor(0.3, 0.0) == 1.0  # no cooldown: the schedule alone
    assert cooldown_factor(0.0, 1.0) == 1.0 and cooldown_factor(0.75, 1.0) == pytest.approx(0.25)
    assert cooldown_factor(0.5, 0.4) == 1.0 and cooldown_factor(0.8, 0.4) == pytest.approx(0.5)
    assert cooldown_factor(1.0, 0.4) == 0.0 and cooldown_factor(1.2, 0.4) == 0.0
    # the nearer end of the run counts: 30 of 100 steps, but 45 of 60 seconds
    assert run_progress(steps=30, seconds=45.0, total_steps=100, time_limit=60.0) == pytest.approx(0.75)
    assert run_progress(steps=30, seconds=45.0, total_steps=100, time_limit=None) == pytest.approx(0.3)
    assert run_progress(steps=130, seconds=0.0, total_steps=100, time_limit=None) == 1.0


def test_rate_decays_to_zero_over_the_last_steps(tmp_path):
    train(tmp_path / "run", "train.max_steps=12", "train.cooldown=0.5")
    lr = {step: r["lr"] for step, r in records(tmp_path / "run").items()}
    assert sorted(lr) == list(range(1, 13))
    for step, rate in lr.items():  # step k starts with k - 1 of 12 steps done
        factor = min(1.0, (1 - (step - 1) / 12) / 0.5)
        assert rate == pytest.approx(noam_lr(step, d_model=D_MODEL, warmup=4, scale=2) * factor, rel=1e-6), step
    assert lr[12] == pytest.approx(noam_lr(12, d_model=D_MODEL, warmup=4, scale=2) / 6, rel=1e-6)  # 1/12 left of 1/2


def test_without_cooldown_the_rate_is_the_schedule(tmp_path):
    train(tmp_path / "run", "train.max_steps=6")
    for step, r in records(tmp_path / "run").items():
        assert r["lr"] == pytest.approx(noam_lr(step, d_model=D_MODEL, warmup=4, scale=2), rel=1e-6)


def test_time_limit_counts_the_whole_run_and_drives_the_cooldown(tmp_path):
    run = tmp_path / "run"
    first = train(run, "train.time_limit=8", "train.cooldown=1", clock=Clock())
    assert first.state.step == 9 and first.state.seconds == 9.0  # stops once 8 seconds are past
    for step, r in records(run).items():  # step k starts k - 1 seconds in
        factor = 1 - (step - 1) / 8
        assert r["lr"] == pytest.approx(noam_lr(step, d_model=D_MODEL, warmup=4, scale=2) * factor, rel=1e-6), step

    again = train(run, "train.time_limit=8", "train.cooldown=1", clock=Clock())
    assert again.state.step == 9  # the time is spent: a rerun trains no further

    longer = train(run, "train.time_limit=12", "train.cooldown=1", clock=Clock(start=100.0))
    assert longer.state.step == 13 and longer.state.seconds == 13.0  # the 4 seconds left, from its 9
    lr = records(run)
    assert lr[10]["lr"] == pytest.approx(noam_lr(10, d_model=D_MODEL, warmup=4, scale=2) * (1 - 9 / 12), rel=1e-6)


def test_a_stopped_run_resumes_onto_the_same_cooldown(tmp_path):
    settings = ("train.max_steps=12", "train.cooldown=0.5", "train.save_every=3")
    train(tmp_path / "straight", *settings)
    with pytest.raises(KeyboardInterrupt):  # stopped after step 8, past the checkpoint of step 6
        train(tmp_path / "stopped", *settings, clock=Clock(fail_at=8.0))
    assert max(records(tmp_path / "stopped")) == 8
    resumed = train(tmp_path / "stopped", *settings)
    assert resumed.resumed_from == 6
    straight, stopped = records(tmp_path / "straight"), records(tmp_path / "stopped")
    assert sorted(stopped) == list(range(1, 13))
    for step in straight:
        assert stopped[step]["lr"] == pytest.approx(straight[step]["lr"], rel=1e-9), step
        assert stopped[step]["loss"] == straight[step]["loss"], step
    assert not math.isnan(stopped[12]["loss"])


def test_a_paused_run_goes_on_with_the_whole_runs_cooldown(tmp_path):
    """train(pause_at=...) stops without changing the schedule, so milestones of a benchmark see the
    model of the one long run."""
    settings = ("train.time_limit=12", "train.cooldown=1", "train.save_every=100")
    straight = train(tmp_path / "straight", *settings, clock=Clock())
    paused = Trainer(RunConfig().with_overrides(TINY + list(settings)), tmp_path / "paused", show_progress=False)
    paused.clock = Clock()
    paused.train(pause_at=5.0)
    assert paused.state.step == 5
    goes_on = train(tmp_path / "paused", *settings, clock=Clock(start=50.0))
    assert goes_on.resumed_from == 5 and goes_on.state.step == straight.state.step == 13
    a, b = records(tmp_path / "straight"), records(tmp_path / "paused")
    assert sorted(a) == sorted(b) == list(range(1, 14))
    for step in a:
        assert b[step]["lr"] == pytest.approx(a[step]["lr"], rel=1e-9) and b[step]["loss"] == a[step]["loss"], step


def test_a_resumed_run_logs_the_same_windows_as_the_uninterrupted_one(tmp_path):
    """A checkpoint in the middle of a logging window (saved at step 6, logged every 4 steps): the resumed
    run's first record still covers steps 5 to 8, as the uninterrupted run's does."""
    settings = ("train.max_steps=12", "train.log_every=4", "train.save_every=3")
    train(tmp_path / "straight", *settings)
    with pytest.raises(KeyboardInterrupt):  # stopped after step 8, past the checkpoint of step 6
        train(tmp_path / "stopped", *settings, clock=Clock(fail_at=8.0))
    assert train(tmp_path / "stopped", *settings).resumed_from == 6
    straight, stopped = records(tmp_path / "straight"), records(tmp_path / "stopped")
    assert sorted(straight) == sorted(stopped) == [4, 8, 12]
    for step in straight:
        assert stopped[step]["loss"] == straight[step]["loss"], step

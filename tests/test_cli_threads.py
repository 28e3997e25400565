"""``--threads N`` on every command that computes: it reaches torch.set_num_threads before the
command's work, it is in each command's --help, and a bad value is one line and exit 2."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

import transformer.training.trainer as trainer_module
from transformer.cli import build_parser, main
from transformer.run.config import MAX_THREADS

COMPUTING = ("demo", "train", "translate", "evaluate", "serve", "attend", "info")


@pytest.fixture
def thread_calls(monkeypatch):
    """Every torch.set_num_threads(n) call, passed on to torch; the thread count restored after."""
    calls, real, before = [], torch.set_num_threads, torch.get_num_threads()

    def record(n):
        calls.append(n)
        real(n)

    monkeypatch.setattr(torch, "set_num_threads", record)
    yield calls
    real(before)


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


def subparser(name):
    return build_parser()._subparsers._group_actions[0].choices[name]


@pytest.mark.parametrize("command", COMPUTING)
def test_help_documents_threads(command):
    text = " ".join(subparser(command).format_help().split())
    assert "--threads N" in text
    assert f"1 to {MAX_THREADS}" in text


def test_translate_runs_with_the_threads_asked(run_dir, thread_calls, monkeypatch, capsys):
    import transformer.translate.cli as translate_cli

    loaded_at, load = [], translate_cli.load_translator
    monkeypatch.setattr(translate_cli, "load_translator", lambda *a, **k: loaded_at.append(torch.get_num_threads())
                        or load(*a, **k))
    assert main(["translate", str(run_dir), "le chat dort", "--greedy", "--threads", "1"]) == 0
    assert thread_calls == [1] and loaded_at == [1]
    assert capsys.readouterr().out.strip()


# Each command with arguments that stop it early and cheaply after the options were read.
CHEAP = {
    "demo": ["demo", "--steps", "0"],
    "translate": ["translate", "{missing}", "x"],
    "evaluate": ["evaluate", "{missing}", "--src", "{missing}", "--ref", "{missing}"],
    "serve": ["serve", "{missing}"],
    "attend": ["attend", "{missing}", "x"],
    "info": ["info", "--vocab", "0"],
}


@pytest.mark.parametrize("command", sorted(CHEAP))
def test_threads_reach_torch_before_the_command_runs(command, tmp_path, thread_calls, capsys):
    argv = [a.format(missing=tmp_path / "missing") for a in CHEAP[command]]
    main(argv + ["--threads", "3"])
    assert thread_calls == [3]


def test_without_threads_the_command_takes_the_idle_cores(thread_calls, monkeypatch, capsys):
    import transformer.cli as cli

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cli, "default_threads", lambda: 1)  # as beside a busy process on two cores
    main(["info", "--vocab", "0"])
    assert thread_calls == [1]


def test_idle_cores_never_exceed_torchs_own_count(thread_calls, monkeypatch, capsys):
    import transformer.cli as cli

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr(cli, "default_threads", lambda: 4096)  # idle hyperthreads: torch counts physical cores
    before = torch.get_num_threads()
    main(["info", "--vocab", "0"])
    assert thread_calls == [before]


def test_omp_num_threads_decides_where_set(thread_calls, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    main(["info", "--vocab", "0"])
    assert thread_calls == []


class FakeTrainer:
    """Stands in for Trainer: sets train.threads as the real one does, records the count it trains at."""

    trained_at: list[int] = []

    def __init__(self, cfg, run_dir, show_progress=True):
        if cfg.train.threads:
            torch.set_num_threads(cfg.train.threads)
        self.dist = SimpleNamespace(is_main=True)
        self.cfg = cfg

    def train(self):
        FakeTrainer.trained_at.append(torch.get_num_threads())
        return SimpleNamespace(run_dir="r", steps=0, epochs_completed=0, seconds=0.0, target_tokens=0, valid=None,
                               resumed_from=None)


@pytest.mark.parametrize("config_threads", [[], ["train.threads=2"]])
def test_train_threads_win_over_the_config_and_stay_out_of_it(config_threads, tmp_path, monkeypatch, thread_calls,
                                                               capsys):
    created = []
    monkeypatch.setattr(trainer_module, "Trainer", lambda cfg, *a, **k: created.append(FakeTrainer(cfg, *a, **k))
                        or created[-1])
    FakeTrainer.trained_at = []
    assert main(["train", "--run-dir", str(tmp_path / "run"), "--threads", "1", *config_threads]) == 0
    assert FakeTrainer.trained_at == [1]
    # the run's recorded settings are the config's, so the run resumes with any --threads
    assert created[0].cfg.train.threads == (2 if config_threads else None)


@pytest.mark.parametrize("value", ["0", "-1", str(MAX_THREADS + 1), "abc", "2.5", ""])
@pytest.mark.parametrize("command", sorted(CHEAP) + ["train"])
def test_bad_threads_is_one_line_and_exit_2(command, value, tmp_path, thread_calls, capsys):
    argv = [a.format(missing=tmp_path / "missing") for a in CHEAP.get(command, ["train", "--run-dir", "{missing}"])]
    assert main(argv + ["--threads", value]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"transformer {command}: error: --threads must be a whole number from 1 to {MAX_THREADS}")
    assert repr(value) in err
    assert thread_calls == []

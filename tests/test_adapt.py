"""``transformer adapt``: a run fine-tuned on a memory's accepted entries, written only through the gate."""

import hashlib
import json
from pathlib import Path

import pytest
import torch

from transformer.corpus.builtin import generate_pairs
from transformer.memory import TranslationMemory
from transformer.run.checkpoints import read_tensors
from transformer.run.config import RunConfig
from transformer.training.adapt import gate, split_held_out
from transformer.training.cli_args import EXIT_NOT_BETTER
from transformer.training.trainer import Trainer

SETTINGS = ["data.builtin_train=300", "data.builtin_valid=10", "data.builtin_test=10", "data.max_tokens=800",
            "train.precision=fp32", "train.threads=1", "train.eval_sentences=0"]
# A short adaptation; --beam 1 keeps the four translations of the comparison quick.
QUICK = ["--steps", "3", "--beam", "1", "--quiet", "--threads", "1", "train.precision=fp32", "data.max_tokens=800"]
ALWAYS = ["--min-gain", "-101", "--max-validation-drop", "101"]  # no BLEU can fail these
NEVER = ["--min-gain", "100"]  # nor pass this one


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("base") / "run"
    cfg = RunConfig().with_overrides(SETTINGS + ["data.vocab_size=400", "model.preset=tiny", "train.max_steps=2",
                                                 "data.src_lang=fr", "data.tgt_lang=en"])
    Trainer(cfg, run, show_progress=False).train()
    return run


@pytest.fixture(scope="module")
def memory(tmp_path_factory) -> Path:
    """40 accepted fr-en entries, 5 pending ones and 30 accepted de-en ones."""
    path = tmp_path_factory.mktemp("memory") / "tm.db"
    with TranslationMemory(path) as tm:
        for source, target in generate_pairs(40, seed=7):
            tm.add(source, target, "fr", "en", origin="reviewer", status="accepted")
        for source, target in generate_pairs(5, seed=8):
            tm.add(source, target, "fr", "en", origin="suggestion", status="pending")
        for source, target in generate_pairs(30, seed=9):
            tm.add(target, source, "de", "en", origin="import", status="accepted")
    return path


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def one_line(err: str) -> str:
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


def test_an_adaptation_that_passes_the_gate_is_written(base, memory, tmp_path, cli):
    before = digest(base / "model.safetensors")
    out = tmp_path / "adapted"
    status, stdout, err = cli("adapt", base, "--tm", memory, "--out", out, *QUICK, *ALWAYS)
    assert status == 0, err
    assert "memory: 40 accepted fr-en entries" in stdout  # neither the pending entries nor the other pair
    assert "held-out memory (" in stdout and "validation (10 sentences): BLEU " in stdout and " -> " in stdout
    assert f"adapted run in {out}" in stdout
    assert (out / "model.safetensors").is_file() and digest(base / "model.safetensors") == before
    saved = json.loads((out / "run_config.json").read_text())
    assert saved["train"]["max_steps"] == 3 and saved["initialized_from"]["run_dir"] == str(base.resolve())
    # the run's training files moved with it: its settings name them where they now are
    for name in saved["data"]["mix"].split(","):
        assert Path(name.rpartition(":")[0]).is_file() and name.startswith(str(out.resolve()))
    assert Path(saved["data"]["valid_src"]).read_text().count("\n") == 10
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adapted"]  # no temporary directory left


def test_steps_decide_however_few_entries_there_are(base, memory, tmp_path, cli):
    # 38 entries and as many replayed pairs are a few batches an epoch: ten epochs end before 80 steps
    options = [*QUICK[2:], "--steps", "80"]
    status, stdout, err = cli("adapt", base, "--tm", memory, "--out", tmp_path / "adapted", *options, *ALWAYS)
    assert status == 0, err
    assert "trained 80 steps" in stdout


def test_an_adaptation_that_is_not_better_leaves_nothing(base, memory, tmp_path, cli):
    status, stdout, err = cli("adapt", base, "--tm", memory, "--out", tmp_path / "adapted", *QUICK, *NEVER)
    assert status == EXIT_NOT_BETTER
    assert "held-out memory (" in stdout and "validation (10 sentences)" in stdout
    assert one_line(err).startswith("transformer adapt: not adapted: held-out BLEU ")
    assert "(--min-gain); nothing written" in err
    assert list(tmp_path.iterdir()) == []
    status, _, err = cli("adapt", base, "--tm", memory, "--out", tmp_path / "adapted", *QUICK,
                         "--min-gain", "-101", "--max-validation-drop", "-101")
    assert status == EXIT_NOT_BETTER and "(--max-validation-drop)" in one_line(err)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv, message", [
    (["--min-entries", "41"], "has 40 accepted fr-en entries; adapting needs at least 41 (--min-entries"),
    (["--held-out", "1.5"], "--held-out must be between 0 and 1, got 1.5"),
    (["--steps", "0"], "--steps must be >= 1, got 0"),
    (["--tm", "missing.db"], "--tm missing.db: no such translation memory"),
])
def test_mistakes_are_one_line(base, memory, tmp_path, cli, argv, message):
    status, _, err = cli("adapt", base, "--tm", memory, "--out", tmp_path / "adapted", *argv)
    assert status == 2 and message in one_line(err) and err.startswith("transformer adapt: error: ")
    assert list(tmp_path.iterdir()) == []


def test_a_pair_the_memory_lacks_and_an_out_that_exists_are_refused(base, tmp_path, cli):
    path = tmp_path / "tm.db"
    with TranslationMemory(path) as tm:
        for source, target in generate_pairs(30, seed=9):
            tm.add(target, source, "de", "en", origin="import", status="accepted")
    status, _, err = cli("adapt", base, "--tm", path, "--out", tmp_path / "adapted")
    assert status == 2 and "has 0 accepted fr-en entries" in one_line(err)
    (tmp_path / "taken").mkdir()
    status, _, err = cli("adapt", base, "--tm", path, "--out", tmp_path / "taken")
    assert status == 2 and "already exists" in one_line(err)


def test_the_held_out_slice_follows_the_entries_ids():
    entries = [(i, (f"s{i}", f"t{i}")) for i in range(1, 201)]
    train, held = split_held_out(entries, 0.1)
    assert 5 <= len(held) <= 40 and len(train) + len(held) == 200 and not set(train) & set(held)
    grown_train, grown_held = split_held_out(entries + [(i, (f"s{i}", f"t{i}")) for i in range(201, 401)], 0.1)
    assert set(held) <= set(grown_held)  # an entry held out stays held out as the memory grows
    assert split_held_out(list(reversed(entries)), 0.1)[1] == list(reversed(held))
    assert len(split_held_out(entries[:3], 0.001)[1]) == 1  # always at least one


def test_the_gate():
    assert gate((10.0, 12.0), (30.0, 29.5), min_gain=0.0, max_drop=1.0) is None
    assert "did not rise" in gate((10.0, 10.0), (30.0, 30.0), min_gain=0.0, max_drop=1.0)
    assert "fell by more than 1" in gate((10.0, 15.0), (30.0, 28.9), min_gain=0.0, max_drop=1.0)
    assert gate((10.0, 15.0), (30.0, 29.0), min_gain=0.0, max_drop=1.0) is None  # exactly 1 BLEU lower is allowed


def test_the_adapted_model_is_the_last_steps_not_the_best_on_validation(base, tmp_path, cli):
    # entries that all say one thing, unlike the run's validation pairs: the more the model learns
    # them, the higher its validation loss, so the trainer's best on validation is its first epoch
    memory, out = tmp_path / "odd.db", tmp_path / "adapted"
    with TranslationMemory(memory) as tm:
        for source, _ in generate_pairs(40, seed=7):
            tm.add(source, "zebra zebra zebra", "fr", "en", origin="reviewer", status="accepted")
    status, _, err = cli("adapt", base, "--tm", memory, "--out", out, *QUICK[2:], "--steps", "40", "--replay", "0",
                         "train.lr=0.01", "train.warmup=1",
                         *ALWAYS)
    assert status == 0, err
    valid = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [(record["loss"], record["step"]) for record in valid if record["kind"] == "valid"]
    assert min(losses)[1] < losses[-1][1] == 40  # the trainer's best on validation is an earlier step's
    last, kept = (read_tensors(path) for path in (out / "checkpoints" / "step-00000040" / "model.safetensors",
                                                  out / "model.safetensors"))
    assert last.keys() == kept.keys() and all(torch.equal(last[name], kept[name]) for name in last)

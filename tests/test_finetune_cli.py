"""Mistakes around ``transformer train --init-from``: one line on stderr, exit status 2, nothing written."""

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from transformer.cli import main
from transformer.model.rnn_config import rnn_preset
from transformer.run.config import RunConfig
from transformer.training.trainer import Trainer

SETTINGS = ["data.builtin_train=300", "data.builtin_valid=10", "data.builtin_test=10", "data.max_tokens=800",
            "train.precision=fp32", "train.threads=1", "train.eval_sentences=0", "train.max_steps=1"]


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("base") / "run"
    cfg = RunConfig().with_overrides(SETTINGS + ["data.vocab_size=400", "model.preset=tiny", "train.max_steps=2"])
    Trainer(cfg, run, show_progress=False).train()
    return run


def refused(capsys, *argv: str) -> str:
    """Run ``transformer train`` in this process; check exit 2 and a one-line message, which is returned."""
    capsys.readouterr()
    assert main(["train", "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("transformer train: error: "), err
    return err


def copy_run(base: Path, out: Path) -> Path:
    shutil.copytree(base, out, ignore=shutil.ignore_patterns(".lock"))
    return out


def test_what_is_not_a_run_is_named(base, tmp_path, capsys):
    run = str(tmp_path / "new")
    assert "does not exist" in refused(capsys, "--init-from", str(tmp_path / "nope"), "--run-dir", run, *SETTINGS)
    (tmp_path / "file").write_text("x")
    assert "is a file, not a run directory" in refused(capsys, "--init-from", str(tmp_path / "file"), "--run-dir", run,
                                                       *SETTINGS)
    (tmp_path / "empty").mkdir()
    assert "is not a run directory (no config.json" in refused(capsys, "--init-from", str(tmp_path / "empty"),
                                                               "--run-dir", run, *SETTINGS)
    hf = tmp_path / "opus-mt"
    hf.mkdir()
    (hf / "config.json").write_text(json.dumps({"model_type": "marian", "d_model": 512}))
    message = refused(capsys, "--init-from", str(hf), "--run-dir", run, *SETTINGS)
    assert "is a Hugging Face model directory (marian)" in message and f"transformer import-hf {hf}" in message
    message = refused(capsys, "--init-from", "Helsinki-NLP/opus-mt-fr-en", "--run-dir", run, *SETTINGS)
    assert "transformer import-hf Helsinki-NLP/opus-mt-fr-en OUT_RUN_DIR, then --init-from OUT_RUN_DIR" in message
    no_weights = copy_run(base, tmp_path / "no-weights")
    (no_weights / "model.safetensors").unlink()
    assert "has no weights" in refused(capsys, "--init-from", str(no_weights), "--run-dir", run, *SETTINGS)
    assert not Path(run).exists()


def test_the_recurrent_baseline_is_named_as_not_fine_tunable(tmp_path, capsys):
    rnn = tmp_path / "rnn"
    rnn.mkdir()
    rnn_preset("tiny", src_vocab_size=300, tgt_vocab_size=300).to_json(rnn / "config.json")
    message = refused(capsys, "--init-from", str(rnn), "--run-dir", str(tmp_path / "new"), *SETTINGS)
    assert "recurrent baseline (architecture rnn), which cannot be fine-tuned" in message
    assert not (tmp_path / "new").exists()


def test_a_vocabulary_that_does_not_fit_the_model_is_refused(base, tmp_path, capsys):
    broken = copy_run(base, tmp_path / "broken")
    config = json.loads((broken / "config.json").read_text())
    config["src_vocab_size"] = config["tgt_vocab_size"] = 401
    (broken / "config.json").write_text(json.dumps(config))
    message = refused(capsys, "--init-from", str(broken), "--run-dir", str(tmp_path / "new"), *SETTINGS)
    assert "vocabulary size mismatch: its model has 401/401 source/target entries but its tokenizer 400/400" in message
    assert not (tmp_path / "new").exists()


def test_data_the_tokenizer_cannot_encode_is_refused_with_its_share(base, tmp_path, capsys):
    tsv = tmp_path / "greek.tsv"
    tsv.write_text("".join(f"καλημέρα κόσμε {i}\tgood morning world {i}\n" for i in range(40)), encoding="utf-8")
    message = refused(capsys, "--init-from", str(base), "--run-dir", str(tmp_path / "new"), *SETTINGS,
                      "data.corpus=tsv", f"data.tsv={tsv}")
    assert "cannot encode the source side of tsv well" in message and "unknown or byte-fallback pieces" in message
    share = float(message.split("well: ")[1].split("%")[0])
    assert share > 50  # Greek letters are two UTF-8 bytes each; the base run's BPE has none of them
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("setting, message", [
    ("model.n_heads=2", "model.n_heads=2 contradicts the initial model of train.init_from (n_heads=4)"),
    ("--src-lang=de", "translates fr->en; use --src-lang fr --tgt-lang en"),
    ("train.freeze=attention", "train.freeze names unknown parts ['attention']"),
    ("data.mix=europarl:1", "data.mix names an unknown corpus 'europarl'"),
])
def test_settings_that_cannot_apply_are_named(base, tmp_path, capsys, setting, message):
    assert message in refused(capsys, "--init-from", str(base), "--run-dir", str(tmp_path / "new"), *SETTINGS, setting)
    assert not (tmp_path / "new").exists()


def test_the_run_itself_is_refused_untouched(base, tmp_path, capsys):
    before = {p: p.stat().st_mtime_ns for p in base.rglob("*")}
    message = refused(capsys, "--init-from", str(base), "--run-dir", str(base), *SETTINGS)
    assert "is the run directory itself" in message
    message = refused(capsys, "--init-from", str(base / "checkpoints" / "step-00000002"), "--run-dir", str(base),
                      *SETTINGS)
    assert "is the run directory itself (or inside it)" in message
    assert {p: p.stat().st_mtime_ns for p in base.rglob("*")} == before


def test_the_command_exits_with_status_2(tmp_path):
    result = subprocess.run([sys.executable, "-m", "transformer.cli", "train", "--init-from", str(tmp_path / "nope"),
                             "--run-dir", str(tmp_path / "new")], capture_output=True, text=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert "train.init_from:" in result.stderr and "does not exist" in result.stderr
    assert not (tmp_path / "new").exists()

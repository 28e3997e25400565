"""The recurrent baseline end to end: ``transformer train model=rnn``, translation, ``transformer attend``."""

import json

import pytest
from cli_helpers import run_cli

from transformer import cli
from transformer.run.model import load_model
from transformer.model import RNNSeq2Seq
from transformer.translate.translator import Translator
from transformer.visualize.page import read_page_data

TINY = [
    "data.builtin_train=600", "data.builtin_valid=20", "data.builtin_test=20", "data.vocab_size=300",
    "data.max_tokens=800", "model=rnn", "model.preset=tiny", "model.score=additive", "train.warmup=10",
    "train.precision=fp32", "train.threads=1", "train.log_every=2", "train.eval_sentences=5", "train.max_steps=4",
]
SENTENCE = "je suis étudiant"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    run = tmp_path_factory.mktemp("rnn") / "run"
    result = run_cli("train", "--run-dir", run, *TINY)  # in this process (tests/cli_helpers.py)
    assert result.returncode == 0, result.stderr
    assert "validation at step 4" in result.stderr
    return run


def test_train_model_rnn_writes_a_run_directory_of_the_rnn(run_dir):
    config = json.loads((run_dir / "config.json").read_text())
    assert config["architecture"] == "rnn" and config["score"] == "additive" and config["hidden_size"] == 32
    assert json.loads((run_dir / "run_config.json").read_text())["model"]["architecture"] == "rnn"
    assert isinstance(load_model(run_dir), RNNSeq2Seq)
    assert (run_dir / "checkpoints" / "step-00000004").is_dir()
    translator = Translator.from_run_dir(run_dir)  # beam search, the paper's settings
    out = translator.translate([SENTENCE, "", "nous mangeons"])
    assert len(out) == 3 and out[1] == "" and all(isinstance(t, str) for t in out)
    # the CPU engine is for Transformers: the recurrent baseline keeps its modules, and refuses int8
    assert not any(hasattr(type(m), "model_class") for m in translator.model.modules())
    with pytest.raises(ValueError, match="int8 is for Transformer models"):
        Translator(translator.model, translator.vocab, precision="int8")
    with pytest.raises(ValueError, match="precision must be one of"):
        Translator(translator.model, translator.vocab, precision="int8-dynamic")  # retired


def test_resuming_a_finished_rnn_run_changes_nothing(run_dir):
    weights = (run_dir / "model.safetensors").read_bytes()
    result = run_cli("train", "--run-dir", run_dir, *TINY)
    assert result.returncode == 0, result.stderr
    assert "resumed at step 4" in result.stderr
    assert (run_dir / "model.safetensors").read_bytes() == weights


def test_attend_shows_one_map_per_decoder_step(run_dir, tmp_path, capsys):
    out = tmp_path / "attention"
    assert cli.main(["attend", str(run_dir), SENTENCE, "--out", str(out), "--format", "png"]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith(f"{SENTENCE}  ->  ")
    doc = json.loads((out / "attention.json").read_text())
    assert list(doc["kinds"]) == ["cross"] and doc["model"]["architecture"] == "rnn"
    assert doc["model"]["heads"] == 1 and doc["model"]["layers"] == {"encoder": 0, "decoder": 1}
    weights = doc["kinds"]["cross"]["weights"]  # [layer][head][row][col]
    assert len(weights) == 1 and len(weights[0]) == 1
    assert len(weights[0][0]) == len(doc["tokens"]["target_output"]["pieces"])  # a row per decoder step
    assert all(abs(sum(row) - doc["weight_scale"]) <= len(row) for row in weights[0][0])
    assert (out / "attention_cross_layer0.png").is_file() and not (out / "attention_encoder_layer0.png").exists()
    assert not list(out.glob("positional_encoding.*"))  # an RNN has no positional encoding
    assert list(read_page_data(out / "attention.html")["sentences"][0]["kinds"]) == ["cross"]


def test_attend_refuses_attention_the_rnn_does_not_have(run_dir, capsys):
    assert cli.main(["attend", str(run_dir), SENTENCE, "--kind", "encoder"]) == 2
    assert "has no encoder attention" in capsys.readouterr().err
    assert cli.main(["attend", str(run_dir), SENTENCE, "--heads", "1"]) == 2
    assert "head 1 does not exist" in capsys.readouterr().err

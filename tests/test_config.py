"""ModelConfig validation, JSON round trip and presets; config files refused as the user's mistake."""

import json

import pytest

from transformer.config import PRESETS, ModelConfig, preset
from transformer.errors import UserError
from transformer.run.config import RunConfig


def test_json_round_trip(tmp_path):
    cfg = preset("small", src_vocab_size=1000, tgt_vocab_size=1200, norm_first=True)
    path = tmp_path / "config.json"
    cfg.to_json(path)
    assert ModelConfig.from_json(path) == cfg
    assert ModelConfig.from_json(cfg.to_json()) == cfg
    assert json.loads(path.read_text())["d_model"] == 256


def test_presets_follow_the_paper():
    base = preset("base", src_vocab_size=100)
    assert (base.d_model, base.n_heads, base.head_dim, base.d_ff, base.n_encoder_layers, base.dropout) == (512, 8, 64, 2048, 6, 0.1)
    assert base.norm_first is False and base.scale_embeddings and base.tie_output and base.share_embeddings
    assert set(PRESETS) == {"base", "big", "small", "tiny"}
    assert preset("tiny", src_vocab_size=10, tgt_vocab_size=12).share_embeddings is False
    with pytest.raises(ValueError, match="unknown preset 'huge'"):
        preset("huge", src_vocab_size=10)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(d_model=100, n_heads=8), "divisible by n_heads"),
        (dict(d_model=0), "d_model must be a positive integer"),
        (dict(n_heads=-1), "n_heads must be a positive integer"),
        (dict(d_ff=2.5), "d_ff must be a positive integer"),
        (dict(n_encoder_layers=0), "n_encoder_layers must be an integer >= 1"),
        (dict(dropout=1.0), r"dropout must be in \[0, 1\)"),
        (dict(attention_dropout=-0.1), r"attention_dropout must be in \[0, 1\)"),
        (dict(activation="swish"), "activation must be one of"),
        (dict(positional="rotary"), "positional must be one of"),
        (dict(sinusoid_layout="x"), "sinusoid_layout must be one of"),
        (dict(src_vocab_size=0), "src_vocab_size must be a positive integer"),
        (dict(share_embeddings=True, tgt_vocab_size=99), "share_embeddings=True needs one shared vocabulary"),
        (dict(layer_norm_eps=0), "layer_norm_eps must be > 0"),
    ],
)
def test_bad_configs_name_the_field(changes, message):
    values = dict(src_vocab_size=100, tgt_vocab_size=100)
    values.update(changes)
    with pytest.raises(UserError, match=message):
        ModelConfig(**values)


def test_unknown_and_missing_keys():
    with pytest.raises(UserError, match=r"unknown ModelConfig keys \['d_modle'\]; valid keys"):
        ModelConfig.from_dict({"src_vocab_size": 5, "tgt_vocab_size": 5, "d_modle": 3})
    with pytest.raises(ValueError, match="missing required keys"):
        ModelConfig.from_dict({"d_model": 8})
    with pytest.raises(ValueError, match="not valid JSON"):
        ModelConfig.from_json("{not json")
    with pytest.raises(FileNotFoundError):
        ModelConfig.from_json("/nonexistent/config.json")


def test_config_files_that_are_not_text_or_not_json_are_the_users_mistake(tmp_path):
    """Decoding and parsing errors (ValueErrors of Python's own) become one-line UserErrors naming the file."""
    binary = tmp_path / "config.json"
    binary.write_bytes(b'{"d_model": "\xff"}')
    with pytest.raises(UserError, match=f"model config {binary} is not UTF-8 text"):
        ModelConfig.from_json(binary)
    with pytest.raises(UserError, match="not valid JSON"):  # more digits than int() converts: a ValueError
        ModelConfig.from_json('{"d_model": ' + "9" * 5000 + "}")
    run_config = tmp_path / "run.yaml"
    run_config.write_bytes(b"train:\n  epochs: \xff\n")
    with pytest.raises(UserError, match=f"{run_config} is not UTF-8 text"):
        RunConfig.load(run_config)
    run_config.write_text("train:\n  epochs: " + "9" * 5000 + "\n")
    with pytest.raises(UserError, match="is not valid YAML/JSON"):
        RunConfig.load(run_config)
    run_config.write_text("model: tiny\n")  # a section that is not a mapping
    with pytest.raises(UserError, match="config section 'model' must be a mapping, got str"):
        RunConfig.load(run_config)

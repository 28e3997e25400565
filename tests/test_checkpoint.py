"""Saving and loading models: safetensors + config.json, round trip and clear errors."""

import json

import pytest
import torch

from transformer.run.model import (
    CONFIG_FILE,
    WEIGHTS_FILE,
    CheckpointError,
    load_model,
    save_model,
)
from transformer.config import preset
from transformer.model import Transformer


@pytest.fixture
def saved(tmp_path):
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=30, tgt_vocab_size=40, tie_output=True, output_bias=True)).eval()
    with torch.no_grad():
        model.output.bias.normal_()
    save_model(model, tmp_path / "run")
    return model, tmp_path / "run"


def test_round_trip_gives_identical_logits(saved):
    model, directory = saved
    loaded = load_model(directory)
    src, tgt = torch.randint(0, 30, (2, 6)), torch.randint(0, 40, (2, 5))
    assert torch.equal(model(src, tgt), loaded(src, tgt))
    assert loaded.output.weight is loaded.decoder.embed.tokens.weight  # re-tied
    assert not loaded.training


def test_files_hold_no_pickle(saved):
    _, directory = saved
    raw = (directory / WEIGHTS_FILE).read_bytes()
    header_len = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8 : 8 + header_len])
    assert header["__metadata__"]["format"] == "pt"
    assert "decoder.embed.tokens.weight" in header and "output.weight" not in header  # tied tensor stored once
    assert sorted(p.name for p in directory.iterdir()) == [CONFIG_FILE, WEIGHTS_FILE]


def test_missing_directory_and_files(tmp_path, saved):
    with pytest.raises(CheckpointError, match="model directory not found"):
        load_model(tmp_path / "nope")
    _, directory = saved
    (directory / WEIGHTS_FILE).unlink()
    with pytest.raises(CheckpointError, match="weights file not found"):
        load_model(directory)
    (directory / CONFIG_FILE).unlink()
    with pytest.raises(CheckpointError, match="model config not found"):
        load_model(directory)


def test_truncated_file(saved):
    _, directory = saved
    path = directory / WEIGHTS_FILE
    data = path.read_bytes()
    for cut in (len(data) // 2, 4, 100):
        path.write_bytes(data[:cut])
        with pytest.raises(CheckpointError, match="truncated or corrupt"):
            load_model(directory)


def test_shapes_that_do_not_fit_the_config(saved):
    _, directory = saved
    cfg = json.loads((directory / CONFIG_FILE).read_text())
    cfg["d_ff"] = 128
    (directory / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match=r"has shape \(64, 32\) but the config needs \(128, 32\)"):
        load_model(directory)
    cfg["d_ff"], cfg["n_encoder_layers"] = 64, 3
    (directory / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(CheckpointError, match="missing tensors"):
        load_model(directory)


def test_invalid_config_file(saved):
    _, directory = saved
    (directory / CONFIG_FILE).write_text("{broken")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_model(directory)
    (directory / CONFIG_FILE).write_text(json.dumps({"src_vocab_size": 30, "tgt_vocab_size": 40, "n_heads": 5}))
    with pytest.raises(CheckpointError, match="divisible"):
        load_model(directory)


def test_failed_save_leaves_previous_weights_loadable(saved, monkeypatch):
    model, directory = saved
    import transformer.run.model as ckpt

    def crash(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(ckpt, "save_file", crash)
    with torch.no_grad():
        model.output.bias.add_(1.0)
    with pytest.raises(OSError, match="disk full"):
        save_model(model, directory)
    monkeypatch.undo()
    loaded = load_model(directory)
    assert not torch.equal(loaded.output.bias, model.output.bias)  # the old weights, intact
    assert [p.name for p in directory.iterdir() if p.name.startswith(".")] == []  # no temp files left

"""One shared check of config dicts (issue 23): ModelConfig, RNNConfig and the run configuration's
sections all go through ``transformer.config_dict.check_keys``, with the error messages they always had."""

import dataclasses

import pytest

from transformer.config import ModelConfig
from transformer.model.rnn_config import RNNConfig
from transformer.run.config import MODEL_KEYS, DataConfig, RunConfig, TrainConfig


def names(cls):
    return sorted(f.name for f in dataclasses.fields(cls))


@pytest.mark.parametrize(
    "build, data, message",
    [
        (ModelConfig.from_dict, [1], "a model config must be a JSON object, got list"),
        (ModelConfig.from_dict, {"src_vocab_size": 5, "tgt_vocab_size": 5, "d_modle": 3, "a": 1},
         f"unknown ModelConfig keys ['a', 'd_modle']; valid keys: {names(ModelConfig)}"),
        (ModelConfig.from_dict, {"d_model": 8}, "model config is missing required keys ['src_vocab_size', 'tgt_vocab_size']"),
        (ModelConfig.from_dict, {"tgt_vocab_size": 8}, "model config is missing required keys ['src_vocab_size']"),
        (RNNConfig.from_dict, "x", "a model config must be a JSON object, got str"),
        (RNNConfig.from_dict, {"src_vocab_size": 5, "tgt_vocab_size": 5, "n_heads": 4},
         f"unknown RNNConfig keys ['n_heads']; valid keys: {names(RNNConfig)}"),
        (RNNConfig.from_dict, {"architecture": "rnn"}, "model config is missing required keys ['src_vocab_size', 'tgt_vocab_size']"),
        (RunConfig.from_dict, "x", "a run config must be a mapping with sections data/model/train, got str"),
        (RunConfig.from_dict, {"trian": {}, "data": {}},
         "unknown config sections ['trian']; valid sections: ['data', 'model', 'train']"),
        (RunConfig.from_dict, {"data": [1]}, "config section 'data' must be a mapping, got list"),
        (RunConfig.from_dict, {"train": "fast"}, "config section 'train' must be a mapping, got str"),
        (RunConfig.from_dict, {"data": {"corpsu": "files"}}, f"unknown data keys ['corpsu']; valid keys: {names(DataConfig)}"),
        (RunConfig.from_dict, {"train": {"epoch": 3}}, f"unknown train keys ['epoch']; valid keys: {names(TrainConfig)}"),
        (RunConfig.from_dict, {"model": {"d_modle": 2}}, f"unknown model keys ['d_modle']; valid keys: {sorted(MODEL_KEYS)}"),
    ],
)
def test_from_dict_errors_are_worded_as_before(build, data, message):
    with pytest.raises(ValueError) as err:
        build(data)
    assert str(err.value) == message


def test_from_dict_still_builds_and_coerces():
    assert ModelConfig.from_dict({"src_vocab_size": 7, "tgt_vocab_size": 7, "d_model": 64}).d_model == 64
    assert RNNConfig.from_dict({"src_vocab_size": 7, "tgt_vocab_size": 9}).tgt_vocab_size == 9
    run = RunConfig.from_dict({"train": {"lr_scale": 2, "adam_eps": "1e-9"}, "model": {"preset": "tiny"}})
    assert run.train.lr_scale == 2.0 and isinstance(run.train.lr_scale, float) and run.train.adam_eps == 1e-9


def test_check_keys():
    from transformer.config_dict import check_keys, field_names

    data = {"a": 1}
    assert check_keys(data, ["a", "b"], mapping="x must be a mapping", owner="x") is data
    assert field_names(TrainConfig) == [f.name for f in dataclasses.fields(TrainConfig)]
    with pytest.raises(ValueError, match=r"^x must be a mapping, got int$"):
        check_keys(3, ["a"], mapping="x must be a mapping", owner="x")
    with pytest.raises(ValueError, match=r"^unknown x sections \['c'\]; valid sections: \['a', 'b'\]$"):
        check_keys({"c": 1}, ["b", "a"], mapping="", owner="x", noun="sections")
    with pytest.raises(ValueError, match=r"^thing is missing required keys \['b', 'a'\]$"):
        check_keys({}, ["a", "b"], mapping="", owner="x", required=("b", "a"), config="thing")


def test_every_config_checks_its_dict_with_the_shared_helper(monkeypatch):
    from transformer import config_dict

    owners = []
    check = config_dict.check_keys

    def spy(data, valid, **kwargs):
        owners.append(kwargs["owner"])
        return check(data, valid, **kwargs)

    monkeypatch.setattr(config_dict, "check_keys", spy)
    ModelConfig.from_dict({"src_vocab_size": 5, "tgt_vocab_size": 5})
    RNNConfig.from_dict({"src_vocab_size": 5, "tgt_vocab_size": 5})
    RunConfig.from_dict({"data": {}, "train": {}, "model": {"preset": "tiny"}})
    assert owners[:2] == ["ModelConfig", "RNNConfig"]
    assert {"config", "data", "train", "model"} <= set(owners[2:])

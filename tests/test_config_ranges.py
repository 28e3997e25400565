"""Numbers the configuration must refuse (issue 27): every numeric setting of ModelConfig, RNNConfig
and the run config has a valid range, declared once on its dataclass field and checked by
``transformer.config_dict`` when the config is read. Any value either loads and round-trips through
run_config.json, or is refused with one line naming the key, the value and the range; through the
real command line that is exit status 2 with nothing written."""

import dataclasses
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer import config_dict
from transformer.config import ModelConfig
from transformer.config_dict import Range, check_value
from transformer.errors import UserError
from transformer.model.rnn_config import RNNConfig
from transformer.run.config import (
    MIN_VOCAB_SIZE, RNN_KEYS, TRANSFORMER_KEYS, DataConfig, RunConfig, TrainConfig, describe_ranges)

# ------------------------------------------------------------------------------------------------
# The cases of the issue, through `python -m transformer.cli train`: (override, the message after "error: ").
CLI_CASES = [
    ("train.lr_scale=nan", "train.lr_scale must be > 0 and finite, got nan"),
    ("train.lr_scale=inf", "train.lr_scale must be > 0 and finite, got inf"),
    ("train.adam_eps=nan", "train.adam_eps must be > 0 and finite, got nan"),
    ("train.adam_beta1=5", "train.adam_beta1 must be in [0, 1), got 5.0"),
    ("train.weight_decay=-1", "train.weight_decay must be >= 0 and finite, got -1.0"),
    ("data.max_ratio=nan", "data.max_ratio must be >= 1 and finite (longer / shorter side), got nan"),
    ("train.threads=0", "train.threads must be an integer in [1, 1024], or null (the idle cores), got 0"),
    ("train.threads=-4", "train.threads must be an integer in [1, 1024], or null (the idle cores), got -4"),
    ("data.vocab_size=3",
     "data.vocab_size must be an integer >= 261 (4 special and 256 byte tokens, then the pieces), got 3"),
    ("train.clip_norm=nan", "train.clip_norm must be >= 0 and finite (0 = no clipping), or null (no clipping), got nan"),
    ("train.cooldown=1.5", "train.cooldown must be in [0, 1] (0 = none), got 1.5"),
    ("train.time_limit=abc", "train.time_limit must be > 0 and finite (seconds), or null (no time limit), got 'abc'"),
    ("train.seed=-1", "train.seed must be an integer in [0, 4294967295], got -1"),
    ("model.dropout=1", "model.dropout must be in [0, 1), got 1.0"),
    ("model.layer_norm_eps=-inf", "model.layer_norm_eps must be > 0 and finite, got -inf"),
]


def train_command(run_dir: Path, override: str) -> list[str]:
    return ["train", "--run-dir", str(run_dir), "--quiet", "model.preset=tiny", override]


def test_the_installed_command_refuses_a_number_with_exit_status_2(tmp_path):
    """One case through a real ``python -m transformer.cli`` process (the others below run its
    ``main`` in this process: starting a process takes seconds)."""
    override, message = CLI_CASES[0]
    done = subprocess.run([sys.executable, "-m", "transformer.cli", *train_command(tmp_path / "run", override)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr
    assert done.stderr == f"transformer train: error: {message}\n"
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "run").exists()  # refused when the config is read: nothing written


@pytest.mark.parametrize("override, message", CLI_CASES, ids=[case for case, _ in CLI_CASES])
def test_the_command_line_refuses_the_number_in_one_line(tmp_path, capsys, override, message):
    from transformer.cli import main

    run_dir = tmp_path / "run"
    status = main(train_command(run_dir, override))
    done = capsys.readouterr()
    assert status == 2, done.err
    assert done.err == f"transformer train: error: {message}\n"
    assert "Traceback" not in done.err and done.out == ""
    assert not run_dir.exists()  # refused when the config is read: nothing written


# ------------------------------------------------------------------------------------------------
# Every value of every numeric setting: loads and round-trips, or is refused naming the key.
NUMERIC = ([("data", name) for name in config_dict.ranges(DataConfig)]
           + [("train", name) for name in config_dict.ranges(TrainConfig)]
           + [("model", name) for name in config_dict.ranges(ModelConfig) if name in TRANSFORMER_KEYS]
           + [("model-rnn", name) for name in config_dict.ranges(RNNConfig) if name in RNN_KEYS])
ANY_VALUE = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-3, max_value=3000),
    st.floats(), st.floats(min_value=-2, max_value=2), st.text(max_size=6),
    st.sampled_from(["nan", "inf", "-inf", "NaN", "1e-9", "1e3", "0.5", "7", " 8 ", "", "0x10", "abc", "1_000"]),
    st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=2), st.integers(), max_size=1),
)
SMALL = {"data": {"vocab_size": 300}, "model": {"preset": "tiny"}, "train": {}}


def raw_config(section: str, name: str, value) -> dict:
    raw = json.loads(json.dumps(SMALL))
    if section == "model-rnn":
        raw["model"] = {"preset": "tiny", "architecture": "rnn", name: value}
    else:
        raw[section][name] = value
    return raw


def stored(cfg: RunConfig, section: str, name: str):
    return cfg.model[name] if section.startswith("model") else getattr(getattr(cfg, section), name)


def check_loaded_or_refused(build, section: str, name: str) -> RunConfig | None:
    try:
        cfg = build()
    except UserError as err:  # the user's mistake, never a plain ValueError (that would be a bug)
        message = str(err)
        assert name in message, message  # names the key
        assert "\n" not in message
        return None
    value = stored(cfg, section, name)
    owner = {"data": DataConfig, "train": TrainConfig, "model": ModelConfig, "model-rnn": RNNConfig}[section]
    valid = config_dict.ranges(owner)[name]
    assert check_value(name, value, valid) == value  # what loaded is in range (finite, of its kind)
    assert not isinstance(value, bool) and (value is None or isinstance(value, valid.kind))
    # round trip through run_config.json (RunConfig.save / load) and to_dict / from_dict
    text = json.dumps(cfg.to_dict(), allow_nan=False)
    assert RunConfig.from_dict(json.loads(text)).to_dict() == cfg.to_dict()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "run_config.json"
        cfg.save(path)
        again = RunConfig.load(path)
        assert again.to_dict() == cfg.to_dict() and stored(again, section, name) == value
    return cfg


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(NUMERIC), value=ANY_VALUE)
def test_any_value_in_a_config_file_loads_and_round_trips_or_is_refused_naming_the_key(key, value):
    section, name = key
    check_loaded_or_refused(lambda: RunConfig.from_dict(raw_config(section, name, value)), section, name)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(key=st.sampled_from(NUMERIC), text=st.one_of(st.text(max_size=8), st.from_regex(r"-?[0-9.e+-]{1,8}", fullmatch=True)))
def test_any_command_line_value_loads_and_round_trips_or_is_refused_naming_the_key(key, text):
    section, name = key
    base = RunConfig.from_dict(raw_config("model-rnn", "dropout", 0.0) if section == "model-rnn" else SMALL)
    key_text = f"{'model' if section == 'model-rnn' else section}.{name}"
    check_loaded_or_refused(lambda: base.with_overrides([f"{key_text}={text}"]), section, name)


def test_every_numeric_field_declares_its_range():
    """No numeric setting without a range: ints and floats of the configs all carry one."""
    for cls in (DataConfig, TrainConfig, ModelConfig, RNNConfig):
        for f in dataclasses.fields(cls):
            numeric = any(t in str(f.type).split(" | ") for t in ("int", "float"))
            assert numeric == (f.name in config_dict.ranges(cls)), f"{cls.__name__}.{f.name}"


# ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("valid, text", [
    (Range(int, 0, low_open=True), "a positive integer"),
    (Range(int, 1), "an integer >= 1"),
    (Range(int, 1, 1024, none_means="torch's choice"), "an integer in [1, 1024], or null (torch's choice)"),
    (Range(float, 0.0, 1.0, high_open=True), "in [0, 1)"),
    (Range(float, 0.0, 0.5, high_open=True), "in [0, 0.5)"),
    (Range(float, 0.0, low_open=True, note="seconds"), "> 0 and finite (seconds)"),
    (Range(float, 1.0), ">= 1 and finite"),
    (Range(float), "a finite number"),
])
def test_ranges_describe_themselves(valid, text):
    assert valid.describe() == text


@pytest.mark.parametrize("value, valid, result", [
    (5, Range(float, 0.0, 1.0, high_open=True), "train.x must be in [0, 1), got 5.0"),
    (1, Range(float, 0.0, 1.0), 1.0),
    ("1e-9", Range(float, 0.0, low_open=True), "train.x must be > 0 and finite, got '1e-9'"),  # text: parse_text only
    (True, Range(int, 0, low_open=True), "train.x must be a positive integer, got True"),
    (2.0, Range(int, 0, low_open=True), "train.x must be a positive integer, got 2.0"),
    (10**400, Range(float), "train.x must be a finite number, got " + repr(10**400)),
    (None, Range(float, 0.0), "train.x must be >= 0 and finite, got None"),
    (None, Range(float, 0.0, none_means="off"), None),
    (float("nan"), Range(float), "train.x must be a finite number, got nan"),
])
def test_check_value(value, valid, result):
    if isinstance(result, str):
        with pytest.raises(ValueError) as err:
            check_value("train.x", value, valid)
        assert str(err.value) == result
    else:
        assert check_value("train.x", value, valid) == result
    assert check_value("k", "1e-9", Range(float, 0.0, low_open=True), parse_text=True) == 1e-9


@pytest.mark.parametrize("cls, changes, message", [
    (ModelConfig, dict(layer_norm_eps=math.inf), "ModelConfig.layer_norm_eps must be > 0 and finite, got inf"),
    (ModelConfig, dict(dropout=False), "ModelConfig.dropout must be in [0, 1), got False"),
    (ModelConfig, dict(attention_dropout=math.nan), "ModelConfig.attention_dropout must be in [0, 1), got nan"),
    (ModelConfig, dict(max_positions=True), "ModelConfig.max_positions must be a positive integer"),
    (ModelConfig, dict(norm_first="yes"), "ModelConfig.norm_first must be true or false, got 'yes'"),
    (ModelConfig, dict(n_encoder_layers=0), "ModelConfig.n_encoder_layers must be an integer >= 1, got 0"),
    (RNNConfig, dict(dropout=math.inf), "RNNConfig.dropout must be in [0, 1), got inf"),
    (RNNConfig, dict(embed_dim=0), "RNNConfig.embed_dim must be a positive integer, got 0"),
    (RNNConfig, dict(score="additive", attention_dim=-2),
     "RNNConfig.attention_dim must be a positive integer, or null (the hidden size), got -2"),
])
def test_model_configs_refuse_numbers_out_of_range(cls, changes, message):
    with pytest.raises(ValueError) as err:
        cls(**{"src_vocab_size": 300, "tgt_vocab_size": 300, **changes})
    assert str(err.value).startswith(message)


def test_the_run_config_names_model_settings_by_their_key():
    with pytest.raises(ValueError, match=r"^model\.hidden_size must be a positive integer \(even\), got -2$"):
        RunConfig.from_dict({"model": {"architecture": "rnn", "hidden_size": -2}})
    with pytest.raises(ValueError, match=r"^model\.d_model must be a positive integer"):
        RunConfig.from_dict({"model": {"d_model": "wide"}})
    assert RunConfig.from_dict({"model": {"preset": "tiny", "layer_norm_eps": "1e-6"}}).model["layer_norm_eps"] == 1e-6


def test_boundaries_and_meanings():
    ok = RunConfig().with_overrides([f"data.vocab_size={MIN_VOCAB_SIZE}", "train.clip_norm=0", "train.threads=1024",
                                     "train.time_limit=1e-3", "train.adam_beta2=0", "data.builtin_test=0",
                                     "train.seed=4294967295", "train.weight_decay=0"])
    assert ok.data.vocab_size == 261 and ok.train.clip_norm == 0.0 and ok.train.time_limit == 0.001
    for bad in (f"data.vocab_size={MIN_VOCAB_SIZE - 1}", "train.threads=1025", "train.adam_beta2=1",
                "data.valid_fraction=0.5", "train.seed=4294967296", "data.max_ratio=0.99", "train.time_limit=0"):
        with pytest.raises(ValueError, match=bad.split("=")[0].replace(".", r"\.")):
            RunConfig().with_overrides([bad])


def test_text_settings_take_the_command_line_text_as_it_is():
    cfg = RunConfig().with_overrides(["data.src_lang=no", "data.tgt_lang=1", "data.corpus=files", "data.train_src=2024",
                                      "data.train_tgt=true"])
    assert (cfg.data.src_lang, cfg.data.tgt_lang, cfg.data.train_src, cfg.data.train_tgt) == ("no", "1", "2024", "true")
    with pytest.raises(ValueError, match=r"^data\.train_src must be a string or null, got 5$"):
        RunConfig.from_dict({"data": {"train_src": 5}})


def test_help_lists_the_ranges():
    lines = describe_ranges()
    assert "train.adam_beta1: in [0, 1)" in lines and "data.max_ratio: >= 1 and finite (longer / shorter side)" in lines
    assert "model.hidden_size: a positive integer (even) (model=rnn)" in lines
    assert len(lines) == len(set(lines))


@pytest.mark.parametrize("args, message", [
    (["--time-limit", "nan"], "--time-limit must be > 0 seconds (and finite), got nan"),
    (["--time-limit", "inf"], "--time-limit must be > 0 seconds (and finite), got inf"),
    (["--seed", "-1"], "--seed must be in [0, 4294967295], got -1"),
])
def test_demo_refuses_its_numbers_out_of_range(tmp_path, capsys, args, message):
    from transformer.cli import main

    assert main(["demo", "--run-dir", str(tmp_path / "demo"), "--steps", "1", *args]) == 2
    assert capsys.readouterr().err == f"transformer demo: error: {message}\n"
    assert not (tmp_path / "demo").exists()

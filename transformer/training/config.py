"""Run configuration: where the data comes from, the model, and the training recipe.

A run is described by one ``RunConfig`` with three sections (``data``, ``model``, ``train``),
read from a YAML or JSON file and adjusted with ``section.key=value`` overrides on the command
line (a key that is unique across sections may be given without its section). Unknown keys
are errors that list the valid ones. The defaults are the paper's recipe (section 5) except
where a comment says otherwise.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import yaml

from transformer import config_dict
from transformer.config import PRESETS, ModelConfig, preset
from transformer.model.rnn_config import RNNConfig, rnn_preset
from transformer.cpu.precision import PRECISIONS

SECTIONS = ("data", "model", "train")
CORPORA = ("builtin", "files", "tsv", "multi30k", "tatoeba")
DEVICES = ("auto", "cpu", "cuda")


@dataclass
class DataConfig:
    """Where the parallel text comes from and how it is cut into batches."""

    corpus: str = "builtin"  # "builtin" (generated fr->en), "files", "tsv", or a registry name: "multi30k", "tatoeba"
    data_dir: str | None = None  # registry corpora: a local copy (default: $TRANSFORMER_DATA, else download)
    train_src: str | None = None  # corpus=files: line-aligned text files (plain or gzip)
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    tsv: str | None = None  # corpus=tsv: one "source<TAB>target" pair per line
    valid_fraction: float = 0.02  # held out from training when no validation files are given
    builtin_train: int = 30000  # corpus=builtin: sentence pairs per split
    builtin_valid: int = 500
    builtin_test: int = 500
    src_lang: str = "fr"
    tgt_lang: str = "en"
    vocab_size: int = 8000  # BPE vocabulary (per side when joint_vocab is false)
    joint_vocab: bool = True  # one shared vocabulary (paper 5.1), needed for shared embeddings
    max_len: int = 128  # drop pairs with a side longer than this many tokens
    max_ratio: float = 3.0  # drop pairs whose token-length ratio exceeds this
    max_tokens: int = 4096  # padded source + target tokens per batch (paper: ~25k + 25k)
    seed: int = 0


@dataclass
class TrainConfig:
    """The optimisation recipe (paper 5.3, 5.4) and the run's bookkeeping."""

    epochs: int = 10
    max_steps: int | None = None  # stop after this many optimizer steps
    time_limit: float | None = None  # stop after this many seconds of training (then validate and save)
    lr_scale: float = 1.0  # factor on the paper's learning-rate formula
    warmup: int = 4000
    adam_beta1: float = 0.9
    adam_beta2: float = 0.98
    adam_eps: float = 1e-9
    weight_decay: float = 0.0
    label_smoothing: float = 0.1
    clip_norm: float | None = None  # gradient clipping by global norm (the paper has none)
    accumulate: int = 1  # batches per optimizer step
    # "auto" (bf16 where the device has bf16 matrix units, else fp32), "fp32", "bf16" (autocast;
    # CPUs with AVX-512 bf16 or AMX, or CUDA) or "fp16" (CUDA, loss scaling)
    precision: str = "auto"
    device: str = "auto"
    threads: int | None = None  # torch intra-op threads on CPU (default: torch's choice)
    seed: int = 0
    log_every: int = 50  # steps between progress lines / metric records
    eval_every: int = 0  # steps between validations; 0 = at the end of each epoch
    eval_sentences: int = 200  # validation sentences translated (greedy) for BLEU; 0 = loss only
    save_every: int = 0  # steps between checkpoints; 0 = at every validation
    keep_last: int = 5  # checkpoints kept (plus the best)
    average_last: int = 0  # at the end, average the last N checkpoints into the model (paper: 5); <= keep_last


ARCHITECTURES = ("transformer", "rnn")  # model.architecture (or the shorthand model=rnn)
_NOT_SET = {"src_vocab_size", "tgt_vocab_size", "extra", "architecture"}  # filled in from the data, or the section key
TRANSFORMER_KEYS = {f.name for f in dataclasses.fields(ModelConfig)} - _NOT_SET
RNN_KEYS = {f.name for f in dataclasses.fields(RNNConfig)} - _NOT_SET
MODEL_KEYS = {"preset", "architecture"} | TRANSFORMER_KEYS | RNN_KEYS


@dataclass
class RunConfig:
    """Everything a training run needs; saved as ``run_config.json`` in the run directory."""

    data: DataConfig = field(default_factory=DataConfig)
    model: dict[str, Any] = field(default_factory=lambda: {"preset": "small"})
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first bad setting."""
        d, t = self.data, self.train
        _choice("data.corpus", d.corpus, CORPORA)
        if d.corpus == "files" and not (d.train_src and d.train_tgt):
            raise ValueError("data.corpus=files needs data.train_src and data.train_tgt")
        if d.corpus == "tsv" and not d.tsv:
            raise ValueError("data.corpus=tsv needs data.tsv (a file of source<TAB>target lines)")
        if bool(d.valid_src) != bool(d.valid_tgt):
            raise ValueError("give both data.valid_src and data.valid_tgt, or neither")
        for name in ("builtin_train", "builtin_valid", "vocab_size", "max_len", "max_tokens"):
            _positive(f"data.{name}", getattr(d, name))
        if not 0.0 <= d.valid_fraction < 0.5:
            raise ValueError(f"data.valid_fraction must be in [0, 0.5), got {d.valid_fraction}")
        if d.max_ratio < 1.0:
            raise ValueError(f"data.max_ratio must be >= 1, got {d.max_ratio}")
        for name in ("epochs", "warmup", "accumulate", "log_every", "keep_last"):
            _positive(f"train.{name}", getattr(t, name))
        for name in ("eval_every", "eval_sentences", "save_every", "average_last"):
            if getattr(t, name) < 0:
                raise ValueError(f"train.{name} must be >= 0, got {getattr(t, name)}")
        if t.average_last > t.keep_last:
            raise ValueError(
                f"train.average_last ({t.average_last}) must not exceed train.keep_last ({t.keep_last}): only the "
                "newest train.keep_last checkpoints are kept to average; raise train.keep_last or lower train.average_last")
        if t.max_steps is not None:
            _positive("train.max_steps", t.max_steps)
        if t.time_limit is not None and t.time_limit <= 0:
            raise ValueError(f"train.time_limit must be > 0 seconds, got {t.time_limit}")
        if t.lr_scale <= 0:
            raise ValueError(f"train.lr_scale must be > 0, got {t.lr_scale}")
        if not 0.0 <= t.label_smoothing < 1.0:
            raise ValueError(f"train.label_smoothing must be in [0, 1), got {t.label_smoothing}")
        if t.clip_norm is not None and t.clip_norm <= 0:
            raise ValueError(f"train.clip_norm must be > 0 (or null for none), got {t.clip_norm}")
        _choice("train.precision", t.precision, PRECISIONS)
        _choice("train.device", t.device, DEVICES)
        config_dict.check_keys(self.model, MODEL_KEYS, mapping="config section 'model' must be a mapping", owner="model")
        architecture = self.model.get("architecture", "transformer")
        _choice("model.architecture", architecture, ARCHITECTURES)
        own = RNN_KEYS if architecture == "rnn" else TRANSFORMER_KEYS
        foreign = sorted(set(self.model) - own - {"preset", "architecture"})
        if foreign:
            raise ValueError(f"model keys {foreign} do not apply to architecture={architecture}; "
                             f"its keys: {sorted(own | {'preset', 'architecture'})}")
        if self.model.get("preset", "small") not in PRESETS:
            raise ValueError(f"model.preset must be one of {sorted(PRESETS)}, got {self.model.get('preset')!r}")
        if d.joint_vocab is False and self.model.get("share_embeddings"):
            raise ValueError("model.share_embeddings needs data.joint_vocab=true (one shared vocabulary)")
        self.model_config(src_vocab_size=d.vocab_size, tgt_vocab_size=d.vocab_size)  # validates the sizes

    def model_config(self, *, src_vocab_size: int, tgt_vocab_size: int) -> ModelConfig | RNNConfig:
        """The model config for vocabularies of the given sizes: a ``ModelConfig`` (Transformer), or an
        ``RNNConfig`` when ``model.architecture`` is ``rnn`` (the preset then names RNN sizes)."""
        overrides = {k: v for k, v in self.model.items() if k not in ("preset", "architecture")}
        build = rnn_preset if self.model.get("architecture") == "rnn" else preset
        cfg = build(self.model.get("preset", "small"), src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
        if "share_embeddings" not in overrides:
            overrides["share_embeddings"] = self.data.joint_vocab and src_vocab_size == tgt_vocab_size
        return cfg.replace(**overrides)

    # ------------------------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return {"data": dataclasses.asdict(self.data), "model": dict(self.model), "train": dataclasses.asdict(self.train)}

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        config_dict.check_keys(raw, SECTIONS, mapping="a run config must be a mapping with sections data/model/train",
                               owner="config", noun="sections")
        return cls(
            data=_section(DataConfig, raw.get("data") or {}, "data"),
            model=dict(raw.get("model") or {"preset": "small"}),
            train=_section(TrainConfig, raw.get("train") or {}, "train"),
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> RunConfig:
        """Read a YAML or JSON file, then apply ``key=value`` overrides."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file not found: {path}")
        text = path.read_text(encoding="utf-8")
        try:
            raw = json.loads(text) if path.suffix == ".json" else (yaml.safe_load(text) or {})
        except (yaml.YAMLError, json.JSONDecodeError) as err:
            raise ValueError(f"{path} is not valid YAML/JSON: {err}") from None
        return cls.from_dict(raw).with_overrides(overrides)

    def with_overrides(self, overrides: Sequence[str]) -> RunConfig:
        """A copy with ``section.key=value`` (or unique ``key=value``) settings applied.

        ``model=rnn`` (or ``model=transformer``) is short for ``model.architecture=...``.
        """
        raw = self.to_dict()
        for item in overrides:
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise ValueError(f"override {item!r} is not of the form key=value (e.g. train.epochs=5)")
            key = "model.architecture" if key.strip() == "model" else key
            section, name = self._resolve(key.strip())
            raw[section][name] = _parse_value(text)
        return RunConfig.from_dict(raw)

    def save(self, path: str | os.PathLike[str]) -> None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    @staticmethod
    def _resolve(key: str) -> tuple[str, str]:
        valid = {
            "data": {f.name for f in dataclasses.fields(DataConfig)},
            "model": MODEL_KEYS,
            "train": {f.name for f in dataclasses.fields(TrainConfig)},
        }
        if "." in key:
            section, _, name = key.partition(".")
            if section in valid and name in valid[section]:
                return section, name
        else:
            owners = [s for s, names in valid.items() if key in names]
            if len(owners) == 1:
                return owners[0], key
            if len(owners) > 1:
                raise ValueError(f"key {key!r} is ambiguous; write one of {[f'{s}.{key}' for s in owners]}")
        listing = "; ".join(f"{s}: {', '.join(sorted(names))}" for s, names in valid.items())
        raise ValueError(f"unknown config key {key!r}. Valid keys are {listing}")


def _parse_value(text: str) -> Any:
    """A command-line value: JSON first (so 1e-9 is a number), then YAML (yes/no, lists), else the string."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError:
        return text


def _section(cls: type, values: dict[str, Any], name: str) -> Any:
    config_dict.check_keys(values, config_dict.field_names(cls), mapping=f"config section {name!r} must be a mapping",
                           owner=name)
    for f in dataclasses.fields(cls):
        if f.name in values:
            values[f.name] = _coerce(f"{name}.{f.name}", values[f.name], f.default)
    return cls(**values)


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Check a value against the type of its field's default (ints become floats where needed)."""
    if value is None:
        return None
    if isinstance(default, bool) or (default is None and isinstance(value, bool)):
        if not isinstance(value, bool):
            raise ValueError(f"{key} must be true or false, got {value!r}")
        return value
    if isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if isinstance(default, float) and isinstance(value, str):
        try:
            return float(value)  # YAML 1.1 reads "1e-9" as a string
        except ValueError:
            pass
    if default is not None and not isinstance(value, type(default)):
        raise ValueError(f"{key} must be of type {type(default).__name__}, got {value!r}")
    if isinstance(value, bool) and default is None:
        raise ValueError(f"{key} must be a number or string, got {value!r}")
    return value


def _positive(key: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{key} must be a positive integer, got {value!r}")


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise ValueError(f"{key} must be one of {list(choices)}, got {value!r}")

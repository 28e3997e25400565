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
from transformer.corpus.builtin import WRITTEN_SHARE
from transformer.config import PRESETS, ModelConfig, preset
from transformer.config_dict import at_least, int_at_least, positive, positive_int, probability, valid
from transformer.model.rnn_config import RNNConfig, rnn_preset
from transformer.text.tokenizer import BYTE_TOKENS, SPECIAL_TOKENS
from transformer.threads import MAX_THREADS
from transformer.run_files import RunFileError, read_json, write_atomic
from transformer.errors import UserError

SECTIONS = ("data", "model", "train")
CORPORA = ("builtin", "files", "tsv", "multi30k", "tatoeba", "wmt14-en-de", "wmt14-en-fr")
SCHEDULES = ("auto", "noam", "inverse_sqrt", "constant")  # train.schedule (transformer/training/schedule.py)
OPTIMIZERS = ("adam", "adamw")  # train.optimizer (transformer/training/schedule.py)
FREEZABLE = ("embeddings", "encoder", "decoder")  # train.freeze: the parts that can be kept as they are
# train.warmup when left unset: the paper's 4000 steps for noam, a short one for fine-tuning schedules
DEFAULT_WARMUP = {"noam": 4000, "inverse_sqrt": 100, "constant": 100}
# how long a run goes on: a resume may set them anew (only train.cooldown's decay follows them)
RUN_LENGTH_KEYS = ("epochs", "max_steps", "time_limit")
DEVICES = ("auto", "cpu", "cuda")


# The smallest vocabulary the BPE tokenizer can hold: its special tokens, its 256 byte tokens and one piece.
MIN_VOCAB_SIZE = len(SPECIAL_TOKENS) + len(BYTE_TOKENS) + 1
SEED = dict(low=0, high=2**32 - 1)  # numpy's global generator takes seeds in [0, 2**32)


@dataclass
class DataConfig:
    """Where the parallel text comes from and how it is cut into batches."""

    # "builtin" (generated fr->en), "files", "tsv", or a registry name: "multi30k", "tatoeba", "wmt14-en-de", "wmt14-en-fr"
    corpus: str = "builtin"
    data_dir: str | None = None  # registry corpora: a local copy (default: $TRANSFORMER_DATA, else download)
    train_src: str | None = None  # corpus=files: line-aligned text files (plain or gzip)
    train_tgt: str | None = None
    valid_src: str | None = None
    valid_tgt: str | None = None
    tsv: str | None = None  # corpus=tsv: one "source<TAB>target" pair per line
    # validation pairs from a sacreBLEU test set in data.src_lang-data.tgt_lang, e.g. wmt13 (newstest2013),
    # read from sacreBLEU's cache ($SACREBLEU, default ~/.sacrebleu) or downloaded into it; instead of the
    # corpus's own validation split or files
    valid_set: str | None = None
    # the run's test pairs from a sacreBLEU test set, e.g. wmt14/full (newstest2014, 3,003 sentences); what
    # `transformer evaluate RUN_DIR` scores when given no test set
    test_set: str | None = None
    # several corpora sampled by weight instead of data.corpus, e.g. "multi30k:0.8,tatoeba:0.2" (registry
    # names, builtin, or .tsv files): each epoch holds every training pair of the first corpus and draws
    # the others anew so that each has its share of the epoch's pairs; validation and test come from the first
    mix: str | None = None
    # held out from training when no validation files are given
    valid_fraction: float = field(default=0.02, metadata=valid(float, 0.0, 0.5, high_open=True))
    builtin_train: int = field(default=30000, metadata=positive_int())  # corpus=builtin: sentence pairs per split
    builtin_valid: int = field(default=500, metadata=positive_int())
    builtin_test: int = field(default=500, metadata=int_at_least(0))
    # corpus=builtin: the share of sentences written with capitals and punctuation (the rest lowercase, no final period)
    builtin_written: float = field(default=WRITTEN_SHARE, metadata=probability())
    src_lang: str = "fr"
    tgt_lang: str = "en"
    # BPE vocabulary (per side when joint_vocab is false)
    vocab_size: int = field(default=8000, metadata=int_at_least(
        MIN_VOCAB_SIZE, note=f"{len(SPECIAL_TOKENS)} special and {len(BYTE_TOKENS)} byte tokens, then the pieces"))
    joint_vocab: bool = True  # one shared vocabulary (paper 5.1), needed for shared embeddings
    # BPE-dropout: training sentences segmented anew for every batch, each merge skipped with this
    # probability (Provilkov et al. 2020 use 0.1); validation, test and translation keep plain BPE
    bpe_dropout: float = field(default=0.0, metadata=valid(float, 0.0, 1.0, high_open=True, note="0 = plain BPE"))
    max_len: int = field(default=128, metadata=positive_int())  # drop pairs with a side longer than this many tokens
    # drop pairs whose token-length ratio (longer / shorter side) exceeds this
    max_ratio: float = field(default=3.0, metadata=at_least(1.0, note="longer / shorter side"))
    # padded source + target tokens per batch (paper: ~25k + 25k)
    max_tokens: int = field(default=4096, metadata=positive_int())
    seed: int = field(default=0, metadata=int_at_least(**SEED))
    # with train.init_from: the largest share of unknown or byte-fallback tokens the initial model's
    # tokenizer may give the training data (per side) before the run is refused
    max_unknown: float = field(default=0.05, metadata=valid(float, 0.0, 1.0))
    # tokenize the training pairs once into a memory-mapped cache that later runs, resumes and DDP ranks
    # reuse ($TRANSFORMER_DATA_CACHE, else binarized/ in the download cache); false: in memory at every start
    binarize: bool = True


@dataclass
class TrainConfig:
    """The optimisation recipe (paper 5.3, 5.4) and the run's bookkeeping."""

    epochs: int = field(default=10, metadata=positive_int())
    # stop after this many optimizer steps
    max_steps: int | None = field(default=None, metadata=positive_int(none_means="no step limit"))
    # stop after this many seconds of training (then validate and save), counted over the whole run:
    # a resumed run goes on for the time that is left
    time_limit: float | None = field(default=None, metadata=positive(note="seconds", none_means="no time limit"))
    # start from the weights, architecture and tokenizer of this run directory (fine-tuning): one of ours,
    # one made by import-hf, or a checkpoints/step-N directory of one; the run itself goes to another directory
    init_from: str | None = None
    # learning-rate schedule: "noam" (paper 5.3), "inverse_sqrt" or "constant" (warmup to train.lr);
    # "auto": noam, or inverse_sqrt when train.init_from is set
    schedule: str = "auto"
    lr_scale: float = field(default=1.0, metadata=positive())  # factor on the paper's learning-rate formula (noam)
    lr: float = field(default=2e-4, metadata=positive())  # peak learning rate of the inverse_sqrt and constant schedules
    # the last fraction of the run over which the learning rate falls linearly to zero (on top of the
    # schedule); the run's length is the nearest of train.time_limit, train.max_steps and train.epochs
    cooldown: float = field(default=0.0, metadata=valid(float, 0.0, 1.0, note="0 = none"))
    # warmup steps of the learning-rate schedule
    warmup: int | None = field(default=None, metadata=positive_int(
        none_means="4000 for noam (paper 5.3), 100 for inverse_sqrt and constant"))
    # parts of the model left as they are (out of the optimizer), comma-separated: embeddings, encoder,
    # decoder; a tensor shared by two parts (shared or tied embeddings) is frozen with either
    freeze: str | None = None
    adam_beta1: float = field(default=0.9, metadata=probability())
    adam_beta2: float = field(default=0.98, metadata=probability())
    adam_eps: float = field(default=1e-9, metadata=positive())
    # "adam" (paper 5.3; train.weight_decay is then an L2 term added to the gradient) or "adamw" (decoupled
    # weight decay, Loshchilov & Hutter 2019: matrices shrink by rate * train.weight_decay each step,
    # biases and LayerNorm parameters are not decayed)
    optimizer: str = "adam"
    weight_decay: float = field(default=0.0, metadata=at_least(0.0))
    label_smoothing: float = field(default=0.1, metadata=probability())
    # R-Drop (Liang et al. 2021): weight of the symmetric KL between two dropout passes of each batch
    # (each step computes the batch twice); 0 = off
    rdrop: float = field(default=0.0, metadata=at_least(0.0))
    # word dropout (Sennrich & Zhang 2019): probability that each source token and each target token the
    # decoder reads (not the ones it predicts) is replaced by <unk> in training; 0 = off
    word_dropout: float = field(default=0.0, metadata=valid(float, 0.0, 1.0, high_open=True, note="0 = off"))
    # gradient clipping by global norm (the paper has none)
    clip_norm: float | None = field(default=None, metadata=at_least(0.0, note="0 = no clipping",
                                                                     none_means="no clipping"))
    accumulate: int = field(default=1, metadata=positive_int())  # batches per optimizer step
    # "auto" (bf16 where the device has bf16 matrix units, else fp32), "fp32", "bf16" (autocast;
    # CPUs with AVX-512 bf16 or AMX, or CUDA) or "fp16" (CUDA, loss scaling)
    precision: str = "auto"
    device: str = "auto"
    # torch.compile the model's forward pass (CUDA only: the CUDA engine; falls back to eager, with a
    # warning, where compiling fails)
    compile: bool = False
    # torch intra-op threads on CPU (null: the cores other processes leave idle when a command starts; torch's
    # own count for a Trainer made in Python)
    threads: int | None = field(default=None, metadata=int_at_least(1, MAX_THREADS, none_means="the idle cores"))
    seed: int = field(default=0, metadata=int_at_least(**SEED))
    log_every: int = field(default=50, metadata=positive_int())  # steps between progress lines / metric records
    # steps between validations; 0 = at the end of each epoch
    eval_every: int = field(default=0, metadata=int_at_least(0, note="0 = at the end of each epoch"))
    # validation sentences translated (greedy) for BLEU; 0 = loss only
    eval_sentences: int = field(default=200, metadata=int_at_least(0, note="0 = loss only"))
    # steps between checkpoints; 0 = at every validation
    save_every: int = field(default=0, metadata=int_at_least(0, note="0 = at every validation"))
    keep_last: int = field(default=5, metadata=positive_int())  # checkpoints kept (plus the best)
    # at the end, average the last N checkpoints into the model (paper: 5); <= keep_last
    average_last: int = field(default=0, metadata=int_at_least(0, note="0 = none; at most train.keep_last"))
    # decay of an exponential moving average of the weights, updated after every step, saved in each
    # checkpoint, and the run's model at its end (e.g. 0.999); not with train.average_last
    ema: float = field(default=0.0, metadata=valid(float, 0.0, 1.0, high_open=True, note="0 = none"))
    # write TensorBoard logs to RUN_DIR/tensorboard (with the tensorboard extra installed)
    tensorboard: bool = True
    # validation sentences whose cross-attention is recorded at each evaluation (alignments.jsonl,
    # TensorBoard images); 0 = none
    alignment_sentences: int = field(default=4, metadata=int_at_least(0, 64, note="0 = none"))

    def effective_schedule(self) -> tuple[str, int]:
        """The schedule and warmup this recipe trains with: ``auto`` and an unset warmup resolved."""
        name = self.schedule if self.schedule != "auto" else ("inverse_sqrt" if self.init_from else "noam")
        return name, self.warmup if self.warmup is not None else DEFAULT_WARMUP[name]

    def frozen_parts(self) -> list[str]:
        """The parts named by ``freeze``, checked."""
        parts = [p.strip() for p in (self.freeze or "").split(",") if p.strip()]
        unknown = [p for p in parts if p not in FREEZABLE]
        if unknown:
            raise UserError(f"train.freeze names unknown parts {unknown}; valid parts: {', '.join(FREEZABLE)} "
                             "(comma-separated)")
        return parts


# The settings that are text (names, paths); a command-line override gives them its text unparsed.
_STRING_FIELDS = {name: {f.name for f in dataclasses.fields(cls) if f.type in ("str", "str | None")}
                  for name, cls in (("data", DataConfig), ("train", TrainConfig))}
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
    # Written by the trainer, not a setting: where train.init_from's weights came from (path, sha256, step).
    initialized_from: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`~transformer.errors.UserError` naming the first bad setting."""
        d, t = self.data, self.train
        _choice("data.corpus", d.corpus, CORPORA)
        if d.corpus == "files" and not (d.train_src and d.train_tgt):
            raise UserError("data.corpus=files needs data.train_src and data.train_tgt")
        if d.corpus == "tsv" and not d.tsv:
            raise UserError("data.corpus=tsv needs data.tsv (a file of source<TAB>target lines)")
        if bool(d.valid_src) != bool(d.valid_tgt):
            raise UserError("give both data.valid_src and data.valid_tgt, or neither")
        if d.valid_set and d.valid_src:
            raise UserError(f"data.valid_set={d.valid_set} and data.valid_src/valid_tgt both name validation data: "
                             "keep one")
        for key in ("valid_set", "test_set"):
            if getattr(d, key):
                from transformer.corpus.testsets import check_test_set

                try:
                    check_test_set(getattr(d, key), d.src_lang, d.tgt_lang)
                except UserError as err:
                    raise UserError(f"data.{key}: {err}") from None
        config_dict.check_fields(d, "data")  # the ranges declared on the fields
        config_dict.check_fields(t, "train")
        for section in (d, t):
            _check_strings(section)
        if t.ema and t.average_last:
            raise UserError(f"train.ema ({t.ema}) and train.average_last ({t.average_last}) each make the run's "
                             "final model: set one of them to 0")
        if t.average_last > t.keep_last:
            raise UserError(
                f"train.average_last ({t.average_last}) must not exceed train.keep_last ({t.keep_last}): only the "
                "newest train.keep_last checkpoints are kept to average; raise train.keep_last or lower train.average_last")
        # with torch: not for reading the settings' ranges
        from transformer.cpu.training_precision import TRAIN_PRECISIONS

        _choice("train.precision", t.precision, TRAIN_PRECISIONS)
        _choice("train.device", t.device, DEVICES)
        _choice("train.schedule", t.schedule, SCHEDULES)
        _choice("train.optimizer", t.optimizer, OPTIMIZERS)
        t.frozen_parts()
        if d.mix and d.bpe_dropout:
            raise UserError("data.bpe_dropout does not work with data.mix yet: train on one corpus, or set "
                             "data.bpe_dropout=0")
        if d.mix:
            from transformer.data.mixing import parse_mix  # with numpy and torch: not for reading the settings

            names = [name for name, _ in parse_mix(d.mix)]
            if d.corpus != "builtin" and d.corpus != names[0]:
                raise UserError(f"data.corpus={d.corpus} and data.mix={d.mix} disagree: with data.mix the first corpus "
                                 "of the mix is the in-domain one (validation, test); leave data.corpus out or make "
                                 "it the first of the mix")
        config_dict.check_keys(self.model, MODEL_KEYS, mapping="config section 'model' must be a mapping", owner="model")
        architecture = self.model.get("architecture", "transformer")
        _choice("model.architecture", architecture, ARCHITECTURES)
        own = RNN_KEYS if architecture == "rnn" else TRANSFORMER_KEYS
        foreign = sorted(set(self.model) - own - {"preset", "architecture"})
        if foreign:
            raise UserError(f"model keys {foreign} do not apply to architecture={architecture}; "
                             f"its keys: {sorted(own | {'preset', 'architecture'})}")
        config_dict.check_mapping(_model_class(architecture), self.model, "model")
        if self.model.get("preset", "small") not in PRESETS:
            raise UserError(f"model.preset must be one of {sorted(PRESETS)}, got {self.model.get('preset')!r}")
        if d.joint_vocab is False and self.model.get("share_embeddings"):
            raise UserError("model.share_embeddings needs data.joint_vocab=true (one shared vocabulary)")
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
        out = self.settings()
        if self.initialized_from is not None:
            out["initialized_from"] = self.initialized_from
        return out

    def settings(self) -> dict[str, Any]:
        """The three sections (what a run is resumed with), without the trainer's record of ``initialized_from``."""
        return {"data": dataclasses.asdict(self.data), "model": dict(self.model), "train": dataclasses.asdict(self.train)}

    def effective_settings(self) -> dict[str, Any]:
        """:meth:`settings` with the schedule and warmup resolved, so that a run configuration saved before
        ``train.schedule`` existed (warmup 4000 written out) equals the same recipe written now."""
        out = self.settings()
        out["train"]["schedule"], out["train"]["warmup"] = self.train.effective_schedule()
        return out

    def recipe_settings(self) -> dict[str, Any]:
        """:meth:`effective_settings` without the keys that only say how long to train
        (:data:`RUN_LENGTH_KEYS`): a run resumed with another of those follows the same trajectory."""
        out = self.effective_settings()
        for key in RUN_LENGTH_KEYS:
            out["train"].pop(key, None)
        return out

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> RunConfig:
        # the trainer's record of where the weights came from sits beside the sections, not among them
        sections = {k: v for k, v in raw.items() if k != "initialized_from"} if isinstance(raw, dict) else raw
        config_dict.check_keys(sections, SECTIONS, mapping="a run config must be a mapping with sections data/model/train",
                               owner="config", noun="sections")
        initialized_from = raw.get("initialized_from")
        if initialized_from is not None and not isinstance(initialized_from, dict):
            raise UserError(f"initialized_from must be a mapping (written by the trainer), got {initialized_from!r}")
        model = raw.get("model") or {"preset": "small"}
        if isinstance(model, dict):  # numbers from YAML 1.1 text ("1e-6") and ints for float settings
            model = config_dict.check_mapping(_model_class(model.get("architecture")), model, "model", parse_text=True)
        return cls(
            data=_section(DataConfig, raw.get("data") or {}, "data"),
            model=dict(model) if isinstance(model, dict) else model,  # validate() refuses a non-mapping
            train=_section(TrainConfig, raw.get("train") or {}, "train"),
            initialized_from=initialized_from,
        )

    @classmethod
    def load(cls, path: str | os.PathLike[str], overrides: Sequence[str] = ()) -> RunConfig:
        """Read a YAML or JSON file, then apply ``key=value`` overrides."""
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"config file not found: {path}")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as err:
            raise UserError(f"{path} is not UTF-8 text: {err}") from None
        try:
            raw = json.loads(text) if path.suffix == ".json" else (yaml.safe_load(text) or {})
        except (yaml.YAMLError, ValueError) as err:  # ValueError: also an integer of more digits than Python converts
            raise UserError(f"{path} is not valid YAML/JSON: {err}") from None
        return cls.from_dict(raw).with_overrides(overrides)

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> RunConfig:
        """The run configuration a run directory's ``run_config.json`` holds, read as any file of a
        run is (a regular file under a size cap, bounded nesting: ``transformer.run_files``).
        FileNotFoundError when missing; ``RunFileError`` (a ValueError) naming the file otherwise."""
        data = read_json(path)
        try:
            return cls.from_dict(data)
        except (TypeError, ValueError) as err:
            raise RunFileError(f"{path} is not a valid run configuration: {' '.join(str(err).split())}") from None

    def with_overrides(self, overrides: Sequence[str]) -> RunConfig:
        """A copy with ``section.key=value`` (or unique ``key=value``) settings applied.

        ``model=rnn`` (or ``model=transformer``) is short for ``model.architecture=...``.
        """
        raw = self.settings()
        for item in overrides:
            key, sep, text = item.partition("=")
            if not sep or not key.strip():
                raise UserError(f"override {item!r} is not of the form key=value (e.g. train.epochs=5)")
            key = "model.architecture" if key.strip() == "model" else key
            section, name = self._resolve(key.strip())
            # a string setting takes the text as it is ("data.src_lang=no" is Norwegian, not false)
            raw[section][name] = (text.strip() or None) if name in _STRING_FIELDS.get(section, ()) else _parse_value(text)
        return RunConfig.from_dict(raw)

    def save(self, path: str | os.PathLike[str]) -> None:
        write_atomic(path, json.dumps(self.to_dict(), indent=2, sort_keys=True) + "\n")

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
                raise UserError(f"key {key!r} is ambiguous; write one of {[f'{s}.{key}' for s in owners]}")
        listing = "; ".join(f"{s}: {', '.join(sorted(names))}" for s, names in valid.items())
        raise UserError(f"unknown config key {key!r}. Valid keys are {listing}")


def _parse_value(text: str) -> Any:
    """A command-line value: JSON first (so 1e-9 is a number), then YAML (yes/no, lists), else the string."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:  # not JSON (or an integer of more digits than Python converts)
        pass
    try:
        return yaml.safe_load(text)
    except (yaml.YAMLError, ValueError):
        return text


def describe_ranges() -> list[str]:
    """``"section.key: valid values"`` for every numeric setting (``transformer train --help`` lists them)."""
    rnn_only = [line for line in config_dict.describe_fields(RNNConfig, "model")
                if line.split(":")[0].removeprefix("model.") not in TRANSFORMER_KEYS | _NOT_SET]
    model = [line for line in config_dict.describe_fields(ModelConfig, "model")
             if line.split(":")[0].removeprefix("model.") not in _NOT_SET]
    return (config_dict.describe_fields(DataConfig, "data") + config_dict.describe_fields(TrainConfig, "train")
            + model + [f"{line} (model=rnn)" for line in rnn_only])


def _model_class(architecture: Any) -> type:
    """The model config class whose ranges the run config's ``model`` section is checked against."""
    return RNNConfig if architecture == "rnn" else ModelConfig


def _section(cls: type, values: dict[str, Any], name: str) -> Any:
    config_dict.check_keys(values, config_dict.field_names(cls), mapping=f"config section {name!r} must be a mapping",
                           owner=name)
    ranges = config_dict.ranges(cls)
    for f in dataclasses.fields(cls):
        if f.name not in values:
            continue
        key = f"{name}.{f.name}"
        if f.name in ranges:  # a number: of its kind, then in its range (NaN and infinity never are)
            if ranges[f.name].kind is int and not config_dict.is_kind(values[f.name], ranges[f.name], parse_text=True):
                raise UserError(f"{key} must be of type int ({ranges[f.name].describe()}), got {values[f.name]!r}")
            values[f.name] = config_dict.check_value(key, values[f.name], ranges[f.name], parse_text=True)
        else:
            values[f.name] = _coerce(key, values[f.name], f.default)
    return cls(**values)


def _coerce(key: str, value: Any, default: Any) -> Any:
    """Check a value against the type of its field's default (a string, a boolean, or a string or null)."""
    if value is None:
        return None
    if isinstance(default, bool):
        if not isinstance(value, bool):
            raise UserError(f"{key} must be true or false, got {value!r}")
        return value
    if default is None and not isinstance(value, str):  # an optional path
        raise UserError(f"{key} must be a string or null, got {value!r}")
    if default is not None and not isinstance(value, type(default)):
        raise UserError(f"{key} must be of type {type(default).__name__}, got {value!r}")
    return value


def _check_strings(section: Any) -> None:
    """The string settings of a section built in Python (``DataConfig(train_src=...)``) hold strings."""
    name = "data" if isinstance(section, DataConfig) else "train"
    for field_name in _STRING_FIELDS[name]:
        value = getattr(section, field_name)
        if value is not None and not isinstance(value, str):
            raise UserError(f"{name}.{field_name} must be a string, got {value!r}")


def _choice(key: str, value: Any, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise UserError(f"{key} must be one of {list(choices)}, got {value!r}")


def setting_differences(old: dict[str, Any], new: dict[str, Any], prefix: str = "") -> list[str]:
    """Each setting that differs between two nested dicts, as 'section.key: old there, new now'."""
    out = []
    for key in sorted(set(old) | set(new)):
        a, b = old.get(key), new.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += setting_differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {a!r} there, {b!r} now")
    return out

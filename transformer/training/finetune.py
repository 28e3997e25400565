"""Starting a run from a trained model (``train.init_from``): fine-tuning and continued training.

The initial run gives the architecture (its ``config.json``), the weights (its ``model.safetensors``,
or a checkpoint's) and the tokenizer (new data is encoded with its vocabulary; no new BPE is
learnt). The new run's settings may change what does not touch the weights' shapes or meaning
(the dropout rates, the data, the recipe); a model setting that contradicts the initial model is
refused, naming the key. The optimizer starts afresh and ``train.schedule`` defaults to
``inverse_sqrt`` at the peak rate ``train.lr``. :func:`freeze` keeps parts of the model as they
are by taking them out of the optimizer.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer.config import ModelConfig, preset
from transformer.errors import UserError
from transformer.model import RNNConfig
from transformer.text import Vocabularies
from transformer.run_files import read_json
from transformer.run.checkpoints import STEP_DIR, latest_checkpoint
from transformer.run.config import RunConfig
from transformer.run.layout import CHECKPOINTS_DIR, CONFIG_FILE, RUN_CONFIG_FILE, TRAINER_STATE_FILE, WEIGHTS_FILE
from transformer.run.model import CheckpointError, check_weights_header, expected_tensors, load_config

# Model settings a fine-tuning run may set anew: they change no weight, only how training regularises.
RETUNABLE = ("dropout", "attention_dropout", "activation_dropout")
# The ModelConfig fields a preset fixes (model.preset=base contradicts a run of d_model 256).
PRESET_SIZES = ("d_model", "n_heads", "d_ff", "n_encoder_layers", "n_decoder_layers")
_HUB_NAME = re.compile(r"^[A-Za-z0-9_-][\w.-]*/[\w.-]+$")  # org/name, as import-hf takes it


class InitFromError(UserError):
    """``train.init_from`` names something that cannot be fine-tuned, or the settings contradict it."""


@dataclass
class InitSource:
    """The run a fine-tuning run starts from."""

    path: Path  # what train.init_from named: a run directory or one of its checkpoints/step-N directories
    run_dir: Path  # the run directory (config.json, tokenizer, run_config.json)
    weights: Path  # the weights file the new run starts from
    config: ModelConfig
    vocab: Vocabularies
    checkpoint: str | None  # "step-00001000" when a checkpoint was named
    step: int | None  # the optimizer steps behind those weights, when known
    languages: tuple[str, str] | None  # (source, target) from its run_config.json, when it has one


def refuse_itself(path: str | Path, run_dir: str | Path) -> None:
    """``InitFromError`` when ``path`` (train.init_from) is the run directory ``run_dir`` or one of its checkpoints:
    a run continues into a new directory (running the same command again resumes a run instead)."""
    path, run_dir = Path(path).resolve(), Path(run_dir).resolve()
    if path == run_dir or run_dir in path.parents:
        raise InitFromError(f"train.init_from: {path} is the run directory itself (or inside it); write the "
                            "fine-tuned or continued run into a new --run-dir")


def open_source(path: str | Path, *, run_dir: str | Path | None = None) -> InitSource:
    """Read and check the run ``path`` names. ``run_dir`` (the new run's directory) must be another one.

    Raises:
        InitFromError: a missing path, a directory that is not a run (or is a Hugging Face model
            not yet imported), the recurrent baseline, missing weights or tokenizer, a tokenizer
            whose sizes differ from the model's, or ``run_dir`` being that run.
    """
    path = Path(path)
    where = f"train.init_from: {path}"
    if not path.exists():
        if _HUB_NAME.match(str(path)):
            raise InitFromError(f"{where} is not a local directory; as a model name on the Hugging Face Hub, "
                                f"convert it first: transformer import-hf {path} OUT_RUN_DIR, then --init-from OUT_RUN_DIR")
        raise InitFromError(f"{where} does not exist; give a run directory of transformer train or import-hf")
    if not path.is_dir():
        raise InitFromError(f"{where} is a file, not a run directory")
    checkpoint, step = None, None
    match = STEP_DIR.match(path.name)
    if match and path.parent.name == CHECKPOINTS_DIR:  # run/checkpoints/step-N: those weights, the run's tokenizer
        root, weights, checkpoint, step = path.parent.parent, path / WEIGHTS_FILE, path.name, int(match.group(1))
    else:
        root, weights = path, path / WEIGHTS_FILE
    if run_dir is not None:
        refuse_itself(path, run_dir)
    config_path = root / CONFIG_FILE
    if not config_path.is_file():
        raise InitFromError(f"{where} is not a run directory (no {CONFIG_FILE}); a run of transformer train or "
                            f"import-hf holds {CONFIG_FILE}, {WEIGHTS_FILE} and its tokenizer")
    try:
        raw = read_json(config_path)
    except (OSError, ValueError) as err:
        raise InitFromError(f"{where}: {config_path} is not readable JSON ({err})") from None
    if isinstance(raw, dict) and "model_type" in raw:
        raise InitFromError(f"{where} is a Hugging Face model directory ({raw.get('model_type')}), not a run; "
                            f"convert it first: transformer import-hf {path} OUT_RUN_DIR, then --init-from OUT_RUN_DIR")
    try:
        config = load_config(root)
    except CheckpointError as err:
        raise InitFromError(f"{where}: {err}") from None
    if isinstance(config, RNNConfig):
        raise InitFromError(f"{where} holds the recurrent baseline (architecture rnn), which cannot be fine-tuned; "
                            "train.init_from takes Transformer runs")
    if not weights.is_file():
        raise InitFromError(f"{where} has no weights ({weights} not found)")
    try:
        vocab = Vocabularies.load(root)
    except (FileNotFoundError, ValueError) as err:
        raise InitFromError(f"{where}: {err}") from None
    if (config.src_vocab_size, config.tgt_vocab_size) != (vocab.src.vocab_size, vocab.tgt.vocab_size):
        raise InitFromError(
            f"{where}: vocabulary size mismatch: its model has {config.src_vocab_size}/{config.tgt_vocab_size} "
            f"source/target entries but its tokenizer {vocab.src.vocab_size}/{vocab.tgt.vocab_size}")
    try:  # the sizes config.json asks for, against the weights, before the model is built
        check_weights_header(weights, expected_tensors(config, source=config_path))
    except CheckpointError as err:
        raise InitFromError(f"{where}: {err}") from None
    languages, run_cfg = None, None
    if (root / RUN_CONFIG_FILE).is_file():
        try:
            run_cfg = RunConfig.read(root / RUN_CONFIG_FILE)
            languages = (run_cfg.data.src_lang, run_cfg.data.tgt_lang)
        except (OSError, ValueError):
            pass  # the languages are a check we can do without
        if step is None:
            step = _model_step(root, run_cfg)
    return InitSource(path, root, weights, config, vocab, checkpoint, step, languages)


def model_config_for(source: InitSource, cfg: RunConfig) -> ModelConfig:
    """The initial model's config with the run's dropout settings; ``InitFromError`` naming the first
    ``model.*`` or ``data.*`` setting that contradicts the initial model."""
    model = cfg.model
    if model.get("architecture", "transformer") != "transformer":
        raise InitFromError(f"model.architecture={model['architecture']} contradicts train.init_from, a Transformer")
    name = model.get("preset", "small")
    if name != "small":  # "small" is the default, so it cannot be told apart from an unset preset
        sizes = preset(name, src_vocab_size=1)
        for key in PRESET_SIZES:
            if getattr(sizes, key) != getattr(source.config, key):
                raise InitFromError(f"model.preset={name} contradicts the initial model of train.init_from "
                                    f"({key} {getattr(sizes, key)} in the preset, {getattr(source.config, key)} "
                                    "there); the architecture comes from that run: leave model.preset out")
    changes: dict[str, Any] = {}
    for key, value in model.items():
        if key in ("preset", "architecture"):
            continue
        if key in RETUNABLE:
            changes[key] = value
        elif getattr(source.config, key) != value:
            raise InitFromError(f"model.{key}={value} contradicts the initial model of train.init_from "
                                f"({key}={getattr(source.config, key)}); the architecture comes from that run: "
                                f"leave model.{key} out")
    d = cfg.data
    if not d.joint_vocab and source.vocab.joint:
        raise InitFromError("data.joint_vocab=false contradicts train.init_from, whose vocabulary is joint; the "
                            "tokenizer comes from that run: leave data.joint_vocab out")
    if source.languages and (d.src_lang, d.tgt_lang) != source.languages:
        raise InitFromError(f"data.src_lang/data.tgt_lang say {d.src_lang}->{d.tgt_lang} but the initial model of "
                            f"train.init_from translates {source.languages[0]}->{source.languages[1]}; "
                            f"use --src-lang {source.languages[0]} --tgt-lang {source.languages[1]}")
    return source.config.replace(**changes)


def provenance(source: InitSource) -> dict[str, Any]:
    """Where the weights came from, for ``run_config.json``: the paths, the weights' sha256, the checkpoint."""
    digest = hashlib.sha256()
    with open(source.weights, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return {"path": str(source.path.resolve()), "run_dir": str(source.run_dir.resolve()),
            "weights": str(source.weights.resolve()), "weights_sha256": digest.hexdigest(),
            "checkpoint": source.checkpoint, "step": source.step,
            "imported_from": source.config.extra.get("imported_from")}


def freeze(model: torch.nn.Module, parts: list[str]) -> list[str]:
    """Stop gradients to the named parts (``embeddings``, ``encoder``, ``decoder``) of a Transformer and
    return the names of the frozen parameters. A tensor with several names (shared embeddings, a tied
    output projection) is frozen when any of its names belongs to a frozen part."""
    if not parts:
        return []
    prefixes = {"encoder": ("encoder.",), "decoder": ("decoder.",), "embeddings": ("encoder.embed.", "decoder.embed.")}
    wanted = tuple(p for part in parts for p in prefixes[part])
    frozen: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if name.startswith(wanted):
            param.requires_grad_(False)
            frozen.setdefault(id(param), name)
    if not frozen:
        raise InitFromError(f"train.freeze={','.join(parts)} matches no parameter of this model")
    if not any(p.requires_grad for p in model.parameters()):
        raise InitFromError(f"train.freeze={','.join(parts)} leaves nothing to train")
    return sorted(frozen.values())


def _model_step(run_dir: Path, cfg: RunConfig | None) -> int | None:
    """The step of the weights in the run's model file, when its checkpoints tell: the best checkpoint's
    (the model is the best on validation), or the newest's where the model is an average of the last
    checkpoints, the moving average of the weights, or the latest weights (no validation chose a best)."""
    checkpoint = latest_checkpoint(run_dir)
    if checkpoint is None:
        return None
    try:
        trainer = read_json(checkpoint / TRAINER_STATE_FILE)["trainer"]
        newest, best = trainer["step"], trainer.get("best_step")
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the step is a record we can do without
    if not (isinstance(newest, int) and not isinstance(newest, bool)):
        return None
    averaged = cfg is not None and bool(cfg.train.average_last or cfg.train.ema)
    if averaged or not (isinstance(best, int) and not isinstance(best, bool) and 0 <= best <= newest):
        return newest
    return best

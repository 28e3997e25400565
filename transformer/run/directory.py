"""Which run a run directory holds: its languages, and the checks and writes of a training run.

A run directory that already holds a run is resumed only with the same recipe; one that holds
another run's settings, or a model no run trained, is refused with :class:`RunDirectoryError`
before anything in it is changed.
"""

from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import Any

from transformer.config import ModelConfig
from transformer.errors import UserError
from transformer.model import RNNConfig, config_from_dict
from transformer.run.config import RunConfig, setting_differences
from transformer.run.layout import CONFIG_FILE, RUN_CONFIG_FILE, WEIGHTS_FILE
from transformer.run_files import MAX_JSON_BYTES, parse_json, read_json, read_text
from transformer.text import Vocabularies


class RunDirectoryError(UserError):
    """The run directory holds another run, or cannot be used."""


def previous_run(run_dir: Path, cfg: RunConfig) -> tuple[Vocabularies | None, dict[str, Any] | None]:
    """The tokenizer and ``initialized_from`` of the run ``run_dir`` holds (None, None for a new
    run); :class:`RunDirectoryError` when it holds another configuration or a model of no run."""
    saved = run_dir / RUN_CONFIG_FILE
    if not saved.exists():
        if run_dir.exists() and any(p.name in (CONFIG_FILE, WEIGHTS_FILE) for p in run_dir.iterdir()):
            raise RunDirectoryError(f"{run_dir} already holds a model that was not trained by this run; "
                                    "choose another --run-dir")
        return None, None
    try:
        previous = RunConfig.read(saved)
    except (OSError, ValueError) as err:
        raise RunDirectoryError(f"{saved} is not a readable run config ({err}); choose another --run-dir") from None
    if previous.recipe_settings() != cfg.recipe_settings():
        diffs = setting_differences(previous.recipe_settings(), cfg.recipe_settings())
        raise RunDirectoryError(
            f"{run_dir} holds a run with a different configuration ({'; '.join(diffs[:6])}); "
            "choose another --run-dir to start a new run, or repeat the original settings to resume"
        )
    return Vocabularies.load(run_dir), previous.initialized_from


def check_model_config(run_dir: Path, model_cfg: ModelConfig | RNNConfig) -> None:
    """Refuse a run directory whose model description is not ``model_cfg``."""
    path = run_dir / CONFIG_FILE
    if not (path.exists() or path.is_symlink()):
        return
    try:
        saved = config_from_dict(read_json(path))
    except (OSError, ValueError, TypeError) as err:
        raise RunDirectoryError(f"{path} is not a readable model config ({' '.join(str(err).split())}); "
                                "choose another --run-dir") from None
    if saved != model_cfg:
        raise RunDirectoryError(f"{path} describes a different model than this run; choose another --run-dir")


def write_run_files(run_dir: Path, cfg: RunConfig, vocab: Vocabularies, model_cfg: ModelConfig | RNNConfig,
                    initialized_from: dict[str, Any] | None) -> None:
    """Write the tokenizer, the model description and the full run config into ``run_dir``."""
    run_dir.mkdir(parents=True, exist_ok=True)
    vocab.save(run_dir)
    model_cfg.to_json(run_dir / CONFIG_FILE)
    dataclasses.replace(cfg, initialized_from=initialized_from).save(run_dir / RUN_CONFIG_FILE)


def run_languages(run_dir: str | os.PathLike[str]) -> tuple[str | None, str | None]:
    """``(src_lang, tgt_lang)`` from a run's ``run_config.json``, or None where it does not say."""
    path = Path(run_dir) / RUN_CONFIG_FILE
    try:
        text = read_text(path, limit=MAX_JSON_BYTES)  # a FIFO, a device or a huge file is refused here
    except FileNotFoundError:
        return None, None
    try:
        data = parse_json(text, where=str(path)).get("data", {})
    except (ValueError, AttributeError):
        return None, None
    if not isinstance(data, dict):
        return None, None
    src, tgt = data.get("src_lang"), data.get("tgt_lang")
    return (src if isinstance(src, str) else None), (tgt if isinstance(tgt, str) else None)

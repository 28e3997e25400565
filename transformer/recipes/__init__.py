"""The paper's experiments as run configurations: ``transformer train --recipe wmt14-en-de-base``.

A recipe is a run configuration file (sections ``data``, ``model``, ``train``, as for ``--config``)
with one more section, ``recipe``, saying how many batches an optimizer step takes across all
processes (``batches_per_step``). :func:`load_recipe` turns that into ``train.accumulate`` for the
number of processes the run is started with (``$WORLD_SIZE``, which ``torchrun`` sets; 1 without
it), so the same command trains the same recipe on one GPU accumulating 8 batches or on 8 GPUs
(one node or several) taking one batch each. A run directory that already holds a run keeps that
run's ``train.accumulate``: resumed on another number of processes, the trainer shares the
checkpoint's batches per step among them (:mod:`transformer.training.distributed`).

The shipped recipes (:func:`recipe_names`) are the base and big models on WMT14 English-German
and English-French, with the paper's numbers; each file says where each number comes from.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Sequence

import yaml

from transformer.run.config import RunConfig
from transformer.run.layout import RUN_CONFIG_FILE
from transformer.errors import UserError

__all__ = ["RECIPE_DIR", "load_recipe", "is_recipe_file", "recipe_names", "recipe_path"]

RECIPE_DIR = Path(__file__).resolve().parent
_META_KEYS = {"batches_per_step"}


def recipe_names() -> list[str]:
    """The recipes shipped with the package, by name (their file names without ``.yaml``)."""
    return sorted(p.stem for p in RECIPE_DIR.glob("*.yaml"))


def recipe_path(name_or_path: str | os.PathLike[str]) -> Path:
    """A shipped recipe's file, by name, or the recipe file at ``name_or_path``.

    Raises:
        FileNotFoundError: neither (the shipped names listed).
    """
    text = str(name_or_path)
    if text in recipe_names():
        return RECIPE_DIR / f"{text}.yaml"
    path = Path(text).expanduser()
    if path.is_file():
        return path
    raise FileNotFoundError(f"no recipe {text!r}: give one of {', '.join(recipe_names())} or a recipe file")


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise UserError(f"{path} is not UTF-8 text: {err}") from None
    try:
        raw = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    except (yaml.YAMLError, ValueError) as err:  # ValueError: also an integer of more digits than Python converts
        raise UserError(f"{path} is not valid YAML/JSON: {' '.join(str(err).split())}") from None
    if not isinstance(raw, dict):
        raise UserError(f"{path}: a recipe must be a mapping with sections recipe/data/model/train")
    return raw


def is_recipe_file(path: str | os.PathLike[str]) -> bool:
    """Whether the configuration file at ``path`` is a recipe (has a ``recipe`` section)."""
    p = Path(path)
    try:
        return p.is_file() and "recipe" in _read(p)
    except (ValueError, OSError):
        return False  # RunConfig.load says what is wrong with it


def _overrides_accumulate(overrides: Sequence[str]) -> bool:
    return any(item.partition("=")[0].strip() in ("train.accumulate", "accumulate") for item in overrides)


def load_recipe(
    name_or_path: str | os.PathLike[str], overrides: Sequence[str] = (), *,
    run_dir: str | os.PathLike[str] | None = None, world_size: int | None = None,
) -> RunConfig:
    """The run configuration of a recipe for ``world_size`` processes, with ``key=value`` overrides.

    ``train.accumulate`` becomes ``batches_per_step / world_size`` (``world_size``: default
    ``$WORLD_SIZE``, else 1), unless an override sets it or ``run_dir`` already holds a run, whose
    own value is kept.

    Raises:
        FileNotFoundError: no such recipe.
        UserError: a bad recipe section, processes that cannot share the batches per step, or a
            bad setting (as for ``--config``).
    """
    path = recipe_path(name_or_path)
    raw = _read(path)
    meta = raw.pop("recipe", None) or {}
    if not isinstance(meta, dict) or set(meta) - _META_KEYS:
        raise UserError(f"{path}: the recipe section takes {', '.join(sorted(_META_KEYS))}, got {meta!r}")
    per_step = meta.get("batches_per_step", 1)
    if isinstance(per_step, bool) or not isinstance(per_step, int) or per_step < 1:
        raise UserError(f"{path}: recipe.batches_per_step must be an integer >= 1, got {per_step!r}")
    world = world_size if world_size is not None else int(os.environ.get("WORLD_SIZE", "1") or 1)
    train = raw.setdefault("train", {}) or {}
    if not isinstance(train, dict):  # the same refusal as RunConfig.from_dict's, before train.accumulate is set in it
        raise UserError(f"{path}: config section 'train' must be a mapping, got {type(train).__name__}")
    raw["train"] = train
    previous = Path(run_dir) / RUN_CONFIG_FILE if run_dir is not None else None
    if _overrides_accumulate(overrides):
        pass  # the command line's train.accumulate is applied with the other overrides below
    elif previous is not None and previous.is_file():
        train["accumulate"] = RunConfig.read(previous).train.accumulate
    elif per_step % world:
        fits = ", ".join(str(n) for n in range(1, per_step + 1) if per_step % n == 0)
        raise UserError(
            f"recipe {path.stem} takes {per_step} batches per step, which {world} processes cannot share: use "
            f"{fits} process(es), or set train.accumulate and data.max_tokens for {world}")
    else:
        train["accumulate"] = per_step // world
    return RunConfig.from_dict(raw).with_overrides(overrides)

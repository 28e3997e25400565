"""The checkpoints of a run: which are there and complete, the latest, and their tensor files.

A checkpoint is a directory ``RUN_DIR/checkpoints/step-XXXXXXXX/`` holding the model's weights,
the optimizer's state, the random generators' states and ``trainer_state.json`` (the trainer
writes them: :mod:`transformer.training.state`); ``checkpoints/latest.json`` names the newest.
A directory missing one of those files is a checkpoint whose save was cut short, never listed.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from safetensors import safe_open
from torch import Tensor

from transformer.run.layout import CHECKPOINT_FILES, CHECKPOINTS_DIR, LATEST_FILE, TRAINER_STATE_FILE
from transformer.run.model import CheckpointError
from transformer.run_files import read_json

PathLike = str | os.PathLike[str]
STEP_DIR = re.compile(r"^step-(\d{8,})$")  # a checkpoint's directory name (layout.checkpoint_name)


def list_checkpoints(run_dir: PathLike) -> list[Path]:
    """Complete ``step-*`` directories under ``run_dir/checkpoints``, oldest first."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := STEP_DIR.match(p.name)) and is_complete(p)]
    return [p for _, p in sorted(found)]


def recent_checkpoints(run_dir: PathLike) -> list[Path]:
    """The newest checkpoints pruning keeps for being recent (``keep_last`` of them), oldest first.

    A checkpoint kept only because it is the best (older than those) is left out, so averaging the
    last N never mixes an old best model in. ``keep_last`` is read from the newest checkpoint;
    checkpoints written before it was recorded give all of :func:`list_checkpoints`.
    """
    checkpoints = list_checkpoints(run_dir)
    keep = _recorded_keep_last(checkpoints[-1]) if checkpoints else None
    return checkpoints[-keep:] if keep else checkpoints


def _recorded_keep_last(checkpoint: Path) -> int | None:
    try:
        keep = read_json(checkpoint / TRAINER_STATE_FILE).get("keep_last")
    except (OSError, ValueError, AttributeError):
        return None
    return keep if isinstance(keep, int) and not isinstance(keep, bool) and keep >= 1 else None


def latest_checkpoint(run_dir: PathLike) -> Path | None:
    """The checkpoint ``latest.json`` names; the newest complete one if that file is missing or bad."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    name = read_latest(root)
    if name and STEP_DIR.match(name) and is_complete(root / name):
        return root / name
    checkpoints = list_checkpoints(run_dir)
    return checkpoints[-1] if checkpoints else None


def is_complete(path: Path) -> bool:
    """Whether ``path`` is a checkpoint directory holding every file a checkpoint has."""
    return path.is_dir() and all((path / f).is_file() for f in CHECKPOINT_FILES)


def read_latest(root: Path) -> str | None:
    """The checkpoint name ``root/latest.json`` holds, or None where it holds none."""
    try:
        name = read_json(root / LATEST_FILE)["path"]
        return name if isinstance(name, str) else None
    except (OSError, ValueError, KeyError, TypeError):
        return None


def read_tensor_file(checkpoint: PathLike, name: str) -> dict[str, Tensor] | None:
    """The tensors of ``name`` in a checkpoint directory (written through ``tensor_files``), or None
    where the checkpoint has no such file. Raises CheckpointError for a truncated or corrupt one."""
    path = Path(checkpoint) / name
    return read_tensors(path) if path.is_file() else None


def read_tensors(path: Path) -> dict[str, Tensor]:
    """Every tensor of the safetensors file ``path``; CheckpointError for a truncated or corrupt one."""
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            return {name: f.get_tensor(name) for name in f.keys()}
    except Exception as err:  # safetensors raises its own error types for truncated/corrupt headers
        raise CheckpointError(f"{path} is not a readable safetensors file (truncated or corrupt?): {err}") from None

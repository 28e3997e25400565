"""Checkpoint averaging (paper 6.1: the base models average the last 5 checkpoints)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch
from torch import Tensor

from transformer.run.model import CheckpointError
from transformer.run.checkpoints import PathLike, list_checkpoints, read_tensors, recent_checkpoints
from transformer.run.layout import CHECKPOINTS_DIR, WEIGHTS_FILE
from transformer.training.state import _write_tensors
from transformer.errors import UserError


def average_checkpoints(paths: Sequence[PathLike]) -> dict[str, Tensor]:
    """Element-wise mean of the model weights of several checkpoints (paper 6.1: the last 5).

    Each path is a checkpoint directory or a ``.safetensors`` file. Floating tensors are summed in
    float64 and returned in their dtype; other tensors are taken from the last checkpoint.
    """
    if not paths:
        raise UserError("average_checkpoints needs at least one checkpoint")
    files = [Path(p) / WEIGHTS_FILE if Path(p).is_dir() else Path(p) for p in paths]
    sums: dict[str, Tensor] = {}
    ref: dict[str, tuple[tuple[int, ...], torch.dtype]] = {}
    for n, file in enumerate(files):
        tensors = read_tensors(file)
        layout = {k: (tuple(t.shape), t.dtype) for k, t in tensors.items()}
        if n == 0:
            ref = layout
        elif layout != ref:
            diff = sorted(k for k in set(ref) | set(layout) if ref.get(k) != layout.get(k))
            raise CheckpointError(
                f"cannot average {files[0]} and {file}: tensors differ in name, shape or dtype: {diff[:8]}")
        for k, t in tensors.items():
            if t.is_floating_point():
                sums[k] = sums[k] + t.double() if k in sums else t.double()
            else:
                sums[k] = t
    return {k: (s / len(files)).to(ref[k][1]) if ref[k][1].is_floating_point else s for k, s in sums.items()}


def average_last(run_dir: PathLike, n: int, out_path: PathLike) -> list[Path]:
    """Average the newest ``n`` checkpoints into ``out_path`` (safetensors, atomic); return those used.

    Only the newest checkpoints that ``keep_last`` keeps count (:func:`recent_checkpoints`); the best
    checkpoint kept besides them is never averaged in.
    """
    checkpoints = recent_checkpoints(run_dir)
    if n < 1 or len(checkpoints) < n:
        where = Path(run_dir) / CHECKPOINTS_DIR
        message = f"cannot average the last {n} checkpoints: {len(checkpoints)} exist in {where}"
        if extra := [p.name for p in list_checkpoints(run_dir) if p not in checkpoints]:
            message += (f" (besides {', '.join(extra)}, kept only as the best, which is never averaged; "
                        "train.keep_last must be at least the number averaged)")
        raise UserError(message)
    used = checkpoints[-n:]
    out_path = Path(out_path)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    meta = {"averaged_from": json.dumps([p.name for p in used])}
    _write_tensors(average_checkpoints(used), out_path, metadata=meta)
    return used

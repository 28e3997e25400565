"""Trainer checkpoints that survive SIGKILL and resume bit-exactly, with no pickle anywhere.

A checkpoint is a directory ``run_dir/checkpoints/step-XXXXXXXX/`` holding

* ``model.safetensors``     model weights, tied tensors once (:func:`transformer.run.model.save_weights`);
* ``optimizer.safetensors`` every tensor of ``optimizer.state_dict()["state"]`` as ``state.<idx>.<name>``
  (and tensor-valued param-group entries as ``param_groups.<i>.<key>``);
* ``rng.safetensors``       torch CPU/CUDA generator states (byte tensors);
* ``trainer_state.json``    :class:`TrainerState`, optimizer param groups, the JSON-able part of the
  scheduler state, python/numpy RNG states, the ``keep_last`` it was pruned with and a format version.

It is built in a ``.tmp-step-XXXXXXXX-<pid>`` directory, fsynced and renamed into place; only then
does ``latest.json`` move to it, so a crash at any point leaves a complete checkpoint behind.
Finding the checkpoints of a run (the complete ones, the latest) and reading their tensor files
is the run directory's part: :mod:`transformer.run.checkpoints`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import random
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import Tensor, nn
from torch.optim.lr_scheduler import LRScheduler

from transformer.run.checkpoints import STEP_DIR, PathLike, list_checkpoints, read_latest, read_tensors
from transformer.run.layout import (
    CHECKPOINT_FILES, CHECKPOINTS_DIR, LATEST_FILE, OPTIMIZER_FILE, RNG_FILE, TRAINER_STATE_FILE, WEIGHTS_FILE,
    checkpoint_name)
from transformer.run.model import CheckpointError, load_weights, save_weights
from transformer.run_files import RunFileError, plain_permissions, read_json, replacing
from transformer.errors import UserError

try:
    import numpy as np
except ImportError:  # numpy is optional
    np = None  # type: ignore[assignment]

FORMAT_VERSION = 1
_TMP = re.compile(r"^\.(?:tmp-.*|%s\.tmp-\d+.*)$" % re.escape(LATEST_FILE))  # work files; left behind by a killed save
_IN_FLIGHT: set[Path] = set()  # this process's work files being written now (others are stale, even at our pid)
# Optimizer state entries that must have their parameter's shape (Adam, AdamW, SGD, RMSprop, ...).
_PARAM_SHAPED = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer", "square_avg", "acc_delta", "sum"}


@dataclass
class TrainerState:
    """Where training stands; everything here is plain JSON."""

    step: int = 0  # optimizer steps done
    epoch: int = 0  # current epoch
    batch_in_epoch: int = 0  # batches of this epoch already consumed (resume continues at this index)
    target_tokens: int = 0  # target tokens trained on so far (all processes)
    seconds: float = 0.0  # wall-clock seconds of training so far, over all invocations (train.time_limit counts these)
    best_metric: float | None = None  # e.g. validation BLEU or loss
    best_step: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # JSON-serialisable

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first field of a wrong type or out of range (counts are
        integers >= 0, ``seconds`` finite and >= 0, ``best_metric`` finite or null)."""
        for name in ("step", "epoch", "batch_in_epoch", "target_tokens", "best_step"):
            value = getattr(self, name)
            if value is None and name == "best_step":
                continue
            if type(value) is not int or value < 0:
                raise ValueError(f"{name} must be an integer >= 0, got {value!r:.80}")
        for name, low in (("seconds", 0.0), ("best_metric", None)):
            value = getattr(self, name)
            if value is None and name == "best_metric":
                continue
            if type(value) not in (int, float) or not math.isfinite(value) or (low is not None and value < low):
                raise ValueError(f"{name} must be a finite number{' >= 0' if low is not None else ''}, got {value!r:.80}")
        if not isinstance(self.extra, dict):
            raise ValueError(f"extra must be an object, got {type(self.extra).__name__}")


# ---------------------------------------------------------------------------------------------- RNG
def capture_rng_state() -> dict[str, Any]:
    """The torch CPU RNG (ByteTensor), CUDA RNGs if available, python ``random`` and numpy global RNG."""
    state: dict[str, Any] = {"torch": torch.get_rng_state(), "python": _jsonable(random.getstate())}
    if torch.cuda.is_available():
        state["cuda"] = list(torch.cuda.get_rng_state_all())
    if np is not None:
        name, keys, pos, has_gauss, cached = np.random.get_state()
        state["numpy"] = [name, keys.tolist(), int(pos), int(has_gauss), float(cached)]
    return state


def restore_rng_state(state: dict[str, Any]) -> None:
    """Put back the generators recorded by :func:`capture_rng_state` (those present in ``state``)."""
    if "torch" in state:
        torch.set_rng_state(state["torch"])
    if state.get("cuda") and torch.cuda.is_available():
        for device, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state, device)
    if "python" in state:
        version, internal, gauss = state["python"]
        random.setstate((version, tuple(internal), gauss))
    if "numpy" in state and np is not None:
        name, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


# ----------------------------------------------------------------------------------------- saving
def save_checkpoint(
    run_dir: PathLike, *, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: LRScheduler | None,
    state: TrainerState, keep_last: int = 5, rng: dict[str, Any] | None = None,
    tensor_files: dict[str, dict[str, Tensor]] | None = None,
) -> Path:
    """Write ``run_dir/checkpoints/step-{state.step:08d}/`` atomically, point ``latest.json`` at it, prune.

    ``rng`` defaults to :func:`capture_rng_state` now. ``tensor_files`` (file name -> tensors) are
    written into the checkpoint too (the moving average of the weights, say);
    :func:`transformer.run.checkpoints.read_tensor_file` reads one back. Pruning keeps the newest ``keep_last``
    checkpoints, the best one (``state.best_step``) and this one; stale ``.tmp-*`` directories
    of other processes are removed. Returns the checkpoint directory.
    """
    if keep_last < 1:
        raise UserError(f"keep_last must be >= 1, got {keep_last}")
    root = Path(run_dir) / CHECKPOINTS_DIR
    root.mkdir(parents=True, exist_ok=True)
    rng = capture_rng_state() if rng is None else rng
    opt_tensors, opt_json = _split_optimizer(optimizer.state_dict())
    rng_tensors = {"torch": rng["torch"]} if "torch" in rng else {}
    rng_tensors.update({f"cuda.{i}": t for i, t in enumerate(rng.get("cuda", []))})
    doc = {
        "format_version": FORMAT_VERSION,
        "trainer": dataclasses.asdict(state),
        "optimizer": opt_json,
        "scheduler": None if scheduler is None else _jsonable(scheduler.state_dict()),
        "rng": {k: v for k, v in rng.items() if k in ("python", "numpy")},
        "keep_last": keep_last,  # tells recent_checkpoints which of the kept ones are the newest
    }
    try:
        text = json.dumps(doc, indent=1)
    except (TypeError, ValueError) as err:
        raise TypeError(f"TrainerState (its extra dict too) must be JSON-serialisable: {err}") from None

    name = checkpoint_name(state.step)
    final, tmp = root / name, root / f".tmp-{name}-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    _IN_FLIGHT.add(tmp)
    try:
        tmp.mkdir()
        save_weights(model, tmp / WEIGHTS_FILE, metadata={"step": str(state.step)})
        _fsync(tmp / WEIGHTS_FILE)
        _write_tensors(opt_tensors, tmp / OPTIMIZER_FILE)
        _write_tensors(rng_tensors, tmp / RNG_FILE)
        for file_name, tensors in (tensor_files or {}).items():
            _write_tensors(tensors, tmp / file_name)
        _write_text(tmp / TRAINER_STATE_FILE, text)
        _fsync(tmp)
        _move_into_place(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        _IN_FLIGHT.discard(tmp)
    _write_latest(root, final)
    best = set() if state.best_step is None else {checkpoint_name(state.best_step)}
    _prune(root, keep=keep_last, protect={name} | best)
    return final


def _move_into_place(tmp: Path, final: Path) -> None:
    """``os.replace`` a finished directory to ``final``; an existing ``final`` (same step again) is swapped out."""
    root = final.parent
    if not final.exists():
        os.replace(tmp, final)
    else:  # a non-empty directory cannot be replaced in one step: first make latest.json point elsewhere
        if read_latest(root) == final.name:
            others = [p for p in list_checkpoints(root.parent) if p.name != final.name]
            _write_latest(root, others[-1]) if others else (root / LATEST_FILE).unlink(missing_ok=True)
        old = root / f".tmp-old-{final.name}-{os.getpid()}"
        os.replace(final, old)
        try:
            os.replace(tmp, final)
        except BaseException:
            os.replace(old, final)  # put the previous copy back
            raise
        shutil.rmtree(old, ignore_errors=True)
    _fsync(root)


def _split_optimizer(sd: dict[str, Any]) -> tuple[dict[str, Tensor], dict[str, Any]]:
    """Optimizer state dict -> (tensors for safetensors, JSON part)."""
    tensors: dict[str, Tensor] = {}
    values: dict[str, dict[str, Any]] = {}
    for idx, entries in sd["state"].items():
        for key, value in entries.items():
            if isinstance(value, Tensor):
                tensors[f"state.{idx}.{key}"] = value.detach().to("cpu", copy=True).contiguous()
            elif (converted := _jsonable(value)) is not _DROP:
                values.setdefault(str(idx), {})[key] = converted
            else:
                raise TypeError(f"optimizer state {idx}.{key} ({type(value).__name__}) is neither a tensor nor JSON")
    groups = []
    for i, group in enumerate(sd["param_groups"]):
        plain = {}
        for key, value in group.items():
            if isinstance(value, Tensor):
                tensors[f"param_groups.{i}.{key}"] = value.detach().to("cpu", copy=True).contiguous()
            elif (converted := _jsonable(value)) is not _DROP:
                plain[key] = converted
        groups.append(plain)
    return tensors, {"param_groups": groups, "state_values": values}


def _prune(root: Path, *, keep: int, protect: set[str]) -> None:
    """Delete checkpoints beyond the newest ``keep`` (except ``protect``) and stale work files."""
    checkpoints = list_checkpoints(root.parent)
    keep_names = {p.name for p in checkpoints[-keep:]} | protect | {read_latest(root)}
    for path in checkpoints:
        if path.name not in keep_names:  # renamed first, so a kill mid-delete leaves only a stale tmp dir
            doomed = root / f".tmp-del-{path.name}-{os.getpid()}"
            os.replace(path, doomed)
            shutil.rmtree(doomed, ignore_errors=True)
    _remove_work_files(root)


def remove_stale_work_files(run_dir: PathLike) -> None:
    """Delete the work files (``checkpoints/.tmp-*``) that saves killed mid-way left behind; those
    this process is writing now are kept. The trainer calls it holding the run directory's lock."""
    root = Path(run_dir) / CHECKPOINTS_DIR
    if root.is_dir():
        _remove_work_files(root)


def _remove_work_files(root: Path) -> None:
    for path in root.iterdir():
        if _TMP.match(path.name) and path not in _IN_FLIGHT:
            shutil.rmtree(path, ignore_errors=True) if path.is_dir() else path.unlink(missing_ok=True)


def _write_latest(root: Path, checkpoint: Path) -> None:
    step = int(STEP_DIR.match(checkpoint.name).group(1))  # type: ignore[union-attr]
    tmp = None
    try:
        with replacing(root / LATEST_FILE, sync=True) as tmp:
            _IN_FLIGHT.add(tmp)
            tmp.write_text(json.dumps({"step": step, "path": checkpoint.name}), encoding="utf-8")
    finally:
        _IN_FLIGHT.discard(tmp)
    _fsync(root)


# ---------------------------------------------------------------------------------------- loading
def load_checkpoint(
    path: PathLike, *, model: nn.Module, optimizer: torch.optim.Optimizer | None = None,
    scheduler: LRScheduler | None = None, restore_rng: bool = True,
) -> TrainerState:
    """Load a checkpoint directory into ``model`` (and optimizer, scheduler, RNGs); return its state.

    All files are read and checked before the model is changed. Raises :class:`CheckpointError`
    naming the file for a missing, incomplete or corrupt checkpoint, and for an optimizer whose
    parameter groups do not match the saved ones.
    """
    path = Path(path)
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory not found: {path}")
    for name in CHECKPOINT_FILES:
        if not (path / name).is_file():
            raise CheckpointError(f"incomplete checkpoint {path}: {name} is missing")
    doc = _read_state_file(path / TRAINER_STATE_FILE)
    try:
        trainer = TrainerState(**doc["trainer"])
        trainer.validate()
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path / TRAINER_STATE_FILE}: bad 'trainer' entry: {err}") from None
    rng_tensors = read_tensors(path / RNG_FILE)
    try:
        opt_sd = None if optimizer is None else _optimizer_state(path, doc["optimizer"], optimizer)
    except UserError:
        raise
    except (ValueError, TypeError, KeyError, AttributeError) as err:  # a value of the wrong kind in the file
        raise CheckpointError(f"{path / TRAINER_STATE_FILE}: bad 'optimizer' entry: {err!r}") from None
    if scheduler is not None and not isinstance(doc.get("scheduler"), dict):
        raise CheckpointError(f"{path / TRAINER_STATE_FILE} holds no scheduler state, but a scheduler was given")
    load_weights(model, path / WEIGHTS_FILE)
    if opt_sd is not None:
        try:
            optimizer.load_state_dict(opt_sd)  # type: ignore[union-attr]  # moves state to the params' device
        except (ValueError, KeyError, RuntimeError) as err:
            raise CheckpointError(f"{path / OPTIMIZER_FILE} does not fit the optimizer: {err}") from None
    if scheduler is not None:
        try:
            scheduler.load_state_dict(_from_json(doc["scheduler"]))
        except (ValueError, KeyError, TypeError) as err:
            raise CheckpointError(f"{path / TRAINER_STATE_FILE}: scheduler state does not fit: {err}") from None
    if restore_rng:
        rng: dict[str, Any] = dict(doc.get("rng", {}))
        if "torch" in rng_tensors:
            rng["torch"] = rng_tensors["torch"]
        rng["cuda"] = [rng_tensors[k] for k in sorted((k for k in rng_tensors if k.startswith("cuda.")),
                                                       key=lambda k: int(k.split(".")[1]))]
        try:
            restore_rng_state(rng)
        except (ValueError, TypeError, KeyError, IndexError, RuntimeError) as err:  # a generator's state of the wrong shape
            raise CheckpointError(f"{path / TRAINER_STATE_FILE}: bad 'rng' entry: {err!r}") from None
    return trainer


def _read_state_file(path: Path) -> dict[str, Any]:
    try:
        doc = read_json(path)
    except (FileNotFoundError, RunFileError) as err:
        raise CheckpointError(f"{err} (truncated or corrupt?)") from None
    if not isinstance(doc, dict) or doc.get("format_version") != FORMAT_VERSION:
        version = doc.get("format_version") if isinstance(doc, dict) else None
        raise CheckpointError(f"{path}: unsupported checkpoint format version {version!r} (expected {FORMAT_VERSION})")
    for key in ("trainer", "optimizer"):
        if not isinstance(doc.get(key), dict):
            raise CheckpointError(f"{path}: the {key!r} entry is missing or not an object")
    return doc


def _optimizer_state(path: Path, saved: dict[str, Any], optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Rebuild an optimizer state dict from the files, checking it against ``optimizer``'s groups."""
    current, groups = optimizer.param_groups, saved.get("param_groups")
    ok = isinstance(groups, list) and all(isinstance(g, dict) and isinstance(g.get("params"), list) for g in groups)
    sizes = [len(g["params"]) for g in groups] if ok else None  # type: ignore[union-attr]
    if sizes != [len(g["params"]) for g in current]:
        raise CheckpointError(
            f"{path / TRAINER_STATE_FILE}: optimizer param groups do not match: saved group sizes {sizes}, "
            f"optimizer has {[len(g['params']) for g in current]}")
    params = [p for g in current for p in g["params"]]
    restored = []
    for now, old in zip(current, groups):  # keys the JSON could not hold keep the optimizer's values
        group = {k: v for k, v in now.items() if k != "params"} | old
        restored.append({k: tuple(v) if isinstance(now.get(k), tuple) else v for k, v in group.items()})
    state: dict[int, dict[str, Any]] = {int(i): _from_json(v) for i, v in saved.get("state_values", {}).items()}
    for name, tensor in read_tensors(path / OPTIMIZER_FILE).items():
        kind, index, key = (name.split(".", 2) + ["", ""])[:3]
        if kind not in ("state", "param_groups") or not index.isdigit() or not key:
            raise CheckpointError(f"{path / OPTIMIZER_FILE}: unexpected tensor name {name!r}")
        idx = int(index)
        if idx >= (len(restored) if kind == "param_groups" else len(params)):
            raise CheckpointError(f"{path / OPTIMIZER_FILE}: {name!r} refers to a {kind} entry the optimizer lacks")
        if kind == "param_groups":
            restored[idx][key] = tensor
            continue
        if key in _PARAM_SHAPED and tensor.shape != params[idx].shape:
            raise CheckpointError(
                f"{path / OPTIMIZER_FILE}: {name!r} has shape {tuple(tensor.shape)} but parameter {idx} "
                f"has shape {tuple(params[idx].shape)}")
        state.setdefault(idx, {})[key] = tensor
    return {"state": state, "param_groups": restored}


# ---------------------------------------------------------------------------------------- helpers
_DROP = object()


def _jsonable(value: Any) -> Any:
    """``value`` as JSON types (tuples -> lists, scalar tensors -> tagged objects, exact); other
    unrepresentable parts become None in lists (like LambdaLR's ``lr_lambdas``) and are dropped from dicts."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Tensor) and value.dim() == 0:
        return {"__tensor__": value.item(), "dtype": str(value.dtype).removeprefix("torch.")}
    if isinstance(value, (list, tuple)):
        return [None if (v := _jsonable(x)) is _DROP else v for x in value]
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: v for k, x in value.items() if (v := _jsonable(x)) is not _DROP}
    return _DROP


def _from_json(value: Any) -> Any:
    """Undo :func:`_jsonable`'s tagging of scalar tensors."""
    if isinstance(value, list):
        return [_from_json(v) for v in value]
    if isinstance(value, dict):
        if value.keys() == {"__tensor__", "dtype"}:
            return torch.tensor(value["__tensor__"], dtype=getattr(torch, value["dtype"]))
        return {k: _from_json(v) for k, v in value.items()}
    return value


def _fsync(path: Path) -> None:
    """Flush a file or directory to disk (directories: best effort, not every OS allows it)."""
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def _write_text(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())


def _write_tensors(tensors: dict[str, Tensor], path: Path, metadata: dict[str, str] | None = None) -> None:
    """Write safetensors through a temporary name, fsync, ``os.replace`` into place."""
    with replacing(path, sync=True) as tmp:
        save_file({k: t.detach().contiguous().cpu() for k, t in tensors.items()}, str(tmp),
                  metadata={"format": "pt", **(metadata or {})})
        plain_permissions(tmp)

"""Saving and loading models: ``config.json`` + ``model.safetensors``, no pickle anywhere.

safetensors holds raw tensors and a JSON header only, so opening a model file can never run
code. Tied weights (shared embeddings, tied output projection) are stored once and re-tied by
building the model from its config. Files are written to a temporary name and moved into
place with ``os.replace``, so a crash while saving leaves the previous file intact.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from transformer.config import ModelConfig
from transformer.model import RNNConfig, RNNSeq2Seq, Transformer, build_model, config_from_dict

CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
FORMAT_VERSION = "1"


class CheckpointError(ValueError):
    """A model file or directory that cannot be loaded; the message names the file and the problem."""


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The model's state dict with each shared tensor kept once, under its first name."""
    seen: set[tuple[int, int]] = set()
    unique: dict[str, torch.Tensor] = {}
    for name, tensor in model.state_dict().items():
        key = (tensor.untyped_storage().data_ptr(), tensor.storage_offset())
        if key in seen:
            continue
        seen.add(key)
        unique[name] = tensor
    return unique


def save_weights(model: torch.nn.Module, path: str | os.PathLike[str], *, metadata: dict[str, str] | None = None) -> None:
    """Write the model's weights to ``path`` as safetensors, atomically."""
    path = Path(path)
    tensors = {name: t.detach().contiguous().cpu() for name, t in unique_state_dict(model).items()}
    meta = {"format": "pt", "transformer_format_version": FORMAT_VERSION, **(metadata or {})}
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        save_file(tensors, str(tmp), metadata=meta)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # the permissions a plain open() would give
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def load_weights(model: torch.nn.Module, path: str | os.PathLike[str]) -> None:
    """Load safetensors weights into ``model`` in place, checking names and shapes first.

    Raises:
        CheckpointError: missing file, unreadable (truncated, corrupt) file, missing or unexpected
            tensors, or tensors whose shapes do not fit the model's config.
    """
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"weights file not found: {path}")
    expected = unique_state_dict(model)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            names = set(f.keys())
            missing = sorted(set(expected) - names)
            unexpected = sorted(names - set(expected))
            if missing or unexpected:
                raise CheckpointError(
                    f"{path} does not match the model config: missing tensors {missing[:8]}"
                    f"{' ...' if len(missing) > 8 else ''}, unexpected tensors {unexpected[:8]}"
                    f"{' ...' if len(unexpected) > 8 else ''}"
                )
            loaded: dict[str, torch.Tensor] = {}
            for name, target in expected.items():
                tensor = f.get_tensor(name)
                if tensor.shape != target.shape:
                    raise CheckpointError(
                        f"{path}: tensor {name!r} has shape {tuple(tensor.shape)} but the config needs "
                        f"{tuple(target.shape)}; the weights belong to a model of other sizes"
                    )
                loaded[name] = tensor
    except CheckpointError:
        raise
    except Exception as err:  # safetensors raises its own error types for truncated/corrupt headers
        raise CheckpointError(f"{path} is not a readable safetensors file (truncated or corrupt?): {err}") from None
    with torch.no_grad():
        for name, target in expected.items():
            target.copy_(loaded[name])


def save_model(model: Transformer | RNNSeq2Seq, directory: str | os.PathLike[str]) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``directory`` (created if needed)."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.config.to_json(directory / CONFIG_FILE)
    save_weights(model, directory / WEIGHTS_FILE)
    return directory


def load_config(directory: str | os.PathLike[str]) -> ModelConfig | RNNConfig:
    """Read ``config.json`` from a model directory with errors that name the file.

    The ``architecture`` key decides the class: ``"rnn"`` gives an ``RNNConfig``, none a ``ModelConfig``.
    """
    path = Path(directory) / CONFIG_FILE
    if not path.is_file():
        raise CheckpointError(f"model config not found: {path} (is {directory} a model directory?)")
    try:
        return config_from_dict(json.loads(path.read_text(encoding="utf-8")))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise CheckpointError(f"{path} is not valid JSON: {err}") from None
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path} is not a valid model config: {err}") from None


def load_model(directory: str | os.PathLike[str], *, device: str | torch.device = "cpu") -> Transformer | RNNSeq2Seq:
    """Build the model from ``config.json`` (a Transformer or the recurrent baseline) and load
    ``model.safetensors``; returns it in eval mode."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"model directory not found: {directory}")
    model = build_model(load_config(directory))
    load_weights(model, directory / WEIGHTS_FILE)
    return model.to(device).eval()

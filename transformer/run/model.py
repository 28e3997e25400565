"""A run's model: ``config.json`` + ``model.safetensors``, saved and loaded, no pickle anywhere.

safetensors holds raw tensors and a JSON header only, so opening a model file can never run
code. Tied weights (shared embeddings, tied output projection) are stored once and re-tied by
building the model from its config. Files are written to a temporary name and moved into
place with ``os.replace``, so a crash while saving leaves the previous file intact.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import save_file

from transformer.config import ModelConfig
from transformer.errors import UserError
from transformer.model import RNNConfig, RNNSeq2Seq, Transformer, build_model, config_from_dict
from transformer.run.layout import CONFIG_FILE, WEIGHTS_FILE
from transformer.run_files import (
    FLOAT_DTYPES, RunFileError, plain_permissions, read_json, read_safetensors_header, replacing)

FORMAT_VERSION = "1"
MAX_LAYERS = 1024  # per stack; a config asking for more is refused before any module is built


class CheckpointError(UserError):
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
    with replacing(path) as tmp:
        save_file(tensors, str(tmp), metadata=meta)
        plain_permissions(tmp)


def tensor_shapes(model: torch.nn.Module, *, unique: bool = True) -> dict[str, tuple[tuple[int, ...], bool]]:
    """``{name: (shape, is_floating)}`` of the tensors :func:`save_weights` writes for ``model``
    (each shared tensor once, under its first name; every name of the state dict with ``unique``
    False); works on the meta device too, where tensors have no storage to tell shared ones apart,
    so sharing is told by the parameter objects."""
    owners = dict(model.named_parameters(remove_duplicate=False))
    owners.update(model.named_buffers(remove_duplicate=False))
    seen: set[int] = set()
    shapes: dict[str, tuple[tuple[int, ...], bool]] = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        owner = owners.get(name, tensor)
        if unique and id(owner) in seen:
            continue
        seen.add(id(owner))
        shapes[name] = (tuple(tensor.shape), tensor.is_floating_point())
    return shapes


def expected_tensors(config: ModelConfig | RNNConfig, *, source: str | os.PathLike[str] = CONFIG_FILE,
                     unique: bool = True) -> dict[str, tuple[tuple[int, ...], bool]]:
    """The tensors (name -> shape, floating or not) a weights file must hold for a model of
    ``config``, found by building the model on the meta device: nothing is allocated, however
    large the sizes. ``CheckpointError`` (naming ``source``) for more than :data:`MAX_LAYERS`
    layers per stack or sizes no model can have."""
    for name in ("n_encoder_layers", "n_decoder_layers"):
        if getattr(config, name) > MAX_LAYERS:
            raise CheckpointError(f"{source}: {name}={getattr(config, name)} is more than the {MAX_LAYERS} layers "
                                  "a model may have")
    try:
        with torch.device("meta"):
            return tensor_shapes(build_model(config), unique=unique)
    except (RuntimeError, OverflowError, ValueError, TypeError, MemoryError) as err:
        raise CheckpointError(f"{source} describes a model that cannot be built: {' '.join(str(err).split())[:200]}"
                              ) from None


def check_weights_header(path: str | os.PathLike[str], expected: dict[str, tuple[tuple[int, ...], bool]]) -> None:
    """Check the names, shapes and dtypes in the header of the safetensors file ``path`` against
    ``expected`` (see :func:`expected_tensors`) without reading any tensor.

    Raises:
        CheckpointError: a missing, unreadable or irregular file (a FIFO, a device), missing or
            unexpected tensors, a shape the config does not give, or an integer tensor where the
            model holds floating-point numbers.
    """
    path = Path(path)
    try:
        header = read_safetensors_header(path)
    except (FileNotFoundError, RunFileError) as err:
        raise CheckpointError(str(err)) from None
    missing = sorted(set(expected) - set(header))
    unexpected = sorted(set(header) - set(expected))
    if missing or unexpected:
        raise CheckpointError(
            f"{path} does not match the model config: missing tensors {missing[:8]}"
            f"{' ...' if len(missing) > 8 else ''}, unexpected tensors {[n[:80] for n in unexpected[:8]]}"
            f"{' ...' if len(unexpected) > 8 else ''}"
        )
    for name, (shape, floating) in expected.items():
        dtype, stored = header[name]
        if stored != shape:
            raise CheckpointError(
                f"{path}: tensor {name!r} has shape {stored} but the config needs {shape}; the weights belong "
                "to a model of other sizes"
            )
        if floating != (dtype in FLOAT_DTYPES):
            raise CheckpointError(f"{path}: tensor {name!r} is stored as {dtype}, but the model holds "
                                  f"{'floating-point numbers' if floating else 'integers'} there")


def load_weights(model: torch.nn.Module, path: str | os.PathLike[str]) -> None:
    """Load safetensors weights into ``model`` in place, checking the file's header (names,
    shapes, dtypes) before reading a tensor and every value after.

    Raises:
        CheckpointError: missing file, unreadable (truncated, corrupt) file, missing or unexpected
            tensors, tensors whose shapes or dtypes do not fit the model's config, or a tensor
            holding NaN or infinity (named).
    """
    path = Path(path)
    check_weights_header(path, tensor_shapes(model))
    expected = unique_state_dict(model)
    try:
        with safe_open(str(path), framework="pt", device="cpu") as f:
            loaded = {name: f.get_tensor(name) for name in expected}
    except Exception as err:  # safetensors raises its own error types for truncated/corrupt files
        raise CheckpointError(f"{path} is not a readable safetensors file (truncated or corrupt?): {err}") from None
    for name, tensor in loaded.items():
        # a model trained into NaN or infinity translates nothing; say which tensor rather than load it
        if tensor.is_floating_point() and not bool(torch.isfinite(tensor).all()):
            raise CheckpointError(f"{path}: tensor {name!r} holds NaN or infinite values; the weights are "
                                  "unusable (a diverged training?)")
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
    if not path.exists():
        raise CheckpointError(f"model config not found: {path} (is {directory} a model directory?)")
    try:
        data = read_json(path)
    except (FileNotFoundError, RunFileError) as err:
        raise CheckpointError(str(err)) from None
    try:
        return config_from_dict(data)
    except (TypeError, ValueError) as err:
        raise CheckpointError(f"{path} is not a valid model config: {err}") from None


def load_model(directory: str | os.PathLike[str], *, device: str | torch.device = "cpu") -> Transformer | RNNSeq2Seq:
    """Build the model from ``config.json`` (a Transformer or the recurrent baseline) and load
    ``model.safetensors``; returns it in eval mode."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"model directory not found: {directory}")
    config = load_config(directory)
    # the sizes config.json asks for are checked against the weights before anything is allocated
    check_weights_header(directory / WEIGHTS_FILE, expected_tensors(config, source=directory / CONFIG_FILE))
    model = build_model(config)
    load_weights(model, directory / WEIGHTS_FILE)
    return model.to(device).eval()

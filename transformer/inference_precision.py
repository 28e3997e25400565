"""The inference precision: the number format a trained model translates in, one value,
resolved and checked here.

``PRECISIONS``:

* ``fp32``: the weights as trained (the default);
* ``bf16``: a bfloat16 copy of the weights (fast on GPUs and on CPUs with AVX-512 bf16 or AMX;
  elsewhere PyTorch emulates it, with a warning);
* ``int8``: int8 copies of the linear layers' weights in the CPU engine's kernels, activations
  and sums in float32 (Transformer models, on the CPU);
* ``fp16``: a float16 copy of the weights (on CUDA devices).

``translate``, ``evaluate``, ``calibrate`` and ``serve`` take it as ``--precision`` (``info``
too, fp32 or bf16 for its forward pass), ``export --format ctranslate2`` as the weight type it
writes; the Python API as ``precision=`` (``Translator``, ``Translator.from_run_dir``,
``load_translator``, ``export_ctranslate2``). :func:`check_precision` makes every refusal of a
value on a device (and a model); :func:`resolve_device` picks the device a ``--device`` name
stands for, the CPU for int8 under ``auto``.

Not the same idea: ``train.precision`` (``auto``, ``fp32``, ``bf16``, ``fp16``) is the autocast a
training runs under, its weights staying float32. :mod:`transformer.cpu.training_precision`
resolves its ``auto`` (bf16 where the device multiplies bf16 matrices in hardware) and says which
devices do.

The names and the options import nothing heavy: the command line's parsers take them without
loading torch, which the functions that check a precision on a device import when called.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from transformer.errors import UserError

if TYPE_CHECKING:
    import torch
    from torch import nn

PRECISIONS = ("fp32", "bf16", "int8", "fp16")
DEVICES = ("auto", "cpu", "cuda")
PRECISION_HELP = {
    "fp32": "the weights as trained (the default)",
    "bf16": "a bfloat16 copy of the weights, fast on GPUs and on CPUs with AVX-512 bf16 or AMX",
    "int8": "int8 copies of the linear layers' weights (one scale per output feature) in the CPU engine's "
            "kernels, activations and sums in float32: a quarter of the weights' memory traffic (Transformer "
            "models on the CPU)",
    "fp16": "a float16 copy of the weights (on a GPU)",
}


def weight_dtype(precision: str) -> torch.dtype:
    """The dtype of the weights a model translates with in ``precision`` (one of ``PRECISIONS``);
    int8 keeps float32 weights, of which the CPU engine packs int8 copies."""
    import torch

    return {"fp32": torch.float32, "bf16": torch.bfloat16, "int8": torch.float32, "fp16": torch.float16}[precision]


def add_precision_option(parser: argparse.ArgumentParser | argparse._ArgumentGroup, *,
                         choices: tuple[str, ...] = PRECISIONS, what: str = "translate") -> None:
    """Add ``--precision`` (``choices``, default ``fp32``).

    Args:
        parser: the command's parser, or one of its argument groups.
        choices: the precisions the command takes.
        what: what the command does in that precision, for the help text.
    """
    described = "; ".join(f"{value}: {PRECISION_HELP[value]}" for value in choices)
    parser.add_argument("--precision", choices=choices, default="fp32",
                        help=f"the number format to {what} in: {described}")


def check_precision(precision: str, device: torch.device | str, *, model: nn.Module | None = None) -> str:
    """``precision`` where it can translate on ``device``; every refusal is made here.

    Args:
        precision: one of ``PRECISIONS``.
        device: where the model translates.
        model: the model, where known (int8 is for Transformer models).

    Returns:
        ``precision``.

    Raises:
        UserError: an unknown value, int8 off the CPU, for a model other than a Transformer or
            without the compiled CPU kernels, fp16 off CUDA.
    """
    if precision not in PRECISIONS:
        raise UserError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    import torch

    from transformer.cpu import build
    from transformer.model import Transformer

    device = torch.device(device)
    _check_device(precision, device)
    if precision == "int8":
        if model is not None and not isinstance(model, Transformer):
            raise UserError("int8 is for Transformer models (the recurrent baseline's layers do not run the "
                             "CPU kernels)")
        if not build.available():
            raise UserError(f"int8 needs the compiled CPU kernels (a C compiler, and {build.ENV_SWITCH} not 0)")
    return precision


def _check_device(precision: str, device: torch.device) -> None:
    """The refusals that depend on the device alone."""
    if precision == "int8" and device.type != "cpu":
        raise UserError(f"int8 quantisation is for fp32 CPU inference: translate on the CPU (--device cpu or "
                         f"auto), not {device}")
    if precision == "fp16" and device.type != "cuda":
        raise UserError(f"fp16 is for CUDA devices, not {device}: on a CPU use bf16 (or fp32)")


def resolve_device(name: str, *, precision: str = "fp32", setting: str = "--device") -> torch.device:
    """The device a device name stands for, for translating in ``precision`` or for training.

    Args:
        name: ``auto`` (the GPU where PyTorch sees one and ``precision`` runs there, not int8,
            a CPU format; else the CPU), ``cpu`` or ``cuda``.
        precision: the precision the device is for (training passes none: fp32).
        setting: the option or setting that named the device, for the messages
            (``--device``, ``train.device``).

    Returns:
        The device.

    Raises:
        UserError: an unknown name, ``cuda`` where PyTorch sees no CUDA device, a precision that
            does not run on the device named.
    """
    import torch

    if name not in DEVICES:
        raise UserError(f"device must be one of {DEVICES}, got {name!r}")
    if name == "auto":
        device = torch.device("cuda" if torch.cuda.is_available() and precision != "int8" else "cpu")
    elif name == "cuda" and not torch.cuda.is_available():
        def spelled(value: str) -> str:
            return f"{setting} {value}" if setting.startswith("--") else f"{setting}={value}"
        raise UserError(f"{spelled('cuda')}: PyTorch sees no CUDA device here (this torch build or machine has "
                         f"none); use {spelled('cpu')} or auto")
    else:
        device = torch.device(name)
    _check_device(precision, device)
    return device

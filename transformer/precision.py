"""The number format a trained model translates in: one value, resolved and checked here.

``PRECISIONS``:

* ``fp32``: the weights as trained (the default);
* ``bf16``: a bfloat16 copy of the weights (fast on GPUs and on CPUs with AVX-512 bf16 or AMX;
  elsewhere PyTorch emulates it, with a warning);
* ``int8``: int8 copies of the linear layers' weights in the CPU engine's kernels, activations
  and sums in float32 (Transformer models, on the CPU);
* ``fp16``: a float16 copy of the weights (on CUDA devices).

``translate``, ``evaluate`` and ``serve`` take it as ``--precision`` (``info`` too, fp32 or bf16
for its forward pass), ``export --format ctranslate2`` as the weight type it writes; the Python
API as ``precision=`` (``Translator``, ``Translator.from_run_dir``, ``load_translator``,
``export_ctranslate2``). The older spellings stay and mean the same:
``--bf16`` and ``--int8`` (``bf16=True``, ``int8=True``, ``quantize="int8"``) are
``--precision bf16`` and ``--precision int8``; :func:`precision_from` turns whatever was given
into the one value and refuses two that disagree. :func:`check_precision` makes every refusal
of a value on a device (and a model); :func:`resolve_device` picks the device a ``--device``
name stands for, the CPU for int8 under ``auto``.

Not the same idea: ``train.precision`` (``auto``, ``fp32``, ``bf16``, ``fp16``) is the autocast a
training runs under, its weights staying float32. :mod:`transformer.cpu.precision` resolves its
``auto`` (bf16 where the device multiplies bf16 matrices in hardware) and says which devices do.

The names and the options import nothing heavy: the command line's parsers take them without
loading torch, which the functions that check a precision on a device import when called.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Mapping

from transformer.errors import UserError

if TYPE_CHECKING:
    import torch
    from torch import nn

PRECISIONS = ("fp32", "bf16", "int8", "fp16")
DEVICES = ("auto", "cpu", "cuda")
QUANTIZE = (None, "int8")  # the values of Translator's older quantize= keyword
FLAGS = ("int8", "bf16")  # the values with an option of their own, the older spelling (--int8, --bf16)
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
    """Add ``--precision`` (``choices``) and the older ``--int8`` and ``--bf16`` of those choices.

    Args:
        parser: the command's parser, or one of its argument groups.
        choices: the precisions the command takes.
        what: what the command does in that precision, for the help text.
    """
    described = "; ".join(f"{value}: {PRECISION_HELP[value]}" for value in choices)
    parser.add_argument("--precision", choices=choices, default=None,
                        help=f"the number format to {what} in: {described}")
    for value in FLAGS:
        if value in choices:
            parser.add_argument(f"--{value}", action="store_true", help=f"the same as --precision {value}")


def precision_option(args: argparse.Namespace) -> str:
    """The one precision of ``--precision``, ``--int8`` and ``--bf16`` (``fp32`` where none is given);
    ValueError where two disagree."""
    given = {f"--precision {args.precision}": args.precision}
    given.update({f"--{value}": value for value in FLAGS if getattr(args, value, False)})
    return precision_from(given)


def precision_from(given: Mapping[str, str | None]) -> str:
    """The one precision, given under any of its spellings; ``fp32`` where none was given.

    Args:
        given: each spelling as the user wrote it (``"--precision int8"``, ``"--int8"``,
            ``"bf16=True"``) mapped to the precision it asks for, or None where it was not given.

    Returns:
        The value asked for (checked against a device by :func:`check_precision`).

    Raises:
        UserError: two spellings ask for different precisions (named as they were given).
    """
    named = {spelling: value for spelling, value in given.items() if value is not None}
    values = set(named.values())
    if values == {"int8", "bf16"} and len(named) == 2:
        raise UserError(f"int8 quantisation is for fp32 CPU inference: give {' or '.join(named)}, not both")
    if len(values) > 1:
        raise UserError(f"give one precision: {' and '.join(named)} disagree")
    return values.pop() if values else "fp32"


def from_quantize(quantize: str | None) -> str | None:
    """The precision ``Translator``'s older ``quantize=`` keyword asks for (None: not given)."""
    if quantize not in QUANTIZE:
        raise UserError(f"quantize must be one of {QUANTIZE}, got {quantize!r}")
    return quantize


def check_precision(precision: str, device: torch.device | str, *, model: nn.Module | None = None,
                    name: str | None = None) -> str:
    """``precision`` where it can translate on ``device``; every refusal is made here.

    Args:
        precision: one of ``PRECISIONS``.
        device: where the model translates.
        model: the model, where known (int8 is for Transformer models).
        name: how the precision was given, for the messages (default: its value).

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
    name = name or precision
    if precision == "int8":
        if model is not None and not isinstance(model, Transformer):
            raise UserError(f"{name} is for Transformer models (the recurrent baseline's layers do not run the "
                             "CPU kernels)")
        if not build.available():
            raise UserError(f"{name} needs the compiled CPU kernels (a C compiler, and {build.ENV_SWITCH} not 0)")
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

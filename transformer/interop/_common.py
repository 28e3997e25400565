"""What every converter shares: its error type, optional-extra imports, and all-or-nothing output directories."""

from __future__ import annotations

import contextlib
import importlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from transformer.errors import MissingExtraError, UserError, install_hint

INSTALL_HINT = install_hint("interop")
MARIAN_TOKENIZER_FILES = ("source.spm", "target.spm", "vocab.json")  # a MarianTokenizer's (+ target_vocab.json)
# CTranslate2's weight type for each precision that ``export --precision`` takes: translate's own
# (transformer.inference_precision, the same number format under CTranslate2's name), then the types that
# only CTranslate2 runs (int8 weights with 16-bit activations, int16), by their CTranslate2 names.
CTRANSLATE2_TYPES = {"fp32": "float32", "bf16": "bfloat16", "int8": "int8", "fp16": "float16",
                     **{name: name for name in ("int8_float32", "int8_float16", "int8_bfloat16", "int16")}}


class InteropError(UserError):
    """Input a converter cannot handle; the message names the file or setting and the fix."""


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` or raise :class:`~transformer.errors.MissingExtraError` naming the
    ``interop`` extra, the package and the install command (``purpose`` says what needs it)."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError("interop", purpose, module.split(".")[0]) from None


def refuse_existing(target: str | os.PathLike[str]) -> Path:
    """``target`` as a Path; InteropError if it exists (checked before a download, and again when writing)."""
    target = Path(target)
    if target.exists():
        raise InteropError(f"output {target} already exists; choose a new directory")
    return target


@contextlib.contextmanager
def staged_output(target: str | os.PathLike[str]) -> Iterator[Path]:
    """A fresh temporary directory beside ``target`` that becomes ``target`` only on success.

    Refuses an existing ``target`` (nothing is ever overwritten). On any exception the temporary
    directory is removed, so no half-written output is left behind.
    """
    target = refuse_existing(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

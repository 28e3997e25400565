"""Interoperability: run Hugging Face Marian models here; take our models to Hugging Face, CTranslate2, ONNX,
Argos Translate.

    import_hf(marian_dir, run_dir)                  # a MarianMTModel directory -> our run directory
    import_hf("Helsinki-NLP/opus-mt-fr-en", run_dir, revision=None)   # ... or a model on the Hugging Face Hub
    export_hf(run_dir, out)                         # -> a directory transformers loads as MarianMTModel
    export_ctranslate2(run_dir, out, precision=None)   # -> a CTranslate2 model directory (fp32, bf16, int8, fp16)
    export_onnx(run_dir, out)                       # -> encoder.onnx + decoder_step.onnx (+ cache)
    export_argos(run_dir, "x.argosmodel")           # -> a package for Argos Translate and LibreTranslate

The third-party packages are the optional ``interop`` extra; each function raises
``MissingExtraError`` (:mod:`transformer.errors`) naming the extra and the install command when one
is missing, and ``InteropError`` (a ``UserError``) for input it cannot convert. Outputs appear whole
or not at all.

The converters are imported when first used (PEP 562), so that the commands' parsers
(``cli_args``) load without torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from transformer.errors import MissingExtraError
from transformer.interop._common import INSTALL_HINT, InteropError
from transformer.lazy import lazy_exports

if TYPE_CHECKING:  # what the names are, for type checkers and readers; imported on first use below
    from transformer.interop.argos import export_argos
    from transformer.interop.ctranslate2 import export_ctranslate2
    from transformer.interop.hf import export_hf, import_hf
    from transformer.interop.onnx import export_onnx

_CONVERTERS = {"export_argos": ".argos", "export_ctranslate2": ".ctranslate2", "export_hf": ".hf", "import_hf": ".hf",
               "export_onnx": ".onnx"}

__all__ = ["INSTALL_HINT", "InteropError", "MissingExtraError", "export_argos", "export_ctranslate2", "export_hf",
           "export_onnx", "import_hf"]
__getattr__, __dir__ = lazy_exports(__name__, _CONVERTERS)

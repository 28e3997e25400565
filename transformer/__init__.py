"""A readable, paper-faithful, fast PyTorch Transformer (Vaswani et al., 2017).

The public API::

    from transformer import ModelConfig, Transformer, preset, save_model, load_model

Its names are imported when first used (PEP 562), so that importing a light submodule, such as
the command line's parser in ``transformer.cli``, does not load torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

# First, before torch loads: the moment from which the commands count the CPUs other processes leave free.
from transformer import threads as _threads  # noqa: F401  (isort: skip)
from transformer.lazy import lazy_exports

if TYPE_CHECKING:  # what the names are, for type checkers and readers; imported on first use below
    from transformer.config import ModelConfig, preset
    from transformer.model import AttentionMaps, DecoderCache, Transformer
    from transformer.model.masks import causal_mask, padding_mask
    from transformer.run.model import CheckpointError, load_model, save_model

__version__ = "0.1.0"

# Each public name -> the module that defines it.
_EXPORTS = {
    "AttentionMaps": "transformer.model",
    "CheckpointError": "transformer.run.model",
    "DecoderCache": "transformer.model",
    "ModelConfig": "transformer.config",
    "Transformer": "transformer.model",
    "causal_mask": "transformer.model.masks",
    "load_model": "transformer.run.model",
    "padding_mask": "transformer.model.masks",
    "preset": "transformer.config",
    "save_model": "transformer.run.model",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

"""A readable, paper-faithful, fast PyTorch Transformer (Vaswani et al., 2017).

The public API::

    from transformer import ModelConfig, Transformer, preset, save_model, load_model
"""

# First, before torch loads: the moment from which the commands count the CPUs other processes leave free.
from transformer import threads as _threads  # noqa: F401  (isort: skip)
from transformer.run.model import CheckpointError, load_model, save_model
from transformer.config import ModelConfig, preset
from transformer.model.masks import causal_mask, padding_mask
from transformer.model import AttentionMaps, DecoderCache, Transformer

__version__ = "0.1.0"

__all__ = [
    "AttentionMaps",
    "CheckpointError",
    "DecoderCache",
    "ModelConfig",
    "Transformer",
    "causal_mask",
    "load_model",
    "padding_mask",
    "preset",
    "save_model",
]

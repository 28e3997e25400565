"""The Transformer model: attention, embeddings, layers, stacks and the decoder cache; the recurrent baseline.

The modules with torch in them are imported when one of their names is first used (PEP 562), so
that the configurations (``rnn_config``, read by the run's settings and the command line's
parsers) load without torch.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from transformer.config import ModelConfig
from transformer.errors import UserError
from transformer.model.rnn_config import RNN_PRESETS, RNNConfig, rnn_preset

if TYPE_CHECKING:  # what the names are, for type checkers and readers; imported on first use below
    from transformer.model.attention import (
        CrossAttention, MultiHeadAttention, SelfAttention, scaled_dot_product_attention,
    )
    from transformer.model.cache import DecoderCache, KVCache, StaticKV
    from transformer.model.embeddings import (
        LearnedPositionalEncoding,
        SinusoidalPositionalEncoding,
        TokenEmbedding,
        sinusoidal_table,
    )
    from transformer.model.layers import DecoderLayer, EncoderLayer, FeedForward
    from transformer.model.rnn import RNNCache, RNNSeq2Seq
    from transformer.model.transformer import AttentionMaps, Decoder, Encoder, Transformer

__all__ = [
    "ARCHITECTURES", "AttentionMaps", "CrossAttention", "Decoder", "DecoderCache", "DecoderLayer", "Encoder", "EncoderLayer",
    "FeedForward", "KVCache", "LearnedPositionalEncoding", "MultiHeadAttention", "RNNCache", "RNNConfig",
    "RNNSeq2Seq", "RNN_PRESETS", "SelfAttention", "SinusoidalPositionalEncoding", "StaticKV", "TokenEmbedding",
    "Transformer", "build_model", "config_from_dict", "rnn_preset", "scaled_dot_product_attention",
    "sinusoidal_table",
]

ARCHITECTURES = ("transformer", "rnn")

# The names of the modules with torch in them -> their module in this package.
_LAZY = {
    "CrossAttention": "attention", "MultiHeadAttention": "attention", "SelfAttention": "attention",
    "scaled_dot_product_attention": "attention",
    "DecoderCache": "cache", "KVCache": "cache", "StaticKV": "cache",
    "LearnedPositionalEncoding": "embeddings", "SinusoidalPositionalEncoding": "embeddings",
    "TokenEmbedding": "embeddings", "sinusoidal_table": "embeddings",
    "DecoderLayer": "layers", "EncoderLayer": "layers", "FeedForward": "layers",
    "RNNCache": "rnn", "RNNSeq2Seq": "rnn",
    "AttentionMaps": "transformer", "Decoder": "transformer", "Encoder": "transformer", "Transformer": "transformer",
}


def __getattr__(name: str) -> Any:
    """A model class or function, imported from its module on first use (and kept)."""
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def config_from_dict(data: dict[str, Any]) -> ModelConfig | RNNConfig:
    """A model config from its JSON object: ``RNNConfig`` when ``architecture`` is ``"rnn"``, else
    ``ModelConfig`` (a Transformer's config.json has no ``architecture`` key)."""
    if isinstance(data, dict) and data.get("architecture", "transformer") != "transformer":
        if data["architecture"] not in ARCHITECTURES:
            raise UserError(f"unknown architecture {data['architecture']!r}; valid: {list(ARCHITECTURES)}")
        return RNNConfig.from_dict(data)
    if isinstance(data, dict) and "architecture" in data:
        data = {k: v for k, v in data.items() if k != "architecture"}
    return ModelConfig.from_dict(data)


def build_model(config: ModelConfig | RNNConfig) -> Transformer | RNNSeq2Seq:
    """The model a config describes: ``RNNSeq2Seq`` for an ``RNNConfig``, ``Transformer`` for a ``ModelConfig``."""
    from transformer.model.rnn import RNNSeq2Seq
    from transformer.model.transformer import Transformer

    if isinstance(config, RNNConfig):
        return RNNSeq2Seq(config)
    if isinstance(config, ModelConfig):
        return Transformer(config)
    raise TypeError(f"expected a ModelConfig or RNNConfig, got {type(config).__name__}")

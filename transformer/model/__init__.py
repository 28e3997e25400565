"""The Transformer model: attention, embeddings, layers, stacks and the decoder cache; the recurrent baseline."""

from __future__ import annotations

from typing import Any

from transformer.config import ModelConfig
from transformer.model.attention import CrossAttention, MultiHeadAttention, SelfAttention, scaled_dot_product_attention
from transformer.model.cache import DecoderCache, KVCache, StaticKV
from transformer.model.embeddings import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from transformer.model.layers import DecoderLayer, EncoderLayer, FeedForward
from transformer.model.rnn import RNNCache, RNNSeq2Seq
from transformer.model.rnn_config import RNN_PRESETS, RNNConfig, rnn_preset
from transformer.model.transformer import AttentionMaps, Decoder, Encoder, Transformer
from transformer.errors import UserError

__all__ = [
    "ARCHITECTURES", "AttentionMaps", "CrossAttention", "Decoder", "DecoderCache", "DecoderLayer", "Encoder", "EncoderLayer",
    "FeedForward", "KVCache", "LearnedPositionalEncoding", "MultiHeadAttention", "RNNCache", "RNNConfig",
    "RNNSeq2Seq", "RNN_PRESETS", "SelfAttention", "SinusoidalPositionalEncoding", "StaticKV", "TokenEmbedding",
    "Transformer", "build_model", "config_from_dict", "rnn_preset", "scaled_dot_product_attention",
    "sinusoidal_table",
]

ARCHITECTURES = ("transformer", "rnn")


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
    if isinstance(config, RNNConfig):
        return RNNSeq2Seq(config)
    if isinstance(config, ModelConfig):
        return Transformer(config)
    raise TypeError(f"expected a ModelConfig or RNNConfig, got {type(config).__name__}")

"""The Transformer model: attention, embeddings, layers, stacks and the decoder cache."""

from transformer.model.attention import CrossAttention, MultiHeadAttention, SelfAttention, scaled_dot_product_attention
from transformer.model.cache import DecoderCache, KVCache, StaticKV
from transformer.model.embeddings import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)
from transformer.model.layers import DecoderLayer, EncoderLayer, FeedForward
from transformer.model.transformer import AttentionMaps, Decoder, Encoder, Transformer

__all__ = [
    "AttentionMaps", "CrossAttention", "Decoder", "DecoderCache", "DecoderLayer", "Encoder", "EncoderLayer",
    "FeedForward", "KVCache", "LearnedPositionalEncoding", "MultiHeadAttention", "SelfAttention",
    "SinusoidalPositionalEncoding", "StaticKV", "TokenEmbedding", "Transformer", "scaled_dot_product_attention",
    "sinusoidal_table",
]

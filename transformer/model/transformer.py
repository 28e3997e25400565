"""Encoder and decoder stacks and the encoder-decoder ``Transformer`` (paper section 3.1, Figure 1).

Decoding algorithms live outside the model and use only ``encode`` and ``decode``:

    memory = model.encode(src, src_mask)                       # (B, S, E)
    cache = model.new_cache()
    logits = model.decode(tgt_step, memory, src_mask, cache=cache)   # (B, 1, V) per step

Letters: B batch, S source length, T target length, E d_model, H heads, V vocabulary, L layers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from transformer.config import ModelConfig
from transformer.model.masks import key_mask_for_attention
from transformer.model.cache import DecoderCache
from transformer.model.embeddings import (
    InputEmbedding,
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
)
from transformer.model.layers import DecoderLayer, EncoderLayer


@dataclass
class AttentionMaps:
    """Every attention weight of one forward pass, per layer and head.

    ``encoder``: L_enc tensors ``(B, H, S, S)``; ``decoder_self``: L_dec tensors ``(B, H, T, T)``;
    ``cross``: L_dec tensors ``(B, H, T, S)``. Rows sum to 1 (0 for fully masked rows).
    """

    encoder: list[Tensor]
    decoder_self: list[Tensor]
    cross: list[Tensor]


def _positions(cfg: ModelConfig) -> nn.Module:
    if cfg.positional == "learned":
        return LearnedPositionalEncoding(cfg.max_positions, cfg.d_model)
    return SinusoidalPositionalEncoding(cfg.d_model, layout=cfg.sinusoid_layout)


class Encoder(nn.Module):
    """Embedding + positions, then N identical layers (paper 3.1)."""

    def __init__(self, cfg: ModelConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        self.embed = InputEmbedding(embedding, _positions(cfg), dropout=cfg.dropout)
        self.layers = nn.ModuleList(EncoderLayer(cfg) for _ in range(cfg.n_encoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(
        self, src: Tensor, src_mask: Tensor | None, *, need_weights: bool = False
    ) -> tuple[Tensor, list[Tensor]]:
        """src ``(B, S)`` ids -> ``(memory (B, S, E), per-layer weights if requested)``."""
        x = self.embed(src)
        mask = key_mask_for_attention(src_mask) if src_mask is not None else None  # (B, 1, 1, S)
        weights: list[Tensor] = []
        for layer in self.layers:
            x, w = layer(x, mask=mask, need_weights=need_weights)
            if w is not None:
                weights.append(w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, weights


class Decoder(nn.Module):
    """Embedding + positions, N identical layers with causal self-attention (paper 3.1)."""

    def __init__(self, cfg: ModelConfig, embedding: TokenEmbedding) -> None:
        super().__init__()
        self.embed = InputEmbedding(embedding, _positions(cfg), dropout=cfg.dropout)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.n_decoder_layers))
        self.final_norm = nn.LayerNorm(cfg.d_model, eps=cfg.layer_norm_eps) if cfg.norm_first else None

    def forward(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None,
        *,
        cache: DecoderCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """tgt ``(B, T)`` ids -> ``(hidden (B, T, E), self weights, cross weights)``."""
        offset = cache.length if cache is not None else 0
        x = self.embed(tgt, offset=offset)
        memory_mask = key_mask_for_attention(src_mask) if src_mask is not None else None  # (B, 1, 1, S)
        self_ws: list[Tensor] = []
        cross_ws: list[Tensor] = []
        for i, layer in enumerate(self.layers):
            self_cache = memory_kv = None
            if cache is not None:
                if cache.cross_attn[i] is None:
                    cache.cross_attn[i] = layer.cross_attn.memory_kv(memory)
                self_cache, memory_kv = cache.self_attn[i], cache.cross_attn[i]
            x, self_w, cross_w = layer(
                x, memory, memory_mask=memory_mask, self_cache=self_cache, memory_kv=memory_kv,
                need_weights=need_weights,
            )
            if self_w is not None and cross_w is not None:
                self_ws.append(self_w)
                cross_ws.append(cross_w)
        if self.final_norm is not None:
            x = self.final_norm(x)
        return x, self_ws, cross_ws


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need" (paper 3, Figure 1)."""

    # ``decode`` accepts memory with fewer rows than the targets (G target rows per memory row).
    supports_grouped_memory = True

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        tgt_embedding = TokenEmbedding(cfg.tgt_vocab_size, cfg.d_model, scale=cfg.scale_embeddings)
        src_embedding = (
            tgt_embedding
            if cfg.share_embeddings
            else TokenEmbedding(cfg.src_vocab_size, cfg.d_model, scale=cfg.scale_embeddings)
        )
        self.encoder = Encoder(cfg, src_embedding)
        self.decoder = Decoder(cfg, tgt_embedding)
        self.output = nn.Linear(cfg.d_model, cfg.tgt_vocab_size, bias=cfg.output_bias)  # pre-softmax (3.4)
        self._init_weights()
        if cfg.tie_output:
            self.output.weight = tgt_embedding.weight
        if self.output.bias is not None:
            nn.init.zeros_(self.output.bias)

    def _init_weights(self) -> None:
        """Xavier-uniform for projection matrices, zeros for biases; embeddings keep N(0, 1/d_model)."""
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2 and "embed" not in name:
                nn.init.xavier_uniform_(p)

    # ------------------------------------------------------------------------------------------
    def encode(self, src: Tensor, src_mask: Tensor | None = None) -> Tensor:
        """Source ids ``(B, S)`` and key-padding mask ``(B, S)`` (True = real token) -> memory ``(B, S, E)``."""
        self._check_ids(src, "src", self.config.src_vocab_size)
        self._check_mask(src_mask, src)
        return self.encoder(src, src_mask)[0]

    def decode(
        self,
        tgt: Tensor,
        memory: Tensor,
        src_mask: Tensor | None = None,
        *,
        cache: DecoderCache | None = None,
    ) -> Tensor:
        """Target ids ``(B, T)`` -> logits ``(B, T, V)``, each position seeing only itself and earlier ones.

        With a ``cache``, ``tgt`` holds only the new positions (usually one); the cache supplies
        the earlier ones and is updated in place.

        ``memory`` ``(M, S, E)`` and ``src_mask`` ``(M, S)`` may hold fewer rows than ``tgt``
        when ``B = M * G``: then G consecutive target rows share one memory row (the beams of a
        sentence; see ``CrossAttention``), and a cache's cross-attention keys/values have M rows.
        """
        self._check_ids(tgt, "tgt", self.config.tgt_vocab_size)
        self._check_memory(memory, tgt, src_mask)
        hidden = self.decoder(tgt, memory, src_mask, cache=cache)[0]
        return self.output(hidden)

    def forward(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None, *,
                positions: Tensor | None = None) -> Tensor:
        """Teacher forcing (paper 3.1, 5): all target positions at once -> logits ``(B, T, V)``.

        ``positions`` (bool ``(B, T)``, e.g. the non-padding targets) limits the pre-softmax
        projection to those positions and returns their logits as ``(N, V)`` in row-major order:
        training skips the (padding x vocabulary) part of the largest matrix product.
        """
        memory = self.encode(src, src_mask)
        if positions is None:
            return self.decode(tgt, memory, src_mask)
        self._check_ids(tgt, "tgt", self.config.tgt_vocab_size)
        self._check_memory(memory, tgt, src_mask)
        if positions.shape != tgt.shape or positions.dtype != torch.bool:
            raise ValueError(f"positions must be a bool mask of the targets' shape {tuple(tgt.shape)}, "
                             f"got {positions.dtype} {tuple(positions.shape)}")
        hidden = self.decoder(tgt, memory, src_mask)[0].flatten(0, 1)  # (B * T, E)
        # index_select rather than hidden[positions]: the backward of boolean indexing is a serial scatter on CPU
        rows = positions.flatten().nonzero().squeeze(1)
        return self.output(hidden.index_select(0, rows))  # (N, V)

    def new_cache(self, *, initial_capacity: int = 32) -> DecoderCache:
        """An empty decoder cache for incremental decoding."""
        return DecoderCache.empty(len(self.decoder.layers), initial_capacity=initial_capacity)

    @torch.no_grad()
    def attention_maps(self, src: Tensor, tgt: Tensor, src_mask: Tensor | None = None) -> AttentionMaps:
        """Every layer's encoder self-, decoder self- and encoder-decoder attention, per head.

        Runs one forward pass on the explicit attention path (``forward`` uses the fused kernel).
        """
        self._check_ids(src, "src", self.config.src_vocab_size)
        self._check_ids(tgt, "tgt", self.config.tgt_vocab_size)
        self._check_mask(src_mask, src)
        memory, enc_ws = self.encoder(src, src_mask, need_weights=True)
        _, self_ws, cross_ws = self.decoder(tgt, memory, src_mask, need_weights=True)
        return AttentionMaps(encoder=enc_ws, decoder_self=self_ws, cross=cross_ws)

    def num_parameters(self) -> int:
        """Distinct trainable parameters (tied weights counted once)."""
        return sum(p.numel() for p in self.parameters())

    # ------------------------------------------------------------------------------------------
    @staticmethod
    def _check_ids(ids: Tensor, name: str, vocab_size: int) -> None:
        if not isinstance(ids, Tensor):
            raise TypeError(f"{name} must be a torch.Tensor of token ids, got {type(ids).__name__}")
        if ids.dtype not in (torch.long, torch.int32, torch.int16, torch.uint8, torch.int8):
            raise ValueError(f"{name} must hold integer token ids (torch.long), got dtype {ids.dtype}")
        if ids.dim() != 2:
            raise ValueError(f"{name} must have shape (batch, length), got {tuple(ids.shape)}")
        if ids.shape[1] == 0:
            raise ValueError(f"{name} is empty: sequences need at least one token")
        # The range check reads values back, so it runs on CPU only (no device sync in CUDA decoding).
        if ids.device.type == "cpu" and ids.numel():
            low, high = (int(x) for x in torch.aminmax(ids))
            if low < 0 or high >= vocab_size:
                raise ValueError(f"{name} holds token ids outside [0, {vocab_size}): min {low}, max {high}")

    @staticmethod
    def _check_mask(mask: Tensor | None, ids: Tensor) -> None:
        if mask is None:
            return
        if mask.dtype != torch.bool:
            raise ValueError(f"src_mask must be torch.bool (True = real token), got {mask.dtype}")
        if mask.shape != ids.shape:
            raise ValueError(f"src_mask must have the shape of src {tuple(ids.shape)}, got {tuple(mask.shape)}")

    def _check_memory(self, memory: Tensor, tgt: Tensor, src_mask: Tensor | None) -> None:
        if memory.dim() != 3 or memory.shape[-1] != self.config.d_model:
            raise ValueError(f"memory must have shape (B, S, {self.config.d_model}), got {tuple(memory.shape)}")
        if memory.shape[0] == 0 or tgt.shape[0] % memory.shape[0] != 0:
            raise ValueError(f"memory has batch size {memory.shape[0]} but tgt has {tgt.shape[0]} "
                             "(tgt rows must equal memory rows, or be a multiple of them when the rows share it)")
        if src_mask is not None and src_mask.shape != memory.shape[:2]:
            raise ValueError(f"src_mask {tuple(src_mask.shape)} does not match memory {tuple(memory.shape[:2])}")

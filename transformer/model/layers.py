"""Feed-forward network, encoder layer and decoder layer (paper sections 3.1 and 3.3).

Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x))) ("Add & Norm", post-LN, as in
the paper). ``norm_first=True`` switches to pre-LN, x + Dropout(Sublayer(LayerNorm(x))), which
trains more stably without warmup; the stacks then end with a final LayerNorm.

Letters: B batch, S source length, T target length, E d_model, H heads.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Callable

import torch.nn.functional as F
from torch import Tensor, nn

from transformer.model.attention import CrossAttention, SelfAttention
from transformer.model.cache import KVCache, StaticKV
from transformer.errors import UserError

_ACTIVATIONS: dict[str, Callable[[Tensor], Tensor]] = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu}


@dataclass(frozen=True)
class LayerSettings:
    """What an encoder or decoder layer is built from: the fields of ``ModelConfig`` of the same names
    (their meanings and ranges are documented there).

    A layer takes a ``LayerSettings``, a ``ModelConfig``, or these fields as keywords
    (``EncoderLayer(d_model=512, n_heads=8, d_ff=2048)``).
    """

    d_model: int
    n_heads: int
    d_ff: int
    dropout: float = 0.1
    attention_dropout: float = 0.0
    activation_dropout: float = 0.0
    activation: str = "relu"
    norm_first: bool = False
    layer_norm_eps: float = 1e-5

    @classmethod
    def given(cls, settings: Any = None, **keywords: Any) -> LayerSettings:
        """``settings`` (a ``LayerSettings`` or anything with these fields, such as a ``ModelConfig``),
        or the fields as keywords."""
        if settings is None:
            return cls(**keywords)
        if keywords:
            raise TypeError(f"give the layer settings or their fields as keywords, not both: {sorted(keywords)}")
        if isinstance(settings, cls):
            return settings
        return cls(**{f.name: getattr(settings, f.name) for f in fields(cls)})


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2, applied to each position alike (paper 3.3)."""

    def __init__(self, *, d_model: int, d_ff: int, activation: str = "relu", dropout: float = 0.0) -> None:
        super().__init__()
        if activation not in _ACTIVATIONS:
            raise UserError(f"unknown activation {activation!r}; choose one of {sorted(_ACTIVATIONS)}")
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.activation = _ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)  # on the hidden activations ("activation dropout")

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (B, L, E)


class AddNorm(nn.Module):
    """One "Add & Norm" wrapper around a sub-layer (paper 3.1, 5.4), post-LN or pre-LN."""

    def __init__(self, *, d_model: int, dropout: float, norm_first: bool, eps: float) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d_model, eps=eps)
        self.dropout = nn.Dropout(dropout)  # residual dropout, on the sub-layer's output
        self.norm_first = norm_first

    def pre(self, x: Tensor) -> Tensor:
        """What the sub-layer sees."""
        return self.norm(x) if self.norm_first else x

    def post(self, x: Tensor, sublayer_out: Tensor) -> Tensor:
        """The residual sum (normalised afterwards in post-LN)."""
        y = x + self.dropout(sublayer_out)
        return y if self.norm_first else self.norm(y)


def _feed_forward(s: LayerSettings) -> FeedForward:
    return FeedForward(d_model=s.d_model, d_ff=s.d_ff, activation=s.activation, dropout=s.activation_dropout)


def _add_norm(s: LayerSettings) -> AddNorm:
    return AddNorm(d_model=s.d_model, dropout=s.dropout, norm_first=s.norm_first, eps=s.layer_norm_eps)


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each with residual + LayerNorm (paper 3.1, encoder)."""

    def __init__(self, settings: Any = None, **keywords: Any) -> None:
        """``settings``: a ``LayerSettings`` or a ``ModelConfig``; or the fields of ``LayerSettings`` as keywords."""
        super().__init__()
        s = LayerSettings.given(settings, **keywords)
        self.self_attn = SelfAttention(d_model=s.d_model, n_heads=s.n_heads, dropout=s.attention_dropout)
        self.ffn = _feed_forward(s)
        self.attn_block = _add_norm(s)
        self.ffn_block = _add_norm(s)

    def forward(
        self, x: Tensor, *, mask: Tensor | None = None, need_weights: bool = False
    ) -> tuple[Tensor, Tensor | None]:
        """x ``(B, S, E)``, mask bool broadcastable to ``(B, H, S, S)`` -> ``(x, weights (B, H, S, S) or None)``."""
        attn_out, weights = self.self_attn(self.attn_block.pre(x), mask=mask, need_weights=need_weights)
        x = self.attn_block.post(x, attn_out)
        x = self.ffn_block.post(x, self.ffn(self.ffn_block.pre(x)))
        return x, weights


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, feed-forward (paper 3.1, decoder)."""

    def __init__(self, settings: Any = None, **keywords: Any) -> None:
        """``settings``: a ``LayerSettings`` or a ``ModelConfig``; or the fields of ``LayerSettings`` as keywords."""
        super().__init__()
        s = LayerSettings.given(settings, **keywords)
        self.self_attn = SelfAttention(d_model=s.d_model, n_heads=s.n_heads, dropout=s.attention_dropout)
        self.cross_attn = CrossAttention(d_model=s.d_model, n_heads=s.n_heads, dropout=s.attention_dropout)
        self.ffn = _feed_forward(s)
        self.self_block = _add_norm(s)
        self.cross_block = _add_norm(s)
        self.ffn_block = _add_norm(s)

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None,
        *,
        memory_mask: Tensor | None = None,
        self_cache: KVCache | None = None,
        memory_kv: StaticKV | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None, Tensor | None]:
        """x ``(B, T, E)`` attends causally to itself (and to ``self_cache``) and to ``memory`` ``(B, S, E)``.

        Returns ``(x, self weights (B, H, T, T') or None, cross weights (B, H, T, S) or None)``.
        """
        self_out, self_w = self.self_attn(
            self.self_block.pre(x), causal=True, cache=self_cache, need_weights=need_weights
        )
        x = self.self_block.post(x, self_out)
        cross_out, cross_w = self.cross_attn(
            self.cross_block.pre(x), memory, mask=memory_mask, memory_kv=memory_kv, need_weights=need_weights
        )
        x = self.cross_block.post(x, cross_out)
        x = self.ffn_block.post(x, self.ffn(self.ffn_block.pre(x)))
        return x, self_w, cross_w

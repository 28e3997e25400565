"""Token embeddings and positional encodings (paper sections 3.4 and 3.5).

Self-attention alone treats its input as a set; positions are added to the embeddings so the
model can use order. The paper's sinusoids

    PE(pos, 2i)   = sin(pos / 10000^(2i / d_model))
    PE(pos, 2i+1) = cos(pos / 10000^(2i / d_model))

are unique per position, bounded in [-1, 1], deterministic, defined for any length, and
PE(pos + k) is a fixed linear map (a rotation per frequency) of PE(pos) for every pos.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from torch.nn import Dropout

from transformer.errors import UserError


def sinusoidal_table(n_positions: int, d_model: int, *, layout: str = "interleaved") -> Tensor:
    """The ``(n_positions, d_model)`` float32 table of paper 3.5.

    ``layout="interleaved"`` puts sin on even and cos on odd dimensions (the paper);
    ``"concat"`` puts all sines first, then all cosines (Marian / tensor2tensor).
    """
    if d_model % 2 != 0:
        raise UserError(f"sinusoidal positions need an even d_model, got {d_model}")
    position = torch.arange(n_positions, dtype=torch.float64).unsqueeze(1)  # (P, 1)
    inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    angles = position * inv_freq  # (P, E/2)
    table = torch.empty(n_positions, d_model, dtype=torch.float64)
    if layout == "interleaved":
        table[:, 0::2], table[:, 1::2] = torch.sin(angles), torch.cos(angles)
    elif layout == "concat":
        half = d_model // 2
        table[:, :half], table[:, half:] = torch.sin(angles), torch.cos(angles)
    else:
        raise UserError(f"unknown sinusoid layout {layout!r}; use 'interleaved' or 'concat'")
    return table.float()


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoidal positions; the table is computed once and extended on demand."""

    def __init__(self, d_model: int, *, layout: str = "interleaved", initial_positions: int = 512) -> None:
        super().__init__()
        self.d_model, self.layout = d_model, layout
        # Not persistent: the table is a function of the config, never stored in a checkpoint.
        self.register_buffer("table", sinusoidal_table(initial_positions, d_model, layout=layout), persistent=False)

    def forward(self, length: int, *, offset: int = 0) -> Tensor:
        """Encodings of positions ``offset .. offset + length - 1`` as ``(length, E)``."""
        end = offset + length
        if end > self.table.shape[0]:
            grown = max(end, 2 * self.table.shape[0])
            self.table = sinusoidal_table(grown, self.d_model, layout=self.layout).to(self.table)  # device, dtype
        return self.table[offset:end]


class LearnedPositionalEncoding(nn.Module):
    """A learned table of ``max_positions`` position vectors (the paper's alternative, Table 3 (E))."""

    def __init__(self, max_positions: int, d_model: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(max_positions, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)

    def forward(self, length: int, *, offset: int = 0) -> Tensor:
        end = offset + length
        if end > self.weight.shape[0]:
            raise UserError(
                f"sequence needs position {end - 1} but the learned position table has only "
                f"{self.weight.shape[0]} positions (max_positions); shorten the input or use sinusoidal positions"
            )
        return self.weight[offset:end]


class TokenEmbedding(nn.Module):
    """Token ids -> vectors, multiplied by sqrt(d_model) (paper 3.4)."""

    def __init__(self, vocab_size: int, d_model: int, *, scale: bool = True) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(vocab_size, d_model))
        nn.init.normal_(self.weight, std=d_model**-0.5)
        self.scale = math.sqrt(d_model) if scale else 1.0

    def forward(self, ids: Tensor) -> Tensor:
        """ids ``(B, L)`` long -> ``(B, L, E)``."""
        return nn.functional.embedding(ids, self.weight) * self.scale


class InputEmbedding(nn.Module):
    """Token embedding + positional encoding, then dropout (paper 3.4, 3.5 and 5.4)."""

    def __init__(self, tokens: TokenEmbedding, positions: nn.Module, *, dropout: float) -> None:
        super().__init__()
        self.tokens, self.positions = tokens, positions
        self.dropout = Dropout(dropout)

    def forward(self, ids: Tensor, *, offset: int = 0) -> Tensor:
        x = self.tokens(ids)  # (B, L, E)
        return self.dropout(x + self.positions(ids.shape[1], offset=offset).to(x.dtype))

"""The one mask convention of the package: boolean tensors, ``True`` = may attend.

Every mask in the code base is built here. Attention functions take a boolean mask that
broadcasts to the score matrix ``(B, H, T, S)``; where a library uses the opposite
convention (``torch.nn.MultiheadAttention``'s ``key_padding_mask``: True = ignore), the
conversion is written out at that boundary.

Letters: B batch, S source length, T target length, H heads.
"""

from __future__ import annotations

import torch
from torch import Tensor


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """Key-padding mask ``(B, L)``: True where ``ids`` holds a real token (not ``pad_id``)."""
    if ids.dim() != 2:
        raise ValueError(f"padding_mask expects token ids of shape (B, L), got {tuple(ids.shape)}")
    return ids != pad_id


def causal_mask(size: int, *, device: torch.device | None = None) -> Tensor:
    """Lower-triangular ``(T, T)`` mask: position t may attend to positions <= t (paper 3.2.3)."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril_()


def causal_mask_with_offset(query_len: int, key_len: int, *, device: torch.device | None = None) -> Tensor:
    """``(T, T_total)`` causal mask for ``query_len`` new queries after ``key_len - query_len`` cached keys."""
    offset = key_len - query_len
    rows = torch.arange(query_len, device=device).unsqueeze(1) + offset  # (T, 1)
    cols = torch.arange(key_len, device=device).unsqueeze(0)  # (1, T_total)
    return cols <= rows


def key_mask_for_attention(key_mask: Tensor) -> Tensor:
    """Turn a key-padding mask ``(B, S)`` into one that broadcasts to scores ``(B, H, T, S)``."""
    return key_mask[:, None, None, :]

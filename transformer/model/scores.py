"""Attention score functions beyond the Transformer's scaled dot product, and attention pooling.

A score function maps a query and a set of keys to unnormalised scores; a (masked) softmax
turns them into weights, and the weighted sum of the values is the context vector.

- additive: ``v^T tanh(W q + U h)``  (Bahdanau, Cho & Bengio 2015, "Neural Machine Translation
  by Jointly Learning to Align and Translate", eq. 6 / appendix A.1.2)
- dot: ``q . h``; "general" bilinear: ``h^T W q``  (Luong, Pham & Manning 2015, "Effective
  Approaches to Attention-based Neural Machine Translation", section 3.1)
- scaled dot: ``q . h / sqrt(d)``  (Vaswani et al. 2017, section 3.2.1)
- reduced-rank bilinear: ``(h U)(V q)``, the bilinear matrix factorised as ``W = U V`` of rank r

Shapes are always 3-D: query ``(B, T, Dq)``, keys ``(B, S, Dk)``, scores ``(B, T, S)``. A single
query per batch element (one RNN decoder step) is passed as ``(B, 1, Dq)``; there is no 2-D form.
Masks follow ``transformer.model.masks``: boolean, True = may attend.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from transformer.errors import UserError


def _check_3d(name: str, t: Tensor, expected: str) -> None:
    if t.dim() != 3:
        raise ValueError(f"{name} must have shape {expected}, got {tuple(t.shape)}")


class AttentionScore(nn.Module):
    """Base class: ``forward(query (B, T, Dq), keys (B, S, Dk)) -> scores (B, T, S)``.

    ``forward`` checks the shapes, then calls ``score``, which subclasses implement.
    ``query_dim`` / ``key_dim`` are None where the function has no fixed input size.
    """

    query_dim: int | None = None
    key_dim: int | None = None

    def forward(self, query: Tensor, keys: Tensor) -> Tensor:
        _check_3d("query", query, "(B, T, Dq)")
        _check_3d("keys", keys, "(B, S, Dk)")
        if query.shape[0] != keys.shape[0]:
            raise ValueError(f"batch sizes differ: query {tuple(query.shape)}, keys {tuple(keys.shape)}")
        if self.query_dim is not None and query.shape[-1] != self.query_dim:
            raise ValueError(f"query must have shape (B, T, {self.query_dim}), got {tuple(query.shape)}")
        if self.key_dim is not None and keys.shape[-1] != self.key_dim:
            raise ValueError(f"keys must have shape (B, S, {self.key_dim}), got {tuple(keys.shape)}")
        return self.score(query, keys)  # (B, T, S)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        """Unnormalised scores ``(B, T, S)``; each score function (subclass) defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define score(query, keys)")


class AdditiveScore(AttentionScore):
    """Bahdanau et al. (2015): ``score(q, h) = v^T tanh(W q + U h)``, no biases (as in the paper)."""

    def __init__(self, *, query_dim: int, key_dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.query_dim, self.key_dim, self.hidden_dim = query_dim, key_dim, hidden_dim
        self.W = nn.Linear(query_dim, hidden_dim, bias=False)  # weight (H, Dq)
        self.U = nn.Linear(key_dim, hidden_dim, bias=False)  # weight (H, Dk)
        self.v = nn.Linear(hidden_dim, 1, bias=False)  # weight (1, H)

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        wq = self.W(query)  # (B, T, H)
        uh = self.U(keys)  # (B, S, H)
        energy = torch.tanh(wq.unsqueeze(2) + uh.unsqueeze(1))  # (B, T, S, H)
        return self.v(energy).squeeze(-1)  # (B, T, S)


class DotScore(AttentionScore):
    """Luong et al. (2015) "dot": ``q . h``; with ``scaled=True``, ``q . h / sqrt(d)`` (Vaswani et al.)."""

    def __init__(self, *, scaled: bool = False) -> None:
        super().__init__()
        self.scaled = scaled

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        if query.shape[-1] != keys.shape[-1]:
            raise ValueError(
                f"dot scores need query_dim == key_dim, got query {tuple(query.shape)}, keys {tuple(keys.shape)}"
            )
        scores = query @ keys.transpose(1, 2)  # (B, T, S)
        return scores / math.sqrt(keys.shape[-1]) if self.scaled else scores

    def extra_repr(self) -> str:
        return f"scaled={self.scaled}"


class BilinearScore(AttentionScore):
    """Luong et al. (2015) "general": ``score(q, h) = h^T W q`` with ``W`` of shape (Dk, Dq)."""

    def __init__(self, *, query_dim: int, key_dim: int) -> None:
        super().__init__()
        self.query_dim, self.key_dim = query_dim, key_dim
        self.W = nn.Linear(query_dim, key_dim, bias=False)  # weight is W, (Dk, Dq)

    def matrix(self) -> Tensor:
        """The bilinear matrix ``W`` (Dk, Dq)."""
        return self.W.weight

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.W(query) @ keys.transpose(1, 2)  # (B, T, Dk) @ (B, Dk, S) -> (B, T, S)


class LowRankBilinearScore(AttentionScore):
    """Reduced-rank bilinear: ``score(q, h) = (h U) . (V q)``, i.e. ``h^T W q`` with ``W = U V``.

    ``U`` is (Dk, r) and ``V`` is (r, Dq); r << Dq, Dk costs r (Dq + Dk) parameters instead of Dq Dk.
    """

    def __init__(self, *, query_dim: int, key_dim: int, rank: int) -> None:
        super().__init__()
        self.query_dim, self.key_dim, self.rank = query_dim, key_dim, rank
        self.U = nn.Linear(key_dim, rank, bias=False)  # weight (r, Dk) = U^T
        self.V = nn.Linear(query_dim, rank, bias=False)  # weight (r, Dq) = V

    def matrix(self) -> Tensor:
        """The equivalent full bilinear matrix ``W = U V`` (Dk, Dq), of rank <= r."""
        return self.U.weight.T @ self.V.weight

    def score(self, query: Tensor, keys: Tensor) -> Tensor:
        return self.V(query) @ self.U(keys).transpose(1, 2)  # (B, T, r) @ (B, r, S) -> (B, T, S)


SCORE_FUNCTIONS: dict[str, type] = {
    "additive": AdditiveScore,
    "dot": DotScore,
    "scaled_dot": DotScore,
    "bilinear": BilinearScore,
    "low_rank_bilinear": LowRankBilinearScore,
}


def build_score(
    name: str, *, query_dim: int, key_dim: int, hidden_dim: int | None = None, rank: int | None = None
) -> AttentionScore:
    """Build a score function by name. ``hidden_dim`` (additive) defaults to ``key_dim``; ``rank`` is required."""
    if name not in SCORE_FUNCTIONS:
        raise UserError(f"unknown score function {name!r}; valid names: {', '.join(SCORE_FUNCTIONS)}")
    if hidden_dim is not None and name != "additive":
        raise UserError(f"hidden_dim only applies to 'additive', not {name!r}")
    if rank is not None and name != "low_rank_bilinear":
        raise UserError(f"rank only applies to 'low_rank_bilinear', not {name!r}")
    if name == "additive":
        return AdditiveScore(query_dim=query_dim, key_dim=key_dim, hidden_dim=hidden_dim or key_dim)
    if name in ("dot", "scaled_dot"):
        if query_dim != key_dim:
            raise UserError(f"{name!r} needs query_dim == key_dim, got {query_dim} and {key_dim}")
        return DotScore(scaled=name == "scaled_dot")
    if name == "bilinear":
        return BilinearScore(query_dim=query_dim, key_dim=key_dim)
    if rank is None:
        raise UserError("'low_rank_bilinear' needs rank=r")
    return LowRankBilinearScore(query_dim=query_dim, key_dim=key_dim, rank=rank)


def attend(scores: Tensor, values: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
    """Masked softmax over the keys, then the weighted sum of the values.

    scores (B, T, S), values (B, S, Dv), mask bool (B or 1, T or 1, S) with True = may attend
    (e.g. a (B, 1, S) key-padding mask) -> context (B, T, Dv), weights (B, T, S).
    Masked keys get weight exactly 0; a row with no allowed key gets zero weights and a zero
    context, with finite gradients (finite fill value, then multiply by the mask; no -inf).
    """
    _check_3d("scores", scores, "(B, T, S)")
    _check_3d("values", values, "(B, S, Dv)")
    B, T, S = scores.shape
    if values.shape[:2] != (B, S):
        raise ValueError(f"values must have shape ({B}, {S}, Dv) to match scores {(B, T, S)}, got {tuple(values.shape)}")
    if mask is not None:
        if mask.dtype != torch.bool:
            raise ValueError(f"mask must be a bool tensor (True = may attend), got {mask.dtype}")
        if mask.dim() != 3 or any(m not in (1, n) for m, n in zip(mask.shape, (B, T, S))):
            raise ValueError(
                f"mask must broadcast to scores {(B, T, S)}, e.g. ({B}, 1, {S}) for key padding, got {tuple(mask.shape)}"
            )
        scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    weights = torch.softmax(scores, dim=-1)  # (B, T, S)
    if mask is not None:
        weights = weights * mask  # exact zeros at masked keys and in rows with no allowed key
    return weights @ values, weights  # (B, T, Dv), (B, T, S)


class AttentionPooling(nn.Module):
    """Pool a sequence (B, S, D) into one vector (B, D): attention with a single learned query.

    The query (D,) is scored against every position with the chosen score function; the pooled
    vector is the attention-weighted sum of the positions. Padded positions (mask False) are ignored.
    """

    def __init__(
        self, *, input_dim: int, score: str = "scaled_dot", hidden_dim: int | None = None, rank: int | None = None
    ) -> None:
        super().__init__()
        self.input_dim = input_dim
        self.query = nn.Parameter(torch.randn(input_dim) / math.sqrt(input_dim))  # (D,)
        self.score = build_score(score, query_dim=input_dim, key_dim=input_dim, hidden_dim=hidden_dim, rank=rank)

    def forward(self, x: Tensor, mask: Tensor | None = None) -> tuple[Tensor, Tensor]:
        _check_3d("x", x, f"(B, S, {self.input_dim})")
        B, S, D = x.shape
        if D != self.input_dim:
            raise ValueError(f"x must have shape (B, S, {self.input_dim}), got {tuple(x.shape)}")
        if mask is not None:
            if mask.dtype != torch.bool:
                raise ValueError(f"mask must be a bool tensor (True = real position), got {mask.dtype}")
            if mask.shape != (B, S):
                raise ValueError(f"mask must have shape ({B}, {S}), got {tuple(mask.shape)}")
            mask = mask.unsqueeze(1)  # (B, 1, S)
        query = self.query.expand(B, 1, D)  # (B, 1, D)
        pooled, weights = attend(self.score(query, x), x, mask)  # (B, 1, D), (B, 1, S)
        return pooled.squeeze(1), weights.squeeze(1)  # (B, D), (B, S)

"""Attention score functions, masked ``attend`` and attention pooling (transformer/model/scores.py).

Reference computations loop over positions with plain matrix-vector products and ``torch.dot``
in float64, using the module's own weights.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from transformer.model.scores import (
    SCORE_FUNCTIONS,
    AdditiveScore,
    AttentionPooling,
    BilinearScore,
    DotScore,
    LowRankBilinearScore,
    attend,
    build_score,
)

B, T, S, DQ, DK, H = 2, 3, 5, 4, 6, 7


@pytest.fixture(autouse=True)
def _one_thread():
    """All tensors here are tiny: one intra-op thread keeps the tests fast even on a busy machine."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _inputs(dq: int = DQ, dk: int = DK) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(B, T, dq, generator=g, dtype=torch.float64), torch.randn(B, S, dk, generator=g, dtype=torch.float64)


def _loop(fn, query: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    out = torch.empty(query.shape[0], query.shape[1], keys.shape[1], dtype=torch.float64)
    for b in range(query.shape[0]):
        for t in range(query.shape[1]):
            for s in range(keys.shape[1]):
                out[b, t, s] = fn(query[b, t], keys[b, s])
    return out


# ---- score functions against explicit formulas --------------------------------------------------


def test_additive_matches_formula() -> None:
    score = AdditiveScore(query_dim=DQ, key_dim=DK, hidden_dim=H).double()
    q, k = _inputs()
    W, U, v = score.W.weight, score.U.weight, score.v.weight[0]  # (H, Dq), (H, Dk), (H,)
    expected = _loop(lambda qi, hj: torch.dot(v, torch.tanh(W @ qi + U @ hj)), q, k)
    torch.testing.assert_close(score(q, k), expected)


@pytest.mark.parametrize("scaled", [False, True])
def test_dot_matches_formula(scaled: bool) -> None:
    q, k = _inputs(DK, DK)
    div = math.sqrt(DK) if scaled else 1.0
    expected = _loop(lambda qi, hj: torch.dot(qi, hj) / div, q, k)
    torch.testing.assert_close(DotScore(scaled=scaled)(q, k), expected)


def test_bilinear_matches_formula() -> None:
    score = BilinearScore(query_dim=DQ, key_dim=DK).double()
    q, k = _inputs()
    W = score.matrix()
    assert W.shape == (DK, DQ)
    torch.testing.assert_close(score(q, k), _loop(lambda qi, hj: torch.dot(hj, W @ qi), q, k))


def test_low_rank_bilinear_matches_formula_and_full_bilinear() -> None:
    score = LowRankBilinearScore(query_dim=DQ, key_dim=DK, rank=2).double()
    q, k = _inputs()
    U, V = score.U.weight.T, score.V.weight  # (Dk, r), (r, Dq)
    expected = _loop(lambda qi, hj: torch.dot(hj @ U, V @ qi), q, k)
    torch.testing.assert_close(score(q, k), expected)
    full = BilinearScore(query_dim=DQ, key_dim=DK).double()
    torch.testing.assert_close(score.matrix(), U @ V)
    with torch.no_grad():
        full.W.weight.copy_(score.matrix())
    torch.testing.assert_close(score(q, k), full(q, k))
    assert torch.linalg.matrix_rank(score.matrix()) == 2


def test_dot_requires_equal_dims() -> None:
    q, k = _inputs(DQ, DK)
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        DotScore()(q, k)
    with pytest.raises(ValueError, match="query_dim == key_dim"):
        build_score("scaled_dot", query_dim=DQ, key_dim=DK)


@pytest.mark.parametrize("name", list(SCORE_FUNCTIONS))
def test_shapes_and_input_checks(name: str) -> None:
    rank = 2 if name == "low_rank_bilinear" else None
    score = build_score(name, query_dim=DK, key_dim=DK, rank=rank).double()
    q, k = _inputs(DK, DK)
    assert score(q, k).shape == (B, T, S)
    assert score(q[:, :1], k).shape == (B, 1, S)  # one RNN decoder step
    with pytest.raises(ValueError, match=r"\(B, T, Dq\)"):
        score(q[:, 0], k)  # 2-D query is not accepted
    with pytest.raises(ValueError, match=r"\(B, S, Dk\)"):
        score(q, k[0])
    with pytest.raises(ValueError, match="batch sizes differ"):
        score(q[:1], k)
    with pytest.raises(ValueError, match="query"):
        score(q[..., :-1], k)  # query dim does not fit (dot: differs from the key dim)
    if name not in ("dot", "scaled_dot"):
        with pytest.raises(ValueError, match=rf"keys must have shape \(B, S, {DK}\)"):
            score(q, k[..., :-1])


def test_build_score_errors() -> None:
    with pytest.raises(ValueError, match="valid names: additive, dot, scaled_dot, bilinear, low_rank_bilinear"):
        build_score("cosine", query_dim=4, key_dim=4)
    with pytest.raises(ValueError, match="rank"):
        build_score("low_rank_bilinear", query_dim=4, key_dim=4)
    with pytest.raises(ValueError, match="hidden_dim"):
        build_score("dot", query_dim=4, key_dim=4, hidden_dim=8)
    assert isinstance(build_score("additive", query_dim=3, key_dim=4), AdditiveScore)
    assert build_score("scaled_dot", query_dim=4, key_dim=4).scaled
    assert not build_score("dot", query_dim=4, key_dim=4).scaled


# ---- attend ---------------------------------------------------------------------------------------


def _mask() -> torch.Tensor:
    mask = torch.ones(B, T, S, dtype=torch.bool)
    mask[0, :, 3:] = False  # key padding in batch element 0
    mask[1, 1, :] = False  # one row with no allowed key
    return mask


def test_attend_weights_and_context() -> None:
    g = torch.Generator().manual_seed(1)
    scores, values = torch.randn(B, T, S, generator=g), torch.randn(B, S, 4, generator=g)
    context, weights = attend(scores, values)
    torch.testing.assert_close(weights.sum(-1), torch.ones(B, T))
    torch.testing.assert_close(weights, torch.softmax(scores, -1))
    torch.testing.assert_close(context, torch.einsum("bts,bsd->btd", weights, values))


def test_attend_mask_zero_weights_and_all_masked_row() -> None:
    g = torch.Generator().manual_seed(2)
    scores = torch.randn(B, T, S, generator=g, requires_grad=True)
    values = torch.randn(B, S, 4, generator=g, requires_grad=True)
    mask = _mask()
    context, weights = attend(scores, values, mask)
    assert torch.all(weights[~mask] == 0)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(T))
    assert torch.all(weights[1, 1] == 0) and torch.all(context[1, 1] == 0)
    torch.testing.assert_close(weights[1, 0].sum(), torch.tensor(1.0))
    (context.sum() + weights.pow(2).sum()).backward()
    assert torch.isfinite(scores.grad).all() and torch.isfinite(values.grad).all()
    assert torch.all(scores.grad[1, 1] == 0) and torch.all(scores.grad[~mask] == 0)


def test_attend_key_padding_mask_broadcasts() -> None:
    g = torch.Generator().manual_seed(3)
    scores, values = torch.randn(B, T, S, generator=g), torch.randn(B, S, 4, generator=g)
    key_mask = torch.tensor([[True, True, False, True, False], [True] * S])[:, None, :]  # (B, 1, S)
    _, weights = attend(scores, values, key_mask)
    _, weights_full = attend(scores, values, key_mask.expand(B, T, S))
    torch.testing.assert_close(weights, weights_full)
    assert torch.all(weights[0, :, [2, 4]] == 0)


def test_attend_input_checks() -> None:
    scores, values = torch.zeros(B, T, S), torch.zeros(B, S, 4)
    with pytest.raises(ValueError, match="bool"):
        attend(scores, values, torch.ones(B, T, S))
    with pytest.raises(ValueError, match=r"\(2, 1, 5\)"):
        attend(scores, values, torch.ones(B, S, dtype=torch.bool))  # (B, S) must be given as (B, 1, S)
    with pytest.raises(ValueError, match="mask must broadcast"):
        attend(scores, values, torch.ones(B, T, S + 1, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"values must have shape \(2, 5, Dv\)"):
        attend(scores, values[:, :-1])
    with pytest.raises(ValueError, match=r"scores must have shape \(B, T, S\)"):
        attend(scores[0], values)


def test_gradcheck_attend_with_additive() -> None:
    score = AdditiveScore(query_dim=DQ, key_dim=DK, hidden_dim=H).double()
    q, k = _inputs()
    values = torch.randn(B, S, 3, dtype=torch.float64)
    mask = _mask()

    def fn(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return attend(score(q, k), v, mask)

    args = (q.requires_grad_(), k.requires_grad_(), values.requires_grad_())
    assert torch.autograd.gradcheck(fn, args)


def test_lecture_worked_example_dot_scores() -> None:
    W_K = torch.tensor([[10.0, 0.0], [0.0, 10.0]])
    W_Q = torch.tensor([[0.0, 1.0], [0.0, 1.0]])
    E = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [1.0, 0.0]])  # tokens A A B A
    q, k = (E @ W_Q)[None], (E @ W_K)[None]  # (1, 4, 2)
    _, weights = attend(DotScore()(q, k), k)
    assert torch.all(weights[0, :, 2] > 0.99)


# ---- attention pooling ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(SCORE_FUNCTIONS))
def test_pooling_ignores_masked_positions(name: str) -> None:
    torch.manual_seed(0)
    pool = AttentionPooling(input_dim=4, score=name, rank=2 if name == "low_rank_bilinear" else None)
    x = torch.randn(2, 6, 4)
    mask = torch.tensor([[True] * 4 + [False] * 2, [True] * 6])
    pooled, weights = pool(x, mask)
    assert pooled.shape == (2, 4) and weights.shape == (2, 6)
    assert torch.all(weights[0, 4:] == 0)
    x2 = x.clone()
    x2[0, 4:] = 100 * torch.randn(2, 4)
    pooled2, weights2 = pool(x2, mask)
    torch.testing.assert_close(pooled2, pooled)
    torch.testing.assert_close(weights2, weights)


def test_pooling_input_checks() -> None:
    pool = AttentionPooling(input_dim=4)
    x = torch.randn(2, 6, 4)
    with pytest.raises(ValueError, match=r"\(B, S, 4\)"):
        pool(x[0])
    with pytest.raises(ValueError, match=r"\(B, S, 4\)"):
        pool(torch.randn(2, 6, 5))
    with pytest.raises(ValueError, match="bool"):
        pool(x, torch.ones(2, 6))
    with pytest.raises(ValueError, match=r"\(2, 6\)"):
        pool(x, torch.ones(2, 1, 6, dtype=torch.bool))


def _marked_batch(g: torch.Generator, batch: int, length: int = 8, dim: int = 6):
    """Random content vectors plus a flag feature marking one position; target = that content."""
    content = torch.randn(batch, length, dim, generator=g)
    pos = torch.randint(0, length, (batch,), generator=g)
    flag = torch.zeros(batch, length, 1)
    flag[torch.arange(batch), pos, 0] = 1.0
    return torch.cat([content, flag], -1), content[torch.arange(batch), pos], pos


@pytest.mark.parametrize("name", list(SCORE_FUNCTIONS))
def test_pooling_learns_to_find_marked_token(name: str) -> None:
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    pool = AttentionPooling(input_dim=7, score=name, rank=2 if name == "low_rank_bilinear" else None)
    head = nn.Linear(7, 6)
    opt = torch.optim.Adam([*pool.parameters(), *head.parameters()], lr=0.05)
    for _ in range(600):
        x, y, _ = _marked_batch(g, 64)
        loss = (head(pool(x)[0]) - y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    x, y, pos = _marked_batch(torch.Generator().manual_seed(123), 256)
    with torch.no_grad():
        pooled, weights = pool(x)
        test_loss = (head(pooled) - y).pow(2).mean()
    assert test_loss < 0.05  # predicting the mean of the content would give ~1
    assert weights[torch.arange(256), pos].mean() > 0.8

"""Scaled dot-product attention and multi-head attention against independent references."""

import math

import pytest
import torch
from torch import nn

from transformer.model.masks import causal_mask, causal_mask_with_offset
from transformer.model.attention import CrossAttention, SelfAttention, scaled_dot_product_attention


def reference_attention(q, k, v, mask=None):
    """softmax(Q K^T / sqrt(d_k)) V written out per query row, in float64."""
    B, H, T, D = q.shape
    S = k.shape[2]
    out = torch.zeros(B, H, T, v.shape[-1], dtype=torch.float64)
    weights = torch.zeros(B, H, T, S, dtype=torch.float64)
    full = mask.expand(B, H, T, S) if mask is not None else torch.ones(B, H, T, S, dtype=torch.bool)
    for b in range(B):
        for h in range(H):
            for t in range(T):
                allowed = full[b, h, t]
                if not allowed.any():
                    continue
                scores = torch.tensor([float(q[b, h, t] @ k[b, h, s]) / math.sqrt(D) for s in range(S)], dtype=torch.float64)
                scores[~allowed] = float("-inf")
                w = torch.softmax(scores, dim=0)
                weights[b, h, t] = w
                out[b, h, t] = w @ v[b, h].double()
    return out, weights


@pytest.fixture
def qkv():
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 3, 4, 8, generator=g)
    k = torch.randn(2, 3, 6, 8, generator=g)
    v = torch.randn(2, 3, 6, 5, generator=g)
    return q, k, v


def padding_with_empty_row():
    mask = torch.ones(2, 1, 4, 6, dtype=torch.bool)
    mask[0, :, :, 4:] = False  # padding in the first sentence
    mask[1, :, 2, :] = False  # one query row with every key masked
    return mask


@pytest.mark.parametrize("need_weights", [False, True])
def test_matches_written_out_formula(qkv, need_weights):
    q, k, v = qkv
    mask = padding_with_empty_row()
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=need_weights)
    ref_out, ref_w = reference_attention(q.double(), k.double(), v.double(), mask)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(weights.double(), ref_w, atol=1e-6, rtol=1e-6)
    else:
        assert weights is None


PATH_CASES = {  # T queries, S keys, causal, mask: None, "keys" (B, 1, 1, S) or "rows" (B, 1, T, S) with empty rows
    "one query": (1, 6, False, None),
    "one query, causal, padded": (1, 6, True, "keys"),
    "four queries": (4, 6, False, None),
    "four queries, empty rows": (4, 6, False, "rows"),
    "causal": (4, 4, True, None),
    "causal, padded": (4, 4, True, "keys"),
    "causal after cached keys": (4, 9, True, None),
    "causal after cached keys, empty rows": (4, 9, True, "rows"),
    "long rows, padded": (40, 40, False, "keys"),
}


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", list(PATH_CASES))
def test_the_two_paths_agree_with_each_other_and_the_formula(case, dtype):
    """need_weights=False (PyTorch's fused kernel) and need_weights=True (written out, returning
    the weights) give the float64 formula's output and each other's gradients."""
    T, S, causal, mask_kind = PATH_CASES[case]
    g = torch.Generator().manual_seed(T * 100 + S)
    q, k, v = (torch.randn(2, 3, n, 8, generator=g).to(dtype) for n in (T, S, S))
    mask = None
    if mask_kind == "keys":
        mask = torch.ones(2, 1, 1, S, dtype=torch.bool)
        mask[0, ..., S - 2:] = False
    elif mask_kind == "rows":
        mask = torch.rand(2, 1, T, S, generator=g) > 0.3
        mask[1, :, T // 2] = False  # a query row that sees no key
    allowed = mask if mask is not None else torch.ones(1, 1, T, S, dtype=torch.bool)
    if causal:
        allowed = allowed & causal_mask_with_offset(T, S)
    ref_out, ref_w = reference_attention(q.double(), k.double(), v.double(), allowed)
    tol = {torch.float64: dict(atol=1e-10, rtol=1e-10), torch.float32: dict(atol=1e-5, rtol=1e-5),
           torch.bfloat16: dict(atol=2e-2, rtol=2e-2)}[dtype]
    results = []
    for need_weights in (False, True):
        qq, kk, vv = (t.clone().requires_grad_() for t in (q, k, v))
        out, w = scaled_dot_product_attention(qq, kk, vv, mask=mask, causal=causal, need_weights=need_weights)
        assert out.dtype == dtype and (w is None) != need_weights
        torch.testing.assert_close(out.double(), ref_out, **tol)
        if need_weights:
            assert w.dtype == dtype
            torch.testing.assert_close(w.double(), ref_w, **tol)
        out.float().square().sum().backward()
        results.append([t.grad.double() for t in (qq, kk, vv)])
    for fused_grad, explicit_grad in zip(*results):
        torch.testing.assert_close(fused_grad, explicit_grad, **tol)


@pytest.mark.parametrize("need_weights", [False, True])
def test_fully_masked_rows_give_zeros_and_finite_gradients(qkv, need_weights):
    q, k, v = (t.clone().requires_grad_() for t in qkv)
    mask = padding_with_empty_row()
    out, weights = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=need_weights)
    assert torch.isfinite(out).all()
    assert torch.equal(out[1, :, 2], torch.zeros_like(out[1, :, 2]))
    if need_weights:
        assert torch.equal(weights[1, :, 2], torch.zeros_like(weights[1, :, 2]))
        # every other row is a distribution
        rows = weights.sum(-1)
        rows[1, :, 2] = 1
        torch.testing.assert_close(rows, torch.ones_like(rows))
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()
    assert torch.equal(q.grad[1, :, 2], torch.zeros_like(q.grad[1, :, 2]))


def test_masked_keys_get_exactly_zero_weight(qkv):
    q, k, v = qkv
    mask = padding_with_empty_row()
    _, weights = scaled_dot_product_attention(q, k, v, mask=mask, need_weights=True)
    assert torch.count_nonzero(weights[0, :, :, 4:]) == 0


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("need_weights", [False, True])
def test_gradcheck_float64(need_weights, causal):
    g = torch.Generator().manual_seed(1)
    q = torch.randn(1, 2, 3, 4, dtype=torch.float64, generator=g, requires_grad=True)
    k = torch.randn(1, 2, 5, 4, dtype=torch.float64, generator=g, requires_grad=True)
    v = torch.randn(1, 2, 5, 3, dtype=torch.float64, generator=g, requires_grad=True)
    mask = torch.ones(1, 1, 3, 5, dtype=torch.bool)
    mask[..., 1] = False  # with causal (3 queries after 2 cached keys) query 0 also loses keys 3 and 4, query 1 key 4
    fn = lambda q, k, v: scaled_dot_product_attention(q, k, v, mask=mask, causal=causal, need_weights=need_weights)[0]
    assert torch.autograd.gradcheck(fn, (q, k, v))


def test_slides_worked_example_scores_112_and_96():
    """q.k1 = 112, q.k2 = 96, d_k = 64: scores / 8 = 14 and 12, softmax = 0.88 and 0.12."""
    q = torch.ones(1, 1, 1, 64)
    k = torch.stack([torch.full((64,), 112 / 64), torch.full((64,), 96 / 64)]).view(1, 1, 2, 64)
    assert float(q[0, 0, 0] @ k[0, 0, 0]) == pytest.approx(112)
    v = torch.eye(2).view(1, 1, 2, 2)
    _, w = scaled_dot_product_attention(q, k, v, need_weights=True)
    assert w[0, 0, 0].tolist() == pytest.approx([0.88, 0.12], abs=0.005)
    assert w[0, 0, 0, 0] == pytest.approx(math.exp(14) / (math.exp(14) + math.exp(12)), rel=1e-6)


def test_slides_worked_example_every_query_attends_to_B():
    """W_K = 10 I, W_Q = [[0, 1], [0, 1]], tokens A A B A: every query attends to the B token."""
    E = torch.tensor([[1.0, 0], [1, 0], [0, 1], [1, 0]])
    W_K = torch.tensor([[10.0, 0], [0, 10]])
    W_Q = torch.tensor([[0.0, 1], [0, 1]])
    q, k = (E @ W_Q).view(1, 1, 4, 2), (E @ W_K).view(1, 1, 4, 2)
    _, w = scaled_dot_product_attention(q, k, k, need_weights=True)
    assert (w[0, 0].argmax(-1) == 2).all()
    assert (w[0, 0, :, 2] > 0.99).all()


def test_why_scale_by_sqrt_dk():
    """With unit-variance components q.k has variance d_k, and softmax(q.k) is nearly one-hot; our
    weights are softmax(q.k / sqrt(d_k)), which is not. Checked on both attention paths."""
    g = torch.Generator().manual_seed(0)
    d_k = 256
    q = torch.randn(1, 1, 400, d_k, dtype=torch.float64, generator=g)  # 400 queries: fused path without weights
    k = torch.randn(1, 1, 10, d_k, dtype=torch.float64, generator=g)
    dots = q[0, 0] @ k[0, 0].T  # (400, 10), computed here, not by the code under test
    assert dots.var().item() == pytest.approx(d_k, rel=0.1)
    assert torch.softmax(dots, -1).max(-1).values.mean() > 0.9  # unscaled: peaked
    v = torch.eye(10, dtype=torch.float64).view(1, 1, 10, 10)  # output row = weight row
    out, w = scaled_dot_product_attention(q, k, v, need_weights=True)
    fused_out, _ = scaled_dot_product_attention(q, k, v)
    # log-weight differences recover the scores: log w_j - log w_0 = (q.k_j - q.k_0) / sqrt(d_k)
    log_w = w[0, 0].log()
    torch.testing.assert_close(log_w - log_w[:, :1], (dots - dots[:, :1]) / math.sqrt(d_k), atol=1e-5, rtol=1e-5)
    for got in (w[0, 0], out[0, 0], fused_out[0, 0]):
        torch.testing.assert_close(got, torch.softmax(dots / math.sqrt(d_k), -1), atol=1e-6, rtol=1e-5)
        assert got.max(-1).values.mean() < 0.6  # scaled: spread over several keys


# --------------------------------------------------------------------------------------------------
# Multi-head attention against torch.nn.MultiheadAttention, weights copied, float64.

def _torch_mha(d_model=16, n_heads=4):
    torch.manual_seed(0)
    return nn.MultiheadAttention(d_model, n_heads, batch_first=True, dtype=torch.float64).eval()


@pytest.mark.parametrize("need_weights", [False, True])
def test_self_attention_matches_torch_mha(need_weights):
    ref = _torch_mha()
    ours = SelfAttention(d_model=16, n_heads=4).double().eval()
    with torch.no_grad():
        ours.qkv_proj.weight.copy_(ref.in_proj_weight)
        ours.qkv_proj.bias.copy_(ref.in_proj_bias)
        ours.out_proj.load_state_dict(ref.out_proj.state_dict())
    x = torch.randn(3, 7, 16, dtype=torch.float64)
    keep = torch.ones(3, 7, dtype=torch.bool)
    keep[0, 5:] = False
    keep[2, 3:] = False
    causal = causal_mask(7)
    # padding + causal: torch's masks say True = ignore
    ref_out, ref_w = ref(x, x, x, key_padding_mask=~keep, attn_mask=~causal, average_attn_weights=False)
    out, w = ours(x, mask=keep[:, None, None, :], causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-6)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-6)
    # padding only
    ref_out, _ = ref(x, x, x, key_padding_mask=~keep)
    out, _ = ours(x, mask=keep[:, None, None, :], need_weights=need_weights)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("need_weights", [False, True])
def test_cross_attention_matches_torch_mha(need_weights):
    ref = _torch_mha()
    ours = CrossAttention(d_model=16, n_heads=4).double().eval()
    with torch.no_grad():
        ours.q_proj.weight.copy_(ref.in_proj_weight[:16])
        ours.q_proj.bias.copy_(ref.in_proj_bias[:16])
        ours.kv_proj.weight.copy_(ref.in_proj_weight[16:])
        ours.kv_proj.bias.copy_(ref.in_proj_bias[16:])
        ours.out_proj.load_state_dict(ref.out_proj.state_dict())
    x = torch.randn(2, 5, 16, dtype=torch.float64)
    memory = torch.randn(2, 9, 16, dtype=torch.float64)
    keep = torch.ones(2, 9, dtype=torch.bool)
    keep[1, 4:] = False
    ref_out, ref_w = ref(x, memory, memory, key_padding_mask=~keep, average_attn_weights=False)
    out, w = ours(x, memory, mask=keep[:, None, None, :], need_weights=need_weights)
    torch.testing.assert_close(out, ref_out, atol=1e-6, rtol=1e-6)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_cross_attention_rows_sharing_a_memory_row_equal_copies_of_it(need_weights, dtype):
    """G consecutive query rows per memory row (beam search) == each row holding its own copy."""
    torch.manual_seed(0)
    attn = CrossAttention(d_model=16, n_heads=4).to(dtype).eval()
    M, G = 3, 4
    x = torch.randn(M * G, 2, 16, dtype=dtype)
    memory = torch.randn(M, 7, 16, dtype=dtype)
    keep = torch.ones(M, 7, dtype=torch.bool)
    keep[1, 3:] = False
    rows = torch.arange(M).repeat_interleave(G)
    with torch.no_grad():
        shared, w_shared = attn(x, memory, mask=keep[:, None, None, :], need_weights=need_weights)
        copies, w_copies = attn(x, memory[rows], mask=keep[rows][:, None, None, :], need_weights=need_weights)
    tol = dict(atol=1e-12, rtol=1e-12) if dtype == torch.float64 else dict(atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(shared, copies, **tol)
    if need_weights:
        torch.testing.assert_close(w_shared, w_copies, **tol)
    with pytest.raises(ValueError, match="cannot share 5 memory rows"):
        attn(x, torch.randn(5, 7, 16, dtype=dtype))


def _head_by_head(x, kv, W_q, b_q, W_k, b_k, W_v, b_v, n_heads, allowed):
    """Each head on its own slice of the projection matrices, attention written out with plain
    matrix products (no code under test): ``(concatenated heads (B, T, E), weights (B, H, T, S))``."""
    B, T, E = x.shape
    D = E // n_heads
    heads, weights = [], []
    for h in range(n_heads):
        rows = slice(h * D, (h + 1) * D)
        q = x @ W_q[rows].T + b_q[rows]  # (B, T, D)
        k = kv @ W_k[rows].T + b_k[rows]  # (B, S, D)
        v = kv @ W_v[rows].T + b_v[rows]
        scores = (q @ k.transpose(1, 2)) / math.sqrt(D)  # (B, T, S)
        scores = scores.masked_fill(~allowed, float("-inf"))
        w = torch.softmax(scores, dim=-1)
        heads.append(w @ v)
        weights.append(w)
    return torch.cat(heads, dim=-1), torch.stack(weights, dim=1)


@pytest.mark.parametrize("need_weights", [False, True])
def test_no_python_loop_over_heads_single_matmul_projection(need_weights):
    """One fused Q/K/V projection for self-attention (separate Q and K/V for cross-attention)
    computing all heads at once: each head's output columns and weights equal that head computed
    on its own slice of the projections. W^O = I exposes the concatenated heads. (A float32-level
    tolerance: a wrong head split, swapped projections or a lost mask are off by > 0.1.)"""
    E, H = 16, 4
    torch.manual_seed(0)
    sa = SelfAttention(d_model=E, n_heads=H).double().eval()
    assert sa.qkv_proj.weight.shape == (3 * E, E)
    ca = CrossAttention(d_model=E, n_heads=H).double().eval()
    assert ca.q_proj.weight.shape == (E, E) and ca.kv_proj.weight.shape == (2 * E, E)
    with torch.no_grad():
        for m in (sa, ca):
            for p in m.parameters():
                p.copy_(torch.randn_like(p) * 0.5)  # non-zero biases as well
            m.out_proj.weight.copy_(torch.eye(E, dtype=torch.float64))
            m.out_proj.bias.zero_()
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2, 5, E, dtype=torch.float64, generator=g)
    memory = torch.randn(2, 7, E, dtype=torch.float64, generator=g)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[1, 4:] = False

    Wq, Wk, Wv = sa.qkv_proj.weight.detach().chunk(3)
    bq, bk, bv = sa.qkv_proj.bias.detach().chunk(3)
    allowed = keep[:, None, :5] & torch.ones(5, 5, dtype=torch.bool).tril()  # padding (first 5 keys) + causal
    ref, ref_w = _head_by_head(x, x, Wq, bq, Wk, bk, Wv, bv, H, allowed)
    with torch.no_grad():
        out, w = sa(x, mask=keep[:, None, None, :5], causal=True, need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)

    Wk, Wv = ca.kv_proj.weight.detach().chunk(2)
    bk, bv = ca.kv_proj.bias.detach().chunk(2)
    ref, ref_w = _head_by_head(x, memory, ca.q_proj.weight.detach(), ca.q_proj.bias.detach(), Wk, bk, Wv, bv, H,
                               keep[:, None, :].expand(2, 5, 7))
    with torch.no_grad():
        out, w = ca(x, memory, mask=keep[:, None, None, :], need_weights=need_weights)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)
    if need_weights:
        torch.testing.assert_close(w, ref_w, atol=1e-5, rtol=1e-5)


def test_bad_inputs_name_the_problem(qkv):
    q, k, v = qkv
    with pytest.raises(ValueError, match="rank 4"):
        scaled_dot_product_attention(q[0], k, v)
    with pytest.raises(ValueError, match="torch.bool"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(2, 1, 4, 6))
    with pytest.raises(ValueError, match="does not broadcast"):
        scaled_dot_product_attention(q, k, v, mask=torch.ones(2, 1, 4, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="floating-point"):
        scaled_dot_product_attention(q.long(), k.long(), v.long())
    sa = SelfAttention(d_model=16, n_heads=4)
    with pytest.raises(ValueError, match=r"\(B, L, 16\)"):
        sa(torch.randn(2, 3, 12))
    with pytest.raises(ValueError, match="divisible"):
        SelfAttention(d_model=10, n_heads=4)

"""Encoder and decoder layers against torch.nn.TransformerEncoderLayer / DecoderLayer, weights copied."""

import pytest
import torch
from torch import nn

from transformer.model.masks import causal_mask
from transformer.model.layers import DecoderLayer, EncoderLayer, FeedForward

E, H, F = 16, 4, 32


def copy_self_attention(ours, ref: nn.MultiheadAttention) -> None:
    ours.qkv_proj.weight.copy_(ref.in_proj_weight)
    ours.qkv_proj.bias.copy_(ref.in_proj_bias)
    ours.out_proj.load_state_dict(ref.out_proj.state_dict())


def copy_cross_attention(ours, ref: nn.MultiheadAttention) -> None:
    ours.q_proj.weight.copy_(ref.in_proj_weight[:E])
    ours.q_proj.bias.copy_(ref.in_proj_bias[:E])
    ours.kv_proj.weight.copy_(ref.in_proj_weight[E:])
    ours.kv_proj.bias.copy_(ref.in_proj_bias[E:])
    ours.out_proj.load_state_dict(ref.out_proj.state_dict())


def copy_ffn(ours: FeedForward, ref) -> None:
    ours.linear1.load_state_dict(ref.linear1.state_dict())
    ours.linear2.load_state_dict(ref.linear2.state_dict())


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(E, H, F, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64).eval()
    ours = EncoderLayer(d_model=E, n_heads=H, d_ff=F, dropout=0.0, norm_first=norm_first).double().eval()
    with torch.no_grad():
        for p in ref.parameters():  # non-trivial LayerNorm parameters too
            p.add_(0.1 * torch.randn_like(p))
        copy_self_attention(ours.self_attn, ref.self_attn)
        copy_ffn(ours.ffn, ref)
        ours.attn_block.norm.load_state_dict(ref.norm1.state_dict())
        ours.ffn_block.norm.load_state_dict(ref.norm2.state_dict())
    x = torch.randn(3, 6, E, dtype=torch.float64)
    keep = torch.ones(3, 6, dtype=torch.bool)
    keep[1, 4:] = False
    expected = ref(x, src_key_padding_mask=~keep)
    got, _ = ours(x, mask=keep[:, None, None, :])
    # torch zeroes padded positions only on its nested-tensor fast path; compare real positions
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_matches_torch(norm_first):
    torch.manual_seed(0)
    ref = nn.TransformerDecoderLayer(E, H, F, dropout=0.0, batch_first=True, norm_first=norm_first, dtype=torch.float64).eval()
    ours = DecoderLayer(d_model=E, n_heads=H, d_ff=F, dropout=0.0, norm_first=norm_first).double().eval()
    with torch.no_grad():
        for p in ref.parameters():
            p.add_(0.1 * torch.randn_like(p))
        copy_self_attention(ours.self_attn, ref.self_attn)
        copy_cross_attention(ours.cross_attn, ref.multihead_attn)
        copy_ffn(ours.ffn, ref)
        ours.self_block.norm.load_state_dict(ref.norm1.state_dict())
        ours.cross_block.norm.load_state_dict(ref.norm2.state_dict())
        ours.ffn_block.norm.load_state_dict(ref.norm3.state_dict())
    x = torch.randn(2, 5, E, dtype=torch.float64)
    memory = torch.randn(2, 7, E, dtype=torch.float64)
    keep = torch.ones(2, 7, dtype=torch.bool)
    keep[0, 3:] = False
    expected = ref(x, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=~keep)
    got, self_w, cross_w = ours(x, memory, memory_mask=keep[:, None, None, :])
    torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)
    assert self_w is None and cross_w is None
    got_w, self_w, cross_w = ours(x, memory, memory_mask=keep[:, None, None, :], need_weights=True)
    torch.testing.assert_close(got_w, expected, atol=1e-6, rtol=1e-6)
    assert self_w.shape == (2, H, 5, 5) and cross_w.shape == (2, H, 5, 7)
    assert torch.count_nonzero(self_w.triu(1)) == 0  # causal: nothing above the diagonal
    assert torch.count_nonzero(cross_w[0, :, :, 3:]) == 0  # padding gets no attention


def test_feed_forward_is_position_wise():
    torch.manual_seed(0)
    ffn = FeedForward(d_model=E, d_ff=F).eval()
    x = torch.randn(2, 5, E)
    out = ffn(x)
    torch.testing.assert_close(out[:, 3], ffn(x[:, 3:4])[:, 0])
    expected = torch.relu(x @ ffn.linear1.weight.T + ffn.linear1.bias) @ ffn.linear2.weight.T + ffn.linear2.bias
    torch.testing.assert_close(out, expected)
    gelu = FeedForward(d_model=E, d_ff=F, activation="gelu").eval()
    gelu.load_state_dict(ffn.state_dict())  # same weights: only the activation differs
    hidden = x @ ffn.linear1.weight.T + ffn.linear1.bias
    exact_gelu = 0.5 * hidden * (1 + torch.erf(hidden / 2**0.5))  # GELU(h) = h * Phi(h), erf form
    torch.testing.assert_close(gelu(x), exact_gelu @ ffn.linear2.weight.T + ffn.linear2.bias)
    with pytest.raises(ValueError, match="activation"):
        FeedForward(d_model=E, d_ff=F, activation="tanh")


def test_dropout_is_active_in_training_only():
    torch.manual_seed(0)
    layer = EncoderLayer(d_model=E, n_heads=H, d_ff=F, dropout=0.5, attention_dropout=0.5)
    x = torch.randn(2, 5, E)
    layer.train()
    assert not torch.allclose(layer(x)[0], layer(x)[0])
    layer.eval()
    torch.testing.assert_close(layer(x)[0], layer(x)[0])


@pytest.mark.parametrize("p", [0.1, 0.5, 0.9])
def test_dropout_mask_is_uniform_and_reproducible(p):
    from transformer.model.dropout import keep_mask

    torch.manual_seed(1)
    a = keep_mask((1000, 999), p)  # an odd size: the last 64-bit draw is only partly used
    torch.manual_seed(1)
    assert torch.equal(a, keep_mask((1000, 999), p))
    assert set(a.unique().tolist()) == {0.0, 1.0}
    dropped = 1.0 - a
    assert abs(dropped.mean().item() - p) < 0.003
    lanes = dropped.flatten()[: 4 * 249_000].view(-1, 4).mean(0)  # each 16-bit lane of a draw alike
    assert (lanes - p).abs().max().item() < 0.006
    # neighbouring elements (one draw) and the two 8-bit halves of the threshold are independent
    pairs = dropped.flatten()[: 4 * 249_000].view(-1, 4)
    assert abs((pairs[:, 0] * pairs[:, 1]).mean().item() - p * p) < 0.004
    assert keep_mask((7, 3), p, torch.bfloat16, "cpu").dtype == torch.bfloat16
    assert keep_mask((7, 3), p, device="cpu").shape == (7, 3)


def test_dropout_mask_probability_is_exact_to_one_in_32768():
    from transformer.model.dropout import keep_mask

    # p = 1/32768 drops only the elements whose 15 random bits are all zero
    torch.manual_seed(3)
    n = 4_000_000
    dropped = n - int(keep_mask((n,), 1 / 32768).sum())
    assert 60 < dropped < 190  # expected 122
    assert keep_mask((1000,), 0.0).sum() == 1000


@pytest.mark.parametrize("fused", [True, False])
def test_dropout_keeps_one_minus_p_and_rescales(fused, monkeypatch):
    from transformer.model import fused_cpu
    from transformer.model.dropout import Dropout

    monkeypatch.setattr(fused_cpu, "_enabled", fused and fused_cpu._enabled)  # False: PyTorch's path
    torch.manual_seed(0)
    drop = Dropout(0.3).train()
    x = torch.ones(400, 500)
    y = drop(x)
    kept = y != 0
    assert abs(kept.float().mean().item() - 0.7) < 0.005
    torch.testing.assert_close(y[kept], torch.full_like(y[kept], 1 / 0.7))
    assert drop.eval()(x) is x
    assert Dropout(0.0).train()(x) is x
    # the gradient passes where the value did, with the same scale
    x = torch.randn(300, 200, requires_grad=True)
    y = drop.train()(x)
    y.backward(torch.ones_like(y))
    torch.testing.assert_close(x.grad, (y != 0).float() / 0.7)
    with pytest.raises(ValueError, match="dropout probability"):
        Dropout(1.0)

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


def test_layers_take_pytorchs_dropout_with_their_probabilities():
    """Residual and hidden dropout are ``nn.Dropout`` (the engine swaps in its mask kernel:
    tests/test_cpu_ops.py, tests/test_cpu_training.py); attention dropout goes to PyTorch's kernel."""
    layer = DecoderLayer(d_model=E, n_heads=H, d_ff=F, dropout=0.3, attention_dropout=0.2, activation_dropout=0.1)
    blocks = (layer.self_block, layer.cross_block, layer.ffn_block)
    assert [(type(m.dropout), m.dropout.p) for m in (*blocks, layer.ffn)] == [(nn.Dropout, 0.3)] * 3 + [(nn.Dropout, 0.1)]
    assert layer.self_attn.dropout == layer.cross_attn.dropout == 0.2


def test_a_layer_takes_the_model_config_or_its_fields():
    """The stacks pass their ``ModelConfig``; a layer built from it is the one its fields build."""
    from transformer.config import preset
    from transformer.model.layers import LayerSettings

    cfg = preset("tiny", src_vocab_size=20, norm_first=True, activation="gelu", activation_dropout=0.2,
                 layer_norm_eps=1e-6)
    settings = LayerSettings.given(cfg)
    assert settings == LayerSettings(d_model=32, n_heads=4, d_ff=64, dropout=0.0, attention_dropout=0.0,
                                     activation_dropout=0.2, activation="gelu", norm_first=True, layer_norm_eps=1e-6)
    for cls in (EncoderLayer, DecoderLayer):
        torch.manual_seed(0)
        from_config = cls(cfg)
        torch.manual_seed(0)
        from_fields = cls(**vars(settings))
        assert from_config.state_dict().keys() == from_fields.state_dict().keys()
        for a, b in zip(from_config.state_dict().values(), from_fields.state_dict().values()):
            assert torch.equal(a, b)
        assert from_config.ffn_block.norm.eps == 1e-6 and from_config.ffn_block.norm_first
        with pytest.raises(TypeError, match="not both"):
            cls(cfg, d_model=32)

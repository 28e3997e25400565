"""The whole model against torch.nn.Transformer, weights copied (issue 23).

Our ``Transformer`` (built from a ``ModelConfig``) and ``torch.nn.Transformer`` with the same
sizes get the same weights; the embeddings, sinusoidal positions and pre-softmax projection
around torch's module are written out here from the paper's formulas (sections 3.4 and 3.5),
not taken from our modules. The logits of a padded batch (source key padding, causal target
mask) must agree to rounding.

Parameter names on our side: encoder.layers[i].self_attn.qkv_proj ([W^Q; W^K; W^V], torch's
in_proj), .self_attn.out_proj, .ffn.linear1/.linear2, .attn_block.norm, .ffn_block.norm;
decoder.layers[i].self_attn.qkv_proj, .cross_attn.q_proj + .cross_attn.kv_proj (torch's
multihead_attn.in_proj), .cross_attn.out_proj, .self_block.norm, .cross_block.norm,
.ffn_block.norm; a final LayerNorm per stack (final_norm) in pre-LN only. torch.nn.Transformer
always ends each stack with a LayerNorm, so in post-LN (the paper) those are identities.
"""

import math

import pytest
import torch
from torch import nn

from transformer.config import ModelConfig
from transformer.model import Transformer

D_MODEL, HEADS, D_FF, LAYERS = 32, 2, 64, 2
SRC_V, TGT_V = 23, 19

pytestmark = [  # torch.nn.Transformer's own notes on its nested-tensor fast path
    pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning"),
    pytest.mark.filterwarnings("ignore:enable_nested_tensor is True:UserWarning"),
]


def _config(*, norm_first: bool, shared: bool) -> ModelConfig:
    vocab = dict(src_vocab_size=SRC_V, tgt_vocab_size=SRC_V if shared else TGT_V)
    return ModelConfig(
        **vocab, d_model=D_MODEL, n_heads=HEADS, d_ff=D_FF, n_encoder_layers=LAYERS, n_decoder_layers=LAYERS,
        dropout=0.0, attention_dropout=0.0, activation_dropout=0.0, norm_first=norm_first,
        share_embeddings=shared, tie_output=not shared, output_bias=shared,
    )


def _copy_weights(ours: Transformer, ref: nn.Transformer, norm_first: bool) -> set[int]:
    """Copy every layer's weights into ``ref``; returns the ids of our parameters copied."""
    used: set[int] = set()

    def put(dst: torch.Tensor, *srcs: torch.Tensor) -> None:
        dst.copy_(torch.cat(srcs) if len(srcs) > 1 else srcs[0])
        used.update(id(s) for s in srcs)

    def put_module(dst: nn.Module, src: nn.Module) -> None:
        for name, p in src.named_parameters():
            put(getattr(dst, name), p)

    for mine, theirs in zip(ours.encoder.layers, ref.encoder.layers, strict=True):
        put(theirs.self_attn.in_proj_weight, mine.self_attn.qkv_proj.weight)
        put(theirs.self_attn.in_proj_bias, mine.self_attn.qkv_proj.bias)
        put_module(theirs.self_attn.out_proj, mine.self_attn.out_proj)
        put_module(theirs.linear1, mine.ffn.linear1)
        put_module(theirs.linear2, mine.ffn.linear2)
        put_module(theirs.norm1, mine.attn_block.norm)
        put_module(theirs.norm2, mine.ffn_block.norm)
    for mine, theirs in zip(ours.decoder.layers, ref.decoder.layers, strict=True):
        put(theirs.self_attn.in_proj_weight, mine.self_attn.qkv_proj.weight)
        put(theirs.self_attn.in_proj_bias, mine.self_attn.qkv_proj.bias)
        put_module(theirs.self_attn.out_proj, mine.self_attn.out_proj)
        put(theirs.multihead_attn.in_proj_weight, mine.cross_attn.q_proj.weight, mine.cross_attn.kv_proj.weight)
        put(theirs.multihead_attn.in_proj_bias, mine.cross_attn.q_proj.bias, mine.cross_attn.kv_proj.bias)
        put_module(theirs.multihead_attn.out_proj, mine.cross_attn.out_proj)
        put_module(theirs.linear1, mine.ffn.linear1)
        put_module(theirs.linear2, mine.ffn.linear2)
        put_module(theirs.norm1, mine.self_block.norm)
        put_module(theirs.norm2, mine.cross_block.norm)
        put_module(theirs.norm3, mine.ffn_block.norm)
    if norm_first:  # pre-LN: both stacks end with a LayerNorm, as torch's do
        put_module(ref.encoder.norm, ours.encoder.final_norm)
        put_module(ref.decoder.norm, ours.decoder.final_norm)
    else:  # post-LN (the paper): no final LayerNorm on our side
        assert getattr(ours.encoder, "final_norm", None) is None
        assert getattr(ours.decoder, "final_norm", None) is None
        ref.encoder.norm = nn.Identity()
        ref.decoder.norm = nn.Identity()
    return used


def _sinusoids(length: int, d: int, dtype: torch.dtype) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) (paper 3.5).

    Computed in float64 and rounded to float32, as our table is stored (``sinusoidal_table``
    returns float32): unrounded, a float64 model differs from the reference by ~1e-8."""
    pe = torch.zeros(length, d, dtype=torch.float64)
    for pos in range(length):
        for i in range(d // 2):
            angle = pos / 10000 ** (2 * i / d)
            pe[pos, 2 * i], pe[pos, 2 * i + 1] = math.sin(angle), math.cos(angle)
    return pe.float().to(dtype)


def _batch():
    g = torch.Generator().manual_seed(7)
    src = torch.randint(1, SRC_V, (3, 9), generator=g)
    src_mask = torch.ones(3, 9, dtype=torch.bool)
    src_mask[1, 6:] = False  # right padding
    src_mask[2, 2:] = False
    src[~src_mask] = 0
    tgt = torch.randint(1, TGT_V, (3, 7), generator=g)
    return src, src_mask, tgt


@pytest.mark.parametrize("dtype, train", [(torch.float64, False), (torch.float32, False), (torch.float32, True)],
                         ids=["float64-eval", "float32-eval", "float32-train"])
@pytest.mark.parametrize("norm_first, shared", [(False, False), (False, True), (True, False)],
                         ids=["post-LN", "post-LN-shared-emb-untied-output", "pre-LN"])
def test_logits_match_torch_nn_transformer(norm_first, shared, dtype, train):
    torch.manual_seed(0)
    cfg = _config(norm_first=norm_first, shared=shared)
    ours = Transformer(cfg).to(dtype)
    ref = nn.Transformer(D_MODEL, HEADS, LAYERS, LAYERS, D_FF, dropout=0.0, batch_first=True,
                         norm_first=norm_first, dtype=dtype)
    with torch.no_grad():
        for p in ours.parameters():  # non-trivial biases and LayerNorm parameters as well
            p.add_(0.2 * torch.randn_like(p))
        used = _copy_weights(ours, ref, norm_first)

    src_embedding = ours.encoder.embed.tokens.weight
    tgt_embedding = ours.decoder.embed.tokens.weight
    output = ours.output
    assert (src_embedding is tgt_embedding) == shared
    assert (output.weight is tgt_embedding) == (not shared)  # tied pre-softmax projection (3.4)
    used |= {id(src_embedding), id(tgt_embedding)} | {id(p) for p in output.parameters()}
    missing = [name for name, p in ours.named_parameters() if id(p) not in used]
    assert not missing, f"parameters the reference does not use: {missing}"

    src, src_mask, tgt = _batch()
    S, T = src.shape[1], tgt.shape[1]
    ours.train(train)
    ref.train(train)
    with torch.set_grad_enabled(train):  # eval: the inference paths (no autograd); train: the training ones
        logits = ours(src, tgt, src_mask)

    # the reference: embeddings * sqrt(d_model) + sinusoids, torch's stacks, then x W_out^T (+ b)
    src_x = src_embedding.detach()[src] * math.sqrt(D_MODEL) + _sinusoids(S, D_MODEL, dtype)
    tgt_x = tgt_embedding.detach()[tgt] * math.sqrt(D_MODEL) + _sinusoids(T, D_MODEL, dtype)
    causal = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)  # True = may not attend
    with torch.no_grad():
        hidden = ref(src_x, tgt_x, tgt_mask=causal, src_key_padding_mask=~src_mask,
                     memory_key_padding_mask=~src_mask)
    expected = hidden @ output.weight.detach().T
    if output.bias is not None:
        expected = expected + output.bias.detach()

    assert logits.shape == (3, T, cfg.tgt_vocab_size) and logits.dtype == dtype
    assert expected.abs().max() > 1  # logits of a useful size, so the tolerance means something
    tol = dict(atol=1e-10, rtol=1e-10) if dtype == torch.float64 else dict(atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(logits.detach(), expected.detach(), **tol)

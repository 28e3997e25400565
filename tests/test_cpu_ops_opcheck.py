"""The engine's custom operators (transformer/cpu/ops.py, transformer/cpu/decoding_ops.py): each
passes ``torch.library.opcheck``, and every operator the two modules define is checked here.

What the kernels compute, against PyTorch compositions: tests/test_cpu_ops.py.
"""

import pytest
import torch
from cpu_engine_helpers import DTYPES, SEED, requires_kernels
from torch.library import opcheck

from transformer.cpu import decoding_ops, ops
from transformer.model.layers import DecoderLayer

pytestmark = requires_kernels


def check(op, args):
    """opcheck: schema (no undeclared mutation or aliasing), autograd registration, the fake
    implementation against the real one, and the op (with its backward) under AOT dispatch."""
    result = opcheck(op, args)
    assert set(result.values()) == {"SUCCESS"}, result


# ----------------------------------------------------------------------------------- opcheck
OPCHECKED = set()  # the operators the tests below check, filled as they are defined


def covers(*names):
    OPCHECKED.update(names)
    return lambda test: test


def test_every_custom_op_is_opchecked():
    defined = {v._qualname for module in (ops, decoding_ops) for v in vars(module).values()
               if isinstance(v, torch.library.CustomOpDef)}
    assert len(defined) == 11 and defined == OPCHECKED


@covers("transformer_cpu::dropout")
@pytest.mark.parametrize("dtype", DTYPES)
def test_opcheck_dropout(dtype):
    x = torch.randn(3, 5, 67).to(dtype).requires_grad_(True)  # autograd registered: a grad-requiring input
    check(ops.dropout_op, (x, SEED, ops.drop_threshold(0.1), 1 / 0.9))
    check(ops.dropout_op, (x.detach()[:, 1:], SEED, ops.drop_threshold(0.5), 2.0))  # non-contiguous


@covers("transformer_cpu::dropout_add_layer_norm", "transformer_cpu::dropout_add_layer_norm_backward")
@pytest.mark.parametrize("sub_dtype", DTYPES)
def test_opcheck_dropout_add_layer_norm(sub_dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 5, 32, generator=g, requires_grad=True)
    sub = torch.randn(3, 5, 32, generator=g).to(sub_dtype).requires_grad_(True)
    weight = torch.rand(32, generator=g).add(0.5).requires_grad_(True)
    bias = torch.randn(32, generator=g, requires_grad=True)
    args = (SEED, ops.drop_threshold(0.1), 1 / 0.9, 1e-5)
    check(ops.dropout_add_layer_norm_op, (x, sub, weight, bias, *args))
    _, h, mean, rstd = ops.dropout_add_layer_norm_op(x.detach(), sub.detach(), weight.detach(), bias.detach(), *args)
    check(ops.dropout_add_layer_norm_backward_op,
          (torch.randn(3, 5, 32, generator=g), h, mean, rstd, weight.detach(), *args[:3], sub_dtype == torch.bfloat16))


@covers("transformer_cpu::smoothed_nll")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_grad", [True, False])
def test_opcheck_smoothed_nll(dtype, with_grad):
    g = torch.Generator().manual_seed(1)
    logits = (3 * torch.randn(6, 37, generator=g)).to(dtype)
    target = torch.randint(0, 37, (6,), generator=g)
    row_scale = torch.tensor([1.0, 0.0, 1.0, 1.0, 0.5, 1.0])
    check(ops.smoothed_nll_op, (logits, target, row_scale, 0.1, with_grad))


@covers("transformer_cpu::attention", "transformer_cpu::attention_backward")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("kind", ["self", "cross"])
def test_opcheck_attention(dtype, kind):
    g = torch.Generator().manual_seed(2)
    B, T, S, H, E = 2, 7, 7 if kind == "self" else 5, 4, 32
    mask = torch.rand(B, 1, 1, S, generator=g) > 0.3
    if kind == "self":
        q_src, kv_src = torch.randn(B, T, 3 * E, generator=g).to(dtype).requires_grad_(True), None
    else:
        q_src = torch.randn(B, T, E, generator=g).to(dtype).requires_grad_(True)
        kv_src = torch.randn(B, S, 2 * E, generator=g).to(dtype).requires_grad_(True)
    drop = (SEED, ops.drop_threshold(0.1), 1 / 0.9)
    check(ops.attention_op, (q_src, kv_src, mask, H, kind == "self", *drop))
    check(ops.attention_op, (q_src, kv_src, None, H, False, 0, 0, 1.0))  # no mask, no dropout
    kv = kv_src.detach() if kv_src is not None else None
    _, probs = ops.attention_op(q_src.detach(), kv, mask, H, kind == "self", *drop)
    upstream = torch.randn(B, T, E, generator=g).to(dtype)
    check(ops.attention_backward_op, (upstream, q_src.detach(), kv, probs, H, *drop))


@covers("transformer_cpu::decode_attention")
@pytest.mark.parametrize("causal", [False, True])
def test_opcheck_decode_attention(causal):  # float32 only (the op takes nothing else)
    g = torch.Generator().manual_seed(3)
    M, G, H, T, S, D = 2, 3, 4, 1 if not causal else 3, 7, 8
    q = torch.randn(M * G, H, T, D, generator=g)  # G beams per memory row
    k, v = torch.randn(M, H, S, D, generator=g), torch.randn(M, H, S, D, generator=g)
    mask = torch.ones(M, 1, 1, S, dtype=torch.bool)
    mask[1, ..., 4:] = False
    check(decoding_ops.decode_attention, (q, k, v, mask, causal))
    check(decoding_ops.decode_attention, (q, k, v, None, causal))


@covers("transformer_cpu::best_tokens")
def test_opcheck_best_tokens():
    logits = torch.randn(5, 40, generator=torch.Generator().manual_seed(4))
    check(decoding_ops.best_tokens, (logits, 4))
    check(decoding_ops.best_tokens, (logits[:, ::2], 1))  # a strided row


@covers("transformer_cpu::pack", "transformer_cpu::packed_linear")
@pytest.mark.parametrize("int8", [False, True])
def test_opcheck_pack_and_packed_linear(int8):
    g = torch.Generator().manual_seed(5)
    weight = torch.randn(40, 24, generator=g)  # 40 outputs: not a whole number of panels
    check(decoding_ops.pack, (weight, int8))
    packed, scales = decoding_ops.pack(weight, int8)
    x = torch.randn(3, 2, 24, generator=g)
    check(decoding_ops.packed_linear, (x, packed, scales, torch.randn(40, generator=g), 40, True))
    check(decoding_ops.packed_linear, (torch.randn(3, 24, generator=g), packed, scales, None, 40, False))


def decoder_step_weights(layer: DecoderLayer, int8: bool) -> list:
    """The 24 tensors of ``decoder_layer_step``, made the way transformer/cpu/decoding.py makes them."""
    linears = (layer.self_attn.qkv_proj, layer.self_attn.out_proj, layer.cross_attn.q_proj,
               layer.cross_attn.out_proj, layer.ffn.linear1, layer.ffn.linear2)
    norms = (layer.self_block.norm, layer.cross_block.norm, layer.ffn_block.norm)
    weights = []
    for i, norm in enumerate(norms):
        for lin in linears[2 * i: 2 * i + 2]:
            weights += [*decoding_ops.pack(lin.weight.detach(), int8), lin.bias.detach()]
        weights += [norm.weight.detach(), norm.bias.detach()]
    assert len(weights) == decoding_ops.STEP_POINTERS
    return weights


@covers("transformer_cpu::decoder_layer_step")
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("int8", [False, True])
def test_opcheck_decoder_layer_step(norm_first, int8):
    """(Its values against the model's DecoderLayer are the decoding tests' business.)"""
    torch.manual_seed(6)
    E, H, FF, B, M, S, capacity, position = 32, 4, 64, 4, 2, 5, 8, 3
    layer = DecoderLayer(d_model=E, n_heads=H, d_ff=FF, norm_first=norm_first).eval()
    with torch.no_grad():
        kv = layer.cross_attn.memory_kv(torch.randn(M, S, E))  # (M, H, S, D) views
    cache_k, cache_v = torch.zeros(B, H, capacity, E // H), torch.zeros(B, H, capacity, E // H)
    cache_k[:, :, :position].normal_()
    cache_v[:, :, :position].normal_()
    mask = torch.ones(M, 1, 1, S, dtype=torch.bool)
    mask[1, ..., 3:] = False
    check(decoding_ops.decoder_layer_step, (torch.randn(B, 1, E), decoder_step_weights(layer, int8), cache_k,
                                            cache_v, position, kv.k, kv.v, mask, H, FF, norm_first, 1e-5))

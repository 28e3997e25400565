"""The full encoder-decoder: cache == no cache, causality, padding invariance, attention maps, sizes."""

import pytest
import torch

from transformer.errors import UserError
from transformer.config import ModelConfig, preset
from transformer.model import Transformer

V = 40


def make_model(**overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = preset("tiny", src_vocab_size=V, **overrides)
    return Transformer(cfg).double().eval()


def batch(seed=0, B=3, S=7, T=6):
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, V, (B, S), generator=g)
    tgt = torch.randint(4, V, (B, T), generator=g)
    keep = torch.ones(B, S, dtype=torch.bool)
    keep[1, 5:] = False
    keep[2, 3:] = False
    return src, tgt, keep


@pytest.mark.parametrize("norm_first", [False, True])
def test_incremental_decoding_with_cache_equals_full_forward(norm_first):
    model = make_model(norm_first=norm_first)
    src, tgt, keep = batch()
    full = model(src, tgt, keep)  # (B, T, V)
    with torch.no_grad():
        memory = model.encode(src, keep)
        cache = model.new_cache(initial_capacity=2)  # forces the buffers to grow
        for t in range(tgt.shape[1]):
            step = model.decode(tgt[:, t : t + 1], memory, keep, cache=cache)
            torch.testing.assert_close(step[:, 0], full[:, t], atol=1e-10, rtol=1e-10)
        assert cache.length == tgt.shape[1]


def test_cache_reorder_for_beam_search():
    model = make_model()
    src, tgt, keep = batch()
    index = torch.tensor([2, 0, 0, 1])
    with torch.no_grad():
        memory = model.encode(src, keep)
        cache = model.new_cache()
        model.decode(tgt[:, :3], memory, keep, cache=cache)  # a multi-token prefix in one call
        cache.reorder(index)
        memory, keep_r = memory[index], keep[index]
        steps = [model.decode(tgt[index, t : t + 1], memory, keep_r, cache=cache) for t in range(3, 6)]
    expected = model(src[index], tgt[index], keep[index])[:, 3:]
    torch.testing.assert_close(torch.cat(steps, dim=1), expected, atol=1e-10, rtol=1e-10)
    with pytest.raises(ValueError, match="1-D long"):
        cache.reorder(torch.tensor([0.0]))


def test_cache_reordered_after_every_step_reusing_its_buffers():
    """Reorders after every step (repeating, permuting, dropping and adding rows, while the buffers
    grow): each row still sees the history of the sentence it descends from."""
    model = make_model()
    src, tgt, keep = batch()
    full = model(src, tgt, keep)  # (B, T, V)
    indices = [[0, 1, 2, 2], [3, 1, 0, 2], [1, 2], [0, 1], [1, 0, 1]]
    rows = torch.arange(src.shape[0])  # the sentence each cache row belongs to
    with torch.no_grad():
        memory = model.encode(src, keep)
        cache = model.new_cache(initial_capacity=2)
        for t in range(tgt.shape[1]):
            step = model.decode(tgt[rows, t : t + 1], memory[rows], keep[rows], cache=cache)
            torch.testing.assert_close(step[:, 0], full[rows, t], atol=1e-10, rtol=1e-10)
            if t < len(indices):
                index = torch.tensor(indices[t])
                cache.reorder(index)
                rows = rows[index]


def test_causality_later_tokens_never_change_earlier_outputs():
    model = make_model()
    src, tgt, keep = batch()
    base = model(src, tgt, keep)
    for j in range(1, tgt.shape[1]):
        changed = tgt.clone()
        changed[:, j:] = (changed[:, j:] + 7) % (V - 4) + 4
        out = model(src, changed, keep)
        torch.testing.assert_close(out[:, :j], base[:, :j], atol=1e-12, rtol=0)
        assert not torch.allclose(out[:, j], base[:, j])


def test_appending_source_padding_changes_nothing():
    model = make_model()
    src, tgt, keep = batch()
    base = model(src, tgt, keep)
    padded_src = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    padded_keep = torch.cat([keep, torch.zeros(3, 4, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(padded_src, tgt, padded_keep), base, atol=1e-12, rtol=0)
    # garbage in the padded positions is invisible too
    padded_src[:, -4:] = 9
    torch.testing.assert_close(model(padded_src, tgt, padded_keep), base, atol=1e-12, rtol=0)


def test_fp32_padding_invariance_without_attention_weights():
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=V)).eval()
    src, tgt, keep = batch()
    base = model(src, tgt, keep)
    padded_src = torch.cat([src, torch.full((3, 5), 11)], dim=1)
    padded_keep = torch.cat([keep, torch.zeros(3, 5, dtype=torch.bool)], dim=1)
    torch.testing.assert_close(model(padded_src, tgt, padded_keep), base, atol=1e-5, rtol=1e-5)


def test_attention_maps_match_the_forward_pass():
    model = make_model()
    src, tgt, keep = batch()
    maps = model.attention_maps(src, tgt, keep)
    cfg = model.config
    assert len(maps.encoder) == cfg.n_encoder_layers and len(maps.cross) == cfg.n_decoder_layers
    assert maps.encoder[0].shape == (3, cfg.n_heads, 7, 7)
    assert maps.decoder_self[-1].shape == (3, cfg.n_heads, 6, 6)
    assert maps.cross[-1].shape == (3, cfg.n_heads, 6, 7)
    for w in maps.encoder + maps.decoder_self + maps.cross:
        torch.testing.assert_close(w.sum(-1), torch.ones(w.shape[:-1], dtype=w.dtype))
    for w in maps.decoder_self:
        assert torch.count_nonzero(w.triu(1)) == 0
    for w in maps.encoder + maps.cross:
        assert torch.count_nonzero(w[2, :, :, 3:]) == 0  # padding of sentence 2
    # first-layer encoder weights recomputed by hand from the layer's own projections
    layer = model.encoder.layers[0]
    x = model.encoder.embed(src)
    q, k, _ = layer.self_attn.qkv_proj(x).chunk(3, dim=-1)
    q = q.view(3, 7, cfg.n_heads, -1).transpose(1, 2)
    k = k.view(3, 7, cfg.n_heads, -1).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / cfg.head_dim**0.5
    scores = scores.masked_fill(~keep[:, None, None, :], float("-inf"))
    torch.testing.assert_close(maps.encoder[0], torch.softmax(scores, -1))


def test_base_preset_has_about_65M_parameters():
    """Paper Table 3: base model, 65M parameters (shared 37k BPE vocabulary, tied embeddings)."""
    model = Transformer(preset("base", src_vocab_size=37000))
    n = model.num_parameters()
    assert n == 63_082_496  # 18.94M embeddings + 18.91M encoder + 25.23M decoder
    assert abs(n - 65e6) / 65e6 < 0.05
    big = preset("big", src_vocab_size=37000)
    assert (big.d_model, big.d_ff, big.n_heads, big.dropout) == (1024, 4096, 16, 0.3)


def test_tied_and_shared_embeddings():
    model = make_model()
    assert model.output.weight is model.decoder.embed.tokens.weight
    assert model.encoder.embed.tokens is model.decoder.embed.tokens
    untied = Transformer(ModelConfig(src_vocab_size=30, tgt_vocab_size=50, d_model=16, n_heads=2, d_ff=32,
                                     n_encoder_layers=1, n_decoder_layers=1, tie_output=False))
    assert untied.output.weight is not untied.decoder.embed.tokens.weight
    assert untied.encoder.embed.tokens.weight.shape == (30, 16)
    assert untied.output.weight.shape == (50, 16)


def test_learned_positions_reject_too_long_inputs():
    model = make_model(positional="learned", max_positions=8)
    src = torch.randint(4, V, (1, 9))
    with pytest.raises(UserError, match="learned position table has only 8"):
        model.encode(src)
    model.encode(src[:, :8])


def test_sinusoidal_positions_extend_past_initial_table():
    model = make_model()
    src = torch.randint(4, V, (1, 700))  # the table starts with 512 positions
    assert model.encode(src).shape == (1, 700, model.config.d_model)


def test_bf16_autocast_runs_and_stays_close():
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=V)).eval()
    src, tgt, keep = batch()
    ref = model(src, tgt, keep)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = model(src, tgt, keep)
    assert low.dtype == torch.bfloat16
    assert (low.float() - ref).abs().max() < 0.1 * ref.abs().max()


def test_forward_positions_selects_those_logits():
    model = make_model()
    src, tgt, keep = batch()
    positions = torch.rand(tgt.shape, generator=torch.Generator().manual_seed(3)) > 0.4
    full = model(src, tgt, keep)
    picked = model(src, tgt, keep, positions=positions)
    assert picked.shape == (int(positions.sum()), V)
    torch.testing.assert_close(picked, full[positions])
    # and the same gradients as boolean indexing of the full logits
    weights = torch.randn(picked.shape, generator=torch.Generator().manual_seed(4))
    grads = []
    for logits in (lambda: model(src, tgt, keep, positions=positions), lambda: model(src, tgt, keep)[positions]):
        model.zero_grad(set_to_none=True)
        (logits() * weights).sum().backward()
        grads.append([p.grad.clone() for p in model.parameters()])
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-4)
    with pytest.raises(ValueError, match="positions must be a bool mask"):
        model(src, tgt, keep, positions=positions[:, :2])


def test_bf16_autocast_training_step_gradients_stay_close_to_fp32():
    """A training step under CPU bf16 autocast (attention in PyTorch's fused kernel, LayerNorm and
    loss in float32) gives float32's gradients up to bf16 rounding (measured: 1.5-3% in norm)."""
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=V, dropout=0.0, attention_dropout=0.0)).train()
    src, tgt, keep = batch()
    grads = []
    for bf16 in (False, True):
        model.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            out = model(src, tgt, keep)
        assert out.dtype == (torch.bfloat16 if bf16 else torch.float32)
        out.float().square().mean().backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert (grads[1] - grads[0]).norm() < 0.1 * grads[0].norm()


def test_bad_inputs_name_the_problem():
    model = make_model()
    src, tgt, keep = batch()
    with pytest.raises(ValueError, match="integer token ids"):
        model(src.float(), tgt, keep)
    with pytest.raises(ValueError, match=r"shape \(batch, length\)"):
        model(src[0], tgt, keep)
    with pytest.raises(ValueError, match="src_mask must be torch.bool"):
        model(src, tgt, keep.long())
    with pytest.raises(ValueError, match="src_mask must have the shape of src"):
        model(src, tgt, keep[:, :4])
    with pytest.raises(ValueError, match=r"outside \[0, 40\)"):
        model(src + 100, tgt, keep)
    with pytest.raises(ValueError, match="batch size"):
        model.decode(tgt[:2], model.encode(src, keep), keep)
    with pytest.raises(ValueError, match="empty"):
        model.encode(src[:, :0])
    with pytest.raises(TypeError, match="torch.Tensor"):
        model.encode([[1, 2, 3]])

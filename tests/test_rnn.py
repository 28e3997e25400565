"""The recurrent baseline: shapes, masks, cache equivalence, decoders, checkpoints, copy task, config."""

import json

import pytest
import torch

from transformer.run.model import load_config, load_model, save_model
from transformer.config import ModelConfig
from transformer.decoding import DecodeConfig, beam_search, decode, greedy_search
from transformer.model import RNNCache, RNNConfig, RNNSeq2Seq, Transformer, build_model, config_from_dict, rnn_preset
from transformer.model.scores import AdditiveScore, BilinearScore, DotScore
from transformer.run.config import RunConfig

SCORES = ("additive", "dot", "general", "scaled_dot")
V = 40


def tiny(score="general", **overrides) -> RNNSeq2Seq:
    torch.manual_seed(0)
    return RNNSeq2Seq(rnn_preset("tiny", src_vocab_size=V, score=score, **overrides)).eval()


def padded_batch():
    torch.manual_seed(1)
    src = torch.randint(4, V, (3, 9))
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 6:] = False
    mask[2, 3:] = False
    src[~mask] = 0
    tgt = torch.randint(4, V, (3, 7))
    return src, mask, tgt


# ------------------------------------------------------------------------------------------------ config
def test_config_json_round_trip_and_architecture_dispatch(tmp_path):
    cfg = rnn_preset("small", src_vocab_size=100, score="additive", attention_dim=64)
    assert RNNConfig.from_json(cfg.to_json()) == cfg
    data = json.loads(cfg.to_json(tmp_path / "config.json"))
    assert data["architecture"] == "rnn" and data["score"] == "additive"
    assert isinstance(config_from_dict(data), RNNConfig)
    assert isinstance(config_from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10}), ModelConfig)
    assert isinstance(build_model(cfg), RNNSeq2Seq)
    assert isinstance(build_model(ModelConfig(10, 10, d_model=32, n_heads=4, d_ff=64)), Transformer)
    assert cfg.d_model == cfg.hidden_size == 512  # the learning-rate schedule's width


@pytest.mark.parametrize("changes, message", [
    (dict(score="concat"), "score must be one of"),
    (dict(hidden_size=33), "must be even"),
    (dict(attention_dim=8), "only applies to score='additive'"),
    (dict(dropout=1.0), r"dropout must be in \[0, 1\)"),
    (dict(share_embeddings=True, tgt_vocab_size=11), "one shared vocabulary"),
    (dict(architecture="transformer"), "architecture must be 'rnn'"),
])
def test_config_validation_names_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        RNNConfig(**{"src_vocab_size": 10, "tgt_vocab_size": 10, **changes})
    with pytest.raises(ValueError, match="unknown RNNConfig keys"):
        RNNConfig.from_dict({"src_vocab_size": 10, "tgt_vocab_size": 10, "n_heads": 4})


def test_run_config_selects_the_rnn_with_model_equals_rnn():
    run = RunConfig().with_overrides(["model=rnn", "model.score=dot", "model.preset=tiny", "data.vocab_size=300"])
    cfg = run.model_config(src_vocab_size=300, tgt_vocab_size=300)
    assert isinstance(cfg, RNNConfig) and cfg.score == "dot" and cfg.hidden_size == 32 and cfg.share_embeddings
    assert RunConfig.from_dict(run.to_dict()).to_dict() == run.to_dict()
    assert isinstance(RunConfig().model_config(src_vocab_size=300, tgt_vocab_size=300), ModelConfig)  # default unchanged
    with pytest.raises(ValueError, match=r"model keys \['n_heads'\] do not apply to architecture=rnn"):
        RunConfig().with_overrides(["model=rnn", "model.n_heads=4"])
    with pytest.raises(ValueError, match=r"model keys \['score'\] do not apply to architecture=transformer"):
        RunConfig().with_overrides(["model.score=dot"])
    with pytest.raises(ValueError, match="model.architecture must be one of"):
        RunConfig().with_overrides(["model=gru"])


# ------------------------------------------------------------------------------------------------ model
@pytest.mark.parametrize("score, cls", [("additive", AdditiveScore), ("dot", DotScore), ("general", BilinearScore),
                                        ("scaled_dot", DotScore)])
def test_shapes_and_the_core_score_functions(score, cls):
    model = tiny(score)
    src, mask, tgt = padded_batch()
    assert isinstance(model.score, cls)
    memory = model.encode(src, mask)
    assert memory.shape == (3, 9, 32)
    assert model(src, tgt, mask).shape == (3, 7, V)
    cross = model.attention_maps(src, tgt, mask).cross
    assert len(cross) == 1 and cross[0].shape == (3, 1, 7, 9)
    torch.testing.assert_close(cross[0].sum(-1), torch.ones(3, 1, 7))


def test_additive_keys_computed_once_equal_the_score_function():
    model = tiny("additive")
    src, mask, tgt = padded_batch()
    memory = model.encode(src, mask)
    s = torch.randn(3, 7, 32)
    fast, _ = model._attend(s, memory, mask.unsqueeze(1), model.score.U(memory))
    plain, _ = model._attend(s, memory, mask.unsqueeze(1), None)  # AdditiveScore.forward
    torch.testing.assert_close(fast, plain)


@pytest.mark.parametrize("score", SCORES)
def test_padding_never_receives_attention_and_changes_nothing(score):
    model = tiny(score)
    src, mask, tgt = padded_batch()
    weights = model.attention_maps(src, tgt, mask).cross[0][:, 0]  # (B, T, S)
    assert torch.all(weights.masked_select(~mask.unsqueeze(1)) == 0)
    other = src.clone()
    other[~mask] = torch.randint(4, V, (int((~mask).sum()),))
    torch.testing.assert_close(model(other, tgt, mask), model(src, tgt, mask), rtol=0, atol=0)
    # a padded row gives what the same sentence gives alone
    alone = model(src[2:, :3], tgt[2:], mask[2:, :3])
    torch.testing.assert_close(model(src, tgt, mask)[2:], alone, rtol=1e-5, atol=1e-6)


def test_mask_must_be_a_prefix():
    model = tiny()
    src, mask, tgt = padded_batch()
    mask[0, 2] = False
    with pytest.raises(ValueError, match="prefix"):
        model.encode(src, mask)


@pytest.mark.parametrize("score", SCORES)
@pytest.mark.parametrize("input_feeding", [True, False])
def test_step_by_step_decoding_with_the_cache_equals_teacher_forcing(score, input_feeding):
    model = tiny(score, input_feeding=input_feeding)
    src, mask, tgt = padded_batch()
    full = model(src, tgt, mask)
    memory, cache = model.encode(src, mask), model.new_cache()
    steps = [model.decode(tgt[:, :3], memory, mask, cache=cache)]  # several positions at once, then one at a time
    steps += [model.decode(tgt[:, t : t + 1], memory, mask, cache=cache) for t in range(3, 7)]
    assert cache.length == 7
    torch.testing.assert_close(torch.cat(steps, dim=1), full, rtol=1e-5, atol=1e-6)


def test_the_decoder_step_computes_what_nn_lstm_computes():
    model = tiny(n_decoder_layers=2)
    x = torch.randn(3, 5, 64)  # (B, T, 2E): embedding + fed attentional vector
    h0, c0 = torch.randn(2, 3, 32), torch.randn(2, 3, 32)
    expected, (h, c) = model.decoder(x, (h0, c0))
    state = RNNCache(h=h0, c=c0)
    steps = torch.stack([model._lstm_step(x[:, t], state) for t in range(5)], dim=1)
    torch.testing.assert_close(steps, expected)
    torch.testing.assert_close((state.h, state.c), (h, c))


def test_cache_reorder_follows_the_rows():
    model = tiny("additive")
    src, mask, tgt = padded_batch()
    index = torch.tensor([2, 0, 0])
    memory, cache = model.encode(src, mask), model.new_cache()
    model.decode(tgt[:, :4], memory, mask, cache=cache)
    cache.reorder(index)
    out = model.decode(tgt[index, 4:], memory[index], mask[index], cache=cache)
    torch.testing.assert_close(out, model(src[index], tgt[index], mask[index])[:, 4:], rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="1-D long"):
        cache.reorder(index.int())


def test_bf16_autocast_runs():
    model = tiny()
    src, mask, tgt = padded_batch()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = model(src, tgt, mask)
    assert logits.shape == (3, 7, V) and torch.isfinite(logits.float()).all()


def test_bf16_weights_decode():
    """The bf16 copy Translator(precision="bf16") decodes with: packed LSTM, steps and beam search in bf16."""
    from transformer.translate.translator import low_precision_copy

    model = tiny("general")
    src, mask, _ = padded_batch()
    half = low_precision_copy(model, torch.bfloat16)
    assert next(model.parameters()).dtype == torch.float32  # the original is untouched
    beams = beam_search(half, src, mask, bos_id=1, eos_id=2, beam_size=3, max_len_b=6)
    assert len(beams) == 3 and all(h[0].score <= 0 for h in beams)
    greedy = greedy_search(half, src, mask, bos_id=1, eos_id=2, max_len_b=6)
    assert all(isinstance(h.score, float) for h in greedy)


# ------------------------------------------------------------------------------------------------ decoders
def test_greedy_and_beam_search_run_through_the_shared_decoders():
    model = tiny("additive")
    src, mask, _ = padded_batch()
    greedy = greedy_search(model, src, mask, bos_id=1, eos_id=2, max_len_b=6)
    beam1 = beam_search(model, src, mask, bos_id=1, eos_id=2, beam_size=1, length_penalty="none", max_len_b=6)
    assert [h.tokens for h in greedy] == [b[0].tokens for b in beam1]  # beam 1 without length penalty is greedy
    beams = beam_search(model, src, mask, bos_id=1, eos_id=2, beam_size=4, n_best=3, max_len_b=6)
    for hyps in beams:
        assert len(hyps) == 3 and [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    samples = decode(model, src, mask, DecodeConfig("sample", n_best=2, seed=3, max_len_b=6), bos_id=1, eos_id=2)
    again = decode(model, src, mask, DecodeConfig("sample", n_best=2, seed=3, max_len_b=6), bos_id=1, eos_id=2)
    assert [[h.tokens for h in s] for s in samples] == [[h.tokens for h in s] for s in again]  # seeded
    with_attention = decode(model, src, mask, DecodeConfig("beam", beam_size=3, return_attention=True, max_len_b=6),
                            bos_id=1, eos_id=2)
    h = with_attention[1][0]
    assert h.attention.shape == (1, 1, len(h.tokens) + 1, int(mask[1].sum()))


def test_checkpoint_round_trip(tmp_path):
    model = tiny("general", share_embeddings=True)
    src, mask, tgt = padded_batch()
    save_model(model, tmp_path / "m")
    assert isinstance(load_config(tmp_path / "m"), RNNConfig)
    again = load_model(tmp_path / "m")
    assert isinstance(again, RNNSeq2Seq) and again.config == model.config
    assert again.output.weight is again.tgt_embed.weight is again.src_embed.weight  # re-tied from the config
    torch.testing.assert_close(again(src, tgt, mask), model(src, tgt, mask), rtol=0, atol=0)


def test_a_tiny_model_learns_to_copy():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = RNNSeq2Seq(RNNConfig(src_vocab_size=12, tgt_vocab_size=12, embed_dim=32, hidden_size=64, dropout=0.0,
                                 share_embeddings=True, score="general"))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(0)

    def batch(n):
        src = torch.randint(3, 12, (n, 6), generator=gen)
        tgt_in = torch.cat([torch.ones(n, 1, dtype=torch.long), src], dim=1)  # <s> = 1
        tgt_out = torch.cat([src, torch.full((n, 1), 2)], dim=1)  # </s> = 2
        return src, tgt_in, tgt_out

    for _ in range(250):
        src, tgt_in, tgt_out = batch(64)
        loss = torch.nn.functional.cross_entropy(model(src, tgt_in).flatten(0, 1), tgt_out.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    src, _, _ = batch(100)
    hyps = greedy_search(model, src, torch.ones_like(src, dtype=torch.bool), bos_id=1, eos_id=2, max_len_b=4)
    exact = sum(h.tokens == s.tolist() for h, s in zip(hyps, src)) / len(hyps)
    assert exact >= 0.9, f"copied {exact:.0%} of the sentences exactly"

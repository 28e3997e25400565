"""Decoders: sampling, decode() with attention, DecodeConfig and argument checks."""

import pytest
import torch
from decoding_helpers import BOS, EOS, V, make_batch, make_model, row, seq_log_prob

from transformer.config import preset
from transformer.decoding import DecodeConfig, Hypothesis, beam_search, decode, greedy_search, sample
from transformer.errors import UserError
from transformer.model import Transformer

# ---------------------------------------------------------------------------------------------
# Sampling.


def test_sampling_is_reproducible_and_leaves_the_global_rng_alone():
    model = make_model(0, eos_bias=-1.0)
    src, mask = make_batch(0)
    state = torch.get_rng_state()
    kwargs = dict(bos_id=BOS, eos_id=EOS, n=3, max_len_b=6)
    a = sample(model, src, mask, seed=7, **kwargs)
    b = sample(model, src, mask, seed=7, **kwargs)
    c = sample(model, src, mask, seed=8, **kwargs)
    sample(model, src, mask, **kwargs)  # seed=None draws a fresh seed, not from the global RNG either
    assert torch.equal(torch.get_rng_state(), state)
    assert a == b
    assert a != c
    assert all(len(hyps) == 3 for hyps in a)
    for i, hyps in enumerate(a):
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        for h in hyps:
            ended = len(h.tokens) < int(mask[i].sum()) + 6
            assert h.log_prob == pytest.approx(seq_log_prob(model, *row(src, mask, i), h.tokens, ended=ended), abs=1e-9)


@pytest.mark.parametrize("kwargs", [dict(top_k=1), dict(top_p=1e-9), dict(temperature=1e-4)])
def test_degenerate_sampling_equals_greedy(kwargs):
    model = make_model(2)
    src, mask = make_batch(2, lengths=(8, 3, 6, 2))
    greedy = greedy_search(model, src, mask, bos_id=BOS, eos_id=EOS, max_len_b=6)
    samples = sample(model, src, mask, bos_id=BOS, eos_id=EOS, n=2, seed=0, max_len_b=6, **kwargs)
    for g, hyps in zip(greedy, samples):
        for h in hyps:
            assert h.tokens == g.tokens
            assert h.log_prob == pytest.approx(g.log_prob, abs=1e-9)


@pytest.mark.parametrize("top_k, top_p", [(3, 1.0), (0, 0.5)])
def test_sampled_tokens_respect_top_k_and_top_p(top_k, top_p):
    model = make_model(1, eos_bias=-1.0)
    src, mask = make_batch(1)
    samples = sample(model, src, mask, bos_id=BOS, eos_id=EOS, n=4, seed=3, top_k=top_k, top_p=top_p, max_len_b=5)
    for i, hyps in enumerate(samples):
        s, m = row(src, mask, i)
        for h in hyps:
            with torch.no_grad():
                p = model(s, torch.tensor([[BOS] + h.tokens]), m)[0].softmax(-1)  # (T, V)
            for t, tok in enumerate(h.tokens):
                if top_k:
                    assert int((p[t] > p[t, tok]).sum()) < top_k
                else:
                    assert float(p[t][p[t] > p[t, tok]].sum()) < top_p


# ---------------------------------------------------------------------------------------------
# decode(), attention, configuration.


@pytest.mark.parametrize("strategy", ["greedy", "beam", "sample"])
def test_decode_dispatches_and_returns_attention(strategy):
    model = make_model(0)
    src, mask = make_batch(0)
    cfg = DecodeConfig(strategy, n_best=1 if strategy == "greedy" else 2, seed=0, max_len_b=5, return_attention=True)
    results = decode(model, src, mask, cfg, bos_id=BOS, eos_id=EOS)
    if strategy == "greedy":
        assert [h for (h,) in results] == greedy_search(model, src, mask, bos_id=BOS, eos_id=EOS, max_len_b=5)
    elif strategy == "beam":
        assert results == beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, n_best=2, max_len_b=5)
    cfg_model = model.config
    for i, hyps in enumerate(results):
        assert len(hyps) == cfg.n_best
        s, m = row(src, mask, i)
        for h in hyps:
            T = len(h.tokens) + 1
            assert h.attention.shape == (cfg_model.n_decoder_layers, cfg_model.n_heads, T, int(mask[i].sum()))
            torch.testing.assert_close(h.attention.sum(-1), torch.ones(h.attention.shape[:-1], dtype=torch.float64))
            expected = torch.stack(model.attention_maps(s, torch.tensor([[BOS] + h.tokens]), m).cross, dim=1)[0]
            torch.testing.assert_close(h.attention, expected)


def test_output_length_is_capped_by_a_learned_position_table():
    torch.manual_seed(0)
    cfg = preset("tiny", src_vocab_size=V, positional="learned", max_positions=9, output_bias=True)
    model = Transformer(cfg).double().eval()
    with torch.no_grad():
        model.output.bias[EOS] = -100.0  # never ends by itself; src + 50 would need 50+ positions
    src, mask = make_batch(0)
    for strategy in ("greedy", "beam", "sample"):
        results = decode(model, src, mask, DecodeConfig(strategy, seed=0), bos_id=BOS, eos_id=EOS)
        assert all(len(h.tokens) == 9 for hyps in results for h in hyps)


def test_hypothesis_keeps_its_two_field_form():
    h = Hypothesis([3, 4], -1.5)
    assert h.log_prob == -1.5 and h.attention is None


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(strategy="topk"), "strategy"),
        (dict(beam_size=0), "beam_size"),
        (dict(beam_size=2, n_best=3), "n_best"),
        (dict(strategy="greedy", n_best=2), "n_best"),
        (dict(n_best=0), "n_best"),
        (dict(length_penalty="wu"), "length_penalty"),
        (dict(alpha=-0.1), "alpha"),
        (dict(alpha=float("nan")), "alpha"),
        (dict(max_len_a=-1.0), "max_len_a"),
        (dict(max_len_b=-1), "max_len_b"),
        (dict(max_len_b=2.5), "max_len_b"),
        (dict(max_len_a=0.0, max_len_b=0), "both 0"),
        (dict(temperature=0.0), "temperature"),
        (dict(top_k=-1), "top_k"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_p=1.5), "top_p"),
        (dict(seed="1"), "seed"),
        (dict(return_attention=1), "return_attention"),
    ],
)
def test_decode_config_validation(kwargs, message):
    with pytest.raises(UserError, match=message):
        DecodeConfig(**kwargs)


def test_decode_config_defaults_are_the_papers():
    cfg = DecodeConfig()
    assert (cfg.strategy, cfg.beam_size, cfg.length_penalty, cfg.alpha, cfg.max_len_a, cfg.max_len_b) == (
        "beam", 4, "gnmt", 0.6, 1.0, 50)


def test_decoder_functions_validate_their_arguments():
    model = make_model(0)
    src, mask = make_batch(0)
    with pytest.raises(UserError, match="n_best"):
        beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=2, n_best=3)
    with pytest.raises(UserError, match="vocabulary"):
        beam_search(model, src, mask, bos_id=BOS, eos_id=EOS, beam_size=V)
    with pytest.raises(UserError, match="top_p"):
        sample(model, src, mask, bos_id=BOS, eos_id=EOS, top_p=0.0)

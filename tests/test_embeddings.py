"""Positional encoding: the five requirements of the lecture material, and embedding scaling."""

import math

import pytest
import torch

from transformer.errors import UserError
from transformer.model.embeddings import (
    LearnedPositionalEncoding,
    SinusoidalPositionalEncoding,
    TokenEmbedding,
    sinusoidal_table,
)


def test_formula_sin_on_even_cos_on_odd():
    pe = sinusoidal_table(50, 16)
    pos, i = 7, 3
    assert pe[pos, 2 * i].item() == pytest.approx(math.sin(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    assert pe[pos, 2 * i + 1].item() == pytest.approx(math.cos(pos / 10000 ** (2 * i / 16)), abs=1e-6)
    concat = sinusoidal_table(50, 16, layout="concat")
    torch.testing.assert_close(concat[:, :8], pe[:, 0::2])
    torch.testing.assert_close(concat[:, 8:], pe[:, 1::2])


def test_bounded():
    assert sinusoidal_table(10_000, 64).abs().max() <= 1.0


def test_unique_per_position():
    pe = sinusoidal_table(2048, 64).double()
    distances = torch.cdist(pe, pe)
    distances.fill_diagonal_(float("inf"))
    assert distances.min() > 1e-3


def test_deterministic():
    assert torch.equal(sinusoidal_table(300, 32), sinusoidal_table(300, 32))
    assert torch.equal(SinusoidalPositionalEncoding(32)(100), SinusoidalPositionalEncoding(32)(100))


def test_generalises_past_the_trained_length():
    module = SinusoidalPositionalEncoding(32, initial_positions=64)
    far = module(10, offset=1000)  # beyond the initial table: extended on demand
    torch.testing.assert_close(far, sinusoidal_table(1010, 32)[1000:])
    assert "table" not in module.state_dict()  # a function of the config, never saved


def test_relative_offset_is_the_same_linear_map_for_every_position():
    """PE(pos + k) = M_k PE(pos) with one matrix M_k for all pos (a rotation per frequency)."""
    d, k = 16, 5
    pe = sinusoidal_table(10_000, d).double()
    # fit one M_k on positions spread over [0, 5000), then check it on [5000, 9000)
    fit = torch.randperm(5000, generator=torch.Generator().manual_seed(0))[:400]
    M = torch.linalg.lstsq(pe[fit], pe[fit + k]).solution.T  # PE(pos + k) = M PE(pos)
    torch.testing.assert_close(pe[5000:9000] @ M.T, pe[5000 + k : 9000 + k], atol=1e-4, rtol=0)
    # and M_k is exactly the block-diagonal rotation by k * omega_i
    for i in range(d // 2):
        w = 1 / 10000 ** (2 * i / d)
        rot = torch.tensor([[math.cos(k * w), math.sin(k * w)], [-math.sin(k * w), math.cos(k * w)]], dtype=torch.float64)
        torch.testing.assert_close(M[2 * i : 2 * i + 2, 2 * i : 2 * i + 2], rot, atol=1e-5, rtol=0)


def test_code_of_a_position_does_not_depend_on_the_sentence_length():
    """pos / length would give position 3 the code 0.3 in a sentence of 10 and 0.15 in one of 20;
    the sinusoids give it one code in every length, whether computed from the table or by the
    module (from position 0 or from an offset, as incremental decoding does)."""
    expected = torch.tensor([math.sin(3 / 10000 ** (i // 2 * 2 / 8)) if i % 2 == 0
                             else math.cos(3 / 10000 ** (i // 2 * 2 / 8)) for i in range(8)])
    for length in (4, 10, 20, 700):  # 700: past the module's initial table
        torch.testing.assert_close(sinusoidal_table(length, 8)[3], expected, atol=1e-6, rtol=0)
        torch.testing.assert_close(SinusoidalPositionalEncoding(8, initial_positions=16)(length)[3], expected,
                                   atol=1e-6, rtol=0)
    torch.testing.assert_close(SinusoidalPositionalEncoding(8)(5, offset=3)[0], expected, atol=1e-6, rtol=0)


def test_learned_positions_raise_past_table():
    learned = LearnedPositionalEncoding(16, 8)
    assert learned(16).shape == (16, 8)
    with pytest.raises(UserError, match="only 16 positions"):  # the input is too long: the caller's mistake
        learned(4, offset=14)


def test_token_embedding_scaled_by_sqrt_d_model():
    emb = TokenEmbedding(10, 64)
    ids = torch.tensor([[1, 2]])
    torch.testing.assert_close(emb(ids), emb.weight[ids] * 8.0)
    unscaled = TokenEmbedding(10, 64, scale=False)
    torch.testing.assert_close(unscaled(ids), unscaled.weight[ids])

"""The decoding steps' output layer as (W h^T)^T equals the nn.Linear output layer."""

import pytest
import torch

from transformer.config import ModelConfig
from transformer.model import Transformer
from transformer.model import transformer as transformer_module


@pytest.mark.parametrize("output_bias", [False, True])
@pytest.mark.parametrize("rows", [1, 5, 64])
def test_small_product_equals_the_linear_layer(output_bias, rows):
    cfg = ModelConfig(src_vocab_size=300, tgt_vocab_size=300, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=1,
                      n_decoder_layers=1, output_bias=output_bias, tie_output=not output_bias)
    torch.manual_seed(0)
    model = Transformer(cfg).eval()
    if output_bias:
        torch.nn.init.normal_(model.output.bias)
    hidden = torch.randn(rows, 1, 32, dtype=torch.float64).float()
    with torch.no_grad():
        got = model._logits(hidden)
        expected = (hidden.double() @ model.output.weight.double().t()
                    + (model.output.bias.double() if output_bias else 0)).float()
    assert got.shape == (rows, 1, 300) and got.is_contiguous()
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_small_product_only_without_autograd_and_for_few_rows(monkeypatch):
    cfg = ModelConfig(src_vocab_size=50, tgt_vocab_size=50, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1,
                      n_decoder_layers=1)
    model = Transformer(cfg).eval()
    calls = []
    monkeypatch.setattr(model.output, "forward", lambda h: calls.append(h.shape) or torch.zeros(*h.shape[:-1], 50))
    with torch.no_grad():
        model._logits(torch.randn(4, 1, 16))  # the small product
        model._logits(torch.randn(transformer_module.SMALL_PRODUCT_ROWS + 1, 1, 16))  # too many rows
        model._logits(torch.randn(4, 1, 16, dtype=torch.float64))  # not float32
    model._logits(torch.randn(4, 1, 16, requires_grad=True))  # autograd: the layer
    assert calls == [(65, 1, 16), (4, 1, 16), (4, 1, 16)]


def test_greedy_decoding_is_unchanged_by_the_small_product(monkeypatch):
    from transformer.decoding import greedy_search

    cfg = ModelConfig(src_vocab_size=60, tgt_vocab_size=60, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
                      n_decoder_layers=2)
    torch.manual_seed(1)
    model = Transformer(cfg).eval()
    src = torch.randint(4, 60, (6, 9))
    mask = torch.ones_like(src, dtype=torch.bool)
    results = []
    for rows in (64, 0):  # 0: every product through the nn.Linear layer
        monkeypatch.setattr(transformer_module, "SMALL_PRODUCT_ROWS", rows)
        hyps = greedy_search(model, src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=12)
        results.append([h.tokens for h in hyps])
    assert results[0] == results[1]

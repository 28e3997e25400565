"""Encoding a padded batch in groups of similar length (Transformer.encode without autograd on
CPU) equals encoding it as one batch at every real position."""

import pytest
import torch

from transformer.config import ModelConfig
from transformer.decoding import beam_search, greedy_search
from transformer.model import Transformer
from transformer.model import transformer as transformer_module


def _model() -> Transformer:
    cfg = ModelConfig(src_vocab_size=90, tgt_vocab_size=90, d_model=32, n_heads=4, d_ff=64, n_encoder_layers=2,
                      n_decoder_layers=2)
    torch.manual_seed(0)
    return Transformer(cfg).eval()


def _batch(lengths: list[int], width: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    width = width or max(lengths)
    src = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    src[mask] = torch.randint(4, 90, (int(mask.sum()),))
    return src, mask


def _widths(model: Transformer) -> list[int]:
    """Records the width of every batch the encoder stack runs."""
    widths: list[int] = []
    model.encoder.register_forward_pre_hook(lambda module, args: widths.append(args[0].shape[1]))
    return widths


def test_grouped_memory_equals_one_batch_at_real_positions(monkeypatch):
    model = _model()
    monkeypatch.setattr(transformer_module, "GROUP_MIN_TOKENS", 8)
    monkeypatch.setattr(transformer_module, "GROUP_MIN_SAVING", 64)
    torch.manual_seed(1)
    lengths = [3, 40, 5, 17, 4, 39, 12, 3, 25, 6, 30, 8]
    src, mask = _batch(lengths)
    widths = _widths(model)
    with torch.no_grad():
        grouped = model.encode(src, mask)
        groups = list(widths)
        whole = model.encoder(src, mask)[0]
    widths = groups
    assert len(widths) > 3 and max(widths) == 40 and min(widths) < 10  # several groups, each cut to its longest
    torch.testing.assert_close(grouped[mask], whole[mask], rtol=1e-5, atol=1e-5)
    assert grouped[0, 10:].eq(0).all() and grouped.isfinite().all()  # past its group's width: zeros


def test_one_batch_where_grouping_does_not_apply(monkeypatch):
    model = _model()
    monkeypatch.setattr(transformer_module, "GROUP_MIN_TOKENS", 8)
    monkeypatch.setattr(transformer_module, "GROUP_MIN_SAVING", 64)
    widths = _widths(model)
    torch.manual_seed(2)
    src, mask = _batch([3, 40, 5, 17, 4, 39, 12, 3])
    model.encode(src, mask)  # autograd on
    with torch.no_grad():
        model.encode(*_batch([20, 19, 18, 20, 17]))  # little padding
        model.encode(src.flip(1), mask.flip(1))  # padding at the start
        model.encode(src[:1], mask[:1])  # one sentence
    assert widths == [40, 20, 40, 40]  # each in one batch of its full width


def test_min_tokens_merge_short_groups(monkeypatch):
    model = _model()
    monkeypatch.setattr(transformer_module, "GROUP_MIN_SAVING", 64)
    widths = _widths(model)
    src, mask = _batch([2, 3, 4, 5, 6, 7, 8, 9, 40, 40])  # the short ones hold < GROUP_MIN_TOKENS tokens
    with torch.no_grad():
        model.encode(src, mask)
    assert widths == [40]


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_decoding_unchanged(monkeypatch, strategy):
    model = _model()
    monkeypatch.setattr(transformer_module, "GROUP_MIN_TOKENS", 8)
    monkeypatch.setattr(transformer_module, "GROUP_MIN_SAVING", 64)
    torch.manual_seed(3)
    src, mask = _batch([3, 30, 5, 17, 4, 29, 12, 3, 22, 6])
    results = []
    for grouped in (True, False):
        if not grouped:
            monkeypatch.setattr(Transformer, "_encode_by_length", lambda *a: None)
        if strategy == "greedy":
            hyps = greedy_search(model, src, mask, bos_id=1, eos_id=2, max_len_a=0, max_len_b=8)
            results.append([h.tokens for h in hyps])
        else:
            hyps = beam_search(model, src, mask, bos_id=1, eos_id=2, beam_size=3, max_len_a=0, max_len_b=8)
            results.append([[h.tokens for h in hs] for hs in hyps])
    assert results[0] == results[1]


def test_small_savings_keep_one_batch(monkeypatch):
    model = _model()
    monkeypatch.setattr(transformer_module, "GROUP_MIN_TOKENS", 8)
    widths = _widths(model)
    src, mask = _batch([3, 40, 5, 17, 4, 39, 12, 3, 25, 6, 30, 8])  # saves < GROUP_MIN_SAVING positions
    with torch.no_grad():
        model.encode(src, mask)
    assert widths == [40]

"""``Translator._encode_by_length``: a padded CPU batch encoded in groups of sentences of similar
length equals the batch encoded whole at every real position, and grouping happens only where
there is enough padding to save."""

import pytest
import torch

import transformer.translate.translator as translator_module
from transformer.config import ModelConfig
from transformer.corpus.builtin import generate_pairs
from transformer.decoding import DecodeConfig
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate.translator import Translator


@pytest.fixture(scope="module")
def vocab():
    return Vocabularies.train(generate_pairs(400, seed=1), vocab_size=400)


@pytest.fixture
def translator(vocab):
    cfg = ModelConfig(src_vocab_size=vocab.src.vocab_size, tgt_vocab_size=vocab.tgt.vocab_size, d_model=32,
                      n_heads=4, d_ff=64, n_encoder_layers=2, n_decoder_layers=2)
    torch.manual_seed(0)
    translator = Translator(Transformer(cfg), vocab, decoding=DecodeConfig(strategy="greedy", max_len_b=8),
                            max_tokens=10**6)
    yield translator
    translator.close()


@pytest.fixture
def small_groups(monkeypatch):
    """Groups worth making in small test batches (the defaults suit batches of thousands of tokens)."""
    monkeypatch.setattr(translator_module, "GROUP_MIN_TOKENS", 8)
    monkeypatch.setattr(translator_module, "GROUP_MIN_SAVING", 64)


def _batch(lengths: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(lengths)
    src = torch.zeros(len(lengths), width, dtype=torch.long)
    mask = torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]
    src[mask] = torch.randint(4, 400, (int(mask.sum()),))
    return src, mask


def _widths(model: Transformer) -> list[int]:
    """Records the width of every batch the encoder stack runs."""
    widths: list[int] = []
    model.encoder.register_forward_pre_hook(lambda module, args: widths.append(args[0].shape[1]))
    return widths


def test_grouped_memory_equals_one_batch_at_real_positions(engine, translator, small_groups):
    """(engine first: the switch is set before the translator prepares its model.)"""
    model = translator.model
    torch.manual_seed(1)
    lengths = [3, 40, 5, 17, 4, 39, 12, 3, 25, 6, 30, 8]
    src, mask = _batch(lengths)
    widths = _widths(model)
    grouped = translator._encode_by_length(src, mask, lengths)
    groups = list(widths)
    with torch.inference_mode():
        whole = model.encode(src, mask)
    assert grouped is not None and grouped.shape == whole.shape
    assert len(groups) > 3 and max(groups) == 40 and min(groups) < 10  # several groups, each cut to its longest
    assert sum(groups) < len(groups) * 40
    torch.testing.assert_close(grouped[mask], whole[mask], rtol=1e-5, atol=1e-5)
    assert grouped[0, 10:].eq(0).all() and grouped.isfinite().all()  # past its group's width: zeros


def test_one_batch_where_grouping_does_not_pay(translator, small_groups):
    widths = _widths(translator.model)
    torch.manual_seed(2)
    for lengths in ([20, 19, 18, 20, 17],  # little padding
                    [40]):  # one sentence
        assert translator._encode_by_length(*_batch(lengths), lengths) is None, lengths
    assert widths == []  # nothing was encoded: the caller encodes the batch whole


def test_grouping_needs_a_quarter_of_the_batch_to_be_padding(translator, small_groups, monkeypatch):
    monkeypatch.setattr(translator_module, "GROUP_MIN_SAVING", 1)  # any saving would do
    little = [20] * 6 + [12] * 2  # 15% padding: one batch, though two groups would save 16 positions
    assert translator._encode_by_length(*_batch(little), little) is None
    more = [20] * 2 + [12] * 6  # 30% padding: groups
    assert translator._encode_by_length(*_batch(more), more) is not None


def test_min_tokens_merge_short_groups(translator, monkeypatch):
    monkeypatch.setattr(translator_module, "GROUP_MIN_SAVING", 64)
    lengths = [2, 3, 4, 5, 6, 7, 8, 9, 40, 40]  # the short ones hold < GROUP_MIN_TOKENS tokens: one group
    assert translator._encode_by_length(*_batch(lengths), lengths) is None
    monkeypatch.setattr(translator_module, "GROUP_MIN_TOKENS", 8)
    assert translator._encode_by_length(*_batch(lengths), lengths) is not None


def test_small_savings_keep_one_batch(translator, monkeypatch):
    monkeypatch.setattr(translator_module, "GROUP_MIN_TOKENS", 8)
    lengths = [3, 40, 5, 17, 4, 39, 12, 3, 25, 6, 30, 8]  # saves fewer than GROUP_MIN_SAVING positions
    assert translator._encode_by_length(*_batch(lengths), lengths) is None
    monkeypatch.setattr(translator_module, "GROUP_MIN_SAVING", 64)
    assert translator._encode_by_length(*_batch(lengths), lengths) is not None


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_translations_unchanged(translator, small_groups, monkeypatch, strategy):
    words = [f for f, _ in generate_pairs(30, seed=5)]
    texts = [" ".join(words[i: i + (1 if i % 3 else 4)]) for i in range(0, 30, 2)]  # one or four sentences each
    translator = translator.with_decoding(strategy=strategy, beam_size=3)
    widths = _widths(translator.model)
    grouped = translator.translate_n_best(texts)
    assert len(widths) > 1  # one batch, encoded in groups
    widths.clear()
    monkeypatch.setattr(Translator, "_encode_by_length", lambda *args: None)
    whole = translator.translate_n_best(texts)
    assert len(widths) == 1
    assert [[h.tokens for h in hs] for hs in grouped] == [[h.tokens for h in hs] for hs in whole]
    assert [h.score for hs in grouped for h in hs] == pytest.approx([h.score for hs in whole for h in hs], abs=1e-4)

"""Forced decoding (``Translator.score_translations``, ``transformer/translate/forced.py``): a given
translation scored in the units of the model's own hypotheses.

A random tiny model whose output layer favours ``</s>`` a little (a bias on it) so that some of its
translations end before the length limit: those are the hypotheses whose score is the sum the
forced pass must reproduce (one cut at the limit never scored ``</s>``).
"""

from __future__ import annotations

import random

import pytest
import torch

from transformer.config import preset
from transformer.corpus.builtin import generate_pairs
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate.translator import Translator

EOS_BIAS = 2.0  # ends some greedy translations early, others run to the limit (measured on this seed)


@pytest.fixture(scope="module")
def translator():
    vocab = Vocabularies.train(generate_pairs(400, seed=1), vocab_size=400)
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size, output_bias=True)).requires_grad_(False)
    model.output.bias[vocab.tgt.eos_id] = EOS_BIAS
    translator = Translator(model, vocab)
    yield translator
    translator.close()


@pytest.fixture(scope="module")
def sources():
    return [source for source, _ in generate_pairs(30, seed=3)]


def _ended(translator, sources, hyps):
    """The (source, hypothesis) pairs whose hypothesis ended with </s> before the length limit."""
    limits = [translator._output_positions(len(ids)) for ids in translator.encode_sources(sources)]
    return [(s, h[0]) for s, h, limit in zip(sources, hyps, limits) if len(h[0].tokens) < limit]


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_the_models_own_translation_scores_its_hypothesis_score(translator, sources, strategy):
    t = translator.with_decoding(strategy=strategy)
    ended = _ended(t, sources, t.translate_n_best(sources))
    assert len(ended) >= 3, "the fixture's model should end some translations early"
    scores = t.score_translations([s for s, _ in ended], [h.tokens for _, h in ended])
    for (_, h), f in zip(ended, scores):
        assert f.complete and f.steps == len(h.tokens) + 1
        assert f.log_prob == pytest.approx(h.log_prob, rel=1e-5, abs=1e-4)
        assert f.score == pytest.approx(h.score, rel=1e-5, abs=1e-4)
    # the same pairs given as texts: the detokenized translation, tokenized again
    texts = t.score_translations([s for s, _ in ended], [t.detokenize(h) for _, h in ended])
    same = [f for (_, h), f in zip(ended, texts) if t.vocab.tgt.encode(t.detokenize(h)) == h.tokens]
    assert same and all(f.score == pytest.approx(g.score, abs=1e-4) for f, g in zip(texts, scores) if f in same)


def test_a_random_string_scores_far_lower(translator, sources):
    t = translator.with_decoding(strategy="greedy")
    ended = _ended(t, sources, t.translate_n_best(sources))
    rng = random.Random(0)
    junk = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz ") for _ in range(40)) for _ in ended]
    own = t.score_translations([s for s, _ in ended], [h.tokens for _, h in ended])
    random_ = t.score_translations([s for s, _ in ended], junk)
    for mine, theirs in zip(own, random_):
        assert theirs.mean_log_prob < mine.mean_log_prob - 1.0


def test_a_pairs_score_does_not_depend_on_its_batch(translator, sources):
    targets = ["the singer", "a very long sentence " * 6, "", "la plage est blanche et le chat dort sur la table ."]
    mixed_sources = [sources[0], sources[5] * 3, sources[2], sources[1]]
    together = translator.score_translations(mixed_sources, targets)
    for source, target, batched in zip(mixed_sources, targets, together):
        alone = translator.score_translations([source], [target])[0]
        assert alone.steps == batched.steps
        assert alone.log_prob == pytest.approx(batched.log_prob, abs=1e-4)


def test_a_target_past_the_learned_positions_is_scored_up_to_them(tiny_run):
    t = Translator.from_run_dir(tiny_run())  # learned positions: 64
    long, short = t.score_translations(["Le chat dort."] * 2, [[5] * 100, [5] * 10])
    assert (long.steps, long.complete) == (64, False)
    assert (short.steps, short.complete) == (11, True)
    assert long.end_log_prob is None and short.end_log_prob < 0  # the end of the long one was never scored


def test_the_end_is_scored_on_its_own(translator, sources):
    t = translator.with_decoding(strategy="greedy")
    source, hypothesis = _ended(t, sources, t.translate_n_best(sources))[0]
    found = t.score_translations([source], [hypothesis.tokens])[0]
    src = torch.tensor([t.encode_sources([source])[0]])
    mask = torch.ones_like(src, dtype=torch.bool)
    logits = t.model.decode(torch.tensor([[t.vocab.tgt.bos_id, *hypothesis.tokens]]), t.model.encode(src, mask), mask)
    last = torch.log_softmax(logits[0, -1].double(), dim=-1)
    assert found.end_log_prob == pytest.approx(float(last[t.vocab.tgt.eos_id]), abs=1e-4)
    assert found.end_log_prob == pytest.approx(float(last.max()), abs=1e-4)  # greedy ended there: </s> was best


def test_an_unreadable_source_has_no_score_and_a_lone_string_is_refused(translator):
    assert translator.score_translations(["", "Le chat."], ["x", "The cat."])[0] is None
    with pytest.raises(TypeError, match="lists"):
        translator.score_translations("Le chat.", "The cat.")
    with pytest.raises(ValueError, match="2 sources for 1 targets"):
        translator.score_translations(["a", "b"], ["c"])

"""The text pipeline's two ends without a model: plan (sentences -> inputs) and assemble (outputs ->
sentences), with a tokenizer that counts words."""

from __future__ import annotations

import pytest

from transformer.translate.pipeline import ModelOutput, fitting_spans, per_text, plan, rounds


def words(texts: list[str]) -> list[list[int]]:
    return [list(range(len(text.split()))) for text in texts]


def test_a_sentence_over_the_limit_is_planned_in_pieces_with_its_prefix():
    planned = plan(["un deux trois.", "a b c d e f, g h i j k."], words, 4, [">>fra<< ", ""])
    assert planned.tokens == [4, 11]
    assert planned.spans[0] == [(0, 14)]
    assert planned.inputs[0] == ">>fra<< un deux trois."
    assert len(planned.spans[1]) > 1 and planned.inputs[1:] == [planned.sentences[1][a:b] for a, b in planned.spans[1]]
    assert all(len(piece.split()) <= 4 for piece in planned.inputs)


def test_pieces_are_joined_back_into_their_sentence():
    planned = plan(["alpha.", "a b c, d e f."], words, 3)
    assert len(planned.inputs) == 3  # the second sentence in two pieces
    outputs = [ModelOutput([("A.", -1.0, -2.0)], (), 0.9),
               ModelOutput([("x", -1.0, -3.0), ("y", -3.0, -5.0)], ("t1",), 0.5),
               ModelOutput([("z", -2.0, -4.0)], ("t1", "t2"), 0.7)]
    first, second = planned.assemble(outputs)
    assert first == ModelOutput([("A.", -1.0, -2.0)], (), 0.9)
    # k-th hypothesis: each piece's k-th (its last when it has fewer), scores averaged, log-probabilities summed
    assert second.hyps == [("x z", -1.5, -7.0), ("y z", -2.5, -9.0)]
    assert second.missing == ("t1", "t1", "t2") and second.confidence == 0.5
    with pytest.raises(ValueError, match="2 model outputs for 3 inputs"):
        planned.assemble(outputs[:2])


def test_a_piece_without_hypotheses_and_an_unknown_confidence():
    planned = plan(["a b c, d e f."], words, 3)
    (sentence,) = planned.assemble([ModelOutput([]), ModelOutput([("z", -2.0)], (), None)])
    assert sentence == ModelOutput([("z", -2.0)], (), None)
    (nothing,) = plan([""], words, 3).assemble([ModelOutput([])])
    assert nothing == ModelOutput([], (), None)


def test_rounds_put_every_sentences_kth_hypothesis_in_the_text():
    hyps = [[("a", -1.0, -1.0), ("b", -3.0, -2.0)], [], [("c", -2.0, -4.0)]]
    got = rounds(hyps, 3, "|".join, ("", 0.0, 0.0))
    assert got == [("a||c", -1.0, -5.0), ("b||c", -5 / 3, -6.0), ("b||c", -5 / 3, -6.0)]
    assert rounds([], 1, "|".join, ("", 0.0, 0.0)) == [("", 0.0, 0)]  # a text without a sentence


def test_fitting_spans_and_per_text():
    assert fitting_spans("a b c", lambda text: len(text.split()), 3) == [(0, 5)]
    assert [("a b c d"[a:b]) for a, b in fitting_spans("a b c d", lambda text: len(text.split()), 2)] == ["a b", "c d"]
    assert per_text([2, 0, 1], ["x", "y", "z"]) == [["x", "y"], [], ["z"]]

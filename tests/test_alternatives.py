"""Alternative translations (transformer/translate/alternatives.py): n distinct translations per
text, the beam's n-best deduplicated after detokenisation, the first always the translation.

``distinct`` and ``combine`` on hand-made lists; ``translate_alternatives`` on the small random
model of the tiny_run fixture, whose n-best holds duplicates after detokenisation (byte tokens of an
incomplete character all read as U+FFFD), checked against the translator's own n-best.
"""

from __future__ import annotations

import pytest

from transformer.translate.alternatives import combine, distinct, translate_alternatives
from transformer.translate.document import translate_document
from transformer.translate.segment import segment_text
from transformer.translate.translator import Translator

DUPLICATED = "je suis étudiant"  # its 4-best holds a text twice
TEXTS = [DUPLICATED, "le chat noir dort", "Je suis étudiant. Le chat noir dort.\n\nNous mangeons."]


@pytest.fixture(scope="module")
def translator(tiny_run) -> Translator:
    base = Translator.from_run_dir(tiny_run())
    return base.with_decoding(max_len_a=0.0, max_len_b=8)  # beam 4, the paper's


def detokenised_n_best(translator: Translator, sentences: list[str]) -> list[list[str]]:
    wide = translator.with_decoding(n_best=translator.decoding.beam_size)
    return [[wide.detokenize(h) for h in hyps] for hyps in wide.translate_n_best(sentences)]


# --------------------------------------------------------------------------------------------- the rules
def test_distinct_keeps_the_first_of_each_text_in_order_and_reads_no_further_than_needed():
    assert distinct(["b", "a", "b", "c", "a"]) == ["b", "a", "c"]
    assert distinct(["b", "a", "b", "c", "a"], 2) == ["b", "a"]
    assert distinct([], 3) == []

    def texts():
        yield from ("x", "x", "y")
        raise AssertionError("read past the second distinct text")

    assert distinct(texts(), 2) == ["x", "y"]


def test_combine_takes_each_sentences_kth_distinct_translation_then_deduplicates():
    join = " | ".join
    # sentence 1 has two distinct texts, sentence 2 one: the k-th takes sentence 2's last
    assert combine([["a", "a", "b"], ["x", "x"]], 5, join) == ["a | x", "b | x"]
    assert combine([["a", "b", "c"], ["x", "y"]], 5, join) == ["a | x", "b | y", "c | y"]
    assert combine([["a", "b", "c"], ["x", "y"]], 2, join) == ["a | x", "b | y"]
    assert combine([[], ["x", "y"]], 5, join) == [" | x", " | y"]  # a sentence without a translation: ""
    # texts built the same from different choices count once
    assert combine([["A", "a", "b"]], 5, lambda chosen: chosen[0].lower()) == ["a", "b"]


# --------------------------------------------------------------------------------------------- the library
def test_the_first_is_the_translation_and_the_rest_distinct(translator):
    got = translate_alternatives(translator, TEXTS, 4)
    assert [alternatives[0] for alternatives in got] == [translate_document(translator, t).text for t in TEXTS]
    for alternatives in got:
        assert 1 <= len(alternatives) <= 4 and len(set(alternatives)) == len(alternatives)


def test_one_sentence_gets_its_detokenised_n_best_deduplicated(translator):
    n_best = detokenised_n_best(translator, [DUPLICATED, "le chat noir dort"])
    assert len(set(n_best[0])) < len(n_best[0]) == 4  # the model's duplicates are there to be removed
    got = translate_alternatives(translator, [DUPLICATED, "le chat noir dort"], 4)
    assert got == [list(dict.fromkeys(texts)) for texts in n_best]
    assert len(got[0]) == 3


def test_a_text_of_several_sentences_takes_each_sentences_kth_distinct_translation(translator):
    text = TEXTS[2]
    document = segment_text(text, translator.src_lang)
    per_sentence = [list(dict.fromkeys(texts)) for texts in detokenised_n_best(translator, document.sentences)]
    want = []
    for k in range(max(len(texts) for texts in per_sentence)):
        built = document.rebuild([texts[min(k, len(texts) - 1)] for texts in per_sentence])
        if built not in want:
            want.append(built)
    assert translate_alternatives(translator, [text], 10) == [want[:4]]  # at most beam_size
    assert translate_alternatives(translator, [text], 2) == [want[:2]]
    assert all(alternative.count("\n\n") == 1 for alternative in want)  # the text's structure kept


def test_more_than_the_beam_size_is_capped_and_the_best_unchanged(translator):
    got = translate_alternatives(translator, TEXTS, 12)
    assert got == translate_alternatives(translator, TEXTS, 4)
    wider = translator.with_decoding(beam_size=8)
    assert all(len(a) <= 8 for a in translate_alternatives(wider, TEXTS, 12))
    assert [a[0] for a in translate_alternatives(wider, TEXTS, 12)] == [translate_document(wider, t).text
                                                                        for t in TEXTS]


def test_greedy_gives_one_and_sampling_is_refused(translator):
    greedy = translator.with_decoding(strategy="greedy")
    assert translate_alternatives(greedy, TEXTS, 3) == [[translate_document(greedy, t).text] for t in TEXTS]
    with pytest.raises(ValueError, match="alternatives come from beam search"):
        translate_alternatives(translator.with_decoding(strategy="sample"), TEXTS, 3)


def test_n_of_one_blank_texts_and_bad_arguments(translator):
    assert translate_alternatives(translator, TEXTS, 1) == [[translate_document(translator, t).text] for t in TEXTS]
    assert translate_alternatives(translator, ["", "  \n", DUPLICATED], 2)[:2] == [[""], ["  \n"]]
    assert translate_alternatives(translator, [], 2) == []
    for bad in (0, -1, True, 2.0, "3"):
        with pytest.raises(ValueError, match="n must be an integer >= 1"):
            translate_alternatives(translator, TEXTS, bad)
    with pytest.raises(TypeError, match="wrap a single text in a list"):
        translate_alternatives(translator, DUPLICATED, 2)
    with pytest.raises(TypeError, match="text 2 is int"):
        translate_alternatives(translator, [DUPLICATED, 3], 2)

"""Fuzzy matches of the translation memory as glossary terms (``--tm-constraints``,
transformer/translate/tm_terms.py): the phrases a sentence shares with its match, aligned to the
match's translation, are constraints of its beam search where the model is unsure of its own
translation.

The phrase rules are checked on word matrices written by hand; the word matrix of a real model
against its attention maps summed by hand; the whole path (``transformer translate``) with the
alignment replaced by a word-for-word one, since a tiny random model's attention aligns nothing."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from transformer.decoding import Hypothesis
from transformer.memory import TranslationMemory
from transformer.translate.glossary import Glossary, Term
from transformer.translate.tm import MemoryTranslator
from transformer.translate.tm_terms import (_phrase_terms, memory_terms, unsure, users_unmet, with_memory_terms,
                                            word_matrices)

ENTRY = ("Le petit chat dort dans la maison.", "The little cat sleeps in the house.")
SENTENCE = "Le petit chat dort dans la grande maison."
WORD_FOR_WORD = [Term("Le petit chat dort dans la", "The little cat sleeps in the"), Term("maison", "house")]


def links(n_target: int, n_source: int, pairs: dict[int, int], back: dict[int, int] | None = None) -> np.ndarray:
    """A word matrix in which target word j attends most to source word ``pairs[j]`` and source
    word i is attended most by target word ``back[i]`` (default: the first j linked to it)."""
    matrix = np.full((n_target, n_source), 0.01)
    for j, i in pairs.items():
        matrix[j, i] = 0.5
    for i, j in (back or {}).items():
        matrix[j, i] = 0.9
    return matrix


def test_shared_phrases_become_terms_with_the_words_that_translate_them():
    source, target = "Je suis allé au cinéma hier.", "I went to the cinema yesterday."
    # I-Je, went-allé, to-au, the-au, cinema-cinéma, yesterday-hier; suis is attended most by went
    matrix = links(6, 6, {0: 0, 1: 2, 2: 3, 3: 3, 4: 4, 5: 5}, back={1: 1})
    terms = _phrase_terms("Je suis allé au marché hier.", source, target, matrix)
    assert terms == [Term("Je suis allé au", "I went to the"), Term("hier", "yesterday")]


def test_a_phrase_whose_span_holds_a_word_of_another_source_word_is_dropped():
    source, target = "Je suis allé au cinéma hier.", "I went to the cinema yesterday."
    # "to" attends most to cinéma, which the sentence does not share, and lies between "I" and
    # "the": "I went to the" is not the translation of "Je suis allé au" alone
    matrix = links(6, 6, {0: 0, 1: 2, 2: 4, 3: 3, 4: 4, 5: 5}, back={1: 1, 4: 4})
    assert _phrase_terms("Je suis allé au marché hier.", source, target, matrix) == [Term("hier", "yesterday")]
    # the same words, "the" outside the phrase's span: "I went" is its translation
    matrix = links(6, 6, {0: 0, 1: 2, 2: 4, 3: 4, 4: 4, 5: 5}, back={1: 1, 3: 1, 4: 4})
    assert _phrase_terms("Je suis allé au marché hier.", source, target, matrix)[0] == Term("Je suis allé au", "I went")


def test_words_compare_without_case_and_punctuation_and_phrases_stop_at_punctuation():
    source, target = "Il fait froid. Fermez la fenêtre !", "It is cold. Close the window!"
    matrix = links(6, 7, {0: 0, 1: 1, 2: 2, 3: 3, 4: 4, 5: 5})
    terms = _phrase_terms("il fait FROID. Fermez la porte !", source, target, matrix)
    # "froid." ends the first phrase; "fenêtre" differs; "!" alone holds no word
    assert terms == [Term("il fait FROID", "It is cold"), Term("Fermez la", "Close the")]


def test_nothing_shared_no_terms():
    assert _phrase_terms("Bonjour.", "Au revoir.", "Goodbye.", links(1, 2, {0: 0})) == []


def test_the_word_matrix_sums_a_source_words_pieces_and_averages_a_target_words(pair_translators):
    translator = pair_translators["fr", "en"]
    pairs = [ENTRY, ("Anticonstitutionnellement, oui.", "Unconstitutionally, yes.")]
    matrices = word_matrices(translator, pairs)
    for (source, target), matrix in zip(pairs, matrices):
        src, tgt = translator.vocab.src.encode(source), translator.vocab.tgt.encode(target)
        tgt = tgt[:-1] if tgt[-1] == translator.vocab.tgt.eos_id else tgt
        maps = translator.model.attention_maps(torch.tensor([src]), torch.tensor([[translator.vocab.tgt.bos_id] + tgt[:-1]]),
                                                torch.ones(1, len(src), dtype=torch.bool))
        layer = len(maps.cross) - 2 if len(maps.cross) > 1 else 0
        attention = maps.cross[layer][0].mean(0).numpy()  # (T, S)
        src_word, tgt_word = _words(translator.vocab.src, src), _words(translator.vocab.tgt, tgt)
        assert None not in tgt_word
        expected = np.zeros((len(target.split()), len(source.split())))
        for j, wj in enumerate(tgt_word):
            for i, wi in enumerate(src_word):
                if wi is not None:
                    expected[wj, wi] += attention[j, i] / tgt_word.count(wj)
        assert matrix.shape == expected.shape and np.allclose(matrix, expected, atol=1e-5)
    source = translator.vocab.src.encode(pairs[1][0])
    assert len([w for w in _words(translator.vocab.src, source) if w is not None]) > len(pairs[1][0].split())


def _words(tokenizer, ids):
    """Each piece's whitespace word (None for <s> and </s>), counted by hand in the text the pieces
    up to it decode to; a piece that only adds a space belongs to the word after it."""
    out = []
    for k, token in enumerate(ids):
        if token in (tokenizer.bos_id, tokenizer.eos_id):
            out.append(None)
            continue
        text = tokenizer.decode(ids[: k + 1]) or " "
        out.append(len(text.split()) - 1 + (not text or text[-1].isspace()))
    return out


def test_pairs_the_model_cannot_align_give_none(pair_translators):
    translator = pair_translators["fr", "en"]
    long = " ".join(["chat"] * (translator.max_input_tokens + 5))
    assert word_matrices(translator, [(long, "cat"), (ENTRY[0], "cat " * 400), ENTRY])[:2] == [None, None]

    class NoAttention:
        vocab, model = translator.vocab, object()

    assert word_matrices(NoAttention(), [ENTRY]) == [None]
    with pytest.raises(ValueError, match="1 sentences for 2 matches"):
        memory_terms(translator, [SENTENCE], [None, None])


def test_the_users_glossary_wins_and_only_its_terms_are_reported_unmet():
    users = Glossary([Term("maison", "home")])
    searched = with_memory_terms(users, WORD_FOR_WORD, SENTENCE)
    assert searched.terms == (Term("maison", "home"), WORD_FOR_WORD[0])
    assert with_memory_terms(None, WORD_FOR_WORD, SENTENCE).terms == tuple(WORD_FOR_WORD)
    found = searched.matches(SENTENCE)  # in the sentence's order: the memory's phrase, then maison
    hypothesis = Hypothesis([5], -1.0, unmet=(0, 1))
    users_unmet([hypothesis], found, users.matches(SENTENCE))
    assert hypothesis.unmet == (0,)  # maison -> home, as numbered among the user's terms


def test_a_memory_term_that_would_drop_a_users_term_from_the_search_is_left_out():
    # longer than the user's "chat" and over it; or worded "house" as the user's "grande maison"
    # is, and found first: either would leave the user's term unsearched
    users = Glossary([Term("chien", "dog"), Term("chat", "kitty"), Term("grande maison", "house")])
    memory = [Term("Le petit chat dort dans la", "The little cat sleeps in the"), Term("Le petit", "The little"),
              Term("dort dans", "house")]
    searched = with_memory_terms(users, memory, SENTENCE)
    assert searched.terms == (*users.terms[1:], memory[1])  # of the user's, those found: not all indexed again
    assert set(users.matches(SENTENCE)) <= set(searched.matches(SENTENCE))


@pytest.fixture(scope="module")
def run_dir(pair_runs):
    return pair_runs["fr", "en"]


@pytest.fixture
def memory(tmp_path):
    path = tmp_path / "memory.db"
    with TranslationMemory(path) as store:
        entry = store.add(*ENTRY, "fr", "en", origin="reviewer", status="accepted")
    return path, entry.id


def translate(cli, run_dir, *argv: str):
    return cli("translate", run_dir, "--beam", "4", "--threads", "1", "--no-progress", *argv)


def test_translate_puts_the_memorys_terms_in_the_translation(run_dir, memory, word_for_word, cli):
    path, entry_id = memory
    status, without, _ = translate(cli, run_dir, SENTENCE)
    assert status == 0 and "The little cat sleeps in the" not in without
    status, out, err = translate(cli, run_dir, SENTENCE, "--tm", str(path), "--tm-constraints", "--json")
    assert status == 0, err
    [sentence] = json.loads(out)["sentences"]
    assert sentence["memory_terms"] == [{"source": t.source, "target": t.target, "id": entry_id} for t in WORD_FOR_WORD]
    assert word_for_word == [ENTRY]
    translation = json.loads(out)["translation"]
    assert all(term.target in translation for term in WORD_FOR_WORD), translation
    status, plain, _ = translate(cli, run_dir, SENTENCE, "--tm", str(path), "--tm-constraints")
    assert status == 0 and plain.strip() == translation
    status, out, _ = translate(cli, run_dir, SENTENCE, "--tm", str(path), "--json")
    assert "memory_terms" not in json.loads(out)["sentences"][0]  # an option: off, the match is an alternative


@pytest.mark.parametrize("term, kept", [
    (("maison", "home"), WORD_FOR_WORD[:1]),  # the same source: the user's target, the memory's other term
    # "Le petit chat dort dans la" holds "chat", and a longer match wins a glossary's search: the
    # memory's phrase would drop the user's term from the translation without a word
    (("chat", "kitty"), WORD_FOR_WORD[1:]),
])
def test_the_users_glossary_wins_over_the_memorys_terms(term, kept, run_dir, memory, word_for_word, tmp_path, cli):
    path, _ = memory
    glossary = tmp_path / "terms.tsv"
    glossary.write_text("\t".join(term) + "\n", encoding="utf-8")
    status, out, err = translate(cli, run_dir, SENTENCE, "--tm", str(path), "--tm-constraints", "--json",
                                 "--glossary", str(glossary))
    assert status == 0, err
    record = json.loads(out)
    assert all(target in record["translation"] for target in [term[1], *(t.target for t in kept)]), record["translation"]
    assert [t["source"] for t in record["sentences"][0]["memory_terms"]] == [t.source for t in kept]


@pytest.mark.parametrize("argv, message", [
    (["--tm-constraints"], "--tm-constraints is for --tm"),
    (["--tm", "{memory}", "--tm-constraints", "--greedy"], "greedy decoding cannot"),
])
def test_constraints_need_a_memory_and_beam_search(argv, message, run_dir, memory, cli):
    status, out, err = cli("translate", run_dir, "--no-progress", SENTENCE,
                           *(a.format(memory=memory[0]) for a in argv))
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err


def test_a_translation_is_unsure_below_the_mean_log_probability_per_token():
    assert not unsure([Hypothesis([5], -1.0)])  # -1.0 over a token and </s>: -0.5 each
    assert unsure([Hypothesis([5], -2.0)]) and not unsure([])
    assert not unsure([Hypothesis([5], -2.0)], below=-1.5)


def test_only_translations_the_model_is_unsure_of_get_the_memorys_terms(pair_translators, memory, word_for_word):
    path, entry_id = memory
    translator = pair_translators["fr", "en"].with_decoding(strategy="beam", beam_size=4)
    own = translator.translate_n_best([SENTENCE])[0][0]
    mean = own.log_prob / (len(own.tokens) + 1)  # a random model: far below UNSURE_LOG_PROB
    with TranslationMemory(path) as store:
        for below, given in ((mean + 0.01, True), (mean - 0.01, False)):
            translating = MemoryTranslator(translator, store, "fr", "en", constraints=True, unsure_below=below)
            [hyps] = translating.translate_n_best([SENTENCE])
            text = translating.detokenize(hyps[0])
            if given:
                assert [term for term, _ in translating.terms[SENTENCE]] == WORD_FOR_WORD
                assert all(term.target in text for term in WORD_FOR_WORD) and text != translator.detokenize(own)
            else:
                assert SENTENCE not in translating.terms and text == translator.detokenize(own)
                assert translating.notes(SENTENCE)["memory_alternatives"][0]["id"] == entry_id


def test_a_glossary_per_text_goes_with_the_texts_the_model_translates(pair_translators, memory, word_for_word):
    # the memory answers the first text: the model gets the second, and its glossary
    path, _ = memory
    translator = pair_translators["fr", "en"].with_decoding(strategy="beam", beam_size=4)
    with TranslationMemory(path) as store:
        translating = MemoryTranslator(translator, store, "fr", "en", constraints=True, unsure_below=0.0)
        served, [best] = translating.translate_n_best(
            [ENTRY[0], SENTENCE], glossary=[Glossary([Term("petit", "tiny")]), Glossary([Term("maison", "home")])])
    text = translating.detokenize(best)
    assert translating.detokenize(served[0]) == ENTRY[1]
    assert "home" in text and WORD_FOR_WORD[0].target in text and "tiny" not in text, text
    assert [term for term, _ in translating.terms[SENTENCE]] == WORD_FOR_WORD[:1]


@pytest.mark.parametrize("command", ["translate", "serve"])
def test_the_help_says_the_threshold_of_unsure(command):
    from transformer.cli import build_parser
    from transformer.translate.tm_terms import UNSURE_LOG_PROB

    help_text = "".join(build_parser()._subparsers._group_actions[0].choices[command].format_help().split())
    assert f"meanlog-probabilitypertokenbelow{UNSURE_LOG_PROB}" in help_text  # argparse may wrap at a hyphen

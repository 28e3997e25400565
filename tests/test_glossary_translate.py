"""Glossaries through the Translator, the document layer and the commands: every term found in a
sentence is in its translation (constrained beam search), sentences without terms are translated
as without a glossary, a term that cannot be placed is reported, greedy search refuses a glossary
that applies, bad files are refused naming their line."""

import json
import warnings
from functools import partial

import pytest

from transformer.corpus.builtin import generate_pairs as generate_written_pairs
from transformer.decoding import DecodeConfig
from transformer.model import Transformer
from transformer.translate.document import translate_document, translate_lines
from transformer.translate.glossary import Glossary, GlossaryError
from transformer.translate.translator import Translator
from transformer.translate.warning import TermWarning

generate_pairs = partial(generate_written_pairs, written_share=0)
SENTENCES = ["le chat noir dort", "nous mangeons une pomme", "il pleut", "le chien dort sous la table"]
TERMS = {"chat": "kitty cat", "pomme": "apple", "chien": "hound"}


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run(pairs=generate_pairs(400, seed=1), learned_positions=False, languages=None)


def translator(run_dir, **decoding) -> Translator:
    return Translator.from_run_dir(run_dir, decoding=DecodeConfig(**decoding))


def test_each_found_term_is_in_the_translation_and_other_sentences_do_not_change(run_dir, engine):
    t = translator(run_dir)
    plain = t.translate(SENTENCES)
    steered = t.translate(SENTENCES, glossary=TERMS)
    assert "kitty cat" in steered[0] and "apple" in steered[1] and "hound" in steered[3]
    assert steered[2] == plain[2]  # no term found: the unconstrained translation
    assert "kitty cat" not in plain[0]  # the glossary made the difference


def test_a_glossary_whose_terms_never_occur_changes_nothing(run_dir):
    t = translator(run_dir, n_best=2)
    never = Glossary.from_pairs({"zeppelin": "airship", "Zugspitze": "Zugspitze"})
    plain = t.translate_n_best(SENTENCES)
    assert t.translate_n_best(SENTENCES, glossary=never) == plain
    assert [[h.tokens for h in hyps] for hyps in t.translate_n_best(SENTENCES, glossary={})] == \
        [[h.tokens for h in hyps] for hyps in plain]


@pytest.mark.parametrize("precision", ["int8", "bf16"])
def test_terms_are_placed_in_other_precisions(run_dir, precision):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # bf16 on a CPU without bf16 units warns that it is slow
        t = Translator.from_run_dir(run_dir, precision=precision)
    if precision == "int8" and type(t.model) is Transformer:
        pytest.skip("the CPU kernels are unavailable")
    out = t.translate(SENTENCES, glossary=TERMS)
    assert "kitty cat" in out[0] and "apple" in out[1]


def test_n_best_hypotheses_hold_the_terms_or_say_they_do_not(run_dir):
    t = translator(run_dir, beam_size=4, n_best=3)
    vocab = t.vocab.tgt
    for hyps, term in zip(t.translate_n_best(SENTENCES[:2], glossary=TERMS), ["kitty cat", "apple"]):
        assert len(hyps) == 3 and hyps[0].unmet == ()
        for h in hyps:  # the untrained model never ends a sentence: the others are cut at the length limit
            assert (term in vocab.decode(h.tokens)) == (h.unmet == ())


def test_greedy_search_refuses_a_glossary_that_applies(run_dir):
    t = translator(run_dir, strategy="greedy")
    assert t.translate(["il pleut"], glossary=TERMS) == t.translate(["il pleut"])  # nothing to enforce
    with pytest.raises(ValueError, match="need beam search"):
        t.translate(SENTENCES, glossary=TERMS)


def test_a_term_that_cannot_be_placed_is_reported_not_dropped(run_dir):
    t = translator(run_dir, max_len_a=0.5, max_len_b=0)  # a sentence's limit: half its length, under "kitty cat"'s 7 tokens
    with pytest.warns(TermWarning, match=r"sentence 1: the glossary's 'chat' -> 'kitty cat' could not be placed"):
        t.translate(SENTENCES[:2], glossary={"chat": "kitty cat", "pomme": "apple"})
    with pytest.warns(TermWarning, match="line 2: the glossary's 'chat'") as caught:
        document = translate_document(t, "il pleut.\nle chat noir dort.", glossary={"chat": "kitty cat"})
    assert len(caught) == 1
    assert [s.missing_terms for s in document.sentences][1][0].target == "kitty cat"
    assert document.sentences[0].missing_terms == ()


def test_a_term_longer_than_any_output_is_refused_naming_it(run_dir, tmp_path):
    t = translator(run_dir, max_len_a=0.0, max_len_b=3)
    path = tmp_path / "terms.tsv"
    path.write_text("pomme\tapple\nchat\tthe very small and quite black kitty cat\n", encoding="utf-8")
    with pytest.raises(GlossaryError, match=r"terms.tsv:2: the target term .* tokens, longer than"):
        t.translate(SENTENCES, glossary=Glossary.load(path))


def test_documents_and_lines_take_a_glossary(run_dir):
    t = translator(run_dir)
    document = translate_document(t, "Le chat noir dort. Il pleut.\n\nNous mangeons une pomme.", glossary=TERMS)
    assert "kitty cat" in document.text and "apple" in document.text
    assert document.text.count("\n\n") == 1
    lines = translate_lines(t, ["le chat noir dort", "", "il pleut"], glossary=TERMS)
    assert "kitty cat" in lines[0].text and lines[1].text == ""


def test_confidence_is_none_without_a_calibration(run_dir):
    t = translator(run_dir)
    assert t.calibration is None
    hyps = t.translate_n_best(SENTENCES[:2], confidence=True)
    assert all(h.confidence is None for found in hyps for h in found)
    assert translate_document(t, "il pleut.", confidence=True).sentences[0].confidence is None


def test_one_glossary_per_text(run_dir):
    t = translator(run_dir)
    per_text = [Glossary.from_pairs({"chat": "kitty cat"}), Glossary.from_pairs({}), Glossary.from_pairs({}),
                Glossary.from_pairs({"chat": "kitty cat", "chien": "hound"})]
    out = t.translate(SENTENCES, glossary=per_text)
    assert "kitty cat" in out[0] and "hound" in out[3]
    assert out[1:3] == t.translate(SENTENCES[1:3])
    with pytest.raises(ValueError, match="one glossary per text: 2 glossaries for 4 texts"):
        t.translate(SENTENCES, glossary=per_text[:2])


def test_web_pages_take_a_glossary(run_dir):
    from transformer.translate.document import translate_sentences
    from transformer.translate.html import translate_html

    t = translator(run_dir)
    page = translate_html("<p>le chat noir dort</p><p>il pleut</p>",
                          lambda sentences: translate_sentences(t, sentences, glossary=TERMS), lang="fr")
    assert "kitty cat" in page and page.count("<p>") == 2


# --------------------------------------------------------------------------------------------- commands


def test_translate_places_the_terms_of_the_glossary(run_dir, tmp_path, cli):
    terms = tmp_path / "terms.tsv"
    terms.write_text("# our terms\nchat\tkitty cat\npomme\tapple\n", encoding="utf-8")
    done = cli("translate", run_dir, "le chat noir dort. il pleut.", "nous mangeons une pomme", "--glossary", terms,
               "--threads", 1)
    assert done.returncode == 0, done.stderr
    first, second = done.stdout.splitlines()
    assert "kitty cat" in first and "apple" in second
    lines = cli("translate", run_dir, "le chat noir dort", "--segment", "lines", "--glossary", terms, "--threads", 1)
    assert lines.returncode == 0 and "kitty cat" in lines.stdout


def test_a_bad_glossary_file_is_refused_naming_its_line(run_dir, tmp_path, cli):
    terms = tmp_path / "terms.tsv"
    terms.write_text("chat\tkitty cat\npomme\tapple\tfruit\n", encoding="utf-8")
    done = cli("translate", run_dir, "le chat", "--glossary", terms)
    assert done.returncode != 0 and "terms.tsv:2" in done.stderr and "Traceback" not in done.stderr
    missing = cli("evaluate", run_dir, "--src", terms, "--ref", terms, "--glossary", tmp_path / "none.tsv")
    assert missing.returncode != 0 and "none.tsv" in missing.stderr and "Traceback" not in missing.stderr


def test_a_term_that_cannot_be_placed_is_named_on_stderr_and_in_json(run_dir, tmp_path, cli):
    terms = tmp_path / "terms.tsv"
    long = "the very small and quite black kitty cat of the old house"  # more tokens than the sentence
    terms.write_text(f"chat\t{long}\n", encoding="utf-8")
    done = cli("translate", run_dir, "il pleut. le chat noir dort.", "--glossary", terms, "--json", "--max-len-b", 0,
               "--threads", 1)
    assert done.returncode == 0, done.stderr
    assert f"line 1: the glossary's 'chat' -> '{long}' could not be placed" in done.stderr
    record = json.loads(done.stdout)
    assert "missing_terms" not in record["sentences"][0]
    assert record["sentences"][1]["missing_terms"] == [{"source": "chat", "target": long}]


def test_greedy_with_a_glossary_is_refused_in_one_line(run_dir, tmp_path, cli):
    terms = tmp_path / "terms.tsv"
    terms.write_text("chat\tkitty cat\n", encoding="utf-8")
    done = cli("translate", run_dir, "le chat noir dort", "--glossary", terms, "--greedy")
    assert done.returncode != 0 and "need beam search" in done.stderr and "Traceback" not in done.stderr


def test_scores_need_a_calibrated_run(run_dir, cli):
    done = cli("translate", run_dir, "il pleut", "--scores")
    assert done.returncode != 0 and "transformer calibrate" in done.stderr and "Traceback" not in done.stderr


def test_evaluate_takes_a_glossary(run_dir, tmp_path, cli):
    (tmp_path / "src").write_text("le chat noir dort\nil pleut\n", encoding="utf-8")
    (tmp_path / "ref").write_text("the black cat sleeps\nit rains\n", encoding="utf-8")
    terms = tmp_path / "terms.tsv"
    terms.write_text("chat\tkitty cat\n", encoding="utf-8")
    out = tmp_path / "out.txt"
    done = cli("evaluate", run_dir, "--src", tmp_path / "src", "--ref", tmp_path / "ref", "--glossary", terms,
               "--output", out, "--threads", 1)
    assert done.returncode == 0, done.stderr
    assert "kitty cat" in out.read_text(encoding="utf-8").splitlines()[0]


def test_a_term_ends_its_word_in_the_translation(run_dir):
    # The constraint of a term ending in a letter bans the pieces that would go on with its last
    # word (no "▁" mark: "dark" + "es" is "darkes"); a term ending in punctuation, or in a script
    # written without spaces, bans nothing.
    import re

    from transformer.translate.glossary import Term

    t = translator(run_dir)
    pieces = t.vocab.tgt.pieces(list(range(t.vocab.tgt.vocab_size)))
    constraint = t._term_tokens(Term("chat", "dark"))
    assert constraint.not_after and all(not pieces[i].startswith("\u2581") and pieces[i][:1].isalnum()
                                        for i in constraint.not_after if not pieces[i].startswith("<0x"))
    assert {i for i, p in enumerate(pieces) if re.fullmatch(r"[a-z]+", p)} <= constraint.not_after
    assert t._term_tokens(Term("chat", "C++")).not_after == frozenset()
    assert t._term_tokens(Term("chat", "北京")).not_after == frozenset()
    terms = {"chat": "dark", "chien": "TABLEX", "pomme": "ab"}
    for sentence, hyps in zip(SENTENCES, t.translate_n_best(SENTENCES, glossary=terms)):
        text = t.vocab.tgt.decode(hyps[0].tokens)
        for source, target in terms.items():
            if source in sentence and not hyps[0].unmet:
                assert re.search(rf"(?<!\w){target}(?!\w)", text), (target, text)

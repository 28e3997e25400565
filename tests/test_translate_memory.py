"""``transformer translate --tm PATH``: sentences with an accepted entry of the run's pair come from
the translation memory, the model translates the others as it would without one, and ``--json``
marks the first and gives the fuzzy matches of the others."""

from __future__ import annotations

import json

import pytest

from transformer.cli import build_parser
from transformer.memory import TranslationMemory
from transformer.translate import tm as tm_module
from transformer.translate.translator import Translator

SERVED = ("Le chat dort.", "The cat is asleep, says the memory.")
FUZZY = ("Le petit chat dort dans la maison.", "The little cat sleeps in the house, says the memory.")
NEAR_FUZZY = "Le petit chat dort dans la grande maison."
UNUSED = {"pending": ("Je suis étudiant.", "PENDING"), "rejected": ("Nous allons manger.", "REJECTED")}
OTHER_PAIR = ("Le chien court.", "Der Hund läuft.")
TWO = ("Il pleut. Nous restons ici.", "It rains, so we stay in, says the memory.")  # one entry of two sentences


@pytest.fixture(scope="module")
def run_dir(pair_runs):
    return pair_runs["fr", "en"]


@pytest.fixture
def memory(tmp_path):
    path = tmp_path / "memory.db"
    with TranslationMemory(path) as store:
        ids = {"served": store.add(*SERVED, "fr", "en", origin="reviewer", status="accepted").id,
               "fuzzy": store.add(*FUZZY, "fr", "en", origin="reviewer", status="accepted").id,
               "two": store.add(*TWO, "fr", "en", origin="reviewer", status="accepted").id}
        for status, (source, target) in UNUSED.items():
            store.add(source, target, "fr", "en", status=status)
        store.add(*OTHER_PAIR, "fr", "de", status="accepted")
    return path, ids


def translate(cli, run_dir, *argv: str):
    return cli("translate", run_dir, "--greedy", "--threads", "1", "--no-progress", *argv)


def test_an_accepted_entry_is_the_translation_and_the_model_does_not_run(run_dir, memory, model_calls, cli):
    path, _ = memory
    status, out, err = translate(cli, run_dir, "Le   chat\tdort.", "--tm", str(path))
    assert status == 0 and out == SERVED[1] + "\n", err
    assert model_calls == []
    assert f"1 of 1 sentence from the translation memory {path}" in err


def test_pending_rejected_and_other_pairs_are_not_used(run_dir, memory, cli):
    path, _ = memory
    texts = [source for source, _ in UNUSED.values()] + [OTHER_PAIR[0]]
    status, without, _ = translate(cli, run_dir, *texts)
    assert status == 0
    status, out, err = translate(cli, run_dir, *texts, "--tm", str(path))
    assert status == 0 and out == without
    assert not {"PENDING", "REJECTED", OTHER_PAIR[1]} & set(out.splitlines())
    assert "0 of 3 sentences from the translation memory" in err


def test_json_marks_the_memory_and_gives_fuzzy_matches_as_alternatives(run_dir, memory, model_calls, cli):
    path, ids = memory
    status, out, _ = translate(cli, run_dir, f"{SERVED[0]} {NEAR_FUZZY}", "--tm", str(path), "--json")
    assert status == 0
    record = json.loads(out)
    served, fuzzy = record["sentences"]
    assert served["memory"] == {"id": ids["served"], "similarity": 1.0} and "memory_alternatives" not in served
    assert record["translation"].startswith(SERVED[1] + " ")
    [match] = fuzzy["memory_alternatives"]
    assert match["text"] == FUZZY[1] and match["id"] == ids["fuzzy"] and match["source"] == FUZZY[0]
    assert 0.75 <= match["similarity"] < 1 and "memory" not in fuzzy
    assert model_calls == [[NEAR_FUZZY]]  # a fuzzy match is an alternative: the model still translates it
    status, out, _ = translate(cli, run_dir, NEAR_FUZZY, "--tm", str(path), "--json", "--tm-threshold", "0.99")
    assert "memory_alternatives" not in json.loads(out)["sentences"][0]


def test_segment_lines_looks_up_whole_lines(run_dir, memory, model_calls, cli):
    path, ids = memory
    status, out, _ = translate(cli, run_dir, SERVED[0], NEAR_FUZZY, "--tm", str(path), "--json",
                               "--segment", "lines")
    first, second = (json.loads(line) for line in out.splitlines())
    assert first["translations"] == [{"text": SERVED[1], "score": 0.0}] and first["memory"]["id"] == ids["served"]
    assert second["memory_alternatives"][0]["id"] == ids["fuzzy"]
    assert model_calls == [[NEAR_FUZZY]]


def test_a_sentence_in_the_middle_of_a_document_is_replaced_and_the_others_translated_as_before(
        run_dir, memory, tmp_path, model_calls, cli):
    path, _ = memory
    lines = ["Il fait beau. Le chat dort. Nous partons demain.", "", "Le chat dort.", "  La maison est grande."]
    text = tmp_path / "text.fr"
    text.write_text("\n".join(lines) + "\n", encoding="utf-8")
    markdown = tmp_path / "page.md"
    markdown.write_text("# Le chat dort.\n\nIl fait beau. Le chat dort. Nous partons demain.\n", encoding="utf-8")
    own = _model(run_dir, SERVED[0])
    for source in (text, markdown):
        status, without, _ = translate(cli, run_dir, "--input", str(source))
        assert status == 0 and without.count(own) == 2
        model_calls.clear()
        status, out, err = translate(cli, run_dir, "--input", str(source), "--tm", str(path))
        assert status == 0
        assert out == without.replace(own, SERVED[1])
        assert out.count(SERVED[1]) == 2 and all(SERVED[0] not in texts for texts in model_calls)
        assert err.splitlines()[-1].startswith("2 of ") and "from the translation memory" in err


def test_an_entry_of_several_sentences_is_a_line_translated_whole(run_dir, memory, tmp_path, model_calls, cli):
    path, ids = memory
    status, out, err = translate(cli, run_dir, TWO[0], "--tm", str(path), "--json")
    assert status == 0, err
    record = json.loads(out)
    assert record["translation"] == TWO[1] and len(record["sentences"]) == 1
    assert record["sentences"][0]["memory"] == {"id": ids["two"], "similarity": 1.0}
    assert model_calls == []
    text = tmp_path / "two.fr"
    text.write_text(f"{TWO[0]}\n{TWO[0]} Demain aussi.\n", encoding="utf-8")
    status, out, err = translate(cli, run_dir, "--input", str(text), "--tm", str(path))
    first, second = out.splitlines()
    assert status == 0 and first == TWO[1]
    assert TWO[1] not in second  # the entry is the whole line, not a part of a longer one
    assert [texts for texts in model_calls if "Il pleut." in texts and "Demain aussi." in texts]


def test_an_html_page_gets_the_memory_inside_its_markup(run_dir, memory, model_calls, cli):
    path, _ = memory
    status, out, err = translate(cli, run_dir, "--format", "html", "<p>Il fait beau. <b>Le chat dort.</b></p>",
                                 "--tm", str(path))
    assert status == 0 and f"<b>{SERVED[1]}</b></p>" in out
    assert model_calls == [["Il fait beau."]] and "1 of 2 sentences from the translation memory" in err


def _model(run_dir, sentence: str) -> str:
    """The model's own translation of ``sentence``, as translate --greedy gives it."""
    from transformer.decoding import DecodeConfig

    return Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy")).translate_text(sentence)


@pytest.mark.parametrize("argv, message", [
    (["--tm", "{tmp}/missing.db"], "no translation memory at"),
    (["--tm", "{tmp}/corrupt.db"], "is not a translation memory"),
    (["--tm", "{memory}", "--tm-threshold", "0"], "--tm-threshold must be"),
    (["--tm-threshold", "0.8"], "--tm-threshold is for --tm"),
])
def test_a_bad_memory_or_threshold_is_one_line(argv, message, run_dir, memory, tmp_path, cli):
    (tmp_path / "corrupt.db").write_bytes(b"\x00garbage" * 512)
    names = {"tmp": tmp_path, "memory": memory[0]}
    status, out, err = translate(cli, run_dir, "Le chat dort.", *(a.format(**names) for a in argv))
    assert status == 2 and out == "" and err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "missing.db").exists()


def test_the_help_says_the_default_threshold():
    help_text = " ".join(build_parser()._subparsers._group_actions[0].choices["translate"].format_help().split())
    assert f"(default: {tm_module.DEFAULT_THRESHOLD}; 1: none)" in help_text

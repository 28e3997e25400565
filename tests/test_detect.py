"""Language detection (``transformer/translate/detect.py``), ``translate --src-lang auto`` and
``transformer detect``.

The detector against real test sentences (Multi30k and Tatoeba, read from ../shared/data where
they are; skipped elsewhere) and inline ones; its restriction to given languages, its refusals,
text without a letter, per-sentence detection of a document mixing languages, concurrent calls.
The commands run the random tiny model of the ``tiny_run`` fixture (source fr): what is checked is
what detection adds (warnings, the JSON field, the splitting rules), not the translations.
"""

from __future__ import annotations

import gzip
import json
import threading
from pathlib import Path

import pytest

from transformer.cli import build_parser
from transformer.translate import cli as translate_cli
from transformer.translate.detect import (
    SHORT_WORDS, UNDETERMINED, Detection, LanguageDetector, count_words, known_languages,
)

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"
FAST = ["--greedy", "--max-len-b", "1", "--no-progress"]

EXAMPLES = {
    "en": "The weather was so nice that we decided to walk along the river.",
    "de": "Das Wetter war so schön, dass wir am Fluss entlang spazieren gingen.",
    "fr": "Il faisait si beau que nous avons décidé de marcher le long de la rivière.",
    "es": "Hacía tan buen tiempo que decidimos caminar a lo largo del río.",
    "it": "Il tempo era così bello che abbiamo deciso di camminare lungo il fiume.",
    "nl": "Het weer was zo mooi dat we besloten langs de rivier te wandelen.",
}


@pytest.fixture(scope="module")
def en_de_fr() -> LanguageDetector:
    return LanguageDetector(["en", "de", "fr"])


@pytest.fixture(scope="module")
def everything() -> LanguageDetector:
    return LanguageDetector()


# --------------------------------------------------------------------------------------------- the detector
def test_inline_sentences_in_six_languages(everything):
    for language, text in EXAMPLES.items():
        found = everything.best(text)
        assert found.language == language and found.confidence > 0.8, (text, found)


@pytest.mark.skipif(not (SHARED_DATA / "multi30k").is_dir() or not (SHARED_DATA / "tatoeba").is_dir(),
                    reason=f"the test corpora are not at {SHARED_DATA}")
def test_accuracy_on_multi30k_and_tatoeba(en_de_fr):
    """The first 100 Multi30k test sentences of each language (nearly all longer than 5 words),
    and 300 Tatoeba pairs spread over the file (sorted by length: many short ones)."""
    labelled = []
    for language in ("en", "de", "fr"):
        with gzip.open(SHARED_DATA / "multi30k" / f"test_2016_flickr.{language}.gz", "rt", encoding="utf-8") as f:
            labelled += [(next(f).strip(), language) for _ in range(100)]
    assert all(en_de_fr.best(text).language == language for text, language in labelled)
    lines = (SHARED_DATA / "tatoeba" / "eng-fra.txt").read_text(encoding="utf-8").splitlines()
    pairs = [line.split("\t")[:2] for line in lines[:: len(lines) // 300]]
    tatoeba = [(en, "en") for en, _ in pairs] + [(fr, "fr") for _, fr in pairs]
    right = sum(en_de_fr.best(text).language == language for text, language in tatoeba)
    assert right >= 0.98 * len(tatoeba), f"{right} of {len(tatoeba)}"
    assert sum(count_words(text) <= 5 for text, _ in tatoeba) > 100  # short sentences are tested too


def test_detect_ranks_every_candidate_with_probabilities(en_de_fr):
    ranked = en_de_fr.detect(EXAMPLES["de"])
    assert [d.language for d in ranked][0] == "de" and sorted(d.language for d in ranked) == ["de", "en", "fr"]
    assert [d.confidence for d in ranked] == sorted((d.confidence for d in ranked), reverse=True)
    assert sum(d.confidence for d in ranked) == pytest.approx(1.0, abs=1e-4)
    assert all(isinstance(d, Detection) and isinstance(d.confidence, float) for d in ranked)
    assert en_de_fr.best(EXAMPLES["de"]) == pytest.approx(ranked[0])


def test_restriction_is_honoured(everything):
    two = LanguageDetector({"en", "de"})
    assert two.languages == ("de", "en")
    assert two.best(EXAMPLES["fr"]).language in {"en", "de"}
    assert {d.language for d in two.detect(EXAMPLES["fr"])} == {"en", "de"}
    assert LanguageDetector(["fr"]).best(EXAMPLES["de"]) == ("fr", pytest.approx(1.0))
    # each detector has its own identifier: building one restricted detector changes no other
    assert everything.best(EXAMPLES["fr"]).language == "fr" and len(everything.detect("Bonjour")) > 100
    assert everything.languages == known_languages() and "zxx" not in known_languages()


def test_codes_are_checked():
    with pytest.raises(ValueError, match=r"does not know tlh, xx; it knows .*\ben\b"):
        LanguageDetector(["en", "xx", "tlh"])
    with pytest.raises(ValueError, match=r"does not know pt-BR \(give the language alone: 'pt', not 'pt-BR'\)"):
        LanguageDetector(["pt-BR"])
    with pytest.raises(ValueError, match="no languages"):
        LanguageDetector([])
    with pytest.raises(TypeError, match="not the string 'en'"):
        LanguageDetector("en")
    assert LanguageDetector([" EN ", "de"]).languages == ("de", "en")


@pytest.mark.parametrize("text", ["", "   \n\t", "1234, 56.", "!!! ???", "🙂 🎉"])
def test_text_without_a_letter_is_undetermined(en_de_fr, text):
    assert en_de_fr.best(text) == Detection(UNDETERMINED, 0.0)
    assert en_de_fr.detect(text) == [Detection(UNDETERMINED, 0.0)]
    with pytest.raises(TypeError, match="must be a str"):
        en_de_fr.best(b"Hallo")


def test_count_words():
    assert count_words("Merci !") == 1 and count_words("It's 5 o'clock.") == 2
    assert count_words("我喜欢学习中文。") == 7  # each character a word: a Chinese sentence is not "short"


def test_sentences_of_a_document_mixing_languages(everything):
    text = ("The children are playing football in the garden. Yes. "
            "Die Kinder spielen im Garten Fußball.\n"
            "Oui. Les enfants jouent au football dans le jardin. Merci beaucoup !\n"
            "Danke.\n")
    found = everything.detect_sentences(text)
    sentences = [(text[a:b], d.language) for (a, b), d in found]
    assert sentences == [
        ("The children are playing football in the garden.", "en"),
        ("Yes.", "en"),  # short: the nearest longer sentence on its line before it
        ("Die Kinder spielen im Garten Fußball.", "de"),
        ("Oui.", "fr"),  # short, first on its line: the longer one after it on the same line, not the German
        ("Les enfants jouent au football dans le jardin.", "fr"),
        ("Merci beaucoup !", "fr"),
        ("Danke.", "fr"),  # a line of short sentences only: the nearest longer sentence before it
    ]
    short = [d for (a, b), d in found if count_words(text[a:b]) <= SHORT_WORDS]
    assert short[0] == found[0][1]  # the borrowed detection, confidence included
    assert everything.detect_sentences("") == [] and everything.detect_sentences("\n  \n") == []
    # only short sentences: each gets the whole text's detection
    three = LanguageDetector(["en", "de", "fr"])
    assert [d for _, d in three.detect_sentences("Ja. Nein. Danke.")] == [three.best("Ja. Nein. Danke.")] * 3
    assert three.detect_sentences("12. 13.") == [((0, 3), Detection("und", 0.0)), ((4, 7), Detection("und", 0.0))]


def test_sentence_splitting_follows_the_detected_language(everything):
    german = "Wir treffen uns am 3. Mai in Berlin und gehen dann essen."
    assert len(everything.detect_sentences(german)) == 1  # German rules: "am 3. Mai" ends no sentence
    assert len(everything.detect_sentences(german, lang_for_splitting="fr")) == 2


def test_concurrent_calls_give_the_serial_answers(everything):
    two = LanguageDetector(["en", "de"])
    texts = list(EXAMPLES.values()) * 20
    expected = [(everything.detect(t), two.best(t)) for t in texts]
    results: list = [None] * 8
    start = threading.Barrier(8)

    def work(k: int) -> None:
        start.wait()
        results[k] = [(everything.detect(t), two.best(t)) for t in texts]

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r == expected for r in results)


# --------------------------------------------------------------------------------------------- the commands
@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()  # data.src_lang fr


MIXED = [
    "Il pleut depuis ce matin et nous restons à la maison.",
    "Wir treffen uns am 3. Mai in Berlin und gehen dann essen. Das Wetter wird schön.",
    "Oui.",
    "",
    "The weather has been lovely all week in the mountains.",
]


@pytest.fixture
def mixed(tmp_path) -> Path:
    path = tmp_path / "mixed.txt"
    path.write_text("\n".join(MIXED) + "\n", encoding="utf-8")
    return path


def test_src_lang_auto_warns_once_per_line_in_another_language(run_dir, mixed, cli):
    status, out, err = cli("translate", run_dir, "--input", mixed, "--src-lang", "auto", *FAST)
    assert status == 0 and len(out.splitlines()) == len(MIXED)
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert len(warnings) == 2, err  # the German line (two sentences: one warning) and the English line
    assert f"{mixed}: line 2: detected as de (confidence 1.00), not fr" in warnings[0]
    assert "translated as fr all the same" in warnings[0]
    assert "line 5: detected as en" in warnings[1]
    status, out_lines, err = cli("translate", run_dir, "--input", mixed, "--src-lang", "auto",
                                 "--segment", "lines", *FAST)
    assert status == 0 and err.count("warning:") == 2


def test_src_lang_auto_json_and_splitting(run_dir, mixed, cli):
    status, out, _ = cli("translate", run_dir, "--input", mixed, "--src-lang", "auto", "--json", *FAST)
    records = [json.loads(line) for line in out.splitlines()]
    detected = [r["detected_language"] for r in records]
    assert [d["language"] for d in detected] == ["fr", "de", detected[2]["language"], "und", "en"]
    assert detected[1]["confidence"] > 0.99 and detected[3]["confidence"] == 0.0
    # the German line is cut by the German rules: "am 3. Mai" ends no sentence
    assert len(records[1]["sentences"]) == 2
    status, out, err = cli("translate", run_dir, "--input", mixed, "--json", *FAST)
    plain = [json.loads(line) for line in out.splitlines()]
    assert all("detected_language" not in r for r in plain) and "detected as" not in err
    assert len(plain[1]["sentences"]) == 3  # the run's French rules cut after "3."
    status, out, _ = cli("translate", run_dir, "--input", mixed, "--json", "--segment", "lines",
                         "--src-lang", "auto", *FAST)
    assert [json.loads(line)["detected_language"]["language"] for line in out.splitlines()][1] == "de"


def test_without_auto_the_output_is_unchanged(run_dir, mixed, cli):
    """--src-lang auto changes the splitting of the German line only; without it nothing is detected."""
    _, default, err = cli("translate", run_dir, "--input", mixed, *FAST)
    _, french, _ = cli("translate", run_dir, "--input", mixed, "--src-lang", "fr", *FAST)
    _, auto, _ = cli("translate", run_dir, "--input", mixed, "--src-lang", "auto", *FAST)
    assert default == french and "warning" not in err
    assert [a == b for a, b in zip(default.splitlines(), auto.splitlines())] == [True, False, True, True, True]


def test_resume_records_auto(run_dir, mixed, tmp_path):
    args = build_parser().parse_args(["translate", str(run_dir), "--input", str(mixed), "--src-lang", "auto"])
    assert translate_cli._settings(args)["src_lang"] == "auto"


def test_src_lang_auto_for_html_documents(run_dir, cli):
    german = "<p>Wir treffen uns <b>morgen</b> in Berlin und gehen dann zusammen essen.</p>"
    french = "<p>Il pleut depuis ce matin et nous restons à la maison.</p>"
    status, out, err = cli("translate", run_dir, "--format", "html", "--src-lang", "auto", german, french,
                           *FAST)
    assert status == 0 and len(out.splitlines()) == 2
    assert err.count("detected as") == 1 and "text: document 1: detected as de" in err
    # the German page is cut into sentences by the German rules: "am 3. Mai" ends no sentence
    page = "<p>Wir treffen uns am 3. Mai in Berlin und gehen dann essen.</p>"
    outputs = {lang: cli("translate", run_dir, "--format", "html", "--src-lang", lang, page, *FAST)[1]
               for lang in ("auto", "de", "fr")}
    assert outputs["auto"] == outputs["de"] != outputs["fr"]


def test_detect_command(tmp_path, cli):
    status, out, _ = cli("detect", EXAMPLES["de"], EXAMPLES["es"], "", "1234")
    rows = [line.split("\t") for line in out.splitlines()]
    assert status == 0 and [r[0] for r in rows] == ["de", "es", "und", "und"]
    assert float(rows[0][1]) > 0.9 and rows[2][1] == "0.0000"
    path = tmp_path / "in.txt"
    path.write_text(f"{EXAMPLES['fr']}\n{EXAMPLES['en']}\n", encoding="utf-8")
    status, out, _ = cli("detect", "--input", path, "--languages", "en,de", "--json")
    records = [json.loads(line) for line in out.splitlines()]
    assert status == 0 and [r["index"] for r in records] == [0, 1] and records[1]["source"] == EXAMPLES["en"]
    assert records[0]["language"] in {"en", "de"} and [a["language"] for a in records[1]["alternatives"]] == ["de"]
    status, _, err = cli("detect", "--languages", "en,klingon", "Hello")
    assert status == 2 and "transformer detect: error: language detection does not know klingon" in err

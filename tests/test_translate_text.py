"""``transformer translate`` on real text, and the input defects of the translate path (issue 24).

Each line is cut into sentences and put back (N lines in, N lines out), ``--segment lines``
keeps one segment per line; the paragraph corpus loses no sentence; and the defects found in
review: empty lines through a SentencePiece (Marian) tokenizer, a UTF-8 byte-order mark, gzip
input, the ``</s>`` a window cut off, generators, and bad input (binary data, invalid UTF-8,
NUL bytes, a 10 MB line, CRLF). The model is the random tiny one of the ``tiny_run`` fixture
(its translations are nonsense, never empty); streaming and ``--resume`` are in
``tests/test_translate_stream.py``.
"""

from __future__ import annotations

import gzip
import json
import random
import re
from pathlib import Path

import pytest
import torch

from transformer.cli import main
from transformer.config import preset
from transformer.corpus.builtin import generate_pairs
from transformer.decoding import DecodeConfig, Hypothesis
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.run.model import save_model
from transformer.translate.inputs import read_lines
from transformer.translate.document import translate_lines
from transformer.translate.segment import segment_text
from transformer.translate.translator import TranslationWarning, Translator

CORPUS = Path(__file__).parent / "data" / "paragraphs"
FAST = ["--greedy", "--max-len-b", "2", "--no-progress"]  # outputs of source length + 2 tokens at most


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


@pytest.fixture(scope="module")
def translator(run_dir):
    return Translator.from_run_dir(run_dir, decoding=DecodeConfig(strategy="greedy", max_len_b=2))


# --------------------------------------------------------------------------------------------- defects
@pytest.fixture(scope="module")
def spm_run(tmp_path_factory):
    """A run directory with Marian's tokenizer conventions (SentencePiece, ``</s>`` appended to
    the source) and a random tiny model with 16 learned positions."""
    pytest.importorskip("sentencepiece")
    import sentencepiece as spm
    from interop_helpers import train_spm

    from transformer.text.sentencepiece import SentencePieceTokenizer

    pairs = generate_pairs(300, seed=0)
    proto = train_spm([f for f, _ in pairs] + [e for _, e in pairs], 150)
    sp = spm.SentencePieceProcessor(model_proto=proto)
    pieces = [sp.id_to_piece(i) for i in range(sp.get_piece_size()) if not sp.is_control(i) and not sp.is_unknown(i)]
    vocab = {p: i for i, p in enumerate(["</s>", "<unk>", *pieces, "<pad>"])}
    src = SentencePieceTokenizer(proto, vocab, start_token="<pad>", append_eos=True)
    tgt = SentencePieceTokenizer(proto, vocab, start_token="<pad>", append_eos=False)
    torch.manual_seed(0)
    model = Transformer(preset("tiny", src_vocab_size=len(vocab), positional="learned", max_positions=16))
    directory = tmp_path_factory.mktemp("spm-run")
    save_model(model, directory)
    Vocabularies(src, tgt).save(directory)
    return directory


def test_empty_lines_through_a_sentencepiece_model_stay_empty(spm_run, tmp_path, cli):
    """encode("") is [</s>] with Marian's tokenizer: that is no text, and translates to ""."""
    translator = Translator.from_run_dir(spm_run, decoding=DecodeConfig(strategy="greedy"))
    assert translator.vocab.src.encode("") == [translator.vocab.src.eos_id]
    assert translator.translate_n_best(["", "   ", "\t"]) == [[], [], []]
    out = translator.translate(["", "je suis étudiant", "  "])
    assert out[0] == "" and out[2] == ""
    assert translator.translate_text("\n  \nje suis étudiant.\n\n") .startswith("\n  \n")
    source = tmp_path / "blank.txt"
    source.write_text("je suis étudiant\n\n   \nnous mangeons\n", encoding="utf-8")
    status, stdout, _ = cli("translate", spm_run, "--input", source, "--segment", "lines", *FAST)
    assert status == 0
    lines = stdout.split("\n")
    assert len(lines) == 5 and lines[1] == "" and lines[2] == "" and lines[4] == ""


def test_a_window_keeps_the_end_of_source_token(spm_run):
    """Where a source is still cut to the input limit (translate(), --segment lines), Marian's
    appended </s> stays its last token."""
    translator = Translator.from_run_dir(spm_run, decoding=DecodeConfig(strategy="greedy"))
    long_text = " ".join(["le chat noir mange"] * 10)
    eos = translator.vocab.src.eos_id
    assert len(translator.vocab.src.encode(long_text)) > 16
    with pytest.warns(TranslationWarning, match="first 15 and the end-of-source token"):
        (ids,) = translator.encode_sources([long_text])
    assert len(ids) == 16 and ids[-1] == eos and eos not in ids[:-1]
    with pytest.warns(TranslationWarning):
        assert isinstance(translator.translate([long_text])[0], str)


def test_translate_takes_any_iterable_of_str_but_not_a_str(translator):
    sentences = [f for f, _ in generate_pairs(3, seed=2)]
    expected = translator.translate(sentences)
    assert translator.translate(s for s in sentences) == expected
    assert translator.translate(iter(sentences)) == expected
    assert translator.translate(tuple(sentences)) == expected
    assert [h[0].tokens for h in translator.translate_n_best(s for s in sentences)] == \
        [h[0].tokens for h in translator.translate_n_best(sentences)]
    for single in ("je suis étudiant", b"je suis"):
        with pytest.raises(TypeError, match="list of sentences"):
            translator.translate(single)
    with pytest.raises(TypeError, match="text 1 is int"):
        translator.translate(x for x in ["a", 3])


def test_a_byte_order_mark_is_dropped_by_translate_and_evaluate(run_dir, tmp_path, cli):
    lines = [f for f, _ in generate_pairs(6, seed=3)]
    plain, bom = tmp_path / "plain.fr", tmp_path / "bom.fr"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    bom.write_bytes(b"\xef\xbb\xbf" + plain.read_bytes())
    assert read_lines(str(bom)) == read_lines(str(plain)) == lines
    outputs = [cli("translate", run_dir, "--input", f, *FAST, "--segment", mode)[1]
               for mode in ("lines", "sentences") for f in (plain, bom)]
    assert outputs[0] == outputs[1] and outputs[2] == outputs[3]
    # evaluate: the hypotheses as their own references score 100, with a BOM on either file too.
    hyps = tmp_path / "hyps.en"
    status, out, _ = cli("evaluate", run_dir, "--src", plain, "--ref", plain, "--greedy",
                               "--max-len-b", "2", "--output", hyps)
    assert status == 0
    bom_ref = tmp_path / "bom.en"
    bom_ref.write_bytes(b"\xef\xbb\xbf" + hyps.read_bytes())
    status, out, _ = cli("evaluate", run_dir, "--src", bom, "--ref", bom_ref, "--greedy",
                               "--max-len-b", "2", "--json")
    assert status == 0 and json.loads(out.strip().splitlines()[-1])["bleu"] == pytest.approx(100.0)


def test_gzip_input_is_read_by_its_magic_bytes(run_dir, tmp_path, cli):
    lines = [f for f, _ in generate_pairs(6, seed=4)]
    plain = tmp_path / "test.fr"
    plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
    packed, unnamed = tmp_path / "test.fr.gz", tmp_path / "packed-without-suffix"
    packed.write_bytes(gzip.compress(b"\xef\xbb\xbf" + plain.read_bytes()))
    unnamed.write_bytes(packed.read_bytes())
    assert read_lines(str(packed)) == read_lines(str(unnamed)) == lines
    status, expected, _ = cli("translate", run_dir, "--input", plain, *FAST)
    for f in (packed, unnamed):
        status, out, err = cli("translate", run_dir, "--input", f, *FAST)
        assert status == 0 and out == expected and "invalid UTF-8" not in err
    hyps = tmp_path / "hyps.en"
    cli("evaluate", run_dir, "--src", plain, "--ref", plain, "--greedy", "--max-len-b", "2",
              "--output", hyps)
    ref = tmp_path / "ref.en.gz"
    ref.write_bytes(gzip.compress(hyps.read_bytes()))
    status, out, _ = cli("evaluate", run_dir, "--src", packed, "--ref", ref, "--greedy",
                               "--max-len-b", "2", "--json")
    assert status == 0 and json.loads(out.strip().splitlines()[-1])["bleu"] == pytest.approx(100.0)


def test_bad_input_is_named_and_the_other_lines_translated(run_dir, translator, tmp_path, cli):
    good = ["je suis étudiant.", "nous mangeons du fromage.", "le chat dort."]
    huge = "le chat noir dort sur la table. " * (10_500_000 // 32)  # a 10 MB line
    junk = bytes(b for b in random.Random(0).randbytes(3000) if b not in b"\r\n")
    source = tmp_path / "bad.txt"
    source.write_bytes(b"\n".join([
        good[0].encode(),
        b"nous \xff\xfe mangeons.",             # 2: invalid UTF-8
        b"le \x00chat\x00 dort.",               # 3: NUL bytes
        huge.encode(),                          # 4: 10 MB
        junk,                                   # 5: binary data
        good[1].encode() + b"\r",               # 6: CRLF
        good[2].encode(),                       # 7: no final line break
    ]))
    status, out, err = cli("translate", run_dir, "--input", source, *FAST)
    assert status == 0
    assert "line 2: invalid UTF-8" in err and "line 5: invalid UTF-8" in err
    assert "line 3: 2 NUL bytes removed" in err and "line 5" in err
    assert f"line 4: {len(huge):,} characters, over --max-line-chars 1,000,000: copied to the output " \
           "untranslated" in err
    assert "Traceback" not in err
    lines = out.split("\n")
    assert len(lines) == 8 and lines[-1] == ""  # 7 lines, each ended
    expected = translator.translate_text("\n".join(good)).split("\n")
    assert lines[0] == expected[0] and lines[5] == expected[1] + "\r" and lines[6] == expected[2]
    assert lines[1] and lines[2] == translator.translate_text("le chat dort.") and lines[4]
    assert lines[3] == huge  # nothing lost: the line too long to translate is there as it was
    # Translated after all when the limit allows it: the pieces of a huge sentence are found in linear time.
    sentence = "le chat noir dort sur la table et " * 3_000
    from transformer.translate.pipeline import fitting_spans

    spans = fitting_spans(sentence, lambda piece: len(translator.vocab.src.encode(piece)), translator.max_input_tokens)
    assert len(spans) > 100 and all(len(translator.vocab.src.encode(sentence[a:b])) <= 64 for a, b in spans[:50])
    assert re.sub(r"\s", "", "".join(sentence[a:b] for a, b in spans)) == re.sub(r"\s", "", sentence)


def test_binary_input_warnings_are_counted_after_ten(run_dir, tmp_path, cli):
    rng = random.Random(1)
    junk = b"\n".join(bytes(b for b in rng.randbytes(40) if b != 10) + b"\xff" for _ in range(15))
    source = tmp_path / "image.bin"
    source.write_bytes(junk)
    status, out, err = cli("translate", run_dir, "--input", source, *FAST)
    assert status == 0 and out.count("\n") == junk.count(b"\n") + (not junk.endswith(b"\n"))
    assert err.count("invalid UTF-8 (") == 10 and "further warnings like this (invalid UTF-8 replaced)" in err
    assert re.search(r"warning: \d+ warnings in all: invalid UTF-8 replaced \(first lines: 1, ", err)


def test_utf16_input_is_refused_with_a_one_line_error(run_dir, tmp_path, cli):
    source = tmp_path / "utf16.txt"
    source.write_bytes("je suis étudiant.\n".encode("utf-16"))
    status, out, err = cli("translate", run_dir, "--input", source, *FAST)
    assert status == 2 and "UTF-16 byte-order mark" in err and "iconv" in err and err.count("\n") == 1


def test_crlf_in_crlf_out(run_dir, translator, tmp_path, cli):
    source = tmp_path / "crlf.txt"
    source.write_bytes(b"Il pleut. Nous restons.\r\n\r\n  Le chat dort.  \r\nfin\n")
    status, out, _ = cli("translate", run_dir, "--input", source, *FAST)
    expected = translator.translate_text("Il pleut. Nous restons.\r\n\r\n  Le chat dort.  \r\nfin\n")
    assert status == 0 and out == expected
    assert out.count("\r\n") == 3 and out.endswith("\n") and not out.endswith("\r\n")


# --------------------------------------------------------------------------------------------- paragraphs
def gold(lang: str) -> list[list[str]]:
    """The corpus's paragraphs, each a list of its sentences (one a line in the file)."""
    return [p.split("\n") for p in (CORPUS / f"{lang}.txt").read_text("utf-8").strip("\n").split("\n\n")]


class Echo:
    """A translator that gives each sentence back in brackets: what reached the model is visible."""

    def __init__(self, real: Translator) -> None:
        self.vocab, self.max_input_tokens, self.src_lang = real.vocab, real.max_input_tokens, None
        self.seen: list[str] = []

    def translate_n_best(self, texts):
        texts = list(texts)
        self.seen += texts
        return [[Hypothesis([len(self.seen) - len(texts) + i], 0.0)] for i in range(len(texts))]

    def detokenize(self, hypothesis: Hypothesis) -> str:
        return f"[{self.seen[hypothesis.tokens[0]]}]"


@pytest.mark.filterwarnings("ignore::transformer.translate.translator.TranslationWarning")
@pytest.mark.parametrize("lang", ["fr", "de", "en"])
def test_every_sentence_of_the_paragraph_corpus_reaches_the_model_once(translator, lang):
    """Paragraphs (one a line): every character of every sentence goes to the model, in order,
    each sentence once, and the translations come back in the paragraph's place."""
    paragraphs = [" ".join(sentences) for sentences in gold(lang)]
    echo = Echo(translator)
    results = translate_lines(echo, paragraphs, lang=lang)
    assert len(results) == len(paragraphs)
    for paragraph, result in zip(paragraphs, results):
        assert result.text.replace("[", "").replace("]", "") == paragraph
        assert len(result.sentences) == len(segment_text(paragraph, lang).segments)
    assert re.sub(r"\s", "", "".join(echo.seen)) == re.sub(r"\s", "", "".join(paragraphs))
    found = sum(len(r.sentences) for r in results)
    expected = sum(len(s) for s in gold(lang))
    assert abs(found - expected) <= 2  # the segmenter's known residue (tests/test_segment.py)


@pytest.mark.parametrize("lang", ["fr", "de"])
def test_paragraph_files_keep_their_structure_and_every_sentence(run_dir, tmp_path, lang, cli):
    """The corpus as a file of paragraphs (one a line, blank lines between) through the command:
    the same lines, blank where the input is blank, and one non-empty translation per sentence."""
    text = "\n\n".join(" ".join(sentences) for sentences in gold(lang)) + "\n"
    source = tmp_path / f"paragraphs.{lang}"
    source.write_text(text, encoding="utf-8")
    status, out, err = cli("translate", run_dir, "--input", source, "--src-lang", lang, "--json", *FAST)
    assert status == 0, err
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == text.count("\n")
    assert [r["translation"] == "" for r in records] == [line == "" for line in text.split("\n")[:-1]]
    segments = 0
    for record, line in zip(records, text.split("\n")):
        document = segment_text(line, lang)
        assert record["source"] == line and len(record["sentences"]) == len(document.segments)
        for sentence, segment in zip(record["sentences"], document.segments):
            assert sentence["source"] == [segment.start, segment.end]
            a, b = sentence["target"]
            assert b > a and record["translation"][a:b].strip()  # no sentence dropped
        segments += len(document.segments)
    assert abs(segments - sum(len(s) for s in gold(lang))) <= 2  # the segmenter's known residue


def test_segment_lines_keeps_one_segment_per_line(run_dir, translator, tmp_path, cli):
    lines = ["Il pleut. Nous restons à la maison.", "", "  le chat dort.  "]
    source = tmp_path / "two-sentences.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    status, by_sentence, _ = cli("translate", run_dir, "--input", source, *FAST)
    assert status == 0 and by_sentence == translator.translate_text("\n".join(lines) + "\n")
    status, by_line, _ = cli("translate", run_dir, "--input", source, "--segment", "lines", *FAST)
    assert status == 0 and by_line == "".join(t + "\n" for t in translator.translate(lines))
    assert by_line != by_sentence
    assert by_sentence.split("\n")[2].startswith("  ") and by_sentence.split("\n")[2].endswith("  ")
    # As arguments, each argument a text (line breaks inside it kept).
    status, out, _ = cli("translate", run_dir, "Il pleut.\nNous restons.", "le chat dort.", *FAST)
    assert out == translator.translate_text("Il pleut.\nNous restons.") + "\n" + translator.translate_text(
        "le chat dort.") + "\n"


def test_n_best_and_json_per_line(run_dir, tmp_path, cli):
    status, out, _ = cli("translate", run_dir, "Il pleut. Nous restons.", "", "--beam", "2",
                               "--n-best", "2", "--max-len-b", "2")
    rows = [line.split(" ||| ") for line in out.splitlines()]
    assert status == 0 and [r[0] for r in rows] == ["0", "0"]  # the empty line has no hypothesis
    assert float(rows[0][2]) >= float(rows[1][2])
    status, out, _ = cli("translate", run_dir, "Il pleut. Nous restons.", "--json", *FAST)
    record = json.loads(out)
    assert record["translation"] == record["translations"][0]["text"] and len(record["sentences"]) == 2
    assert record["translations"][0]["score"] == pytest.approx(
        sum(s["score"] for s in record["sentences"]) / 2, abs=1e-3)


def test_evaluate_says_it_scores_line_by_line(capsys):
    with pytest.raises(SystemExit):
        main(["evaluate", "--help"])
    assert "line by line" in capsys.readouterr().out.replace("\n", " ")
    with pytest.raises(SystemExit):
        main(["translate", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    assert "--segment {sentences,lines}" in help_text and "one segment" in help_text


# --------------------------------------------------------------------------------------------- refusals
def test_output_that_is_the_input_or_exists_is_refused(run_dir, tmp_path, cli):
    source = tmp_path / "in.txt"
    source.write_text("je suis étudiant.\n", encoding="utf-8")
    cases = [
        (["--input", source, "--output", source], "is the --input file"),
        (["--input", source, "--output", tmp_path / "." / "in.txt", "--overwrite"], "is the --input file"),
        (["--input", source, "--output", source, "--format", "html"], ""),
        (["--input", source, "--output", tmp_path / "exists.txt"], "exists: give --overwrite to replace it, or "
                                                                   "--resume"),
        (["--input", source, "--resume"], "--resume needs --output FILE"),
        (["je suis", "--output", tmp_path / "new.txt", "--resume"], "--resume needs --input FILE"),
        (["--input", source, "--output", tmp_path / "exists.txt", "--resume", "--overwrite"], "not both"),
        (["--input", source, "--chunk-lines", "0"], "--chunk-lines"),
    ]
    (tmp_path / "exists.txt").write_text("keep me\n")
    for args, message in cases:
        status, out, err = cli("translate", run_dir, *args, *FAST)
        assert status == 2 and message in err and err.count("\n") == 1, (args, err)
    assert (tmp_path / "exists.txt").read_text() == "keep me\n" and source.read_text() == "je suis étudiant.\n"
    status, _, err = cli("translate", run_dir, "--input", source, "--output", tmp_path / "exists.txt",
                               "--overwrite", *FAST)
    assert status == 0 and (tmp_path / "exists.txt").read_text() != "keep me\n"
    assert not (tmp_path / "exists.txt.resume").exists()  # removed when the run completes
    status, _, err = cli("translate", tmp_path / "no-run", "--input", source, "--output",
                               tmp_path / "never.txt", *FAST)
    assert status == 2 and "run directory not found" in err
    assert not (tmp_path / "never.txt").exists() and not (tmp_path / "never.txt.resume").exists()


def test_format_html(run_dir, tmp_path, cli):
    try:
        import transformer.translate.html  # noqa: F401
    except ImportError:
        status, _, err = cli("translate", run_dir, "--format", "html", "<p>Il pleut.</p>", *FAST)
        assert status == 2 and "--format html needs transformer.translate.html" in err
        return
    page = "<html><body><p>Il pleut. <b>Nous</b> restons.</p><script>var x = 1;</script></body></html>"
    status, out, err = cli("translate", run_dir, "--format", "html", page, *FAST)
    assert status == 0, err
    assert "<script>var x = 1;</script>" in out and "<b>" in out and "</b>" in out

"""transformer.visualize: what is drawn is what the model computed; files are valid; errors are clear."""

from __future__ import annotations

import argparse
import json
import os
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
import torch

from transformer.run.model import save_model
from transformer.config import preset
from transformer.errors import UserError
from transformer.corpus.builtin import generate_pairs
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate.translator import Translator
from transformer.visualize.cli import run_attend, write_demo_pages
from transformer.visualize.cli_args import register_attend_command
from transformer.visualize.data import FORMAT, KINDS, AttentionData, TokenAxis, best_translation_ids, collect_attention
from transformer.visualize.heatmaps import (
    FONT_POINTS,
    MAX_FIGURE_INCHES,
    attention_figure,
    positional_encoding_figure,
    save_attention_heatmaps,
)
from transformer.visualize.page import attention_page_html, read_page_data, write_attention_page

SENTENCE = "je suis étudiant"
SCHEMA = Path(__file__).resolve().parents[1] / "transformer" / "visualize" / "schema.json"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def pairs():
    return generate_pairs(500)


@pytest.fixture(scope="module")
def translator(pairs):
    vocab = Vocabularies.train(pairs, vocab_size=400)
    torch.manual_seed(0)
    translator = Translator(Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size)), vocab)
    if hasattr(translator, "with_decoding"):  # an untrained model never stops: keep its output short
        translator = translator.with_decoding(strategy="greedy", max_len_b=12)
    return translator


@pytest.fixture(scope="module")
def data(translator):
    """The model's own translation (untrained: long and odd, which is fine for numbers)."""
    return collect_attention(translator, SENTENCE)


@pytest.fixture(scope="module")
def short(translator):
    """A forced short translation: small figures that draw fast."""
    return collect_attention(translator, SENTENCE, translation="i am a student")


def direct_maps(translator, sentence: str, out_ids: list[int]) -> dict[str, np.ndarray]:
    """``model.attention_maps`` on (source ids, <s> + output ids), as (L, H, rows, cols) arrays."""
    vocab = translator.vocab
    src = torch.tensor([vocab.src.encode(sentence)])
    tgt = torch.tensor([[vocab.tgt.bos_id, *out_ids]])
    maps = translator.model.attention_maps(src, tgt, torch.ones_like(src, dtype=torch.bool))
    stack = lambda ws: torch.stack([w[0] for w in ws]).numpy()  # noqa: E731
    return {"encoder": stack(maps.encoder), "decoder": stack(maps.decoder_self), "cross": stack(maps.cross)}


def long_sentence(pairs, vocab, n_tokens: int = 120, side: int = 0) -> str:
    """The first words of the corpus that make ``n_tokens`` subword tokens."""
    words = " ".join(p[side] for p in pairs[:60]).split()
    tok = vocab.src if side == 0 else vocab.tgt
    for k in range(1, len(words)):
        if len(tok.encode(" ".join(words[:k]))) >= n_tokens:
            return " ".join(words[:k])
    raise AssertionError("corpus too short")


# ---------------------------------------------------------------------------------------------
def test_page_numbers_equal_a_direct_forward_pass(translator, data, tmp_path):
    out_ids = best_translation_ids(translator, SENTENCE)
    assert data.translation == translator.translate([SENTENCE])[0]
    page = read_page_data(write_attention_page(data, tmp_path / "page.html"))
    (doc,) = page["sentences"]
    expected = direct_maps(translator, SENTENCE, out_ids)
    for kind in KINDS:
        drawn = np.asarray(doc["kinds"][kind]["weights"]) / doc["weight_scale"]
        assert drawn.shape == expected[kind].shape
        np.testing.assert_allclose(drawn, expected[kind], atol=0.5 / doc["weight_scale"] + 1e-6)
    pieces = translator.vocab.src.pieces(translator.vocab.src.encode(SENTENCE))
    assert doc["tokens"]["source"]["pieces"] == [p.removeprefix("\u2581") or p for p in pieces]
    assert doc["tokens"]["source"]["word_start"] == [p.startswith("\u2581") for p in pieces]
    n = len(out_ids)
    assert doc["tokens"]["target_input"]["pieces"][0] == "<s>"
    assert doc["tokens"]["target_output"]["pieces"][-1] == "</s>"
    assert len(doc["tokens"]["target_input"]["pieces"]) == len(doc["tokens"]["target_output"]["pieces"]) == n + 1


def test_rows_sum_to_one_and_the_decoder_is_causal(data):
    doc = data.to_dict()
    scale = doc["weight_scale"]
    for kind in KINDS:
        w = np.asarray(doc["kinds"][kind]["weights"])
        cols = w.shape[-1]
        assert np.all(np.abs(w.sum(-1) - scale) <= cols * 0.5 + 1e-9), kind  # each entry rounds by <= 0.5
    dec = np.asarray(doc["kinds"]["decoder"]["weights"])
    above = np.triu(np.ones(dec.shape[-2:], dtype=bool), k=1)
    assert dec.shape[-1] > 1 and np.all(dec[..., above] == 0)
    assert np.all(dec[..., ~above].sum(-1) > 0)


def test_json_follows_the_schema_and_round_trips(data, tmp_path):
    path = tmp_path / "attention.json"
    data.to_json(path)
    doc = json.loads(path.read_text(encoding="utf-8"))
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    try:
        import jsonschema
    except ImportError:  # hand check of the essentials
        assert set(schema["required"]) <= set(doc) and set(doc) <= set(schema["properties"])
        assert doc["format"] == "transformer-attention" and doc["version"] == 1
        assert set(doc["model"]) == {"layers", "heads", "d_model"}
    else:
        jsonschema.validate(doc, schema)
    # what a schema cannot say: shapes agree with the model block and the token axes
    for kind in KINDS:
        block = doc["kinds"][kind]
        w = np.asarray(block["weights"])
        layers = doc["model"]["layers"]["encoder" if kind == "encoder" else "decoder"]
        rows, cols = doc["tokens"][block["rows"]]["pieces"], doc["tokens"][block["cols"]]["pieces"]
        assert w.shape == (layers, doc["model"]["heads"], len(rows), len(cols))
        assert w.dtype.kind == "i"
    assert doc["source"] == SENTENCE and doc["translation"] == data.translation
    again = AttentionData.from_json(path)
    for kind in KINDS:
        np.testing.assert_allclose(again.weights[kind], data.weights[kind], atol=0.5e-4 + 1e-6)
    assert again.tokens == data.tokens


def test_a_damaged_attention_document_is_a_user_error(tmp_path):
    path = tmp_path / "attention.json"
    for content, words in [(b"{not json", "is not a JSON document"), (b"\xff\xfe", "is not a JSON document"),
                           (json.dumps({"format": FORMAT}).encode(), "without its 'source' entry"),
                           (b"[]", f"not a {FORMAT} document")]:
        path.write_bytes(content)
        with pytest.raises(UserError) as refused:
            AttentionData.from_json(path)
        assert str(refused.value).startswith(str(path)) and words in str(refused.value)


def test_token_labels_strip_the_word_mark_and_keep_word_starts():
    axis = TokenAxis.from_pieces(["\u2581étudi", "ant", "</s>", "\u2581", "x", "<0xE2>"])
    assert axis.pieces == ("étudi", "ant", "</s>", "\u2581", "x", "<0xE2>")
    assert axis.word_start == (True, False, False, True, False, False)
    assert axis.labels == ["étudi", "\u00b7ant", "</s>", "\u2581", "x", "<0xE2>"]


# ---------------------------------------------------------------------------------------------
def test_heatmap_files_are_valid_png_and_svg(short, tmp_path):
    paths = save_attention_heatmaps(short, tmp_path / "maps", kind="all")
    assert sorted(p.name for p in paths) == sorted(
        f"attention_{k}_layer1.{f}" for k in KINDS for f in ("png", "svg"))
    for p in paths:
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == PNG_MAGIC
        else:
            root = ET.parse(p).getroot()
            assert root.tag.endswith("svg")
            ids = {e.get("id") for e in root.iter()}
            assert {f"attention-head-{h}" for h in range(4)} | {"attention-average"} <= ids
            assert "étudi" in p.read_text(encoding="utf-8") or "ét" in p.read_text(encoding="utf-8")


def test_figure_has_one_axes_per_chosen_head_plus_the_average(short):
    data = short
    fig = attention_figure(data, "cross", layer=0, heads=[0, 2])
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert [ax.get_title() for ax in panels] == ["head 0", "head 2", "average of heads 0, 2"]
    assert len(fig.axes) == len(panels) + 1  # and one colorbar
    image = panels[-1].get_images()[0].get_array()
    np.testing.assert_allclose(image, data.weights["cross"][0][[0, 2]].mean(0), rtol=1e-6)
    rows, cols = data.axes("cross")
    assert [t.get_text() for t in panels[0].get_xticklabels()] == cols.labels
    assert [t.get_text() for t in panels[0].get_yticklabels()] == rows.labels


def test_positional_encoding_figure(tmp_path):
    png = positional_encoding_figure(tmp_path / "pe.png", n_positions=50, d_model=64)
    svg = positional_encoding_figure(tmp_path / "pe.svg")
    assert png.read_bytes()[:8] == PNG_MAGIC
    assert ET.parse(svg).getroot().tag.endswith("svg")
    with pytest.raises(ValueError, match="even"):
        positional_encoding_figure(tmp_path / "x.png", d_model=7)
    with pytest.raises(ValueError, match="format"):
        positional_encoding_figure(tmp_path / "x.jpg")


# ---------------------------------------------------------------------------------------------
def test_long_sentence_makes_a_readable_figure_and_a_small_page(translator, pairs, tmp_path):
    vocab = translator.vocab
    source = long_sentence(pairs, vocab, 120)
    target = long_sentence(pairs, vocab, 119, side=1)
    data = collect_attention(translator, source, translation=target)
    assert len(data.tokens["source"]) >= 120 and len(data.tokens["target_input"]) >= 120
    fig = attention_figure(data, "encoder")
    width, height = fig.get_size_inches()
    assert max(width, height) <= MAX_FIGURE_INCHES and width > 20  # grew with the tokens, within the cap
    ax = fig.axes[0]
    labels = ax.get_xticklabels()
    assert len(labels) == len(data.tokens["source"])  # every token labelled
    assert FONT_POINTS[0] <= labels[0].get_fontsize() < FONT_POINTS[1]  # smaller, not unreadable
    page = write_attention_page(data, tmp_path / "long.html")
    size = page.stat().st_size
    assert size < 2_000_000, f"page is {size / 1e6:.2f} MB"
    text = page.read_text(encoding="utf-8")
    assert text.count('type="application/json"') == 1
    embedded = len(json.dumps(read_page_data(page), ensure_ascii=False, separators=(",", ":")))
    assert size - embedded < 40_000  # the data is embedded once; the rest is the page itself
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "") and "https://" not in text


def test_page_with_several_sentences_and_demo_helper(translator, tmp_path):
    path = write_demo_pages(translator, ["je suis étudiant", "le chat noir"], tmp_path / "demo")
    assert path == tmp_path / "demo" / "attention.html"
    page = read_page_data(path)
    assert [d["source"] for d in page["sentences"]] == ["je suis étudiant", "le chat noir"]
    assert page["min_line_weight"] == 0.01
    html = attention_page_html(collect_attention(translator, "a </script> <b>&"))
    assert html.count("</script>") == 2  # the embedded text cannot close the script element


# ---------------------------------------------------------------------------------------------
def test_input_errors(translator, short, tmp_path):
    data = short
    for blank in ("", "   "):
        with pytest.raises(ValueError, match="^empty sentence$"):
            collect_attention(translator, blank)
    n = len(translator.vocab.src.encode(SENTENCE))
    with pytest.raises(ValueError, match=rf"sentence is {n} tokens long, but at most 3 are allowed \(max_tokens\)"):
        collect_attention(translator, SENTENCE, max_tokens=3)
    vocab = translator.vocab
    learned = Translator(Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size, positional="learned",
                                            max_positions=8)), vocab)
    n = len(vocab.src.encode("x" * 12))
    with pytest.raises(ValueError, match=rf"{n} tokens long, but at most 8 .*max_positions"):
        collect_attention(learned, "x" * 12)
    with pytest.raises(ValueError, match=r"layer 2 does not exist.*valid: 0\.\.1"):
        attention_figure(data, "encoder", layer=2)
    with pytest.raises(ValueError, match=r"head 4 does not exist.*valid: 0\.\.3"):
        save_attention_heatmaps(data, tmp_path, heads=[0, 4])
    with pytest.raises(ValueError, match="unknown attention kind"):
        attention_figure(data, "self")


def test_unwritable_output_paths_name_the_path(short, tmp_path):
    data = short
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    for write in (lambda p: write_attention_page(data, p / "page.html"), lambda p: data.to_json(p / "a.json"),
                  lambda p: save_attention_heatmaps(data, p), lambda p: positional_encoding_figure(p / "pe.png")):
        with pytest.raises(NotADirectoryError, match=str(blocker)):
            write(blocker / "sub")
    if os.geteuid() != 0:  # root may write anywhere
        locked = tmp_path / "locked"
        locked.mkdir(mode=0o500)
        with pytest.raises(PermissionError, match=str(locked)):
            write_attention_page(data, locked / "page.html")


# ---------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_dir(translator, tmp_path_factory):
    directory = tmp_path_factory.mktemp("run")
    save_model(translator.model, directory)
    translator.vocab.save(directory)
    return directory


def attend(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="transformer")
    register_attend_command(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["attend", *argv])
    return run_attend(args)


def test_attend_command_writes_everything(run_dir, tmp_path, capsys):
    out = tmp_path / "att"
    assert attend(str(run_dir), SENTENCE, "--out", str(out), "--kind", "cross", "--layer", "0", "--heads", "0,1") == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith(SENTENCE + "  ->  ")
    names = sorted(Path(line).name for line in printed[1:])
    assert names == sorted(["attention_cross_layer0.png", "attention_cross_layer0.svg", "attention.json",
                            "attention.html", "positional_encoding.png", "positional_encoding.svg"])
    assert all((out / n).is_file() for n in names)
    assert attend(str(run_dir), SENTENCE, "--json") == 0  # default --out: RUN_DIR/attention, only the JSON
    assert [p.name for p in (run_dir / "attention").iterdir()] == ["attention.json"]


@pytest.mark.parametrize("argv, error, message", [
    (["", ], ValueError, "empty sentence"),
    ([SENTENCE, "--layer", "9"], ValueError, r"layer 9 does not exist.*valid: 0\.\.1"),
    ([SENTENCE, "--heads", "0,7"], ValueError, r"head 7 does not exist.*valid: 0\.\.3"),
    ([SENTENCE, "--heads", "a"], ValueError, "--heads must be comma-separated"),
    ([SENTENCE, "--format", "gif"], ValueError, "unknown image format"),
])
def test_attend_command_errors(run_dir, argv, error, message):
    with pytest.raises(error, match=message):
        attend(str(run_dir), *argv)


def test_attend_command_run_dir_and_output_errors(run_dir, tmp_path):
    with pytest.raises(FileNotFoundError, match="run directory not found"):
        attend(str(tmp_path / "nope"), SENTENCE)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text((run_dir / "config.json").read_text())
    with pytest.raises(FileNotFoundError, match="missing model.safetensors"):
        attend(str(tmp_path / "half"), SENTENCE)
    blocker = tmp_path / "file.txt"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match="file.txt"):
        attend(str(run_dir), SENTENCE, "--out", str(blocker))


def test_main_cli_reports_attend_errors_when_wired(run_dir, capsys):
    from transformer import cli

    parser = cli.build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert "attend" in commands
    assert cli.main(["attend", str(run_dir), SENTENCE, "--layer", "5"]) == 2
    assert "transformer attend: error: layer 5 does not exist" in capsys.readouterr().err


@pytest.fixture
def own_run_dir(run_dir, tmp_path):
    """A copy of the run with a page already in RUN_DIR/attention, as the demo leaves it."""
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy, ignore=shutil.ignore_patterns("attention*"))
    (copy / "attention").mkdir()
    (copy / "attention" / "attention.html").write_text("the demo's page")
    return copy


def test_attend_keeps_an_earlier_page_and_says_where_it_wrote(own_run_dir, capsys):
    assert attend(str(own_run_dir), SENTENCE, "--page") == 0
    printed = capsys.readouterr().out
    assert (own_run_dir / "attention" / "attention.html").read_text() == "the demo's page"
    assert (own_run_dir / "attention-2" / "attention.html").is_file()
    assert str(own_run_dir / "attention-2" / "attention.html") in printed
    assert "--overwrite" in printed
    assert attend(str(own_run_dir), SENTENCE, "--page") == 0  # and the next one beside it
    assert (own_run_dir / "attention-3" / "attention.html").is_file()


def test_attend_overwrite_replaces_the_default_page(own_run_dir, capsys):
    assert attend(str(own_run_dir), SENTENCE, "--page", "--overwrite") == 0
    assert (own_run_dir / "attention" / "attention.html").read_text() != "the demo's page"
    assert not (own_run_dir / "attention-2").exists()


def test_attend_out_refuses_to_replace_files(own_run_dir, tmp_path, capsys):
    from transformer import cli

    out = own_run_dir / "attention"
    assert cli.main(["attend", str(own_run_dir), SENTENCE, "--out", str(out), "--page", "--json"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "attention.html" in err and "--overwrite" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["attention.html"]
    assert (out / "attention.html").read_text() == "the demo's page"
    assert cli.main(["attend", str(own_run_dir), SENTENCE, "--out", str(out), "--page", "--overwrite"]) == 0
    assert (out / "attention.html").read_text() != "the demo's page"

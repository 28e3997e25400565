"""The attention page in a real headless Chromium (Playwright): what is drawn follows the data.

Needs ``pip install playwright`` (its bundled driver; no ``playwright install``) and a system
Chromium at /usr/bin/chromium (``apt-get install chromium``). Skipped when either is missing,
unless the environment variable CI is set: then the tests fail instead.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from browser_helpers import ARTIFACTS

from transformer.config import preset
from transformer.corpus.builtin import generate_pairs
from transformer.model import Transformer
from transformer.text import Vocabularies
from transformer.translate.translator import Translator
from transformer.visualize.data import TokenAxis, collect_attention
from transformer.visualize.page import read_page_data, write_attention_page

@pytest.fixture(scope="module")
def translator():
    pairs = generate_pairs(500)
    vocab = Vocabularies.train(pairs, vocab_size=400)
    torch.manual_seed(0)
    translator = Translator(Transformer(preset("tiny", src_vocab_size=vocab.src.vocab_size)), vocab)
    translator.pairs = pairs
    return translator


@pytest.fixture(scope="module")
def page_file(translator, tmp_path_factory):
    data = [collect_attention(translator, "je suis étudiant", translation="i am a student"),
            collect_attention(translator, "le petit chat noir dort", translation="the small black cat sleeps")]
    return write_attention_page(data, tmp_path_factory.mktemp("page") / "attention.html")


def open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    errors: list[str] = []
    requests: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready=true]")
    return page, errors, requests


def expected(doc: dict, min_weight: float, kind: str, layer: int, heads, hover=None) -> dict:
    """{(head, row, col): weight} of the lines the page should draw."""
    block, scale = doc["kinds"][kind], doc["weight_scale"]
    lines = {}
    for h in heads:
        for i, row in enumerate(block["weights"][layer][h]):
            for j, value in enumerate(row):
                if hover and ((hover[0] == "row" and i != hover[1]) or (hover[0] == "col" and j != hover[1])):
                    continue
                if value / scale >= min_weight:
                    lines[(h, i, j)] = value / scale
    return lines


def drawn(page, kind: str, layer: int) -> dict:
    """{(head, row, col): stroke-opacity} of the SVG lines, checking their kind and layer tags."""
    rows = page.eval_on_selector_all(
        "#attention-svg line.attn-line",
        "els => els.map(e => [+e.dataset.head, +e.dataset.row, +e.dataset.col, +e.getAttribute('stroke-opacity'),"
        " e.dataset.kind, +e.dataset.layer, e.getAttribute('stroke')])")
    assert page.is_visible("#lines-view")
    assert all(r[4] == kind and r[5] == layer for r in rows)
    colors = {r[0]: r[6] for r in rows}
    for h, color in colors.items():  # each head keeps the colour of its toggle button
        button = page.eval_on_selector(f".head-toggle[data-head='{h}']", "b => getComputedStyle(b).backgroundColor")
        swatch = page.evaluate("c => { const d = document.createElement('div'); d.style.color = c; "
                               "document.body.append(d); const v = getComputedStyle(d).color; d.remove(); return v; }",
                               color)
        assert swatch == button
    result = {(r[0], r[1], r[2]): r[3] for r in rows}
    assert len(result) == len(rows)  # no line drawn twice
    return result


def assert_lines(page, doc, min_weight, kind, layer, heads, hover=None) -> int:
    want = expected(doc, min_weight, kind, layer, heads, hover)
    got = drawn(page, kind, layer)
    assert got.keys() == want.keys()
    assert all(abs(got[k] - want[k]) < 1e-9 for k in want)
    assert page.get_attribute("#status", "data-lines") == str(len(want))
    return len(want)


# ---------------------------------------------------------------------------------------------
def test_layers_kinds_heads_and_hover_draw_the_data(browser, page_file):
    payload = read_page_data(page_file)
    doc, min_weight = payload["sentences"][0], payload["min_line_weight"]
    layers, heads = doc["model"]["layers"]["decoder"], list(range(doc["model"]["heads"]))
    page, errors, requests = open_page(browser, page_file)

    # the page opens on encoder-decoder attention (the alignment), the last layer
    assert page.input_value("#kind-select") == "cross" and page.input_value("#layer-select") == str(layers - 1)
    n_last = assert_lines(page, doc, min_weight, "cross", layers - 1, heads)
    assert n_last > 0
    page.select_option("#layer-select", "0")
    assert_lines(page, doc, min_weight, "cross", 0, heads)
    page.select_option("#kind-select", "encoder")
    assert_lines(page, doc, min_weight, "encoder", 0, heads)
    page.select_option("#kind-select", "decoder")
    n_dec = assert_lines(page, doc, min_weight, "decoder", 0, heads)
    assert all(col <= row for _, row, col in drawn(page, "decoder", 0))  # causal: nothing above the diagonal
    labels = TokenAxis.from_dict(doc["tokens"]["target_output"]).labels  # the same labels as the figures
    assert page.locator("#attention-svg text.token-row").all_text_contents() == labels
    assert labels[-1] == "</s>"

    page.click(".head-toggle[data-head='1']")
    assert page.get_attribute(".head-toggle[data-head='1']", "aria-pressed") == "false"
    n_without = assert_lines(page, doc, min_weight, "decoder", 0, [0, 2, 3])
    assert n_without < n_dec

    page.hover("#attention-svg .token-group.token-row[data-index='3']")
    assert "hovered" in page.get_attribute("#attention-svg text.token-row[data-index='3']", "class")
    assert_lines(page, doc, min_weight, "decoder", 0, [0, 2, 3], hover=("row", 3))
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "attention_page_hover.png"))
    page.hover("#attention-svg .token-group.token-col[data-index='1']")
    assert_lines(page, doc, min_weight, "decoder", 0, [0, 2, 3], hover=("col", 1))
    page.hover("h1")
    assert_lines(page, doc, min_weight, "decoder", 0, [0, 2, 3])

    page.dblclick(".head-toggle[data-head='2']")
    assert_lines(page, doc, min_weight, "decoder", 0, [2])
    page.click("#heads-all")
    assert_lines(page, doc, min_weight, "decoder", 0, heads)
    page.select_option("#kind-select", "encoder")
    page.select_option("#layer-select", str(layers - 1))
    page.screenshot(path=str(ARTIFACTS / "attention_page.png"))
    assert errors == [] and all(url.startswith("file://") for url in requests)
    page.close()


def test_head_grid_draws_each_head_and_the_average(browser, page_file):
    payload = read_page_data(page_file)
    doc = payload["sentences"][0]
    page, errors, _ = open_page(browser, page_file)
    page.select_option("#kind-select", "cross")
    page.click("#view-grid")
    assert page.is_visible("#grid-view") and not page.is_visible("#lines-view")
    cells = page.eval_on_selector_all("canvas.head-map", "cs => cs.map(c => c.dataset.head)")
    assert cells == [str(h) for h in range(doc["model"]["heads"])] + ["average"]
    # the pixels of head 0 are its weights: white blended with the head colour by weight / max weight
    weights = doc["kinds"]["cross"]["weights"][1]
    vmax = max(max(max(r) for r in m) for m in weights)
    rows, cols = len(weights[0]), len(weights[0][0])
    pixels = page.eval_on_selector("canvas.head-map[data-head='0']", """(c, [rows, cols]) => {
        const cell = c.width / cols, ctx = c.getContext('2d'), out = [];
        for (let i = 0; i < rows; i++) for (let j = 0; j < cols; j++)
            out.push(ctx.getImageData(j * cell + cell / 2, i * cell + cell / 2, 1, 1).data[0]);
        return out; }""", [rows, cols])
    red = 0x1F  # head 0 is #1f77b4
    for k, value in enumerate(pixels):
        a = weights[0][k // cols][k % cols] / vmax
        assert abs(value - (255 * (1 - a) + red * a)) <= 2
    page.click(".head-cell[data-head='3']")  # a head in the grid -> its lines
    assert page.is_visible("#lines-view")
    assert {h for h, _, _ in drawn(page, "cross", 1)} == {3}
    page.click("#view-grid")
    page.screenshot(path=str(ARTIFACTS / "attention_page_grid.png"))
    assert errors == []
    page.close()


def test_sentence_selector(browser, page_file):
    payload = read_page_data(page_file)
    page, errors, _ = open_page(browser, page_file)
    assert page.is_visible("#sentence-select")
    page.select_option("#sentence-select", "1")
    doc = payload["sentences"][1]
    assert "le petit chat noir dort" in page.inner_text("#sentence-text")
    assert page.locator("#attention-svg text.token-row").count() == len(doc["tokens"]["target_output"]["pieces"])
    assert page.locator("#attention-svg text.token-col").count() == len(doc["tokens"]["source"]["pieces"])
    assert_lines(page, doc, payload["min_line_weight"], "cross", 1, range(4))
    assert errors == []
    page.close()


def test_long_sentence_page_scrolls_and_draws_every_line(browser, translator, tmp_path):
    words = " ".join(p[0] for p in translator.pairs[:60]).split()
    k = next(k for k in range(1, len(words)) if len(translator.vocab.src.encode(" ".join(words[:k]))) >= 120)
    data = collect_attention(translator, " ".join(words[:k]), translation="the cat " * 40)
    path = write_attention_page(data, tmp_path / "long.html")
    payload = read_page_data(path)
    page, errors, _ = open_page(browser, path)
    n = len(data.tokens["source"])
    assert_lines(page, payload["sentences"][0], payload["min_line_weight"], "cross", 1, range(4))
    page.select_option("#kind-select", "encoder")
    assert page.locator("#attention-svg text.token-row").count() == n >= 120
    assert page.eval_on_selector("#lines-view", "v => v.scrollHeight > v.clientHeight")  # scrolls, fonts stay
    assert page.eval_on_selector("#attention-svg text.token", "t => parseFloat(getComputedStyle(t).fontSize)") >= 12
    assert_lines(page, payload["sentences"][0], payload["min_line_weight"], "encoder", 1, range(4))
    page.screenshot(path=str(ARTIFACTS / "attention_page_long.png"))
    assert errors == []
    page.close()


def test_head_grid_labels_its_rows_and_columns_and_gives_each_weight_on_hover(browser, translator, tmp_path):
    """A 40-token sentence and its 40-token translation: every panel of the grid is labelled with
    the tokens, cells stay at least 14 pixels with one label per cell, and hovering a cell tells its
    target token, source token and weight."""
    words = " ".join(p[0] for p in translator.pairs[:20]).split()
    k = next(k for k in range(1, len(words)) if len(translator.vocab.src.encode(" ".join(words[:k]))) >= 40)
    data = collect_attention(translator, " ".join(words[:k]), translation="the small black cat sleeps " * 8)
    path = write_attention_page(data, tmp_path / "forty.html")
    doc = read_page_data(path)["sentences"][0]
    src = TokenAxis.from_dict(doc["tokens"]["source"]).labels
    tgt = TokenAxis.from_dict(doc["tokens"]["target_output"]).labels
    assert len(src) >= 40 and len(tgt) >= 40
    page, errors, _ = open_page(browser, path)
    assert page.input_value("#kind-select") == "cross"
    page.click("#view-grid")
    layer, scale = int(page.input_value("#layer-select")), doc["weight_scale"]
    weights = doc["kinds"]["cross"]["weights"][layer]
    for head in ("0", "3", "average"):
        cell = f".head-cell[data-head='{head}']"
        assert page.locator(f"{cell} .col-label").all_text_contents() == src
        assert page.locator(f"{cell} .row-label").all_text_contents() == tgt
    size = page.eval_on_selector("canvas.head-map[data-head='0']", "(c, n) => c.width / n", len(src))
    assert size >= 14 and size == page.eval_on_selector("canvas.head-map[data-head='0']", "(c, n) => c.height / n", len(tgt))
    # one label per cell: the column labels are a cell apart, the row labels a cell high, the text 11 px
    xs = page.eval_on_selector_all(".head-cell[data-head='0'] .col-label", "ls => ls.map(l => l.getBoundingClientRect().x)")
    assert all(abs((b - a) - size) < 0.5 for a, b in zip(xs, xs[1:]))
    hs = page.eval_on_selector_all(".head-cell[data-head='0'] .row-label", "ls => ls.map(l => l.getBoundingClientRect().height)")
    assert all(abs(h - size) < 0.5 for h in hs)
    assert page.eval_on_selector(".col-label", "l => parseFloat(getComputedStyle(l).fontSize)") >= 11

    def hover(head: str, i: int, j: int) -> dict:
        page.locator(f"canvas.head-map[data-head='{head}']").hover(position={"x": j * size + size / 2, "y": i * size + size / 2})
        assert page.is_visible("#tooltip")
        return page.eval_on_selector("#tooltip", "t => ({...t.dataset, text: t.textContent})")

    for head, i, j in ((1, 5, 7), (3, 39, 0), (0, 0, len(src) - 1)):
        tip = hover(str(head), i, j)
        expected = weights[head][i][j] / scale
        assert (tip["head"], int(tip["row"]), int(tip["col"])) == (str(head), i, j)
        assert abs(float(tip["weight"]) - expected) < 1e-9
        assert f"\u201c{tgt[i]}\u201d" in tip["text"] and f"\u201c{src[j]}\u201d" in tip["text"] and f"{expected:.4f}" in tip["text"]
        panel = f".head-cell[data-head='{head}']"
        assert page.locator(f"{panel} .row-label.hovered").all_text_contents() == [tgt[i]]
        assert page.locator(f"{panel} .col-label.hovered").all_text_contents() == [src[j]]
    tip = hover("average", 2, 3)
    assert abs(float(tip["weight"]) - sum(weights[h][2][3] for h in range(4)) / 4 / scale) < 1e-9
    page.screenshot(path=str(ARTIFACTS / "attention_page_grid_40.png"), full_page=True)
    page.mouse.move(1, 1)
    assert not page.is_visible("#tooltip")
    assert errors == []
    page.close()


def test_layer_menu_names_the_first_and_last_layer(browser, page_file):
    # layers are numbered from 0, as --layer and the heatmaps' file names number them
    layers = read_page_data(page_file)["sentences"][0]["model"]["layers"]["decoder"]
    assert layers == 2  # the tiny preset
    page, errors, _ = open_page(browser, page_file)
    labels = page.eval_on_selector_all("#layer-select option", "options => options.map((o) => o.textContent)")
    assert labels == ["0 (first)", "1 (last)"]
    assert page.eval_on_selector("#layer-select", "s => s.selectedOptions[0].textContent") == "1 (last)"
    assert not errors
    page.close()

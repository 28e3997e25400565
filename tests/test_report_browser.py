"""The training report in a real headless Chromium (Playwright): it opens without errors or
requests, and the alignment timeline's slider draws the snapshot of the step it picks.

The run directory is the fake of tests/report_helpers.py, whose weights go from uniform (first
evaluation) to the word alignment (last). Skipped without Playwright or Chromium, unless CI is
set, like tests/test_visualize_browser.py.
"""

from __future__ import annotations

import pytest
from report_helpers import HEADS, HOSTILE, SRC, TGT, make_hostile_run, make_run, snapshot_weights
from browser_helpers import ARTIFACTS

from transformer.visualize.report import build_report

RED = {0: 0x1F, 1: 0xFF, "average": 0x22}  # red channel of head 0 (#1f77b4), head 1 (#ff7f0e), the average (#222)


def open_report(browser, path, dialogs=None):
    page = browser.new_page(viewport={"width": 1300, "height": 1000})
    problems: list[str] = []
    requests: list[str] = []
    if dialogs is not None:  # a script that ran says so with alert(N)
        page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    page.on("pageerror", lambda e: problems.append(str(e)))
    page.on("console", lambda m: problems.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
    page.on("request", lambda r: requests.append(r.url))
    page.goto(path.as_uri())
    page.wait_for_selector("body[data-ready=true]")
    return page, problems, requests


def cell_reds(page, head, rows: int, cols: int) -> list[list[int]]:
    """The red channel at the centre of each cell of a head's heatmap (the pixels read once: the
    browser warns about a canvas read back many times)."""
    return page.eval_on_selector(f"#tl-grid canvas.head-map[data-head='{head}']", """(c, [rows, cols]) => {
        const size = c.width / cols, pixels = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        const red = (x, y) => pixels[4 * (Math.floor(y) * c.width + Math.floor(x))];
        return [...Array(rows).keys()].map(i => [...Array(cols).keys()].map(j =>
            red(j * size + size / 2, i * size + size / 2))); }""", [rows, cols])


def assert_snapshot(page, k: int, layer: int) -> None:
    """The timeline draws evaluation ``k``'s weights of the first sentence: white blended with the
    head's colour by the weight itself (the same scale at every step)."""
    weights = snapshot_weights(k, 4)[layer]
    heads = {**{h: weights[h] for h in range(HEADS)}, "average": weights.mean(axis=0)}
    for head, matrix in heads.items():
        reds = cell_reds(page, head, len(TGT), len(SRC))
        for i, row in enumerate(matrix):
            for j, w in enumerate(row):
                # the average is drawn from the rounded weights, so it may differ by a thousandth
                assert abs(reds[i][j] - (255 * (1 - w) + RED[head] * w)) <= 2, (head, i, j)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    return build_report(make_run(tmp_path_factory.mktemp("report") / "run"))[0]


def test_report_opens_and_the_slider_changes_the_heatmap(browser, report):
    page, problems, requests = open_report(browser, report)
    assert page.locator("#curves figure.chart svg").count() == 5
    assert page.input_value("#tl-step") == "3" and page.get_attribute("#tl-grid", "data-step") == "400"
    assert "step 400, epoch 2" in page.inner_text("#tl-step-label") and "BLEU 22.0" in page.inner_text("#tl-step-label")
    assert page.input_value("#tl-layer") == "1"
    assert page.locator(".head-cell[data-head='0'] .col-label").all_text_contents() == SRC
    assert page.locator(".head-cell[data-head='0'] .row-label").all_text_contents() == TGT
    assert_snapshot(page, 3, layer=1)
    page.screenshot(path=str(ARTIFACTS / "report_last_step.png"), full_page=True)

    page.fill("#tl-step", "0")  # the first evaluation: attention spread evenly over the source
    assert page.get_attribute("#tl-grid", "data-step") == "100" and "step 100" in page.inner_text("#tl-step-label")
    assert_snapshot(page, 0, layer=1)
    assert "mean largest weight of a row 0.20 (uniform attention: 0.20)" in page.inner_text("#tl-status")
    page.select_option("#tl-layer", "0")
    assert_snapshot(page, 0, layer=0)
    page.fill("#tl-step", "2")
    assert_snapshot(page, 2, layer=0)
    page.focus("#tl-step")
    page.keyboard.press("ArrowRight")  # the keyboard moves the slider too
    assert_snapshot(page, 3, layer=0)

    size = page.eval_on_selector("#tl-grid canvas.head-map[data-head='0']", "(c, n) => c.width / n", len(SRC))
    page.locator("#tl-grid canvas.head-map[data-head='0']").hover(position={"x": 2.5 * size, "y": 3.5 * size})
    tip = page.eval_on_selector("#tooltip", "t => ({...t.dataset, text: t.textContent})")
    assert (tip["row"], tip["col"]) == ("3", "2") and float(tip["weight"]) == snapshot_weights(3, 4)[0, 0, 3, 2] == 1.0
    assert "\u201cstudent\u201d" in tip["text"] and "\u201c\u00e9tudi\u201d" in tip["text"] and "1.000" in tip["text"]

    assert page.locator("#tl-sentence option").all_text_contents() == [
        "1. je suis étudiant . \u2192 i am a student .", "2. je suis étudi \u2192 i am"]
    page.select_option("#tl-sentence", "1")  # the second followed sentence: its own tokens
    assert page.locator(".head-cell[data-head='0'] .col-label").all_text_contents() == SRC[:3]
    assert page.locator(".head-cell[data-head='0'] .row-label").all_text_contents() == TGT[:2] + ["</s>"]
    page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)
    assert problems == [] and all(url.startswith("file://") for url in requests), (problems, requests)
    page.close()


def test_play_steps_through_the_evaluations(browser, report):
    page, problems, _ = open_report(browser, report)
    page.click("#tl-play")  # at the last step, play starts over from the first
    page.wait_for_selector("#tl-grid[data-step='100']", timeout=2000)
    page.wait_for_selector("#tl-grid[data-step='200']", timeout=3000)
    page.wait_for_selector("#tl-grid[data-step='400']", timeout=5000)
    page.wait_for_selector("#tl-play:has-text('play')", timeout=3000)  # stopped at the end
    assert page.input_value("#tl-step") == "3" and problems == []
    page.close()


def test_report_of_a_run_before_alignments_opens_with_its_note(browser, tmp_path):
    path = build_report(make_run(tmp_path / "old", alignments=False))[0]
    page, problems, _ = open_report(browser, path)
    assert page.is_visible("#timeline-note") and "curves only" in page.inner_text("#timeline-note")
    assert page.locator("#curves figure.chart svg").count() == 5 and page.locator("#tl-grid").count() == 0
    assert problems == []
    page.close()


def test_markup_from_the_run_directory_is_text_and_runs_nothing(browser, tmp_path):
    path = build_report(make_hostile_run(tmp_path / "run<svg onload=alert(10)>"))[0]
    dialogs: list[str] = []
    page, problems, requests = open_report(browser, path, dialogs)
    page.wait_for_timeout(300)  # time for a failed image load to fire its handler
    assert dialogs == [] and page.locator("#summary img, #validation img, main iframe, main script").count() == 0
    summary = page.inner_text("#summary")
    assert f"epoch {HOSTILE['epoch']}" in summary and HOSTILE["d_model"] in summary and HOSTILE["n_heads"] in summary
    assert f"{HOSTILE['layers']}+2 layers" in summary and "<svg onload=alert(10)>" in page.inner_text("h1")
    epochs = page.locator("#validation-table tbody tr td:nth-child(2)").all_text_contents()
    assert epochs == [HOSTILE["epoch"]] * 4
    configuration, machine = page.inner_text("#configuration"), page.inner_text("#machine")
    assert HOSTILE["setting"] in configuration and HOSTILE["section"] in configuration
    assert HOSTILE["summary"] in machine and HOSTILE["host"] in machine
    label = page.inner_text("#tl-step-label")  # the last evaluation's loss is a string: no number shown for it
    assert f"step 400, epoch {HOSTILE['epoch']}" in label and "validation loss" not in label and "BLEU 22.0" in label
    assert page.locator(".head-cell[data-head='0'] .col-label").all_text_contents()[-1] == HOSTILE["token"]
    page.fill("#tl-step", "0")  # the first evaluation's loss was NaN (null in the page's data)
    label = page.inner_text("#tl-step-label")
    assert "step 100" in label and "validation loss" not in label and "BLEU 7.0" in label
    assert problems == [] and all(url.startswith("file://") for url in requests), (problems, requests)
    page.close()


def test_the_policy_stops_markup_that_got_into_the_page(browser, tmp_path):
    """A second line of defence: markup that escaped into the page by some future slip runs nothing,
    because the page's Content-Security-Policy allows only its own inline code."""
    path = build_report(make_run(tmp_path / "run"))[0]
    text = path.read_text(encoding="utf-8")
    path.write_text(text.replace("<main>", "<main><img src=x onerror=alert(1)><script>alert(2)</script>"
                                 "<p id=styled style='color: red'>x</p>", 1), encoding="utf-8")
    dialogs: list[str] = []
    page, problems, _ = open_report(browser, path, dialogs)
    page.wait_for_timeout(300)
    assert dialogs == [] and page.locator("#curves figure.chart svg").count() == 5
    assert page.eval_on_selector("#styled", "e => getComputedStyle(e).color") != "rgb(255, 0, 0)"
    assert any("Content Security Policy" in p for p in problems), problems  # the browser says what it refused
    page.close()

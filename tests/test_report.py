"""``transformer report``: one self-contained page from a run directory's records.

The run directories are fakes with known numbers (tests/report_helpers.py): the page's embedded
data and its SVG curves are checked against those numbers, not against the report's own code.
The page in a browser: tests/test_report_browser.py.
"""

from __future__ import annotations

import base64
import hashlib
import html.parser
import json
import re
from pathlib import Path

import numpy as np
import pytest
from report_helpers import (HOSTILE, SRC, TGT, alignment_lines, make_hostile_run, make_run, snapshot_weights,
                            train_records, tree, valid_records)

from transformer.cli import main
from transformer.visualize.report import build_report
from transformer.visualize.run_records import read_timeline


def embedded(page: Path) -> dict:
    text = page.read_text(encoding="utf-8")
    match = re.search(r'<script type="application/json" id="report-data">(.*?)</script>', text, re.S)
    return json.loads(match.group(1))


def test_the_page_is_self_contained_and_embeds_the_runs_records(tmp_path):
    run = make_run(tmp_path / "run")
    out, pngs, size = build_report(run)
    assert out == run / "report.html" and pngs == [] and size == len(out.read_bytes())
    text = out.read_text(encoding="utf-8")
    # nothing fetched: no URL in a src or href, no <link>, no <script src>, no @import or url() in the CSS
    assert not re.search(r"""\b(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", text, re.I)
    assert "<link" not in text and not re.search(r"<script[^>]*\bsrc\s*=", text) and "@import" not in text
    assert not re.search(r"url\(\s*['\"]?(?:https?:)?//", text)
    data = embedded(out)
    assert data["format"] == "transformer-run-report" and data["last_step"] == 400
    curves = data["curves"]
    assert curves["loss"]["training"] == [[r["step"], r["loss"]] for r in train_records()]
    assert curves["loss"]["validation"] == [[r["step"], r["loss"]] for r in valid_records()]
    assert curves["quality"]["sacreBLEU"] == [[r["step"], r["bleu"]] for r in valid_records()]
    assert curves["learning_rate"]["learning rate"] == [[r["step"], r["lr"]] for r in train_records()]
    assert curves["throughput"]["tokens/s"] == [[r["step"], r["tokens_per_s"]] for r in train_records()]
    assert curves["grad_norm"]["gradient norm"] == [[r["step"], r["grad_norm"]] for r in train_records()]
    assert data["validation"] == valid_records()
    timeline = data["alignments"]
    assert [s["step"] for s in timeline["steps"]] == [100, 200, 300, 400]
    first = timeline["sentences"][0]
    assert (first["index"], first["src_tokens"], first["tgt_tokens"]) == (3, SRC, TGT)
    for k in range(4):  # thousandths of the weights as the trainer rounded them
        assert np.array_equal(first["weights"][k], np.rint(snapshot_weights(k, 4) * 1000))
    # the settings and the machine, as the run recorded them
    for fact in ("CPU threads", "fp32", "precision (configured)", "alignment_sentences"):
        assert fact in text
    assert 'id="timeline-note"' not in text and 'id="tl-step"' in text


def svg_points(page_text: str, gid: str) -> list[tuple[float, float]]:
    """The vertices of the matplotlib line ``<g id=gid>`` of the page."""
    match = re.search(rf'<g id="{gid}">\s*<path d="([^"]+)"', page_text)
    assert match, f"no line {gid}"
    numbers = [float(x) for x in re.findall(r"-?\d+(?:\.\d+)?", match.group(1))]
    return list(zip(numbers[0::2], numbers[1::2]))


@pytest.mark.parametrize("gid, kind, key", [("curve-loss-0", "train", "loss"), ("curve-loss-1", "valid", "loss"),
                                            ("curve-quality-0", "valid", "bleu"), ("curve-throughput-0", "train", "tokens_per_s"),
                                            ("curve-learning_rate-0", "train", "lr")])
def test_each_curve_is_drawn_through_the_records(tmp_path, gid, kind, key):
    out, _, _ = build_report(make_run(tmp_path / "run"))
    points = svg_points(out.read_text(encoding="utf-8"), gid)
    records = train_records() if kind == "train" else valid_records()
    steps = np.array([r["step"] for r in records], dtype=float)
    values = np.array([r[key] for r in records], dtype=float)
    assert len(points) == len(records)
    x, y = np.array(points).T
    # the picture is the data up to an affine map per axis (SVG y grows downwards: a larger value is higher)
    for data, drawn in ((steps, x), (values, y)):
        slope, intercept = np.polyfit(data, drawn, 1)
        assert np.allclose(slope * data + intercept, drawn, atol=0.01 * np.ptp(drawn) + 1e-6)
    assert np.polyfit(values, y, 1)[0] < 0


def test_the_report_reads_the_files_the_trainer_writes():
    from transformer.visualize import run_records

    run_dir = pytest.importorskip("transformer.run.directory")
    alignment_log = pytest.importorskip("transformer.training.alignment_log")
    assert run_records.RUN_CONFIG_FILE == run_dir.RUN_CONFIG_FILE
    assert run_records.ALIGNMENTS_FILE == alignment_log.ALIGNMENTS_FILE


def test_a_run_made_before_alignments_gets_its_curves_and_a_note(tmp_path):
    run = make_run(tmp_path / "old", alignments=False)
    out, _, _ = build_report(run)
    text = out.read_text(encoding="utf-8")
    assert 'id="timeline-note"' in text and "curves only" in text and "alignments.jsonl" in text
    assert 'id="tl-step"' not in text
    data = embedded(out)
    assert data["alignments"] is None and data["curves"]["loss"]["training"]


def test_a_run_still_training_reports_its_complete_lines(tmp_path):
    run = make_run(tmp_path / "run")
    with (run / "metrics.jsonl").open("a") as f:
        f.write('{"kind": "train", "step": 450, "loss": 1.')  # being written now
    line = json.dumps(alignment_lines()[0] | {"step": 500})
    with (run / "alignments.jsonl").open("a") as f:
        f.write(line[: len(line) // 2])
    out, _, _ = build_report(run)
    data = embedded(out)
    assert data["last_step"] == 400 and [s["step"] for s in data["alignments"]["steps"]] == [100, 200, 300, 400]
    assert "timeline-note" not in out.read_text(encoding="utf-8")  # the line being written is no fault


def test_timeline_skips_what_it_cannot_use_and_says_so(tmp_path):
    lines = alignment_lines()
    lines[1]["sentences"][0]["layers"][0][0].pop()  # a head with one row short: its tokens do not fit
    lines[3]["sentences"][1]["tgt_tokens"] = ["other", "</s>", "x"]  # sentence 9 followed with other tokens
    again = lines[2] | {"epoch": 99}  # a step logged twice (a resumed run): the last line counts
    path = tmp_path / "alignments.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines[:3]) + "{not json\n" + json.dumps(again) + "\n"
                    + json.dumps(lines[3]) + "\n", encoding="utf-8")
    timeline, notes = read_timeline(path)
    assert [(s["step"], s["epoch"]) for s in timeline["steps"]] == [(100, 0), (200, 1), (300, 99), (400, 2)]
    first, second = timeline["sentences"]
    assert first["weights"][1] is None and all(first["weights"][k] is not None for k in (0, 2, 3))
    assert second["weights"][3] is None and second["weights"][2] is not None
    assert notes == ["1 line of alignments.jsonl could not be read and were left out",
                     "2 sentence snapshots of alignments.jsonl did not match their tokens and were left out"]
    assert read_timeline(tmp_path / "missing.jsonl") == (None, [])


def test_timeline_leaves_out_a_line_of_other_bytes(tmp_path):
    lines = alignment_lines()
    path = tmp_path / "alignments.jsonl"
    path.write_bytes(b"".join(json.dumps(x).encode() + b"\n" for x in lines[:2]) + b"\xff\xfe{not UTF-8\n"
                     + json.dumps(lines[2]).encode() + b"\n")
    timeline, notes = read_timeline(path)  # a damaged run file: left out and counted, no UnicodeDecodeError
    assert [s["step"] for s in timeline["steps"]] == [100, 200, 300]
    assert notes == ["1 line of alignments.jsonl could not be read and were left out"]


def test_cli_writes_the_page_and_pngs_and_prints_size_and_time(tmp_path, capsys):
    run = make_run(tmp_path / "run")
    assert main(["report", str(run), "--output", str(tmp_path / "out" / "r.html"), "--png", str(tmp_path / "png")]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert re.fullmatch(r".*r\.html: [\d,]+ KiB, built in \d+\.\d\d s", printed[-1])
    names = sorted(p.name for p in (tmp_path / "png").iterdir())
    assert names == ["curve-grad_norm.png", "curve-learning_rate.png", "curve-loss.png", "curve-quality.png",
                     "curve-throughput.png"]
    import matplotlib.image

    for name in names:
        image = matplotlib.image.imread(tmp_path / "png" / name)
        assert image.shape[0] > 200 and image.shape[1] > 400 and image[..., :3].std() > 0.05  # a picture, not blank
    # built again (a run still training): the earlier report is replaced
    assert main(["report", str(run), "--output", str(tmp_path / "out" / "r.html")]) == 0


def _bad(tmp_path: Path) -> dict[str, tuple[list[str], str]]:
    not_run = tmp_path / "notrun"
    not_run.mkdir()
    (not_run / "notes.txt").write_text("hello")
    empty = make_run(tmp_path / "empty")
    (empty / "metrics.jsonl").write_text('{"kind": "train", "st')  # only a line being written
    fresh = make_run(tmp_path / "fresh")
    (fresh / "metrics.jsonl").unlink()
    run = make_run(tmp_path / "run")
    (tmp_path / "mine.html").write_text("<p>my own page</p>")
    (tmp_path / "afile").write_text("x")
    return {
        "missing": ([str(tmp_path / "nope")], "does not exist; give the --run-dir"),
        "file": ([str(tmp_path / "afile")], "is not a directory"),
        "not a run": ([str(not_run)], "is not a training run (no run_config.json); give the --run-dir"),
        "partial metrics": ([str(empty)], "has no metrics yet"),
        "no metrics": ([str(fresh)], "run the report again after the first"),
        "foreign output": ([str(run), "--output", str(tmp_path / "mine.html")], "is not a report written by"),
        "output is a dir": ([str(run), "--output", str(tmp_path / "notrun")], "is a directory"),
        "png is a file": ([str(run), "--png", str(tmp_path / "afile")], "is a file; give a directory"),
    }


@pytest.mark.parametrize("case", ["missing", "file", "not a run", "partial metrics", "no metrics", "foreign output",
                                  "output is a dir", "png is a file"])
def test_bad_input_is_one_line_exit_2_and_nothing_written(tmp_path, capsys, case):
    argv, message = _bad(tmp_path)[case]
    before, folders = tree(tmp_path), sorted(p for p in tmp_path.rglob("*") if p.is_dir())
    assert main(["report", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith("transformer report: error: ") and err.count("\n") == 1 and message in err
    assert tree(tmp_path) == before and sorted(p for p in tmp_path.rglob("*") if p.is_dir()) == folders


def test_the_machine_section_says_what_the_run_recorded(tmp_path):
    import os
    import socket

    run = make_run(tmp_path / "run")
    (run / "benchmark.json").write_text(json.dumps({"corpus": "multi30k", "precision": {"train": "bf16"},
                                                    "results": [{"bleu": 7.0}]}))
    lock = {"pid": os.getpid(), "host": socket.gethostname(), "started": "2026-11-24T21:29:00+00:00",
            "command": "transformer train"}
    (run / ".lock").write_text(json.dumps(lock))  # what the trainer writes while it holds the run
    text = build_report(run)[0].read_text(encoding="utf-8")
    machine = text[text.index('id="machine-table"'):]
    assert f"pid {os.getpid()} on host {socket.gethostname()}" in machine and "(training now)" in machine
    assert "<b>training now</b>" in text  # said in the summary too
    assert "<h3>benchmark.json</h3>" in text and "precision.train</th><td>bf16" in text
    assert "2,650 target tokens/s" in machine  # the median of the fixture's throughput records
    lock["pid"] = 2**22 + 12345  # above any pid this machine hands out: a run that was killed
    (run / ".lock").write_text(json.dumps(lock))
    text = build_report(run)[0].read_text(encoding="utf-8")
    assert "(not running" in text and "<b>training now</b>" not in text


class Elements(html.parser.HTMLParser):
    """Every element of a page with its attributes, and the text of its inline scripts and styles."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.inline: list[tuple[str, dict[str, str | None], str]] = []
        self.open = False

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag in ("script", "style"):
            self.inline.append((tag, self.tags[-1][1], ""))
            self.open = True

    def handle_endtag(self, tag):
        self.open = False

    def handle_data(self, data):  # the parser may hand a script's text over in several pieces
        if self.open:
            self.inline[-1] = (*self.inline[-1][:2], self.inline[-1][2] + data)


def sha256_source(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def test_markup_in_the_run_directory_is_shown_as_text(tmp_path):
    run = make_hostile_run(tmp_path / "run<svg onload=alert(10)>")
    text = build_report(run)[0].read_text(encoding="utf-8")
    page = Elements()
    page.feed(text)
    # only the template's elements: none of the hostile strings became a tag or an event handler
    assert not {tag for tag, _ in page.tags} & {"img", "iframe"}
    assert [tag for tag, attrs in page.tags if tag == "svg" and not attrs.get("xmlns")] == []
    assert not [(tag, name) for tag, attrs in page.tags for name in attrs if name.startswith("on")]
    assert [attrs.get("type") for tag, attrs in page.tags if tag == "script"] == ["application/json", None]
    for value in HOSTILE.values():  # every one shown, escaped
        assert value not in text.split('id="report-data"')[0], value
    assert f"epoch {HOSTILE['epoch']}".replace("<", "&lt;").replace(">", "&gt;") in text
    assert embedded(tmp_path / "run<svg onload=alert(10)>" / "report.html")["validation"][0]["loss"] is None  # NaN


def test_the_page_allows_only_its_own_inline_code(tmp_path):
    text = build_report(make_run(tmp_path / "run"))[0].read_text(encoding="utf-8")
    page = Elements()
    page.feed(text)
    metas = [attrs["content"] for tag, attrs in page.tags
             if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "content-security-policy"]
    assert len(metas) == 1
    policy = {d.split()[0]: d.split()[1:] for d in metas[0].split(";") if d.strip()}
    assert policy["default-src"] == ["'none'"] and policy["base-uri"] == ["'none'"]
    assert policy["form-action"] == ["'none'"] and policy["img-src"] == ["data:"]
    scripts = [sha256_source(code) for tag, attrs, code in page.inline if tag == "script" and not attrs.get("type")]
    styles = {sha256_source(code) for tag, _, code in page.inline if tag == "style"}
    attributes = {sha256_source(attrs["style"]) for _, attrs in page.tags if attrs.get("style")}
    assert policy["script-src"] == scripts and len(scripts) == 1
    assert set(policy["style-src"]) == {"'unsafe-hashes'"} | styles | attributes
    assert text.index("Content-Security-Policy") < text.index("<style")  # it governs everything after it

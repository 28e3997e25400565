"""``transformer report RUN_DIR``: one self-contained HTML page about a training run.

    transformer report RUN_DIR [--output FILE] [--png DIR]

The page (``report.html`` + ``report.js`` in this package, the head grid of ``grid.js`` shared
with the attention page; everything inline, no network) shows:

* the curves of ``metrics.jsonl`` (:mod:`transformer.visualize.report_curves`): training and
  validation loss, validation BLEU and chrF, the learning rate, the throughput and, where the run
  logged it, the gradient norm, as inline SVG drawn by matplotlib (``--png DIR``: the same charts
  as PNG files, ``curve-NAME.png``);
* the alignment timeline: the cross-attention of the followed validation sentences at each
  evaluation (``alignments.jsonl``), a slider over the steps; a run made before those snapshots
  were recorded gets a note instead;
* a table of the validation records, the configuration (``run_config.json``, ``config.json``)
  and what the run recorded about its machine (:mod:`transformer.visualize.run_records`).

The data drawn is embedded once as JSON (``<script type="application/json" id="report-data">``,
format ``transformer-run-report`` version 1: ``curves``, ``validation``, ``alignments``). Every value
read from the run directory is escaped where the page shows it (NaN and infinities are null in the
data), and the page carries a Content-Security-Policy (``<meta http-equiv>``) that allows only its
own inline script and styles, by hash. A run still training can be reported at any time: the
complete lines written so far are read.
A directory that is not a run, or a run with no metrics yet, raises
:class:`~transformer.visualize.run_records.RunRecordsError` before anything is written. The
command's parser is in ``cli_args.py``.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import os
import re
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from transformer.run.layout import ALIGNMENTS_FILE, RUN_CONFIG_FILE
from transformer.visualize._io import writable_dir, writable_file, write_text_atomic
from transformer.visualize.cli_args import REPORT_FILE
from transformer.visualize.csp import inline_hashes, style_attribute_hashes
from transformer.visualize.page import _resource, _script_json, grid_assets
from transformer.visualize.report_curves import curve_series, curve_svgs, write_curve_pngs
from transformer.visualize.run_records import RunRecords, read_run

FORMAT, VERSION = "transformer-run-report", 1
GENERATOR = '<meta name="generator" content="transformer report">'
_PLACEHOLDER = re.compile(
    r"__(CSP|TITLE|RUN|SUMMARY|CURVES|TIMELINE|VALIDATION|CONFIG|MACHINE|BUILT|DATA|SCRIPT|GRID_STYLE)__")
_CHART_TEXT = {"loss": "Training loss (per log window) and validation loss, both label-smoothed.",
               "quality": "sacreBLEU and chrF of greedy translations of the first train.eval_sentences "
                          "validation sentences.",
               "learning_rate": "The learning rate of each logged step.",
               "throughput": "Target tokens per second over each log window.",
               "grad_norm": "The gradient's L2 norm at each logged step, before clipping."}


def report_html(records: RunRecords, *, built: datetime | None = None) -> str:
    """The HTML text of the report of ``records`` (from :func:`~transformer.visualize.run_records.read_run`)."""
    built = built or datetime.now().astimezone()
    series = curve_series(records.metrics)
    valid = [_plain(r) for r in records.metrics if r.get("kind") == "valid"]
    payload = {"format": FORMAT, "version": VERSION, "run_dir": str(records.run_dir), "last_step": records.last_step,
               "curves": series, "validation": valid, "alignments": records.timeline}
    style, grid_script = grid_assets()
    name = records.run_dir.resolve().name or str(records.run_dir)
    code = {"SCRIPT": grid_script + "\n" + _resource("report.js"), "GRID_STYLE": style}
    curves = _curves(series)
    values = {
        "CSP": html.escape(_policy(code, curves)),
        "TITLE": html.escape(f"Training report: {name} (step {records.last_step})"),
        "RUN": html.escape(str(records.run_dir)),
        "SUMMARY": _summary(records, valid),
        "CURVES": curves,
        "TIMELINE": _timeline(records),
        "VALIDATION": _validation(valid),
        "CONFIG": _config(records),
        "MACHINE": _machine(records),
        "BUILT": html.escape(built.isoformat(timespec="seconds")),
        "DATA": _script_json(payload),
        **code,
    }
    # one pass over the template: text from the run that looks like a placeholder stays as it is
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], _resource("report.html"))


def _policy(code: dict[str, str], curves: str) -> str:
    """The page's Content-Security-Policy: its own scripts and styles by hash, taken from the template
    with only the program's code filled in and from matplotlib's charts (drawn from numbers only), so
    nothing read from the run directory can be allowed by it; no network, no forms, no ``<base>``."""
    skeleton = _PLACEHOLDER.sub(lambda m: code.get(m.group(1), ""), _resource("report.html"))
    scripts, styles = inline_hashes(skeleton)
    styles += inline_hashes(curves)[1] + style_attribute_hashes(skeleton + curves)
    return ("default-src 'none'; "
            f"script-src {' '.join(scripts)}; style-src 'unsafe-hashes' {' '.join(dict.fromkeys(styles))}; "
            "img-src data:; base-uri 'none'; form-action 'none'")


def _plain(record: dict[str, Any]) -> dict[str, Any]:
    """A metrics record as the page embeds it: its scalar values, NaN and infinities as null (JSON has
    neither), anything nested left out."""
    plain = {}
    for key, value in record.items():
        if isinstance(value, float) and not math.isfinite(value):
            plain[key] = None
        elif value is None or isinstance(value, (str, int, float)):
            plain[key] = value
    return plain


def _shown(value: Any) -> str:
    """A value read from the run directory as HTML text: escaped, whatever its type."""
    return html.escape(_text(value))


def _summary(records: RunRecords, valid: list[dict[str, Any]]) -> str:
    last = max(records.metrics, key=lambda r: r["step"])
    parts = [f"<b>step {records.last_step}</b>" + (f", epoch {_shown(last['epoch'])}" if "epoch" in last else "")]
    if valid:
        v = valid[-1]
        text = f"last validation (step {_shown(v['step'])}): loss {_number(v.get('loss'), 3) or '?'}"
        if isinstance(v.get("bleu"), (int, float)):
            text += f", <b>BLEU {v['bleu']:.2f}</b>" + (f", chrF {v['chrf']:.1f}" if isinstance(v.get("chrf"), (int, float)) else "")
        parts.append(text)
        scored = [r for r in valid if isinstance(r.get("bleu"), (int, float))]
        if scored:
            best = max(scored, key=lambda r: r["bleu"])
            parts.append(f"best BLEU {best['bleu']:.2f} at step {_shown(best['step'])}")
    else:
        parts.append("no validation yet")
    model = records.model or {}
    if {"d_model", "n_heads"} <= model.keys():
        layers = f"{_shown(model.get('n_encoder_layers', '?'))}+{_shown(model.get('n_decoder_layers', '?'))} layers, "
        parts.append(f"model: {layers}d_model {_shown(model['d_model'])}, {_shown(model['n_heads'])} heads")
    if any(value.endswith("(training now)") for _, value in records.machine):
        parts.append("<b>training now</b>: build the report again to see more")
    return " \u00b7 ".join(parts)


def _curves(series: dict[str, dict[str, list[list[float]]]]) -> str:
    figures = [f'<figure class="chart" id="chart-{name}">{svg}<figcaption class="hint">{html.escape(_CHART_TEXT[name])}'
               "</figcaption></figure>" for name, svg in curve_svgs(series).items()]
    missing = [] if "quality" in series else ['<p class="hint">No BLEU yet: the run has not been validated with '
                                              "train.eval_sentences &gt; 0.</p>"]
    return '<div class="charts">' + "".join(figures) + "</div>" + "".join(missing)


def _timeline(records: RunRecords) -> str:
    notes = "".join(f'<p class="note timeline-note">{html.escape(n)}.</p>' for n in records.timeline_notes)
    if records.timeline is None:
        if records.timeline_notes:
            return notes
        return (f'<p class="note" id="timeline-note">This run has no {ALIGNMENTS_FILE}: it was made before the trainer '
                "recorded alignment snapshots (or with train.alignment_sentences=0), so this page shows its curves "
                "only. A run trained now records, at each evaluation, the encoder-decoder attention of a few "
                "validation sentences, and this section shows it forming.</p>")
    t = records.timeline
    return (f'<p class="hint">The encoder-decoder attention of {len(t["sentences"])} validation sentences, '
            "teacher-forced on their reference translations, at each of the run's "
            f"{len(t['steps'])} evaluations. Rows: the target token being predicted; columns: the source tokens; "
            "the colour of a cell is its weight (white 0, full colour 1), the same scale at every step. Move the "
            "slider (or press play) to watch attention go from spread out to the word alignment.</p>"
            + notes +
            '<div class="controls"><label>Sentence <select id="tl-sentence"></select></label>'
            '<label>Decoder layer <select id="tl-layer"></select></label>'
            '<button type="button" id="tl-play">\u25b6 play</button>'
            '<label>Step <input type="range" id="tl-step" aria-label="evaluation step"></label>'
            '<output id="tl-step-label" for="tl-step"></output></div>'
            '<p id="tl-status"></p><div id="tl-grid"></div>')


def _number(value: Any, digits: int) -> str:
    return f"{value:.{digits}f}" if isinstance(value, (int, float)) and not isinstance(value, bool) else ""


def _validation(valid: list[dict[str, Any]]) -> str:
    if not valid:
        return '<p class="hint">No validation record yet (one is written at each evaluation).</p>'
    head = "".join(f'<th class="num">{h}</th>' for h in ("step", "epoch", "loss", "NLL", "perplexity", "BLEU", "chrF",
                                                         "exact match"))
    rows = "".join(
        "<tr>" + "".join(f'<td class="num">{c}</td>' for c in (
            _shown(r["step"]), _shown(r.get("epoch", "")), _number(r.get("loss"), 3), _number(r.get("nll"), 3),
            _number(r.get("ppl"), 2),
            _number(r.get("bleu"), 2), _number(r.get("chrf"), 2),
            f"{r['exact_match']:.1%}" if isinstance(r.get("exact_match"), (int, float)) else "")) + "</tr>"
        for r in valid)
    return f'<div class="scroll"><table id="validation-table"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table></div>'


def _table(pairs: list[tuple[str, Any]], table_id: str = "") -> str:
    rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(_text(v))}</td></tr>" for k, v in pairs)
    attribute = f' id="{html.escape(table_id)}"' if table_id else ""
    return f"<table{attribute}><tbody>{rows}</tbody></table>"


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


def _config(records: RunRecords) -> str:
    blocks = []
    for section, values in records.config.items():
        if isinstance(values, dict):
            blocks.append(f"<div><h3>{html.escape(section)}</h3>{_table(sorted(values.items()), f'config-{section}')}</div>")
    if records.model:
        blocks.append(f"<div><h3>the model built (config.json)</h3>{_table(sorted(records.model.items()), 'model')}</div>")
    return (f'<p class="hint">From {html.escape(str(records.run_dir / RUN_CONFIG_FILE))}: every setting of the run, '
            'defaults included.</p><div class="tables">' + "".join(blocks) + "</div>")


def _machine(records: RunRecords) -> str:
    parts = [_table(records.machine, "machine-table") if records.machine else
             '<p class="hint">The run recorded nothing about its machine.</p>']
    parts += [f"<h3>{html.escape(name)}</h3>{_table(pairs)}" for name, pairs in records.summaries.items()]
    return ('<p class="hint">What the run recorded about where it ran: its settings, the throughput it logged and, '
            "while it trains, the process holding the run directory.</p>" + "".join(parts))


# ------------------------------------------------------------------------------------------------
def build_report(run_dir: str | os.PathLike[str], output: str | os.PathLike[str] | None = None,
                 png_dir: str | os.PathLike[str] | None = None) -> tuple[Path, list[Path], int]:
    """Write the report of ``run_dir`` (default ``RUN_DIR/report.html``) and, with ``png_dir``, the
    curves as PNG files. Everything is read and checked before anything is written.

    Returns ``(report path, PNG paths, report size in bytes)``. Raises RunRecordsError (not a run, no
    metrics yet), FileExistsError (``output`` exists and is not a report), or the errors of
    :mod:`transformer.visualize._io` for a path that cannot be written, each naming the fix.
    """
    records = read_run(run_dir)
    if png_dir is not None and Path(png_dir).exists() and not Path(png_dir).is_dir():
        raise NotADirectoryError(f"--png {png_dir} is a file; give a directory for the PNG files")
    out = writable_file(Path(output) if output is not None else Path(run_dir) / REPORT_FILE)
    if out.exists() and GENERATOR not in out.read_text(encoding="utf-8", errors="replace")[:2000]:
        raise FileExistsError(f"{out} exists and is not a report written by `transformer report`; "
                              "give another --output file")
    pngs = writable_dir(png_dir) if png_dir is not None else None
    text = report_html(records)
    written = write_curve_pngs(curve_series(records.metrics), pngs) if pngs is not None else []
    write_text_atomic(out, text)
    return out, written, len(text.encode("utf-8"))


def run_report(args: argparse.Namespace) -> int:
    """Handler of ``transformer report``: writes the page (and PNGs), prints where, its size and the build time."""
    start = time.perf_counter()
    out, pngs, size = build_report(args.run_dir, args.output, args.png)
    for path in pngs:
        print(path)
    print(f"{out}: {size / 1024:,.0f} KiB, built in {time.perf_counter() - start:.2f} s")
    return 0

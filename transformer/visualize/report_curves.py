"""The training curves of a run (``metrics.jsonl``), drawn with matplotlib: inline SVG for the
report page, PNG files for the docs.

:func:`curve_series` picks the points, :func:`curve_figure` draws one chart. Each drawn line is an
SVG group ``<g id="curve-CHART-N">`` (N: the line's place in :data:`CHARTS`), so a test or a tool
can find the points of a line in the picture.
"""

from __future__ import annotations

import io
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # files only, never a window
import matplotlib.pyplot as plt  # noqa: E402

from transformer.run_files import replacing  # noqa: E402


@dataclass(frozen=True)
class Chart:
    name: str  # file name stem and SVG id
    title: str
    ylabel: str
    lines: tuple[tuple[str, str, str], ...]  # (record kind, record key, legend label)


CHARTS: tuple[Chart, ...] = (
    Chart("loss", "Loss", "cross-entropy per target token (label-smoothed)",
          (("train", "loss", "training"), ("valid", "loss", "validation"))),
    Chart("quality", "Validation BLEU and chrF", "score (0-100)",
          (("valid", "bleu", "sacreBLEU"), ("valid", "chrf", "chrF"))),
    Chart("learning_rate", "Learning rate", "learning rate", (("train", "lr", "learning rate"),)),
    Chart("throughput", "Throughput", "target tokens per second", (("train", "tokens_per_s", "tokens/s"),)),
    Chart("grad_norm", "Gradient norm", "L2 norm of the gradient (before clipping)",
          (("train", "grad_norm", "gradient norm"),)),
)
COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd")


def curve_series(records: list[dict[str, Any]]) -> dict[str, dict[str, list[list[float]]]]:
    """``{chart name: {line label: [[step, value], ...]}}`` from metrics records, in step order.

    Records without the value (a validation without BLEU, an older run without grad_norm) are
    skipped; a chart with no point at all is left out.
    """
    out: dict[str, dict[str, list[list[float]]]] = {}
    ordered = sorted(records, key=lambda r: r.get("step", 0))
    for chart in CHARTS:
        lines = {}
        for kind, key, label in chart.lines:
            points = [[r["step"], float(r[key])] for r in ordered if r.get("kind") == kind
                      and isinstance(r.get(key), (int, float)) and not isinstance(r.get(key), bool)
                      and math.isfinite(r[key])]
            if points:
                lines[label] = points
        if lines:
            out[chart.name] = lines
    return out


def curve_figure(chart: Chart, lines: dict[str, list[list[float]]]) -> Any:
    """The matplotlib figure of one chart (close it with ``plt.close``)."""
    fig, ax = plt.subplots(figsize=(6.2, 3.4))
    for n, (kind, key, label) in enumerate(chart.lines):
        if label not in lines:
            continue
        steps, values = zip(*lines[label])
        # evaluations are few: their points are marked; a line of one point is a marker alone, or it would not show
        style = ("o-" if kind == "valid" else "-") if len(steps) > 1 else "o"
        (line,) = ax.plot(steps, values, style, color=COLORS[n % len(COLORS)], label=label, markersize=4, linewidth=1.5)
        line.set_gid(f"curve-{chart.name}-{n}")
    ax.set_title(chart.title, fontsize=11)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel(chart.ylabel, fontsize=9)
    ax.grid(alpha=0.3)
    if chart.name == "learning_rate":
        ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))
    if len(lines) > 1:
        ax.legend(fontsize=9)
    fig.tight_layout()
    return fig


def _chart(name: str) -> Chart:
    return next(c for c in CHARTS if c.name == name)


def curve_svgs(series: dict[str, dict[str, list[list[float]]]]) -> dict[str, str]:
    """``{chart name: SVG markup}`` to inline in an HTML page (text left as text, ids unique per chart)."""
    out = {}
    for name, lines in series.items():
        # svg.hashsalt makes the ids matplotlib derives for clip paths and markers differ between charts
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": name}):
            fig = curve_figure(_chart(name), lines)
            buffer = io.StringIO()
            try:
                fig.savefig(buffer, format="svg", metadata={"Date": None})
            finally:
                plt.close(fig)
        out[name] = _inline_svg(buffer.getvalue())
    return out


def _inline_svg(text: str) -> str:
    """The ``<svg>`` element alone: no XML declaration, DOCTYPE or metadata block."""
    text = text[text.index("<svg"):]
    text = re.sub(r"\s*<metadata>.*?</metadata>", "", text, flags=re.S)
    return re.sub(r'<svg ([^>]*?)width="[^"]*" height="[^"]*"', r'<svg \1', text, count=1)  # the page sizes it


def write_curve_pngs(series: dict[str, dict[str, list[list[float]]]], directory: str | os.PathLike[str]) -> list[Path]:
    """One PNG per chart, ``DIR/curve-NAME.png`` (the directory must exist); returns the paths."""
    written = []
    for name, lines in series.items():
        path = Path(directory) / f"curve-{name}.png"
        fig = curve_figure(_chart(name), lines)
        try:
            with replacing(path, suffix=".png") as tmp:
                fig.savefig(tmp, dpi=110)
        finally:
            plt.close(fig)
        written.append(path)
    return written

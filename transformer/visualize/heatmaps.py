"""Attention heatmaps (one layer, a grid of heads plus their average) and the positional-encoding picture.

Figures are built with ``matplotlib.figure.Figure`` directly (no pyplot, no global state) and
rendered by Agg (PNG) or the SVG backend; nothing is shown on screen. Figure size grows with
the number of tokens and fonts shrink, within caps, so a 100+ token sentence stays legible.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from transformer.errors import UserError
from transformer.visualize._io import _unwritable, writable_dir, writable_file
from transformer.visualize.data import AXES, KIND_TITLES, AttentionData, check_kind

FORMATS = ("png", "svg")
MAX_FIGURE_INCHES = 40.0  # neither side of a heatmap figure grows beyond this
PANEL_INCHES = (2.5, 12.0)  # one head's heatmap: at least / at most this wide
FONT_POINTS = (4.0, 10.0)  # token labels: smallest / largest font size
DPI = 110
AXIS_NAMES = {"source": "source (input)", "target_input": "decoder input",
              "target_output": "predicting (output)"}
_RC = {"svg.fonttype": "none", "svg.hashsalt": "transformer-attention"}  # text stays text; stable ids


def figure_layout(n_panels: int, n_rows: int, n_cols: int) -> dict[str, float]:
    """Grid shape, figure size (inches, capped) and label font size for ``n_panels`` heatmaps of
    ``n_rows x n_cols`` tokens."""
    grid_cols = n_panels if n_panels <= 3 else math.ceil(math.sqrt(n_panels))
    grid_rows = math.ceil(n_panels / grid_cols)
    n = max(n_rows, n_cols, 1)
    panel = min(max(0.25 * n, PANEL_INCHES[0]), PANEL_INCHES[1])
    margin_w, margin_h = 2.2, 2.4  # token labels, titles and the colorbar
    scale = min(1.0, (MAX_FIGURE_INCHES - margin_w) / (grid_cols * panel),
                (MAX_FIGURE_INCHES - margin_h) / (grid_rows * panel))
    panel *= scale
    width = grid_cols * panel * max(n_cols, 1) / n + margin_w + 0.6 * grid_cols
    height = grid_rows * panel * max(n_rows, 1) / n + margin_h + 0.5 * grid_rows
    font = min(max(0.8 * panel * 72 / n, FONT_POINTS[0]), FONT_POINTS[1])
    return {"grid_rows": grid_rows, "grid_cols": grid_cols, "width": min(width, MAX_FIGURE_INCHES),
            "height": min(height, MAX_FIGURE_INCHES), "font": font}


def attention_figure(data: AttentionData, kind: str, *, layer: int | None = None,
                     heads: Sequence[int] | None = None) -> Figure:
    """One layer of ``kind`` attention: a heatmap per chosen head (default all), then their average.

    Rows are the attending tokens, columns the attended ones (see :mod:`transformer.visualize.data`);
    every panel shares one colour scale, shown by the colorbar. Raises UserError for a layer or
    head that does not exist, naming the valid range.
    """
    kind = check_kind(kind)
    layer = data.check_layer(kind, layer)
    heads = data.check_heads(list(heads) if heads is not None else None)
    weights = data.weights[kind][layer]  # (H, rows, cols)
    row_axis, col_axis = data.axes(kind)
    panels = [(f"head {h}", f"attention-head-{h}", weights[h]) for h in heads]
    panels.append(("average" if len(heads) == data.n_heads else f"average of heads {', '.join(map(str, heads))}",
                   "attention-average", weights[heads].mean(axis=0)))
    shape = figure_layout(len(panels), len(row_axis), len(col_axis))
    fig = Figure(figsize=(shape["width"], shape["height"]), dpi=DPI, layout="constrained")
    axes = fig.subplots(shape["grid_rows"], shape["grid_cols"], squeeze=False).ravel()
    vmax = max(float(weights[heads].max()), 1e-6)
    font = shape["font"]
    rows_name, cols_name = (AXIS_NAMES[a] for a in AXES[kind])
    image = None
    for i, (ax, (title, gid, matrix)) in enumerate(zip(axes, panels)):
        image = ax.imshow(matrix, cmap="viridis", vmin=0.0, vmax=vmax, interpolation="nearest", aspect="equal")
        ax.set_title(title, fontsize=11)
        ax.set_gid(gid)
        ax.set_xticks(range(len(col_axis)), col_axis.labels, rotation=90, fontsize=font)
        ax.set_yticks(range(len(row_axis)), row_axis.labels, fontsize=font)
        ax.tick_params(length=0, pad=1)
        if i % shape["grid_cols"] == 0:
            ax.set_ylabel(rows_name, fontsize=10)
        ax.set_xlabel(cols_name, fontsize=10)
    for ax in axes[len(panels):]:
        ax.remove()
    colorbar = fig.colorbar(image, ax=list(axes[: len(panels)]), shrink=0.8, label="attention weight")
    colorbar.ax.tick_params(labelsize=8)
    n_layers = data.n_layers(kind)
    fig.suptitle(f"{KIND_TITLES[kind]}, layer {layer} (of 0..{n_layers - 1})\n"
                 f"{_shorten(data.source)}  \u2192  {_shorten(data.translation)}", fontsize=11)
    return fig


def _shorten(text: str, limit: int = 90) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"


def check_formats(formats: Sequence[str]) -> list[str]:
    """``formats`` as a list of known image formats; UserError otherwise."""
    formats = [f.strip().lower().lstrip(".") for f in formats]
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise UserError(f"unknown image format(s) {bad or formats}; choose from {list(FORMATS)}")
    return list(dict.fromkeys(formats))


def save_figure(fig: Figure, path: str | os.PathLike[str]) -> Path:
    """Save ``fig`` to ``path`` (format from the suffix: .png or .svg); errors name the path."""
    path = writable_file(path)
    fmt = check_formats([path.suffix or "?"])[0]
    try:
        with matplotlib.rc_context(_RC):
            fig.savefig(path, format=fmt, dpi=fig.dpi, metadata={"Date": None} if fmt == "svg" else None)
    except OSError as err:
        raise _unwritable(path, err) from None
    return path


def save_attention_heatmaps(data: AttentionData, out_dir: str | os.PathLike[str], *, kind: str = "all",
                            layer: int | None = None, heads: Sequence[int] | None = None,
                            formats: Sequence[str] = FORMATS, stem: str = "attention") -> list[Path]:
    """Write ``{stem}_{kind}_layer{N}.{png,svg}`` into ``out_dir`` for ``kind`` (or every kind the model has).

    ``layer`` defaults to each kind's last layer; ``heads`` to all. Everything is validated before
    anything is written. Returns the written paths.
    """
    kinds = data.kinds if kind == "all" else [check_kind(kind)]
    layers = {k: data.check_layer(k, layer) for k in kinds}
    heads = data.check_heads(list(heads) if heads is not None else None)
    formats = check_formats(formats)
    out = writable_dir(out_dir)
    written = []
    for k in kinds:
        fig = attention_figure(data, k, layer=layers[k], heads=heads)
        for fmt in formats:
            written.append(save_figure(fig, out / f"{stem}_{k}_layer{layers[k]}.{fmt}"))
    return written


def positional_encoding_figure(path: str | os.PathLike[str], n_positions: int = 100, d_model: int = 512, *,
                               layout: str = "interleaved") -> Path:
    """Draw the sinusoidal table of paper 3.5 (position x dimension) to ``path`` (.png or .svg)."""
    from transformer.model.embeddings import sinusoidal_table

    if isinstance(n_positions, bool) or not isinstance(n_positions, int) or n_positions < 1:
        raise UserError(f"n_positions must be a positive integer, got {n_positions!r}")
    if isinstance(d_model, bool) or not isinstance(d_model, int) or d_model < 2 or d_model % 2:
        raise UserError(f"d_model must be an even integer >= 2, got {d_model!r}")
    table = sinusoidal_table(n_positions, d_model, layout=layout).numpy()
    fig = Figure(figsize=(10, 5.5), dpi=DPI, layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(table, cmap="RdBu", vmin=-1, vmax=1, aspect="auto", interpolation="nearest")
    ax.set_gid("positional-encoding")
    ax.set_xlabel(f"embedding dimension (0..{d_model - 1}; {layout}: "
                  + ("sin on even, cos on odd)" if layout == "interleaved" else "sines, then cosines)"))
    ax.set_ylabel(f"position (0..{n_positions - 1})")
    ax.set_title(r"Sinusoidal positional encoding: $PE_{(pos,2i)}=\sin(pos/10000^{2i/d})$, "
                 r"$PE_{(pos,2i+1)}=\cos(pos/10000^{2i/d})$")
    fig.colorbar(image, ax=ax, label="value")
    return save_figure(fig, path)


__all__ = ["attention_figure", "check_formats", "figure_layout", "positional_encoding_figure",
           "save_attention_heatmaps", "save_figure"]

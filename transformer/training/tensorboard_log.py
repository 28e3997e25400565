"""TensorBoard logs of a training run, in ``RUN_DIR/tensorboard/``.

Watch a run while it trains with ``tensorboard --logdir RUN_DIR/tensorboard``. The trainer writes
(the main process only, under DDP):

* every ``train.log_every`` steps: ``train/loss``, ``train/lr``, ``train/grad_norm``,
  ``train/tokens_per_s`` (the same numbers as the ``train`` records of ``metrics.jsonl``);
* at each evaluation: ``valid/loss``, ``valid/ppl``, ``valid/bleu``, ``valid/chrf``, and one image
  per followed validation sentence, ``alignment/sentence-<index>``: its cross-attention
  (teacher-forced on the reference, see :mod:`transformer.training.alignment_log`), a row of
  heatmaps per decoder layer, one per head and their average, on one fixed colour scale (0 to 1),
  so TensorBoard's step slider shows the attention forming.

``metrics.jsonl`` stays the record the rest of the package reads; these logs are for watching. A
resumed run appends to the same directory and tells TensorBoard to hide the events past its
checkpoint (``purge_step``), so the curves do not double back. TensorBoard is an optional extra
(``pip install 'transformer[tensorboard]'``): without it, training prints a one-line hint and goes
on; ``train.tensorboard=false`` writes no logs.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable

import numpy as np

from transformer.run.layout import TENSORBOARD_DIR
from transformer.training.alignment_log import Alignment
HINT = ("tensorboard is not installed, so this run writes no TensorBoard logs (metrics.jsonl as always): "
        "pip install 'transformer[tensorboard]', or set train.tensorboard=false")
# metrics.jsonl record kind -> the keys logged as scalars, under "<kind>/<key>"
SCALARS = {"train": ("loss", "lr", "grad_norm", "tokens_per_s"), "valid": ("loss", "ppl", "bleu", "chrf")}
FLUSH_SECONDS = 30  # how long an event may wait before a watcher sees it
CMAP = "viridis"
DPI = 100


class TensorBoardLog:
    """A ``SummaryWriter`` for one training run, or a log that writes nothing (``writer=None``)."""

    def __init__(self, writer: Any = None) -> None:
        self.writer = writer
        self.figures: dict[int, AlignmentFigure] = {}  # per followed sentence, its labels drawn once

    @classmethod
    def open(cls, run_dir: str | os.PathLike[str], *, enabled: bool, resume_step: int = 0,
             say: Callable[[str], None] = print) -> TensorBoardLog:
        """The run's log, appending after ``resume_step`` (0: a new run); a disabled log when
        ``enabled`` is false, or, after ``say(HINT)``, when tensorboard is not installed."""
        if not enabled:
            return cls()
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            say(HINT)
            return cls()
        # purge_step: TensorBoard hides the events a killed run wrote past the checkpoint resumed from.
        return cls(SummaryWriter(str(Path(run_dir) / TENSORBOARD_DIR), purge_step=resume_step + 1 if resume_step else None,
                                 flush_secs=FLUSH_SECONDS))

    @property
    def enabled(self) -> bool:
        return self.writer is not None

    def scalars(self, record: dict[str, Any]) -> None:
        """The scalars of one ``metrics.jsonl`` record (``kind`` train or valid) at its step."""
        if self.writer is None:
            return
        kind = record.get("kind")
        for key in SCALARS.get(kind, ()):
            if record.get(key) is not None:
                self.writer.add_scalar(f"{kind}/{key}", float(record[key]), record["step"])

    def alignments(self, step: int, alignments: list[Alignment]) -> None:
        """One cross-attention image per followed sentence at ``step``, then the events flushed."""
        if self.writer is None:
            return
        for a in alignments:
            if a.index not in self.figures:
                self.figures[a.index] = AlignmentFigure(a)
            image = self.figures[a.index].render(a.weights)
            self.writer.add_image(f"alignment/sentence-{a.index}", image, step, dataformats="HWC")
        self.writer.flush()

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class AlignmentFigure:
    """The heatmap grid of one sentence (:func:`alignment_figure`), drawn fast at every snapshot.

    Matplotlib draws the frame (token labels, titles, colour bar) once; each snapshot only paints
    its weights into the panels' pixels through the colour map's own table, as ``imshow`` would
    (nearest cells, the same colours). Drawing hundreds of tick labels takes a few hundred
    milliseconds; painting a few thousand cells, about a millisecond.
    """

    def __init__(self, alignment: Alignment) -> None:
        from matplotlib import colormaps
        from matplotlib.backends.backend_agg import FigureCanvasAgg

        fig, panels = _draw(alignment, np.zeros_like(alignment.weights))
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
        self.frame = np.asarray(canvas.buffer_rgba())[..., :3].copy()  # (height, width, RGB)
        self.lut = colormaps[CMAP](np.arange(256), bytes=True)[:, :3]  # the 256 colours imshow picks from
        height = self.frame.shape[0]
        n_tgt, n_src = alignment.weights.shape[2:]
        blank = np.all(self.frame == self.lut[0], axis=-1)  # the pixels of the all-zero heatmaps (not their frames)
        self.panels = []  # per panel: layer, head (None: the average), and for each of its pixels the cell it shows
        for layer, head, ax in panels:
            box = ax.get_window_extent()  # display pixels (float), origin at the bottom left
            top, bottom, left, right = height - math.floor(box.y1), height - math.ceil(box.y0), math.ceil(box.x0), math.floor(box.x1)
            # the cell under each pixel's centre (imshow's nearest interpolation; image row 0 at the top)
            y = height - (np.arange(top, bottom) + 0.5)
            x = np.arange(left, right) + 0.5
            rows = np.clip(np.floor((box.y1 - y) / box.height * n_tgt), 0, n_tgt - 1).astype(np.int64)
            cols = np.clip(np.floor((x - box.x0) / box.width * n_src), 0, n_src - 1).astype(np.int64)
            inside = np.nonzero(blank[top:bottom, left:right])
            self.panels.append((layer, head, (inside[0] + top, inside[1] + left), (rows[inside[0]], cols[inside[1]])))
        self.shape = alignment.weights.shape

    def render(self, weights: np.ndarray) -> np.ndarray:
        """The frame with ``weights`` ``(layers, heads, tgt, src)`` painted in: uint8 ``(height, width, 3)``."""
        if weights.shape != self.shape:
            raise ValueError(f"weights of shape {weights.shape} do not fit the figure's {self.shape}")
        out = self.frame.copy()
        for layer, head, pixels, cells in self.panels:
            matrix = weights[layer].mean(axis=0) if head is None else weights[layer, head]
            levels = np.clip((matrix * 256).astype(np.int64), 0, 255)  # how a colour map of 256 colours indexes
            out[pixels] = self.lut[levels[cells]]
        return out


def alignment_figure(alignment: Alignment, weights: np.ndarray | None = None) -> Any:
    """A matplotlib ``Figure`` of ``weights`` (default: the alignment's own) ``(layers, heads, tgt, src)``:
    a row of heatmaps per decoder layer, one per head and their average, on one colour scale from 0 to 1."""
    return _draw(alignment, alignment.weights if weights is None else weights)[0]


def _draw(alignment: Alignment, weights: np.ndarray) -> tuple[Any, list[tuple[int, int | None, Any]]]:
    """The figure and its heatmap panels as ``(layer, head or None for the average, axes)``.

    The layout is computed here from the measured label sizes (inches) rather than by matplotlib's
    constrained layout, which took most of the drawing time.
    """
    from matplotlib.backends.backend_agg import RendererAgg
    from matplotlib.figure import Figure
    from matplotlib.font_manager import FontProperties

    layers, heads, n_tgt, n_src = weights.shape
    panels = [*range(heads), None] if heads > 1 else [0]  # None: the heads' average (one head needs none)
    renderer, small, large = RendererAgg(1, 1, DPI), FontProperties(size=7), FontProperties(size=9)

    def width(text: str, font: FontProperties) -> float:
        return renderer.get_text_width_height_descent(text, font, ismath=False)[0] / DPI

    title = f"cross-attention on the reference: {_shorten(alignment.source)} \u2192 {_shorten(alignment.reference)}"
    cell = max(0.13, 0.6 / n_src)  # inches per token; a panel at least wide enough for its title
    panel_w, panel_h, gap = n_src * cell, n_tgt * cell, 0.12
    left = 0.3 + max(width(t, small) for t in alignment.tgt_tokens.labels) + 0.05  # "layer N", the target tokens
    bottom = max(width(t, small) for t in alignment.src_tokens.labels) + 0.12  # the source tokens, upright
    top, right = 0.55, 0.9  # the title and the heads' names; the colour bar
    grid_w = len(panels) * panel_w + (len(panels) - 1) * gap
    fig_w = max(left + grid_w + right, width(title, large) + 0.3)
    fig_h = bottom + layers * panel_h + (layers - 1) * gap + top
    fig = Figure(figsize=(fig_w, fig_h), dpi=DPI)
    image, drawn = None, []
    for layer in range(layers):
        for col, head in enumerate(panels):
            x, y = left + col * (panel_w + gap), bottom + (layers - 1 - layer) * (panel_h + gap)
            ax = fig.add_axes((x / fig_w, y / fig_h, panel_w / fig_w, panel_h / fig_h))
            matrix = weights[layer].mean(axis=0) if head is None else weights[layer, head]
            image = ax.imshow(matrix, cmap=CMAP, vmin=0.0, vmax=1.0, interpolation="nearest", aspect="auto")
            drawn.append((layer, head, ax))
            # token labels on the outer panels only: the panels share their axes
            if layer == layers - 1:
                ax.set_xticks(range(n_src), alignment.src_tokens.labels, rotation=90, fontsize=7)
            else:
                ax.set_xticks([])
            if col == 0:
                ax.set_yticks(range(n_tgt), alignment.tgt_tokens.labels, fontsize=7)
                ax.set_ylabel(f"layer {layer}", fontsize=9, labelpad=2)
            else:
                ax.set_yticks([])
            ax.tick_params(length=0, pad=1)
            if layer == 0:
                ax.set_title("average" if head is None else f"head {head}", fontsize=9, pad=3)
    bar = fig.add_axes(((left + grid_w + 0.2) / fig_w, bottom / fig_h, 0.12 / fig_w, (fig_h - bottom - top) / fig_h))
    fig.colorbar(image, cax=bar, label="attention weight")
    fig.suptitle(title, fontsize=9, y=1 - 0.06 / fig_h, va="top")
    return fig, drawn


def _shorten(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "\u2026"

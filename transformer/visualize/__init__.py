"""Look inside a trained Transformer: attention heatmaps, an interactive page, positional encodings.

* :func:`collect_attention` translates one sentence and gathers every attention weight of the
  model (encoder self-, decoder self- and encoder-decoder attention, per layer and head) into an
  :class:`AttentionData`, which serialises to a documented JSON format (``schema.json``).
* :func:`save_attention_heatmaps` / :func:`attention_figure` draw one layer's heads as heatmaps
  (PNG, SVG); :func:`positional_encoding_figure` draws the sinusoidal table of paper 3.5.
* :func:`write_attention_page` writes one self-contained HTML file in the style of the
  tensor2tensor attention tool (lines between tokens, head toggles, a head grid).

The ``transformer attend`` command (:mod:`transformer.visualize.cli`) does all of it at once.
Names are imported lazily, so registering the command does not import matplotlib.
"""

from __future__ import annotations

from transformer.lazy import lazy_exports

_EXPORTS = {
    "KINDS": ".data",
    "AttentionData": ".data",
    "TokenAxis": ".data",
    "collect_attention": ".data",
    "attention_figure": ".heatmaps",
    "positional_encoding_figure": ".heatmaps",
    "save_attention_heatmaps": ".heatmaps",
    "write_attention_page": ".page",
    "write_demo_pages": ".cli",
}

__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

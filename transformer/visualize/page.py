"""One self-contained HTML page to explore attention, in the style of the tensor2tensor attention tool.

The page needs no network: its CSS and JavaScript are inline (``page.html``, ``page.js``,
``grid.css`` and ``grid.js`` in this package) and the data is embedded once, as JSON in ``<script type="application/json"
id="attention-data">``::

    {"format": "transformer-attention-page", "version": 1, "min_line_weight": 0.01,
     "sentences": [<one AttentionData.to_dict() document per sentence, see schema.json>]}

What it shows:

* **lines**: the attending tokens (rows) on the left, the attended tokens (columns) on the right,
  one SVG ``<line class="attn-line">`` per head and token pair whose opacity (``stroke-opacity``)
  is the weight and whose colour is the head; ``data-head``, ``data-layer``, ``data-kind``,
  ``data-row``, ``data-col`` and ``data-weight`` say what it is. Weights below
  ``min_line_weight`` are not drawn (they stay in the data). Hovering a token keeps only its lines.
* **head grid** (``grid.js``, shared with the training report): one heatmap
  (``<canvas class="head-map" data-head=...>``) per head and one for the average of the heads
  switched on, rows and columns labelled with the tokens (``.row-label``, ``.col-label``), the
  weight of a cell in ``#tooltip`` on hover; cells stay at least 14 pixels, so a 40-token
  sentence's map is scrolled rather than shrunk. Clicking a head shows its lines.
* selectors for the sentence (with several), the kind (input-output = cross, shown first: the
  alignment; input-input = encoder, output-output = decoder), the layer, and head toggles
  (click: on/off, double-click: only it).
"""

from __future__ import annotations

import html
import json
import os
import re
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from transformer.errors import UserError
from transformer.visualize._io import write_text_atomic
from transformer.visualize.data import DECIMALS, AttentionData

PAGE_FORMAT, PAGE_VERSION = "transformer-attention-page", 1
MIN_LINE_WEIGHT = 0.01
_PLACEHOLDER = re.compile(r"__(TITLE|MIN_WEIGHT|DATA|SCRIPT|GRID_STYLE)__")


def _resource(name: str) -> str:
    return resources.files("transformer.visualize").joinpath(name).read_text(encoding="utf-8")


def grid_assets() -> tuple[str, str]:
    """``(css, javascript)`` of the head grid (``grid.css``, ``grid.js``): the view that the attention
    page and the training report's alignment timeline share; each page inlines both."""
    return _resource("grid.css"), _resource("grid.js")


def view_template(*, min_line_weight: float = MIN_LINE_WEIGHT) -> str:
    """The page with its styles and scripts inlined, ``__TITLE__`` and ``__DATA__`` left to fill
    (the server's page fills them in the browser, for each sentence)."""
    style, grid_script = grid_assets()
    values = {"MIN_WEIGHT": f"{min_line_weight:g}", "GRID_STYLE": style,
              "SCRIPT": grid_script + "\n" + _resource("page.js")}
    return _PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), _resource("page.html"))


def _script_json(obj: object) -> str:
    """JSON that is safe inside a ``<script>`` element (no ``<``, ``>`` or ``&`` characters)."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def attention_page_html(data: AttentionData | Sequence[AttentionData], *, min_line_weight: float = MIN_LINE_WEIGHT,
                        decimals: int = DECIMALS, title: str | None = None) -> str:
    """The HTML text of the page for one sentence or several (a sentence selector appears)."""
    sentences = [data] if isinstance(data, AttentionData) else list(data)
    if not sentences:
        raise UserError("no sentences to show: give at least one AttentionData")
    for item in sentences:
        if not isinstance(item, AttentionData):
            raise TypeError(f"expected AttentionData, got {type(item).__name__}")
    if not 0.0 <= min_line_weight < 1.0:
        raise UserError(f"min_line_weight must be in [0, 1), got {min_line_weight!r}")
    payload = {"format": PAGE_FORMAT, "version": PAGE_VERSION, "min_line_weight": min_line_weight,
               "sentences": [s.to_dict(decimals=decimals) for s in sentences]}
    if title is None:
        title = f"Attention: {sentences[0].source}" + (f" (+{len(sentences) - 1} more)" if len(sentences) > 1 else "")
    values = {"TITLE": html.escape(title), "DATA": _script_json(payload)}
    # one pass over the template: text in the data that looks like a placeholder stays as it is
    return re.sub(r"__(TITLE|DATA)__", lambda m: values[m.group(1)], view_template(min_line_weight=min_line_weight))


def write_attention_page(data: AttentionData | Sequence[AttentionData], path: str | os.PathLike[str], *,
                         min_line_weight: float = MIN_LINE_WEIGHT, decimals: int = DECIMALS,
                         title: str | None = None) -> Path:
    """Write the self-contained attention page for ``data`` to ``path`` (atomically); returns the path.

    Raises NotADirectoryError / PermissionError naming the path when it cannot be written.
    """
    text = attention_page_html(data, min_line_weight=min_line_weight, decimals=decimals, title=title)
    return write_text_atomic(path, text)


def read_page_data(path: str | os.PathLike[str]) -> dict:
    """The JSON embedded in a page written by :func:`write_attention_page` (for tests and tools)."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")  # a page of other bytes has no data to find
    match = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', text, re.S)
    if match is None:
        raise UserError(f"{path}: no embedded attention data")
    try:
        return json.loads(match.group(1))
    except json.JSONDecodeError as err:
        raise UserError(f"{path}: the embedded attention data is not JSON ({err})") from None

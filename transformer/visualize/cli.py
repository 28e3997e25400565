"""``transformer attend``: translate one sentence and write its attention pictures, data and page.

    transformer attend RUN_DIR "je suis étudiant" [--out DIR] [--layer N] [--heads 0,1]
                       [--kind encoder|decoder|cross|all] [--format png,svg] [--json] [--page]
                       [--heatmaps] [--positions] [--beam-search]

Without any of ``--heatmaps --json --page --positions`` everything is written; with some, only
those. The sentence is translated greedily (``--beam-search``: beam search, the paper's beam of 4). Errors are raised as UserError / FileNotFoundError / PermissionError / NotADirectoryError
with a message; the main CLI prints them as ``transformer attend: error: ...`` and exits 2.
The command's parser is in ``cli_args.py``, which takes this module's file names: its imports of
torch and matplotlib stay inside the functions.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from transformer.errors import UserError

PAGE_FILE = "attention.html"
JSON_FILE = "attention.json"
POSITIONS_STEM = "positional_encoding"
OUTPUTS = ("heatmaps", "json", "page", "positions")


def parse_heads(text: str | None) -> list[int] | None:
    """``"0,1"`` -> ``[0, 1]``; ``None`` -> ``None`` (all heads). UserError on anything else."""
    if text is None:
        return None
    try:
        heads = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise UserError(f"--heads must be comma-separated head numbers such as 0,1; got {text!r}") from None
    if not heads:
        raise UserError(f"--heads names no head: {text!r}")
    return heads


def attend(translator: Any, sentence: str, out_dir: str | os.PathLike[str], *, kind: str = "all",
           layer: int | None = None, heads: Sequence[int] | None = None, formats: Sequence[str] = ("png", "svg"),
           outputs: Sequence[str] = OUTPUTS, overwrite: bool = True) -> tuple[Any, list[Path]]:
    """Collect the attention of ``sentence`` and write the chosen ``outputs`` into ``out_dir``.

    Everything is validated (sentence, layer, heads, formats, output directory) before anything is
    written; with ``overwrite=False`` a file that exists already raises FileExistsError first.
    Returns the :class:`~transformer.visualize.data.AttentionData` and the written paths.
    """
    from transformer.visualize._io import writable_dir
    from transformer.visualize.data import KINDS, attention_layout, check_heads, check_kind, check_layer, collect_attention
    from transformer.visualize.heatmaps import check_formats, positional_encoding_figure, save_attention_heatmaps
    from transformer.visualize.page import write_attention_page

    unknown = [o for o in outputs if o not in OUTPUTS]
    if unknown:
        raise UserError(f"unknown outputs {unknown}; choose from {list(OUTPUTS)}")
    if kind != "all":
        check_kind(kind)
    formats = check_formats(formats)
    cfg = translator.model.config
    layout = attention_layout(cfg)  # {kind: (layers, heads)}; the recurrent baseline has only "cross"
    for k in [k for k in KINDS if k in layout] if kind == "all" else [kind]:  # fail before translating
        if k not in layout:
            raise UserError(f"this model has no {k} attention; its kinds: {list(layout)}")
        check_layer(layout[k][0], k, layer)
    check_heads(layout["cross"][1], heads)
    out = writable_dir(out_dir)
    data = collect_attention(translator, sentence)
    if not overwrite:
        _refuse_existing(out, _planned_files(data, cfg, kind, layer, formats, outputs))
    written: list[Path] = []
    if "heatmaps" in outputs:
        written += save_attention_heatmaps(data, out, kind=kind, layer=layer, heads=heads, formats=formats)
    if "json" in outputs:
        written.append(out / JSON_FILE)
        data.to_json(out / JSON_FILE)
    if "page" in outputs:
        written.append(write_attention_page(data, out / PAGE_FILE))
    if "positions" in outputs and hasattr(cfg, "positional"):  # the recurrent baseline has no positions
        sinusoidal = getattr(cfg, "positional", None) == "sinusoidal"
        d_model = cfg.d_model if sinusoidal else 512
        table_layout = cfg.sinusoid_layout if sinusoidal else "interleaved"
        for fmt in formats:
            written.append(positional_encoding_figure(out / f"{POSITIONS_STEM}.{fmt}", 100, d_model,
                                                      layout=table_layout))
    return data, written


def _planned_files(data: Any, cfg: Any, kind: str, layer: int | None, formats: Sequence[str],
                   outputs: Sequence[str]) -> list[str]:
    """The names ``attend`` writes for these choices (heatmap names as save_attention_heatmaps makes them)."""
    names = []
    if "heatmaps" in outputs:
        kinds = data.kinds if kind == "all" else [kind]
        names += [f"attention_{k}_layer{data.check_layer(k, layer)}.{fmt}" for k in kinds for fmt in formats]
    if "json" in outputs:
        names.append(JSON_FILE)
    if "page" in outputs:
        names.append(PAGE_FILE)
    if "positions" in outputs and hasattr(cfg, "positional"):
        names += [f"{POSITIONS_STEM}.{fmt}" for fmt in formats]
    return names


def _refuse_existing(out: Path, names: Sequence[str]) -> None:
    existing = [n for n in names if (out / n).exists() or (out / n).is_symlink()]
    if existing:
        shown = ", ".join(existing[:3]) + (f" and {len(existing) - 3} more" if len(existing) > 3 else "")
        raise FileExistsError(f"{out} already holds {shown}; give another --out, or --overwrite to replace them")


def default_out_dir(run_dir: str | os.PathLike[str]) -> Path:
    """RUN_DIR/attention, or the first of attention-2, -3, ... that is missing or empty: the demo's
    page (and an earlier attend's pictures) stay where they are."""
    base = Path(run_dir) / "attention"
    candidate, n = base, 2
    while (candidate.is_dir() and any(candidate.iterdir())) or candidate.is_file():
        candidate, n = Path(f"{base}-{n}"), n + 1
    return candidate


def run_attend(args: argparse.Namespace) -> int:
    """Handler of ``transformer attend``: prints the source, the translation and every written path."""
    if not args.sentence.strip():
        raise UserError("empty sentence")
    heads = parse_heads(args.heads)
    formats = [f for f in args.format.split(",") if f.strip()]
    outputs = [o for o in OUTPUTS if getattr(args, o)] or list(OUTPUTS)
    from transformer.decoding import DecodeConfig
    from transformer.translate.translator import load_translator

    translator = load_translator(args.run_dir, decoding=DecodeConfig(strategy="beam" if args.beam_search else "greedy"))
    default = Path(args.run_dir) / "attention"
    out = Path(args.out) if args.out else default if args.overwrite else default_out_dir(args.run_dir)
    data, paths = attend(translator, args.sentence, out, kind=args.kind, layer=args.layer, heads=heads,
                         formats=formats, outputs=outputs, overwrite=args.overwrite)
    print(f"{data.source}  ->  {data.translation}")
    if out != default and not args.out:
        print(f"{default} holds earlier pictures (the demo's page, say): these are in {out} "
              "(--overwrite replaces those instead)")
    for path in paths:
        print(path)
    return 0


def write_demo_pages(translator: Any, sentences: Sequence[str], out_dir: str | os.PathLike[str]) -> Path:
    """Write one attention page (``out_dir/attention.html``) with a selector over ``sentences``."""
    from transformer.visualize._io import writable_dir
    from transformer.visualize.data import collect_attention
    from transformer.visualize.page import write_attention_page

    if isinstance(sentences, str) or not sentences:
        raise UserError("write_demo_pages needs a non-empty list of sentences")
    data = [collect_attention(translator, s) for s in sentences]
    return write_attention_page(data, writable_dir(out_dir) / PAGE_FILE)

"""The parsers of ``transformer attend`` and ``transformer report``.

Building them imports nothing heavy (no torch, no matplotlib); each handler is a
``"module:function"`` reference (``cli.py``'s ``run_attend``, ``report.py``'s ``run_report``)
that the command line imports when the command runs.
"""

from __future__ import annotations

import argparse

from transformer.visualize.cli import JSON_FILE, PAGE_FILE

REPORT_FILE = "report.html"  # what transformer report writes, by default into the run directory


def register_attend_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add the ``attend`` subcommand (handler in ``set_defaults(handler=...)``) to the project's CLI."""
    p = subparsers.add_parser(
        "attend",
        help="translate a sentence and draw its attention (heatmaps, JSON, interactive page)",
        description="Translate SENTENCE with the model in RUN_DIR and write what its attention heads do: "
        "heatmaps per layer (a grid of heads plus their average) for encoder self-attention (input-input), "
        "decoder self-attention (output-output) and encoder-decoder attention (input-output), the weights as "
        "JSON, one self-contained interactive HTML page, and the sinusoidal positional-encoding picture. "
        "Without --heatmaps/--json/--page/--positions all of them are written.",
    )
    p.add_argument("run_dir", help="run directory with config.json, model.safetensors and the tokenizer")
    p.add_argument("sentence", help='the source sentence, e.g. "je suis étudiant"')
    p.add_argument("--out", help="output directory (default: RUN_DIR/attention, or RUN_DIR/attention-2, -3, ... "
                   "when that one holds files already, such as the demo's page); files in it are never replaced "
                   "unless --overwrite is given")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the files of an earlier attend (or the demo) in --out or RUN_DIR/attention")
    p.add_argument("--layer", type=int, help="layer of the heatmaps, 0-based (default: the last)")
    p.add_argument("--heads", help="comma-separated heads of the heatmaps, e.g. 0,1 (default: all)")
    p.add_argument("--kind", default="all", choices=["encoder", "decoder", "cross", "all"],
                   help="which attention the heatmaps show (default: all)")
    p.add_argument("--format", default="png,svg", help="image formats, comma-separated (default: png,svg)")
    p.add_argument("--beam-search", action="store_true",
                   help="translate with beam search, the paper's beam of 4 (default: greedy decoding)")
    for name, what in (("heatmaps", "the heatmaps"), ("json", f"the weights as {JSON_FILE}"),
                       ("page", f"the interactive page {PAGE_FILE}"),
                       ("positions", "the positional-encoding picture (models with positional encodings)")):
        p.add_argument(f"--{name}", action="store_true", help=f"write {what}")
    p.set_defaults(handler="transformer.visualize.cli:run_attend")
    return p


def register_report_command(subparsers: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``transformer report`` (handler in ``set_defaults(handler=...)``) to the project's CLI."""
    p = subparsers.add_parser(
        "report",
        help="write one self-contained HTML page about a training run: curves, alignment timeline, settings",
        description="Write one HTML page about the training run in RUN_DIR, self-contained (it opens without a "
        "network): the curves of metrics.jsonl (training and validation loss, validation BLEU and chrF, learning "
        "rate, throughput), the alignment timeline (the encoder-decoder attention of a few validation sentences "
        "at each evaluation, with a slider over the steps; runs made before it was recorded get a note), the "
        "validation records, the configuration and the machine. Works on a run that is still training.",
    )
    p.add_argument("run_dir", help="the run directory of `transformer train` or `transformer demo`")
    p.add_argument("--output", help=f"the HTML file to write (default: RUN_DIR/{REPORT_FILE}); an existing file is "
                   "replaced only if it is an earlier report")
    p.add_argument("--png", metavar="DIR", help="also write the curves as PNG files into DIR (curve-loss.png, "
                   "curve-quality.png, curve-learning_rate.png, curve-throughput.png, curve-grad_norm.png)")
    p.set_defaults(handler="transformer.visualize.report:run_report")
    return p

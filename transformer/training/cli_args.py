"""The parser of ``transformer adapt``: fine-tune a run on a translation memory's accepted entries.

Building it imports nothing but argparse (no torch, no SQLite), so ``transformer --help`` stays
fast; the handler is the ``"module:function"`` reference ``transformer.training.adapt:adapt_command``,
imported when the command runs.
"""

from __future__ import annotations

import argparse
import textwrap

# The exit status of an adaptation whose model was not better: a result, neither a bug (1) nor a mistake (2).
EXIT_NOT_BETTER = 4


def register_adapt_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``transformer adapt`` (its handler in ``set_defaults(handler=...)``)."""
    description = (
        "Fine-tune RUN on the accepted entries of its language pair in a translation memory (docs/memory.md), "
        "mixed with a replay of RUN's own training data so that it does not forget, then keep the new model only "
        "if it is better. About --held-out of the entries, chosen by a hash of each entry's id (one held out "
        "stays held out as the memory grows), are held back; RUN and the new model translate them and RUN's "
        "validation set, and the BLEU of each before and after is printed. The new run is written to --out only "
        "when its held-out BLEU gains more than --min-gain and its validation BLEU drops by no more than "
        "--max-validation-drop; it is trained in a temporary directory beside --out, removed otherwise. KEY=VALUE "
        "settings go to the training (e.g. train.lr=5e-4 data.max_tokens=2000 train.precision=fp32), as for "
        "`transformer train --init-from`.")
    epilog = ("exit status: 0 the adapted run is in --out; 1 an internal error (a bug: the traceback is shown); 2 a "
              "mistake in the command or its settings (too few accepted entries, a run without its languages or "
              f"validation data, an --out that exists); 3 the environment failed; {EXIT_NOT_BETTER} the adapted model "
              "was not better by the thresholds: the reason is one line on stderr and nothing is written; "
              "130 interrupted.")
    p = sub.add_parser(
        "adapt",
        help="fine-tune a run on a translation memory's accepted entries; keep it only if it is better",
        description=textwrap.fill(description, 100),
        epilog=textwrap.fill(epilog, 100),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("run_dir", metavar="RUN", help="the run to adapt (only read)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE", help="training settings, e.g. train.lr=5e-4")
    p.add_argument("--tm", required=True, metavar="PATH",
                   help="the translation memory: an SQLite file (docs/memory.md)")
    p.add_argument("--out", required=True, metavar="NEW_RUN", help="where the adapted run goes (must not exist)")
    p.add_argument("--steps", type=int, default=200, metavar="N", help="training steps (default: 200)")
    p.add_argument("--replay", type=float, default=1.0, metavar="RATIO",
                   help="pairs of RUN's training data per memory pair in each epoch, drawn anew each epoch "
                   "(default: 1.0; 0: the memory alone)")
    p.add_argument("--held-out", type=float, default=0.1, metavar="FRACTION",
                   help="about this share of the accepted entries is held back for the comparison, at least one "
                   "(default: 0.1)")
    p.add_argument("--min-entries", type=int, default=20, metavar="N",
                   help="refuse a memory with fewer accepted entries of the pair (default: 20)")
    p.add_argument("--min-gain", type=float, default=0.0, metavar="BLEU",
                   help="the held-out BLEU must rise by more than this (default: 0, any gain)")
    p.add_argument("--max-validation-drop", type=float, default=1.0, metavar="BLEU",
                   help="the validation BLEU may fall by at most this (default: 1.0)")
    p.add_argument("--valid-sentences", type=int, default=500, metavar="N",
                   help="the first N pairs of RUN's validation set are translated (default: 500)")
    p.add_argument("--beam", type=int, default=4, metavar="N",
                   help="beam size of the comparison (1: greedy; default: 4)")
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS",
                   help="seconds to wait for another process's write to the memory (default: 5)")
    p.add_argument("--quiet", action="store_true", help="no training progress output")
    p.set_defaults(handler="transformer.training.adapt:adapt_command")
    return p

"""The parser of ``transformer tm``: import, export, list, count and review a translation memory.

Building it imports nothing but argparse (no SQLite, no rapidfuzz), so ``transformer --help``
stays fast; each subcommand's handler is a ``"module:function"`` reference into
``transformer/memory/cli.py``, imported when the command runs.
"""

from __future__ import annotations

import argparse

STATUS_CHOICES = ("pending", "accepted", "rejected")  # records.STATUSES, which a test holds this to
TM_HELP = "the translation memory: an SQLite file (docs/memory.md)"
TIMEOUT_HELP = ("seconds to wait for another process's write to the memory before giving up (default: 5); a "
                "server, a review and an import may share the file")


def _memory_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--tm", required=True, metavar="PATH", help=TM_HELP)
    p.add_argument("--timeout", type=float, default=5.0, metavar="SECONDS", help=TIMEOUT_HELP)


def _pair_options(p: argparse.ArgumentParser, what: str) -> None:
    p.add_argument("--pair", metavar="SRC-TGT", help=f"only entries of this language pair, such as fr-en {what} "
                   "(codes with a region: --src-lang and --tgt-lang)")
    p.add_argument("--src-lang", metavar="CODE", help="only entries of this source language (such as fr, pt-BR)")
    p.add_argument("--tgt-lang", metavar="CODE", help="only entries of this target language")


def register_tm_command(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    """Add ``transformer tm`` and its subcommands (handlers in ``set_defaults(handler=...)``)."""
    p = sub.add_parser(
        "tm",
        help="the translation memory: import and export TMX or TSV, list, count and review its entries",
        description="Work on a translation memory, the SQLite file that `transformer translate --tm PATH` "
        "looks sentences up in (docs/memory.md): import a CAT tool's TMX file or a TSV file of pairs, export it, "
        "list its entries, count them, and review the pending ones (only accepted entries are used). A mistake "
        "(a missing or damaged memory, a broken file, an unknown status or language code) is one line and "
        "exit status 2, with the memory unchanged.",
    )
    p.set_defaults(handler="transformer.memory.cli:tm_command")
    tm = p.add_subparsers(dest="tm_command", metavar="SUBCOMMAND")

    q = tm.add_parser(
        "import", help="import a TMX file, or a TSV file of source<TAB>target lines",
        description="Import the translation units of FILE into the memory (created if missing): a TMX file "
        "(.tmx: the units holding both languages; --src-lang and --tgt-lang choose them, a code without a region "
        "taking the first regional variant) or a TSV file (.tsv, .txt: source<TAB>target lines; --src-lang and "
        "--tgt-lang say their languages). Files of any size are read as a stream and committed 1,000 units at a "
        "time, with a progress line every few seconds; a unit already in the memory is left out. A broken file "
        "stops the import with the line named and takes out what it had added. Imported entries are pending "
        "(review them with `transformer tm review`) unless --accept is given.",
    )
    q.add_argument("file", metavar="FILE", help="the TMX or TSV file")
    _memory_options(q)
    q.add_argument("--src-lang", metavar="CODE", required=True, help="the source language (such as fr, pt-BR)")
    q.add_argument("--tgt-lang", metavar="CODE", required=True, help="the target language")
    q.add_argument("--format", choices=("tmx", "tsv"), help="the file's format (default: from its suffix: .tmx is "
                   "TMX, .tsv and .txt are TSV)")
    q.add_argument("--accept", action="store_true",
                   help="store the entries as accepted (a translator's reviewed memory), not pending")
    q.add_argument("--no-progress", action="store_true", help="no progress lines")
    q.set_defaults(handler="transformer.memory.cli:import_command")

    e = tm.add_parser(
        "export", help="write the memory's entries to a TMX or TSV file",
        description="Write the entries that pass the filters to OUT, whole (a reader sees the old file or the "
        "new one): TMX 1.4b for OUT.tmx (every pair, their status and origin as properties), source<TAB>target "
        "lines for OUT.tsv (one pair: --src-lang and --tgt-lang are needed). Only accepted entries unless "
        "--status says otherwise.",
    )
    _memory_options(e)
    e.add_argument("out", metavar="OUT", help="the file to write: OUT.tmx or OUT.tsv")
    _pair_options(e, "(default: all)")
    # Statuses are checked by the handler (a one-line error like every other mistake), not by choices.
    e.add_argument("--status", default="accepted", metavar="STATUS",
                   help=f"the entries' status: {', '.join(STATUS_CHOICES)}, or all for every entry (default: accepted)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing OUT")
    e.set_defaults(handler="transformer.memory.cli:export_command")

    ls = tm.add_parser(
        "list", help="print the memory's entries",
        description="Print the entries that pass the filters, oldest first, one a line: id, status, pair, "
        "origin, source and target, tab-separated (tabs and line breaks in the texts shown as spaces); --json "
        "prints one JSON object an entry instead.",
    )
    _memory_options(ls)
    ls.add_argument("--status", metavar="STATUS", help=f"only entries in this status: {', '.join(STATUS_CHOICES)}")
    _pair_options(ls, "(default: all)")
    ls.add_argument("--limit", type=int, default=100, metavar="N", help="the most entries printed (default: 100)")
    ls.add_argument("--offset", type=int, default=0, metavar="N", help="pass over the first N that pass (default: 0)")
    ls.add_argument("--json", action="store_true", help="one JSON object an entry")
    ls.set_defaults(handler="transformer.memory.cli:list_command")

    st = tm.add_parser(
        "stats", help="count the memory's entries by pair, status and origin; its size on disk",
        description="Count the memory's entries by language pair and status, and by origin (suggestion, import, "
        "reviewer), list its imports, and say the file's size on disk; --json prints it all as one JSON object.",
    )
    _memory_options(st)
    st.add_argument("--json", action="store_true", help="one JSON object")
    st.set_defaults(handler="transformer.memory.cli:stats_command")

    r = tm.add_parser(
        "review", help="accept or reject pending entries (interactive on a terminal, or by id)",
        description="Review the memory's pending entries. On a terminal, without other options: each pending "
        "entry is shown in turn, and a key decides it: a accept, r reject, s skip (it stays pending), q quit. "
        "For scripts: --accept ID..., --reject ID... or --accept-all-pending. Each decision is written at once, "
        "in a transaction of its own: a review stopped or killed keeps those made before.",
    )
    _memory_options(r)
    r.add_argument("--accept", type=int, nargs="+", metavar="ID", default=[], help="accept these entries")
    r.add_argument("--reject", type=int, nargs="+", metavar="ID", default=[], help="reject these entries")
    r.add_argument("--accept-all-pending", action="store_true",
                   help="accept every pending entry (of the pair, if given)")
    _pair_options(r, "(default: all)")
    r.set_defaults(handler="transformer.memory.cli:review_command")
    return p

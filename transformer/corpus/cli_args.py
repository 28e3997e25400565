"""The parser of ``transformer data`` (``list``, ``download``); its handler,
``transformer.corpus.registry:data_command``, is imported when the command runs."""

from __future__ import annotations

import argparse

from transformer.corpus.registry import CACHE_ENV, DATA_ENV, REGISTRY


def register_data_command(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``data`` subcommand (``list``, ``download``) to the CLI's subparsers."""
    p = subparsers.add_parser(
        "data",
        help="list the registered real corpora, or download one (sha256-verified)",
        description="List the registered real corpora (Multi30k, Tatoeba en-fr, the WMT14 en-de and en-fr "
        "training data), or download one into the "
        f"cache (${CACHE_ENV}, default ~/.cache/transformer), verifying each file's sha256. With --from DIR "
        f"or ${DATA_ENV}=DIR, a local copy laid out as DIR/<corpus>/<file> is verified and used instead.",
    )
    actions = p.add_subparsers(dest="data_action", metavar="ACTION", required=True)
    actions.add_parser("list", help="names, languages, splits and licenses of the registered corpora")
    dl = actions.add_parser(
        "download", help="fetch a corpus (or verify a local copy) and print its directory",
        description="Fetch a corpus and print the directory holding its files.",
    )
    dl.add_argument("name", metavar="NAME", help=f"the corpus: {', '.join(REGISTRY)}")
    dl.add_argument("--from", dest="from_dir", metavar="DIR", default=None,
                    help=f"use the verified local copy DIR/NAME/ instead of downloading (default: ${DATA_ENV} if set)")
    dl.add_argument("--cache-dir", metavar="DIR", default=None,
                    help=f"download cache root (default: ${CACHE_ENV} or ~/.cache/transformer)")
    p.set_defaults(handler="transformer.corpus.registry:data_command")

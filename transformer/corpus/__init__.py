"""Where parallel text comes from: the built-in French->English generator and files on disk."""

from transformer.corpus.builtin import SLIDE_EXAMPLES, builtin_splits, generate_pairs, split_of
from transformer.corpus.files import CorpusError, ReadStats, read_parallel, read_tsv

__all__ = [
    "SLIDE_EXAMPLES", "CorpusError", "ReadStats", "builtin_splits", "generate_pairs", "read_parallel", "read_tsv",
    "split_of",
]

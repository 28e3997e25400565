"""Token ids -> batches: filtering, token-budget batching, padding and masks for training;
memory-mapped tokenized corpora (:mod:`transformer.data.indexed`, built by :mod:`transformer.data.binary`)."""

from transformer.data.batches import (
    Batch, CorpusError, FilterStats, ReadStats, TokenBudgetBatches, drop_words, example_lengths, filter_examples,
    filter_lengths, make_batch, read_parallel, read_tsv,
)
from transformer.data.indexed import IndexedPairs, open_indexed

__all__ = ["Batch", "CorpusError", "FilterStats", "IndexedPairs", "ReadStats", "TokenBudgetBatches", "drop_words",
           "example_lengths", "filter_examples", "filter_lengths", "make_batch", "open_indexed", "read_parallel",
           "read_tsv"]

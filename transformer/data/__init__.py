"""Token ids -> batches: filtering, token-budget batching, padding and masks for training;
memory-mapped tokenized corpora (:mod:`transformer.data.indexed`, built by :mod:`transformer.data.binary`)."""

from transformer.corpus.files import CorpusError, ReadStats, read_parallel, read_tsv
from transformer.data.batches import Batch, TokenBudgetBatches, drop_words, make_batch
from transformer.data.filtering import FilterStats, example_lengths, filter_examples, filter_lengths
from transformer.data.indexed import IndexedPairs, open_indexed

__all__ = ["Batch", "CorpusError", "FilterStats", "IndexedPairs", "ReadStats", "TokenBudgetBatches", "drop_words",
           "example_lengths", "filter_examples", "filter_lengths", "make_batch", "open_indexed", "read_parallel",
           "read_tsv"]

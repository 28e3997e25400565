"""Token ids -> batches: filtering, token-budget batching, padding and masks for training."""

from transformer.data.batches import (
    Batch, CorpusError, FilterStats, ReadStats, TokenBudgetBatches, filter_examples, make_batch, read_parallel, read_tsv,
)

__all__ = ["Batch", "CorpusError", "FilterStats", "ReadStats", "TokenBudgetBatches", "filter_examples", "make_batch",
           "read_parallel", "read_tsv"]

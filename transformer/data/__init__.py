"""Token ids -> batches: filtering, token-budget batching, padding and masks for training."""

from transformer.data.batches import Batch, FilterStats, TokenBudgetBatches, filter_examples, make_batch

__all__ = ["Batch", "FilterStats", "TokenBudgetBatches", "filter_examples", "make_batch"]

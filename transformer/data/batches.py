"""Token ids to padded batches (text files are read by :mod:`transformer.corpus.files`, pairs
filtered by :mod:`transformer.data.filtering`).

Paper 5.1: "Sentence pairs were batched together by approximate sequence length. Each training
batch contained a set of sentence pairs containing approximately 25000 source tokens and 25000
target tokens": :class:`TokenBudgetBatches` groups examples of similar length into batches under
a token budget, deterministically for a seed, resumable mid-epoch, sharded across DDP ranks;
:func:`make_batch` pads one batch.

An *example* is a pair ``(src_ids, tgt_ids)`` of token-id lists *without* BOS/EOS; the
batch adds them for teacher forcing. Masks follow :mod:`transformer.model.masks`: bool, True = real
token. Letters: B sentences in the batch, S source length, T target length (+1 for BOS/EOS).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from itertools import chain

import numpy as np
import torch
from torch import Tensor

from transformer.data.filtering import Example, example_lengths
from transformer.errors import UserError

__all__ = ["Batch", "make_batch", "drop_words", "TokenBudgetBatches"]

# --------------------------------------------------------------------------- one batch


@dataclass
class Batch:
    """A padded batch for teacher-forced training.

    For an example ``(x, y)``: ``src`` row = ``x``; ``tgt_in`` row = ``[bos] + y`` (what the
    decoder reads); ``tgt_out`` row = ``y + [eos]`` (what it must predict at each position);
    all rows right-padded with ``pad_id``. ``tgt_in`` and ``tgt_out`` have the same length
    ``T = max(len(y)) + 1`` and the same padding positions, so ``tgt_out != pad_id`` is
    also the key-padding mask of the decoder input.
    """

    src: Tensor  # (B, S) long, right-padded with pad_id
    src_mask: Tensor  # (B, S) bool, True = real token
    tgt_in: Tensor  # (B, T) long: <s> + target, pad_id where padded
    tgt_out: Tensor  # (B, T) long: target + </s>, pad_id where padded
    n_src_tokens: int  # real source tokens
    n_tgt_tokens: int  # real target tokens = non-pad entries of tgt_out (EOS included)

    def to(self, device: torch.device | str, *, non_blocking: bool = False) -> Batch:
        """The same batch with its tensors on ``device`` (``non_blocking``: see ``Tensor.to``)."""
        return Batch(
            src=self.src.to(device, non_blocking=non_blocking),
            src_mask=self.src_mask.to(device, non_blocking=non_blocking),
            tgt_in=self.tgt_in.to(device, non_blocking=non_blocking),
            tgt_out=self.tgt_out.to(device, non_blocking=non_blocking),
            n_src_tokens=self.n_src_tokens,
            n_tgt_tokens=self.n_tgt_tokens,
        )

    def __len__(self) -> int:
        """Number of sentences B."""
        return int(self.src.shape[0])


def _flat_ids(seqs: Sequence[list[int]], lens: np.ndarray) -> np.ndarray:
    """Concatenate the id lists into one int64 array (one pass, no per-row tensors)."""
    return np.fromiter(chain.from_iterable(seqs), dtype=np.int64, count=int(lens.sum()))


def _scatter_rows(out: np.ndarray, flat: np.ndarray, lens: np.ndarray, col_offset: int = 0) -> None:
    """Write the concatenated rows ``flat`` (lengths ``lens``) into ``out[i, col_offset:...]``."""
    rows = np.repeat(np.arange(len(lens)), lens)  # (N,) row of each token
    starts = np.cumsum(lens) - lens  # (B,) offset of each row in flat
    cols = np.arange(len(flat)) - np.repeat(starts, lens) + col_offset  # (N,) column of each token
    out[rows, cols] = flat


def make_batch(examples: Sequence[Example], *, pad_id: int, bos_id: int, eos_id: int) -> Batch:
    """Pad ``examples`` into a :class:`Batch` (see there for the layout).

    Built with numpy (one fill, one vectorised scatter per tensor), then shared with torch.

    Raises:
        ValueError: no examples, an empty source (its all-False mask row would make
            attention undefined; drop such pairs with :func:`~transformer.data.filtering.filter_examples`), or
            ``pad_id`` inside a sequence (it would be masked as padding).
    """
    n = len(examples)
    if n == 0:
        raise ValueError("make_batch needs at least one example")
    srcs = [e[0] for e in examples]
    tgts = [e[1] for e in examples]
    src_lens = np.fromiter(map(len, srcs), dtype=np.int64, count=n)  # (B,)
    tgt_lens = np.fromiter(map(len, tgts), dtype=np.int64, count=n)  # (B,)
    if src_lens.min() == 0:
        i = int(np.argmin(src_lens))
        raise ValueError(f"example {i} of the batch has an empty source; filter empties with filter_examples")
    src_flat = _flat_ids(srcs, src_lens)
    tgt_flat = _flat_ids(tgts, tgt_lens)
    if (src_flat == pad_id).any() or (tgt_flat == pad_id).any():
        raise ValueError(f"pad_id={pad_id} occurs inside a sequence; it would be masked out as padding")
    s_max, t_max = int(src_lens.max()), int(tgt_lens.max()) + 1

    src = np.full((n, s_max), pad_id, dtype=np.int64)  # (B, S)
    _scatter_rows(src, src_flat, src_lens)
    tgt_in = np.full((n, t_max), pad_id, dtype=np.int64)  # (B, T)
    tgt_in[:, 0] = bos_id
    _scatter_rows(tgt_in, tgt_flat, tgt_lens, col_offset=1)
    tgt_out = np.full((n, t_max), pad_id, dtype=np.int64)  # (B, T)
    _scatter_rows(tgt_out, tgt_flat, tgt_lens)
    tgt_out[np.arange(n), tgt_lens] = eos_id

    src_mask = np.arange(s_max)[None, :] < src_lens[:, None]  # (B, S) bool
    return Batch(
        src=torch.from_numpy(src),
        src_mask=torch.from_numpy(src_mask),
        tgt_in=torch.from_numpy(tgt_in),
        tgt_out=torch.from_numpy(tgt_out),
        n_src_tokens=int(src_lens.sum()),
        n_tgt_tokens=int(tgt_lens.sum()) + n,
    )


def drop_words(batch: Batch, p: float, *, pad_id: int, src_unk_id: int, tgt_unk_id: int) -> Batch:
    """Word dropout (Sennrich & Zhang 2019): each real source token and each target token the
    decoder reads is replaced by ``<unk>`` with probability ``p``, drawn from torch's generator of
    the batch's device (so a checkpoint's RNG state resumes the same draws).

    The tokens the decoder must predict (``tgt_out``), the decoder's ``<s>`` and the padding stay
    as they are, so the loss still asks for the whole sentence from a partly hidden input.
    """
    if not 0.0 <= p < 1.0:
        raise UserError(f"word dropout probability must be in [0, 1), got {p}")
    if p == 0.0:
        return batch
    src_drop = (torch.rand(batch.src.shape, device=batch.src.device) < p) & batch.src_mask
    tgt_read = batch.tgt_out != pad_id  # tgt_in has the same padding positions (see Batch)
    tgt_read[:, 0] = False  # <s>
    tgt_drop = (torch.rand(batch.tgt_in.shape, device=batch.tgt_in.device) < p) & tgt_read
    return replace(batch, src=batch.src.masked_fill(src_drop, src_unk_id),
                   tgt_in=batch.tgt_in.masked_fill(tgt_drop, tgt_unk_id))


# --------------------------------------------------------------------------- many batches


def _sort_keys(first: np.ndarray, second: np.ndarray, tie: np.ndarray) -> np.ndarray:
    """The order sorting by ``first``, then ``second``, then ``tie`` (a permutation: no two equal).

    ``np.lexsort((tie, second, first))``, computed as one argsort of the three packed into an int64
    where their ranges fit in 63 bits (as they do for sentence lengths): several times faster on
    millions of pairs, and the same order, since the packed keys are distinct and compare alike.
    """
    low = second - second.min() if len(second) else second
    bits = [int(x.max()).bit_length() if len(x) else 0 for x in (first, low, tie)]
    if first.min(initial=0) < 0 or sum(bits) > 63:
        return np.lexsort((tie, second, first))
    packed = (first.astype(np.int64) << (bits[1] + bits[2])) | (low.astype(np.int64) << bits[2]) | tie
    return np.argsort(packed)


def _checked_lengths(lengths: tuple[np.ndarray, np.ndarray], n: int) -> tuple[np.ndarray, np.ndarray]:
    """``lengths`` as two int64 arrays of ``n`` non-negative lengths, or a ValueError naming the fault."""
    src, tgt = (np.asarray(x) for x in lengths)
    for side, arr in (("source", src), ("target", tgt)):
        if arr.shape != (n,) or not np.issubdtype(arr.dtype, np.integer) or (arr < 0).any():
            raise ValueError(f"lengths: the {side} lengths must be {n} non-negative integers (one per example), "
                             f"got shape {arr.shape} of {arr.dtype}")
    return src.astype(np.int64), tgt.astype(np.int64)


class TokenBudgetBatches:
    """Length-grouped batches under a token budget; deterministic, resumable, DDP-sharded.

    **Grouping** (done once, in ``__init__``; the same batches every epoch): the examples are
    sorted by source length, then by target length (ascending within even source lengths,
    descending within odd ones, which pads less where a batch spans two source lengths),
    remaining ties broken by a random permutation seeded with ``seed`` (by index when
    ``shuffle=False``); the sorted run is cut greedily into consecutive batches.

    **Budget**: a batch of ``n`` examples costs its *padded* size
    ``n * max(src_len) + n * (max(tgt_len) + 1)``: the source tensor plus one target tensor
    (``tgt_in`` and ``tgt_out`` share shape ``(B, T)``, ``T = max(tgt_len) + 1`` counting
    the BOS/EOS; counted once). Every batch costs ``<= max_tokens`` and has at most
    ``max_sentences`` examples, except that one example costing more than ``max_tokens`` on
    its own forms a batch by itself; those are counted in :attr:`n_oversize` and reported
    with a warning. The paper's "approximately 25000 source tokens and 25000 target
    tokens" corresponds to ``max_tokens`` of roughly 50000 (a little more, as padding is
    counted).

    **Order**: with ``shuffle=True`` the order of the batches in epoch ``e`` is a permutation
    drawn from ``numpy.random.default_rng([seed, 1, e])`` (ties use ``[seed, 0, 0]``); with ``shuffle=False`` it is the
    sorted (short to long) order, every epoch. Nothing depends on global RNG state.

    **Sharding**: with ``world_size > 1`` every rank builds the same batches and the same
    epoch order; rank ``r`` takes positions ``r, r + W, r + 2W, ...`` of that order, and the
    last ``num_batches_total % W`` positions of each epoch's order are dropped so every rank
    has the same number of batches, ``len(self) = num_batches_total // W`` (which batches
    are dropped varies by epoch when shuffling). All ranks must use the same ``seed``.

    **Segmentation**: ``segment(indices, rng)``, when given, returns the examples of a batch in
    another segmentation (BPE-dropout, :class:`transformer.text.bpe_dropout.BPEDropout`); ``rng``
    is ``numpy.random.default_rng([seed, 2, epoch, batch id])``, so a batch served again (on
    resume, or on another rank) is segmented the same way. The batches are grouped and budgeted
    by ``lengths`` (source, target) when given, the examples' own lengths otherwise: a segmenter
    that lengthens sentences passes their expected lengths, so its batches cost about
    ``max_tokens`` (a few percent more on average, as a batch is padded to its longest drawn
    sentence).

    Iterating yields :class:`Batch` es built lazily with :func:`make_batch`; ``iter(self)``
    is ``self.iter_from(self.epoch, 0)``. Call :meth:`set_epoch` before each epoch (as with
    ``DistributedSampler``); iteration does not advance the epoch by itself.
    """

    def __init__(
        self,
        examples: Sequence[Example],
        *,
        max_tokens: int,
        pad_id: int,
        bos_id: int,
        eos_id: int,
        shuffle: bool = True,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        max_sentences: int | None = None,
        segment: Callable[[list[int], np.random.Generator], list[Example]] | None = None,
        lengths: tuple[np.ndarray, np.ndarray] | None = None,
    ) -> None:
        if max_tokens < 1:
            raise UserError(f"max_tokens must be >= 1, got {max_tokens}")
        if max_sentences is not None and max_sentences < 1:
            raise UserError(f"max_sentences must be >= 1 or None, got {max_sentences}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise UserError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        if seed < 0:
            raise UserError(f"seed must be >= 0, got {seed}")
        if len(examples) == 0:
            raise ValueError("TokenBudgetBatches needs at least one example")
        self.examples = examples
        self.max_tokens = max_tokens
        self.max_sentences = max_sentences
        self.pad_id, self.bos_id, self.eos_id = pad_id, bos_id, eos_id
        self.shuffle, self.seed = shuffle, seed
        self.rank, self.world_size = rank, world_size
        self.segment = segment
        self.epoch = 0

        n = len(examples)
        src_lens, tgt_lens = example_lengths(examples) if lengths is None else _checked_lengths(lengths, n)
        if src_lens.min() == 0:
            raise ValueError(
                f"example {int(np.argmin(src_lens))} has an empty source; drop empties with filter_examples first"
            )
        if shuffle:
            tie = np.random.default_rng([seed, 0, 0]).permutation(n)
        else:
            tie = np.arange(n)
        # Sort by source length, then target length: ascending for even source lengths and
        # descending for odd ones ("snake" order), so a batch straddling two source lengths
        # joins their long-target ends instead of the longest targets of one with the
        # shortest of the next (~25% less padding than a plain (src, tgt) sort).
        tgt_key = np.where(src_lens % 2 == 1, -tgt_lens, tgt_lens)
        order = _sort_keys(src_lens, tgt_key, tie)  # (N,)
        self._batches, self.n_oversize = self._cut(order, src_lens, tgt_lens + 1)
        self.num_batches_total = len(self._batches)
        if self.num_batches_total < world_size:
            raise UserError(
                f"only {self.num_batches_total} batch(es) for world_size={world_size}: some rank would get "
                "none; lower max_tokens or use fewer ranks"
            )
        self._src_lens, self._tgt_lens = src_lens, tgt_lens
        self._lengths_are_the_examples = lengths is None  # else the budget's (a segmenter's expected lengths)
        if self.n_oversize:
            warnings.warn(
                f"{self.n_oversize} example(s) alone exceed max_tokens={max_tokens} (padded src + tgt + 1 tokens); "
                "each forms its own batch. Filter long pairs or raise max_tokens.",
                stacklevel=2,
            )

    def _cut(self, order: np.ndarray, src_lens: np.ndarray, tgt1_lens: np.ndarray) -> tuple[list[np.ndarray], int]:
        """Greedily cut the sorted ``order`` into index arrays under the budget.

        Each batch is as long as it can be: from its first example, the padded cost of the first
        ``k`` examples is ``k * (running max src + running max tgt)``; the batch ends before the
        first ``k`` over the budget or the sentence cap. Those costs are computed with numpy over a
        window of candidates (twice the last batch's size, doubled until the batch ends inside it),
        so the work is a few array operations per batch instead of Python steps per example.
        """
        budget, cap = self.max_tokens, self.max_sentences or len(order)
        s_all, t_all = src_lens[order], tgt1_lens[order]
        n = len(order)
        bounds: list[int] = [0]  # batch k is order[bounds[k]:bounds[k+1]]
        n_oversize = 0
        start, window = 0, 16
        while start < n:
            if s_all[start] + t_all[start] > budget:  # too big alone: a batch of its own
                n_oversize += 1
                start += 1
                bounds.append(start)
                continue
            while True:
                end = min(n, start + window, start + cap)
                size = np.arange(1, end - start + 1)
                cost = size * (np.maximum.accumulate(s_all[start:end]) + np.maximum.accumulate(t_all[start:end]))
                over = np.flatnonzero(cost > budget)
                if len(over):
                    k = int(over[0])
                    break
                if end == n or end - start == cap:
                    k = end - start
                    break
                window *= 2
            start += k
            bounds.append(start)
            window = max(16, 2 * k)
        return [order[a:b] for a, b in zip(bounds[:-1], bounds[1:])], n_oversize

    # ----------------------------------------------------------------- epochs and order

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch whose batch order plain iteration uses."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        self.epoch = epoch

    def __len__(self) -> int:
        """Batches per epoch for this rank: ``num_batches_total // world_size``."""
        return self.num_batches_total // self.world_size

    def epoch_order(self, epoch: int) -> np.ndarray:
        """Batch ids of the whole epoch (all ranks, before the tail drop), in the order served."""
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch}")
        if not self.shuffle:
            return np.arange(self.num_batches_total)
        return np.random.default_rng([self.seed, 1, epoch]).permutation(self.num_batches_total)

    def batch_indices(self, epoch: int) -> list[list[int]]:
        """This rank's batches for ``epoch`` as lists of example indices, in the order served."""
        return [self._batches[b].tolist() for b in self._rank_order(epoch)]

    def _rank_order(self, epoch: int) -> np.ndarray:
        used = len(self) * self.world_size
        return self.epoch_order(epoch)[self.rank : used : self.world_size]

    def iter_from(self, epoch: int, index: int) -> Iterator[Batch]:
        """Batches ``index, index + 1, ...`` of this rank's epoch ``epoch``, for exact resume.

        ``iter_from(e, 0)`` is the whole epoch; ``iter_from(e, k)`` is what is left after ``k``
        batches were consumed; ``k == len(self)`` yields nothing. Does not change :attr:`epoch`.
        """
        if not 0 <= index <= len(self):
            raise ValueError(f"index must be in [0, {len(self)}] for this rank's epoch, got {index}")
        order = self._rank_order(epoch)[index:]  # validates epoch eagerly
        return self._generate(order, epoch)

    def _generate(self, order: np.ndarray, epoch: int) -> Iterator[Batch]:
        ex = self.examples
        for b in order.tolist():
            indices = self._batches[b].tolist()
            if self.segment is None:
                examples = [ex[i] for i in indices]
            else:  # segmented anew, the same way whenever this batch of this epoch is served
                examples = self.segment(indices, np.random.default_rng([self.seed, 2, epoch, b]))
            yield make_batch(examples, pad_id=self.pad_id, bos_id=self.bos_id, eos_id=self.eos_id)

    def __iter__(self) -> Iterator[Batch]:
        return self.iter_from(self.epoch, 0)

    def target_tokens_by_rank(self, epoch: int, index: int, count: int) -> list[int]:
        """The target tokens (EOS included) of batches ``index`` to ``index + count - 1`` of each rank's
        epoch ``epoch``, rank by rank: every rank knows what the others train on beside its own batches
        (a data-parallel step's normalizer) without asking them. With a segmenter, the other ranks'
        batches are segmented here as they segment them."""
        if not 0 <= index <= index + count <= len(self):
            raise ValueError(f"batches {index} to {index + count - 1} are not within this rank's epoch of {len(self)}")
        order = self.epoch_order(epoch)[: len(self) * self.world_size]
        return [sum(self._target_tokens(b, epoch) for b in order[rank::self.world_size][index:index + count].tolist())
                for rank in range(self.world_size)]

    def _target_tokens(self, b: int, epoch: int) -> int:
        indices = self._batches[b]
        if self.segment is not None:
            examples = self.segment(indices.tolist(), np.random.default_rng([self.seed, 2, epoch, b]))
        elif self._lengths_are_the_examples:
            return int(self._tgt_lens[indices].sum()) + len(indices)
        else:
            examples = [self.examples[i] for i in indices.tolist()]
        return sum(len(tgt) + 1 for _, tgt in examples)

    # ----------------------------------------------------------------- statistics

    def batch_costs(self) -> list[int]:
        """Padded cost (as budgeted) of every batch, in batch-id order."""
        return [len(i) * (int(self._src_lens[i].max()) + int(self._tgt_lens[i].max()) + 1) for i in self._batches]

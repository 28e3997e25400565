"""BPE-dropout (Provilkov et al., 2020): the training sentences segmented anew for every batch.

BPE always splits a word the same way: ``▁chats`` is ``▁chat s`` every time it is seen, so the
model never learns that ``▁ch at s`` spells the same thing. BPE-dropout applies the tokenizer's
merges with some of them left out at random: at every merge step, each adjacent pair that has a
merge is skipped with probability ``p``; the best-ranked pair that is left is merged; when every
pair is skipped, the word stays as it is. ``p = 0`` is plain BPE; at ``p = 0.1`` (the paper's
value) most words keep their usual pieces and some come in smaller ones. Decoding still gives the
same text, since the pieces of a word spell it whatever the split. Only training batches are
resegmented: validation, test and translation use plain BPE.

:class:`BPEDropout` works from the training examples' token ids (so from an in-memory list or a
memory-mapped corpus alike): a word is a run of pieces from one that starts with the word mark
``▁`` to the next. For every distinct word it draws ``samples`` segmentations once, with a
generator seeded by ``seed``; :meth:`BPEDropout.sample` gives each occurrence of a word in a
batch one of them, drawn from the generator it is given (the batcher seeds it with the seed, the
epoch and the batch, so a resumed run sees the same segmentations). Drawing from a fixed set of
samples rather than afresh at every occurrence keeps the cost per batch at a few milliseconds:
fresh BPE in Python for the ~4,000 words of a batch would add a third to a CPU training step.
Words holding byte-fallback pieces (characters the vocabulary lacks) keep their one segmentation.
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

import numpy as np

from transformer.text.tokenizer import BYTE_TOKENS, WORD_BOUNDARY, BPETokenizer, Tokenizer
from transformer.errors import UserError

Example = tuple[list[int], list[int]]
SAMPLES = 16  # segmentations drawn per distinct word


def merge_ranks(tokenizer: BPETokenizer) -> dict[tuple[str, str], int]:
    """The tokenizer's merges as ``{(left, right): rank}``, rank 0 the first learned."""
    merges = json.loads(tokenizer._hf.to_str())["model"]["merges"]
    # tokenizers writes merges as [left, right] pairs; older files hold "left right" strings
    pairs = [tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in merges]
    return {pair: rank for rank, pair in enumerate(pairs)}


def dropout_segment(word: str, ranks: dict[tuple[str, str], int], p: float, rng: random.Random) -> list[str]:
    """The pieces of ``word`` under BPE with each possible merge skipped with probability ``p`` per step."""
    symbols = list(word)
    while len(symbols) > 1:
        best, best_rank = -1, len(ranks)
        for i in range(len(symbols) - 1):
            rank = ranks.get((symbols[i], symbols[i + 1]))
            if rank is not None and rank < best_rank and (p == 0.0 or rng.random() >= p):
                best, best_rank = i, rank
        if best < 0:
            break
        symbols[best : best + 2] = [symbols[best] + symbols[best + 1]]
    return symbols


class _Side:
    """One tokenizer's distinct words and their sampled segmentations (shared by both sides when joint)."""

    def __init__(self, tokenizer: Tokenizer, p: float, samples: int, seed: int) -> None:
        if not isinstance(tokenizer, BPETokenizer):
            raise UserError(f"BPE-dropout needs the project's BPE tokenizer, not {type(tokenizer).__name__} "
                             "(an imported model's SentencePiece tokenizer has no merges to drop)")
        self.tokenizer, self.p, self.samples = tokenizer, p, samples
        self.ranks = merge_ranks(tokenizer)
        self.vocab = tokenizer._hf.get_vocab(with_added_tokens=True)
        pieces = tokenizer.pieces(range(tokenizer.vocab_size))
        self.starts_word = np.array([piece.startswith(WORD_BOUNDARY) for piece in pieces])
        specials, byte_pieces = set(tokenizer.special_ids.values()), set(BYTE_TOKENS)
        self.fixed_piece = np.array([i in specials or piece in byte_pieces for i, piece in enumerate(pieces)])
        self.words: dict[tuple[int, ...], int] = {}  # a word's plain-BPE ids -> its number
        self.variants: list[list[tuple[int, ...]]] = []  # per word number, its sampled segmentations
        self.rng = random.Random(seed)

    def word_numbers(self, ids: Sequence[int]) -> list[int]:
        """The numbers of the words ``ids`` spells, new words sampled as they first appear."""
        ids = np.asarray(ids, dtype=np.int64)
        if not len(ids):
            return []
        starts = np.flatnonzero(self.starts_word[ids]).tolist()
        if not starts or starts[0] != 0:
            starts.insert(0, 0)
        out = []
        for a, b in zip(starts, starts[1:] + [len(ids)]):
            key = tuple(ids[a:b].tolist())
            number = self.words.get(key)
            if number is None:
                number = self.words[key] = len(self.variants)
                self.variants.append(self._sample(key, bool(self.fixed_piece[ids[a:b]].any())))
            out.append(number)
        return out

    def _sample(self, key: tuple[int, ...], fixed: bool) -> list[tuple[int, ...]]:
        word = "".join(self.tokenizer.pieces(key))
        if fixed or len(word) == 1 or any(ch not in self.vocab for ch in word):
            return [key]  # nothing to split, or characters only byte pieces spell
        draws = [tuple(self.vocab[s] for s in dropout_segment(word, self.ranks, self.p, self.rng))
                 for _ in range(self.samples)]
        # kept with their repeats, so a uniform pick among them follows BPE-dropout's distribution;
        # equal draws share one tuple
        shared: dict[tuple[int, ...], tuple[int, ...]] = {}
        return [shared.setdefault(d, d) for d in draws]


class BPEDropout:
    """Segmentations of a run's training examples with BPE-dropout, drawn per batch.

    ``examples``: the training pairs as plain-BPE token ids (without ``<s>``/``</s>``);
    ``src``/``tgt``: their tokenizers (one object for a joint vocabulary); ``p``: the probability
    of skipping a merge; ``seed``: seeds the segmentations drawn for each word; ``samples``: how
    many are drawn per distinct word.
    """

    def __init__(self, examples: Sequence[Example], src: Tokenizer, tgt: Tokenizer, *, p: float, seed: int = 0,
                 samples: int = SAMPLES) -> None:
        if not 0.0 <= p < 1.0:
            raise UserError(f"BPE-dropout probability must be in [0, 1), got {p}")
        if samples < 1:
            raise UserError(f"samples must be >= 1, got {samples}")
        self.src = _Side(src, p, samples, seed)
        self.tgt = self.src if tgt is src else _Side(tgt, p, samples, seed + 1)
        self._words: tuple[list[np.ndarray], list[np.ndarray]] = ([], [])
        for s, t in examples:
            self._words[0].append(np.array(self.src.word_numbers(s), dtype=np.int32))
            self._words[1].append(np.array(self.tgt.word_numbers(t), dtype=np.int32))
        self._counts = tuple(np.array([len(v) for v in side.variants], dtype=np.int64)
                             for side in (self.src, self.tgt))

    def expected_lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """Every example's source and target length in pieces, averaged over its words' sampled
        segmentations and rounded (int64 arrays): what a batcher should budget by, since the
        dropped merges make the sentences longer than their plain BPE."""
        return tuple(self._mean_lengths(k) for k in (0, 1))

    def _mean_lengths(self, k: int) -> np.ndarray:
        side, words = (self.src, self.tgt)[k], self._words[k]
        mean = np.array([sum(map(len, v)) for v in side.variants], dtype=np.float64) / self._counts[k]
        return np.array([np.rint(mean[w].sum()) for w in words], dtype=np.int64)

    def sample(self, indices: Sequence[int], rng: np.random.Generator) -> list[Example]:
        """The examples ``indices``, each word in one of its sampled segmentations chosen with ``rng``."""
        return list(zip(*(self._draw(k, indices, rng) for k in (0, 1))))

    def _draw(self, k: int, indices: Sequence[int], rng: np.random.Generator) -> list[list[int]]:
        side, words, counts = (self.src, self.tgt)[k], self._words[k], self._counts[k]
        numbers = [words[i] for i in indices]
        flat = np.concatenate(numbers) if numbers else np.zeros(0, np.int32)
        picks = (rng.random(len(flat)) * counts[flat]).astype(np.int64).tolist()
        variants, out, at = side.variants, [], 0
        for row in numbers:
            ids: list[int] = []
            for number, pick in zip(row.tolist(), picks[at : at + len(row)]):
                ids.extend(variants[number][pick])
            at += len(row)
            out.append(ids)
        return out

"""From a ``DataConfig`` to token-id examples: read text, train (or load) the tokenizer, filter.

Splits:
* builtin: the generated corpus's own train / valid / test splits (disjoint by construction);
* files / tsv: the given training data; validation from the given files, or a seeded held-out
  fraction of the training pairs;
* multi30k: its train / val / test_2016_flickr splits in the chosen languages;
* tatoeba: English-French, shuffled with the seed and split so that no source sentence of the
  test or validation split occurs in training (``tatoeba_splits``);
* wmt14-en-de, wmt14-en-fr: training pairs only; validation from ``data.valid_set`` (a sacreBLEU
  test set such as ``wmt13``), else a seeded held-out fraction as for files;
* ``data.valid_set`` / ``data.test_set``, with any corpus: the validation / test pairs are those of
  that sacreBLEU test set (:mod:`transformer.corpus.testsets`);
* data.mix: each corpus of the mix read as above; validation and test from the first, the
  training splits of all of them mixed by weight each epoch (:mod:`transformer.data.mixing`).

With ``train.init_from`` the tokenizer is the initial run's; :func:`prepare_data` then refuses
data that it encodes badly (``data.max_unknown``).
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass, field
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from transformer.corpus.builtin import builtin_splits
from transformer.corpus.files import CorpusError, read_parallel, read_tsv
from transformer.corpus.registry import REGISTRY, fetch, read_corpus, tatoeba_splits
from transformer.data import TokenBudgetBatches, example_lengths, filter_examples, filter_lengths
from transformer.data.indexed import ConcatPairs, IndexedPairs
from transformer.data.mixing import MixedBatches, parse_mix
from transformer.errors import UserError
from transformer.text import Vocabularies
from transformer.text.bpe_dropout import BPEDropout
from transformer.text.tokenizer import Tokenizer
from transformer.run.config import DataConfig
from transformer.training.data_cache import open_cache

Pair = tuple[str, str]
Example = tuple[list[int], list[int]]
_BYTE_PIECE = re.compile(r"<0x[0-9A-Fa-f]{2}>")  # a byte-fallback piece (BPE and SentencePiece alike)


@dataclass
class PreparedData:
    vocab: Vocabularies
    train: Sequence[Example]  # a list, or memory-mapped (transformer.data.indexed) with data.binarize
    valid: list[Example]
    valid_text: list[Pair]  # the validation pairs as text, aligned with ``valid``
    test_text: list[Pair] = field(default_factory=list)  # held-out test pairs when the corpus has them
    stats: dict[str, Any] = field(default_factory=dict)
    # data.mix: the training pairs of each corpus (``train`` is them all) and the corpora's weights
    parts: list[Sequence[Example]] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)


def load_text_splits(cfg: DataConfig) -> tuple[dict[str, list[Pair]], dict[str, Any]]:
    """Sentence pairs per split ("train", "valid", optionally "test") and reading statistics."""
    splits, stats = _corpus_splits(cfg)
    for split, name in (("valid", cfg.valid_set), ("test", cfg.test_set)):
        if name:
            from transformer.corpus.testsets import sacrebleu_pairs

            splits[split] = sacrebleu_pairs(name, src=cfg.src_lang, tgt=cfg.tgt_lang)
            stats[f"{split}_set"] = name
    return splits, stats


def _held_out(train: list[Pair], cfg: DataConfig) -> tuple[list[Pair], list[Pair]]:
    """(train, valid): a seeded ``data.valid_fraction`` of the pairs (at most 2,000) held out for validation."""
    rng = random.Random(cfg.seed)
    order = list(range(len(train)))
    rng.shuffle(order)
    n_valid = min(max(1, int(len(train) * cfg.valid_fraction)), 2000) if cfg.valid_fraction > 0 else 0
    held = set(order[:n_valid])
    valid = [train[i] for i in sorted(held)]
    train = [p for i, p in enumerate(train) if i not in held]
    if not train:
        raise CorpusError("no training pairs left after holding out validation pairs; give more data")
    return train, valid


def _corpus_splits(cfg: DataConfig) -> tuple[dict[str, list[Pair]], dict[str, Any]]:
    stats: dict[str, Any] = {}
    if cfg.corpus == "builtin":
        splits = builtin_splits(
            n_train=cfg.builtin_train, n_valid=cfg.builtin_valid, n_test=cfg.builtin_test, seed=cfg.seed,
            written_share=cfg.builtin_written,
        )
        return splits, {"corpus": "builtin"}
    if cfg.corpus in REGISTRY:
        info = REGISTRY[cfg.corpus]
        directory = fetch(cfg.corpus, local_dir=cfg.data_dir)
        stats["corpus"] = cfg.corpus
        stats["attribution"] = info.attribution
        if cfg.corpus == "multi30k":
            splits = {}
            for split, name in (("train", "train"), ("valid", "val"), ("test", "test_2016_flickr")):
                splits[split], read = read_corpus(cfg.corpus, src=cfg.src_lang, tgt=cfg.tgt_lang, split=name,
                                                  directory=directory)
                stats[f"{split}_read"] = vars(read)
        elif cfg.corpus == "tatoeba":
            pairs, read = read_corpus(cfg.corpus, src=cfg.src_lang, tgt=cfg.tgt_lang, split="all", directory=directory)
            stats["corpus_read"] = vars(read)  # one file for all splits, read before it is split
            splits = tatoeba_splits(pairs, seed=cfg.seed)
        else:  # training pairs only (WMT14): validation from data.valid_set, else held out
            train, read = read_corpus(cfg.corpus, src=cfg.src_lang, tgt=cfg.tgt_lang, split="train",
                                      directory=directory)
            stats["train_read"] = vars(read)
            splits = {"train": train, "valid": []} if cfg.valid_set else dict(zip(("train", "valid"),
                                                                                 _held_out(train, cfg)))
        return splits, stats
    if cfg.corpus == "files":
        assert cfg.train_src and cfg.train_tgt
        train, read = read_parallel(cfg.train_src, cfg.train_tgt)
    else:
        assert cfg.tsv
        train, read = read_tsv(cfg.tsv)
    stats["train_read"] = vars(read)
    if cfg.valid_src and cfg.valid_tgt:
        valid, vread = read_parallel(cfg.valid_src, cfg.valid_tgt)
        stats["valid_read"] = vars(vread)
    elif cfg.valid_set:
        valid = []  # load_text_splits reads it
    else:
        train, valid = _held_out(train, cfg)
    return {"train": train, "valid": valid}, stats


def _mix_sources(cfg: DataConfig) -> list[tuple[str, DataConfig]]:
    """The corpora of ``data.mix`` as (name, the DataConfig that reads it)."""
    out = []
    for name, _ in parse_mix(cfg.mix or ""):
        if name.endswith(".tsv"):
            sub = dataclasses.replace(cfg, corpus="tsv", tsv=name, mix=None)
        else:
            sub = dataclasses.replace(cfg, corpus=name, mix=None)
        out.append((name, sub))
    return out


def prepare_data(cfg: DataConfig, *, vocab: Vocabularies | None = None, max_unknown: float | None = None,
                 build: bool = True, progress: TextIO | None = None) -> PreparedData:
    """Read the corpus (or the corpora of ``data.mix``), train the tokenizer on the training pairs
    (unless given), encode and filter. With ``max_unknown``, refuse training data of which a larger
    share of tokens (on either side) is unknown or byte fallback (:class:`TokenizerCoverageError`).

    With ``data.binarize`` the tokenizer and the tokenized training pairs come from the cache
    (:mod:`transformer.training.data_cache`, memory-mapped), made there first where missing: by
    this process, or (``build=False``) by another one it waits for. ``progress``: the stream where
    the making of the cache says how far it is (None: silent)."""
    sources = _mix_sources(cfg) if cfg.mix else [(cfg.corpus, cfg)]
    weights = [w for _, w in parse_mix(cfg.mix)] if cfg.mix else []
    encoded_parts: list[Sequence[Example] | None]
    if cfg.binarize:
        vocab, cached = open_cache([sub for _, sub in sources], load_text_splits, vocab=vocab, cfg=cfg, build=build,
                                   progress=progress)
        splits, stats = {"valid": cached[0].valid_text, "test": cached[0].test_text}, cached[0].stats
        encoded_parts = [c.train for c in cached]
    else:
        loaded = [load_text_splits(sub) for _, sub in sources]
        splits, stats = loaded[0]
        trains = [s["train"] for s, _ in loaded]
        if vocab is None:
            vocab = Vocabularies.train([p for part in trains for p in part], vocab_size=cfg.vocab_size,
                                       joint=cfg.joint_vocab)
        encoded_parts = [_encode(vocab, text) for text in trains]
    parts: list[Sequence[Example]] = []
    for i, encoded in enumerate(encoded_parts):
        assert encoded is not None
        if max_unknown is not None:
            check_coverage(vocab, encoded, max_unknown, what=sources[i][0])
        kept, fstats = filter_lengths(*example_lengths(encoded), max_len=cfg.max_len, max_ratio=cfg.max_ratio)
        if not len(kept):
            raise CorpusError(f"every training pair{f' of {sources[i][0]}' if cfg.mix else ''} was filtered out "
                              f"(max_len={cfg.max_len}, max_ratio={cfg.max_ratio}): {vars(fstats)}")
        if i == 0:
            stats["train_filter"] = vars(fstats)
        # a memory-mapped corpus is narrowed to the kept pairs as a view; lists are copied as before
        parts.append(encoded.select(kept) if isinstance(encoded, IndexedPairs) else [encoded[j] for j in kept.tolist()])
        encoded_parts[i] = None  # the unfiltered lists are freed as soon as they are filtered
    if cfg.mix:
        stats["mix"] = [{"corpus": name, "weight": w, "pairs": len(part)}
                        for (name, _), w, part in zip(sources, weights, parts)]
    valid_text = splits.get("valid", [])
    valid = _encode(vocab, valid_text)
    vkept, vstats = filter_examples(valid, max_len=cfg.max_len, max_ratio=None) if valid else ([], None)
    stats["valid_filter"] = vars(vstats) if vstats else None
    return PreparedData(
        vocab=vocab,
        train=parts[0] if len(parts) == 1 else ConcatPairs(parts),
        valid=[valid[i] for i in vkept],
        valid_text=[valid_text[i] for i in vkept],
        test_text=splits.get("test", []),
        stats=stats,
        parts=parts if cfg.mix else [],
        weights=weights,
    )


def make_batches(data: PreparedData, *, max_tokens: int, seed: int, rank: int = 0, world_size: int = 1,
                 bpe_dropout: float = 0.0) -> TokenBudgetBatches | MixedBatches:
    """The training batches: token-budget batches, or, with ``data.mix``, the corpora mixed by weight.
    ``bpe_dropout`` > 0 segments every batch anew (:class:`~transformer.text.bpe_dropout.BPEDropout`)."""
    ids = dict(pad_id=data.vocab.src.pad_id, bos_id=data.vocab.tgt.bos_id, eos_id=data.vocab.tgt.eos_id)
    if data.parts:
        if bpe_dropout:
            raise ValueError("BPE-dropout does not work with data.mix yet")
        return MixedBatches(data.parts, data.weights, max_tokens=max_tokens, shuffle=True, seed=seed, rank=rank,
                            world_size=world_size, **ids)
    segment = lengths = None
    if bpe_dropout:  # budgeted by the segmented lengths, so a batch keeps to about max_tokens
        sampler = BPEDropout(data.train, data.vocab.src, data.vocab.tgt, p=bpe_dropout, seed=seed)
        segment, lengths = sampler.sample, sampler.expected_lengths()
    return TokenBudgetBatches(data.train, max_tokens=max_tokens, shuffle=True, seed=seed, rank=rank,
                              world_size=world_size, segment=segment, lengths=lengths, **ids)


class TokenizerCoverageError(UserError):
    """The initial model's tokenizer encodes the new data badly: too many unknown or byte-fallback tokens."""


def fallback_share(tokenizer: Tokenizer, sequences: list[list[int]]) -> float:
    """The share of tokens in ``sequences`` that are ``<unk>`` or byte-fallback pieces (``<0xE2>``):
    text the vocabulary has no pieces for."""
    if not sequences:
        return 0.0
    return _fallback_share_of(tokenizer, np.bincount(np.fromiter((i for seq in sequences for i in seq), dtype=np.int64),
                                                     minlength=1))


def _fallback_share_of(tokenizer: Tokenizer, counts: np.ndarray) -> float:
    """:func:`fallback_share` from the number of times each id occurs."""
    used = np.flatnonzero(counts).tolist()
    bad = [i for i, piece in zip(used, tokenizer.pieces(used)) if i == tokenizer.unk_id or _BYTE_PIECE.fullmatch(piece)]
    total = int(counts.sum())
    return float(counts[bad].sum()) / total if total else 0.0


def check_coverage(vocab: Vocabularies, examples: Sequence[Example], max_unknown: float, *, what: str) -> None:
    """Raise :class:`TokenizerCoverageError` when either side's :func:`fallback_share` exceeds ``max_unknown``."""
    for side, tokenizer, index in (("source", vocab.src, 0), ("target", vocab.tgt, 1)):
        if isinstance(examples, IndexedPairs):  # counted over the memory-mapped ids, no lists made
            share = _fallback_share_of(tokenizer, examples.token_counts(("src", "tgt")[index]))
        else:
            share = fallback_share(tokenizer, [e[index] for e in examples])
        if share > max_unknown:
            raise TokenizerCoverageError(
                f"the tokenizer of train.init_from cannot encode the {side} side of {what} well: {share:.1%} of its "
                f"tokens are unknown or byte-fallback pieces (data.max_unknown={max_unknown:.0%}); is it the "
                "language pair and script the initial model was trained on? (raise data.max_unknown to accept it)")


def _encode(vocab: Vocabularies, pairs: list[Pair]) -> list[Example]:
    src = vocab.src.encode_batch([s for s, _ in pairs])
    tgt = vocab.tgt.encode_batch([t for _, t in pairs])
    return list(zip(src, tgt))


def data_report(stats: dict[str, Any]) -> str:
    """One line on what reading and filtering kept and dropped, for the training and the validation pairs."""
    parts = []
    if read := stats.get("corpus_read"):  # a registry corpus in one file (Tatoeba), read before the split
        files = ", ".join(Path(name).name for name in read.get("sources", ())) or "the corpus"
        parts.append(f"{read['n_read']:,} lines read from {files} (all splits), "
                     f"{read['n_empty_skipped']:,} with an empty side skipped")
    for split, name in (("train", "training"), ("valid", "validation"), ("test", "test")):
        if read := stats.get(f"{split}_read"):
            parts.append(f"{read['n_read']:,} {name} lines read, "
                         f"{read['n_empty_skipped']:,} with an empty side skipped")
    if kept := stats.get("train_filter"):
        parts.append(f"{kept['kept']:,} training pairs kept, dropped {kept['too_long']:,} too long, "
                     f"{kept['bad_ratio']:,} with a bad length ratio, {kept['empty']:,} empty after tokenization")
    if kept := stats.get("valid_filter"):  # no length-ratio filter on validation pairs
        parts.append(f"{kept['kept']:,} validation pairs kept, dropped {kept['too_long']:,} too long, "
                     f"{kept['empty']:,} empty after tokenization")
    if mix := stats.get("mix"):  # data.mix: the corpora, their shares of each epoch's pairs, their pairs
        parts.append("mix " + ", ".join(f"{m['corpus']} {m['weight']:.0%} ({m['pairs']:,} pairs)" for m in mix)
                     + f"; validation on {mix[0]['corpus']}")
    if stats.get("attribution"):
        parts.append(f"corpus {stats['corpus']}: {stats['attribution']}")
    return "data: " + "; ".join(parts) if parts else "data: built-in corpus"

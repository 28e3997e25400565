"""From a ``DataConfig`` to token-id examples: read text, train (or load) the tokenizer, filter.

Splits:
* builtin: the generated corpus's own train / valid / test splits (disjoint by construction);
* files / tsv: the given training data; validation from the given files, or a seeded held-out
  fraction of the training pairs;
* multi30k: its train / val / test_2016_flickr splits in the chosen languages;
* tatoeba: English-French, shuffled with the seed and split so that no source sentence of the
  test or validation split occurs in training (``tatoeba_splits``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from transformer.corpus.builtin import builtin_splits
from transformer.corpus.files import CorpusError, read_parallel, read_tsv
from transformer.corpus.registry import REGISTRY, fetch, read_corpus, tatoeba_splits
from transformer.data import filter_examples
from transformer.text import Vocabularies
from transformer.training.config import DataConfig

Pair = tuple[str, str]
Example = tuple[list[int], list[int]]


@dataclass
class PreparedData:
    vocab: Vocabularies
    train: list[Example]
    valid: list[Example]
    valid_text: list[Pair]  # the validation pairs as text, aligned with ``valid``
    test_text: list[Pair] = field(default_factory=list)  # held-out test pairs when the corpus has them
    stats: dict[str, Any] = field(default_factory=dict)


def load_text_splits(cfg: DataConfig) -> tuple[dict[str, list[Pair]], dict[str, Any]]:
    """Sentence pairs per split ("train", "valid", optionally "test") and reading statistics."""
    stats: dict[str, Any] = {}
    if cfg.corpus == "builtin":
        splits = builtin_splits(
            n_train=cfg.builtin_train, n_valid=cfg.builtin_valid, n_test=cfg.builtin_test, seed=cfg.seed
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
        else:
            pairs, read = read_corpus(cfg.corpus, src=cfg.src_lang, tgt=cfg.tgt_lang, split="all", directory=directory)
            stats["corpus_read"] = vars(read)  # one file for all splits, read before it is split
            splits = tatoeba_splits(pairs, seed=cfg.seed)
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
    else:
        rng = random.Random(cfg.seed)
        order = list(range(len(train)))
        rng.shuffle(order)
        n_valid = min(max(1, int(len(train) * cfg.valid_fraction)), 2000) if cfg.valid_fraction > 0 else 0
        held = set(order[:n_valid])
        valid = [train[i] for i in sorted(held)]
        train = [p for i, p in enumerate(train) if i not in held]
        if not train:
            raise CorpusError("no training pairs left after holding out validation pairs; give more data")
    return {"train": train, "valid": valid}, stats


def prepare_data(cfg: DataConfig, *, vocab: Vocabularies | None = None) -> PreparedData:
    """Read the corpus, train the tokenizer on the training pairs (unless given), encode and filter."""
    splits, stats = load_text_splits(cfg)
    if vocab is None:
        vocab = Vocabularies.train(splits["train"], vocab_size=cfg.vocab_size, joint=cfg.joint_vocab)
    train = _encode(vocab, splits["train"])
    kept, fstats = filter_examples(train, max_len=cfg.max_len, max_ratio=cfg.max_ratio)
    stats["train_filter"] = vars(fstats)
    if not kept:
        raise CorpusError(
            f"every training pair was filtered out (max_len={cfg.max_len}, max_ratio={cfg.max_ratio}): {vars(fstats)}"
        )
    valid_text = splits.get("valid", [])
    valid = _encode(vocab, valid_text)
    vkept, vstats = filter_examples(valid, max_len=cfg.max_len, max_ratio=None) if valid else ([], None)
    stats["valid_filter"] = vars(vstats) if vstats else None
    return PreparedData(
        vocab=vocab,
        train=[train[i] for i in kept],
        valid=[valid[i] for i in vkept],
        valid_text=[valid_text[i] for i in vkept],
        test_text=splits.get("test", []),
        stats=stats,
    )


def _encode(vocab: Vocabularies, pairs: list[Pair]) -> list[Example]:
    src = vocab.src.encode_batch([s for s, _ in pairs])
    tgt = vocab.tgt.encode_batch([t for _, t in pairs])
    return list(zip(src, tgt))

"""Loading a run's tokenizers: ``load_tokenizer`` picks the backend a file names, and
``Vocabularies`` holds the source and target tokenizers (one object when the vocabulary is joint)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from transformer.text.sentencepiece import SentencePieceTokenizer
from transformer.text.tokenizer import (
    JOINT_FILE,
    SRC_FILE,
    TGT_FILE,
    BPETokenizer,
    Tokenizer,
    _check_texts,
    read_tokenizer_json,
)
from transformer.errors import UserError

_BACKENDS: dict[str, type[Tokenizer]] = {"BPE": BPETokenizer, "SentencePiece": SentencePieceTokenizer}  # JSON "model.type" -> class


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Load a tokenizer file, choosing the backend by the model type recorded in it.

    ``"SentencePiece"`` files (imported Marian models) need the ``sentencepiece`` package.
    """
    kind = read_tokenizer_json(path)["model"].get("type")
    if kind not in _BACKENDS:
        raise UserError(f"{path}: unsupported tokenizer model type {kind!r} (known: {sorted(_BACKENDS)})")
    return _BACKENDS[kind].load(path)


class Vocabularies:
    """Source and target tokenizers; ``joint`` (one shared vocabulary) when both are the same object."""

    def __init__(self, src: Tokenizer, tgt: Tokenizer) -> None:
        if not isinstance(src, Tokenizer) or not isinstance(tgt, Tokenizer):
            raise TypeError("Vocabularies needs two Tokenizer instances")
        self.src = src
        self.tgt = tgt

    @property
    def joint(self) -> bool:
        """True when source and target share one tokenizer (the paper's shared BPE)."""
        return self.src is self.tgt

    @classmethod
    def train(cls, pairs: Sequence[tuple[str, str]], *, vocab_size: int, joint: bool = True,
              min_frequency: int = 2) -> Vocabularies:
        """Train on ``(source, target)`` pairs: one shared BPE, or (``joint=False``) one per side,
        each with ``vocab_size`` ids."""
        pairs = list(pairs)
        for p in pairs:
            if not isinstance(p, (tuple, list)) or len(p) != 2:
                raise TypeError(f"pairs must hold (source, target) 2-tuples, got {p!r:.80}")
        src = _check_texts((s for s, _ in pairs), "source texts")
        tgt = _check_texts((t for _, t in pairs), "target texts")
        if joint:
            shared = BPETokenizer.train(src + tgt, vocab_size=vocab_size, min_frequency=min_frequency)
            return cls(shared, shared)
        return cls(BPETokenizer.train(src, vocab_size=vocab_size, min_frequency=min_frequency),
                   BPETokenizer.train(tgt, vocab_size=vocab_size, min_frequency=min_frequency))

    def save(self, directory: str | os.PathLike) -> None:
        """Write ``tokenizer.json`` (joint) or ``tokenizer.src.json`` + ``tokenizer.tgt.json``
        into ``directory`` (created if needed); files of the other layout are removed."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        if self.joint:
            self.src.save(directory / JOINT_FILE)
            stale = [SRC_FILE, TGT_FILE]
        else:
            self.src.save(directory / SRC_FILE)
            self.tgt.save(directory / TGT_FILE)
            stale = [JOINT_FILE]
        for name in stale:
            (directory / name).unlink(missing_ok=True)

    @classmethod
    def load(cls, directory: str | os.PathLike) -> Vocabularies:
        """Load what :meth:`save` wrote, picking the layout by the files present in ``directory``."""
        directory = Path(directory)
        has = {name: (directory / name).is_file() for name in (JOINT_FILE, SRC_FILE, TGT_FILE)}
        if has[JOINT_FILE]:
            if has[SRC_FILE] or has[TGT_FILE]:
                raise UserError(f"{directory} holds both {JOINT_FILE} and {SRC_FILE}/{TGT_FILE}: ambiguous")
            shared = load_tokenizer(directory / JOINT_FILE)
            return cls(shared, shared)
        if has[SRC_FILE] and has[TGT_FILE]:
            return cls(load_tokenizer(directory / SRC_FILE), load_tokenizer(directory / TGT_FILE))
        if has[SRC_FILE] or has[TGT_FILE]:
            missing = TGT_FILE if has[SRC_FILE] else SRC_FILE
            raise FileNotFoundError(f"{directory / missing} not found (separate vocabularies need both "
                                    f"{SRC_FILE} and {TGT_FILE})")
        raise FileNotFoundError(f"no tokenizer in {directory}: expected {JOINT_FILE} (joint) "
                                f"or {SRC_FILE} + {TGT_FILE} (separate)")

    def __repr__(self) -> str:
        if self.joint:
            return f"Vocabularies(joint, {self.src!r})"
        return f"Vocabularies(src={self.src!r}, tgt={self.tgt!r})"

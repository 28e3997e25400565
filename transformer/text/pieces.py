"""Tokenizer pieces as a reader sees them: the word-boundary mark taken off, and where words start.

The attention heatmaps, the attention page, the alignment snapshots of a training run and the
TensorBoard figures label their rows and columns with :class:`TokenAxis`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from transformer.text.tokenizer import WORD_BOUNDARY

_SPECIAL = re.compile(r"<(?:s|/s|pad|unk|0x[0-9A-Fa-f]{2})>")


@dataclass(frozen=True)
class TokenAxis:
    """The tokens along one axis: display pieces (``▁`` removed) and whether each starts a word."""

    pieces: tuple[str, ...]
    word_start: tuple[bool, ...]

    @classmethod
    def from_pieces(cls, raw: list[str]) -> TokenAxis:
        """From tokenizer pieces such as ``["▁chat", "s", "</s>"]``."""
        pieces, starts = [], []
        for p in raw:
            start = p.startswith(WORD_BOUNDARY) and len(p) > 1
            pieces.append(p[1:] if start else p)
            starts.append(start or p == WORD_BOUNDARY)
        return cls(tuple(pieces), tuple(starts))

    @property
    def labels(self) -> list[str]:
        """Readable labels: a piece continuing a word gets a leading ``·`` (``étudi``, ``·ant``).

        Specials and byte tokens (``<s>``, ``<0xE2>``) are shown as they are, and a lone ``▁``
        piece as ``▁`` (the piece after it then starts the word).
        """
        labels, previous = [], ""
        for piece, start in zip(self.pieces, self.word_start):
            plain = start or previous == WORD_BOUNDARY or _SPECIAL.fullmatch(piece)
            labels.append(piece if plain else f"\u00b7{piece}")
            previous = piece
        return labels

    def __len__(self) -> int:
        return len(self.pieces)

    def to_dict(self) -> dict[str, list]:
        return {"pieces": list(self.pieces), "word_start": list(self.word_start)}

    @classmethod
    def from_dict(cls, d: dict[str, list]) -> TokenAxis:
        return cls(tuple(d["pieces"]), tuple(bool(s) for s in d["word_start"]))

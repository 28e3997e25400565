"""SentencePiece tokenizers (the ``sentencepiece`` library), as used by Marian / opus-mt models.

A :class:`SentencePieceTokenizer` segments text with a SentencePiece model and maps the pieces
to ids through its own vocabulary (Marian's ``vocab.json``: piece -> id, so ids need not be
the SentencePiece model's own). A piece missing from the vocabulary becomes ``<unk>``.

Two Marian conventions are settings of the tokenizer, recorded in its file:

* ``start_token``: the token the decoder starts from, reported as ``bos_id`` (Marian starts
  from ``<pad>``); the decoding and the data pipeline read it from there.
* ``append_eos``: ``encode`` ends every sequence with ``</s>`` (Marian's source side). The
  target side leaves it off; the data pipeline and the decoders add and strip it themselves.

A leading language code such as ``>>fra<<`` (multilingual Marian models) is kept as one token,
as ``MarianTokenizer`` does. Special-token strings elsewhere in the text are ordinary text.

The tokenizer is saved as one self-contained JSON file (``model.type == "SentencePiece"``, the
serialized SentencePiece model in base64, the vocabulary and the settings), so
:func:`transformer.tokenizer.load_tokenizer` picks this backend by what the run directory holds.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from transformer.errors import MissingExtraError, UserError
from transformer.run_files import MAX_TOKENIZER_BYTES, read_bytes, write_atomic
from transformer.text.tokenizer import (
    EOS,
    PAD,
    UNK,
    WORD_BOUNDARY,
    Tokenizer,
    read_tokenizer_json,
)

MODEL_TYPE = "SentencePiece"


def _spm():
    """The ``sentencepiece`` module, or MissingExtraError naming the ``interop`` extra and its install command."""
    try:
        import sentencepiece
    except ImportError:
        raise MissingExtraError("interop", "a SentencePiece tokenizer (a run imported from Marian)",
                                "sentencepiece") from None
    return sentencepiece


def split_language_code(text: str) -> tuple[list[str], str]:
    """``">>fra<< text"`` -> ``([">>fra<<"], " text")``; text without a leading code is returned whole."""
    if text.startswith(">>"):
        end = text.find("<<")
        if end != -1:
            return [text[: end + 2]], text[end + 2 :]
    return [], text


class SentencePieceTokenizer(Tokenizer):
    """SentencePiece segmentation + a piece -> id vocabulary (Marian's tokenizer, one side)."""

    def __init__(self, model_proto: bytes, vocab: Mapping[str, int], *, start_token: str = PAD,
                 append_eos: bool = False, pad_token: str = PAD, eos_token: str = EOS,
                 unk_token: str = UNK) -> None:
        """Wrap a serialized SentencePiece model and a vocabulary whose ids are ``0 .. len - 1``.

        Raises UserError if the model cannot be read, the ids are not contiguous, or a special
        token (start, pad, eos, unk) is missing from the vocabulary.
        """
        spm = _spm()
        self._sp = spm.SentencePieceProcessor()
        try:
            self._sp.LoadFromSerializedProto(bytes(model_proto))
        except Exception as err:  # sentencepiece raises RuntimeError/OSError on a bad proto
            raise UserError(f"not a valid SentencePiece model: {err}") from None
        self._vocab = {str(piece): int(i) for piece, i in vocab.items()}
        self._pieces = {i: piece for piece, i in self._vocab.items()}
        if sorted(self._pieces) != list(range(len(self._vocab))):
            raise UserError(f"vocabulary ids must be 0 .. {len(self._vocab) - 1}, each once")
        missing = [t for t in (start_token, pad_token, eos_token, unk_token) if t not in self._vocab]
        if missing:
            raise UserError(f"SentencePiece vocabulary lacks special tokens {missing}")
        self._proto = bytes(model_proto)
        self.start_token, self.append_eos = start_token, bool(append_eos)
        self._tokens = {"pad": pad_token, "eos": eos_token, "unk": unk_token}
        self._bos, self._pad, self._eos, self._unk = (self._vocab[t] for t in (start_token, pad_token, eos_token, unk_token))
        self._special = {self._bos, self._pad, self._eos, self._unk}

    # -- construction and files ------------------------------------------------------------
    @classmethod
    def from_files(cls, model_file: str | os.PathLike, vocab_file: str | os.PathLike, **settings) -> SentencePieceTokenizer:
        """Read a SentencePiece model file (``source.spm``) and a JSON vocabulary (``vocab.json``)."""
        model_file, vocab_file = Path(model_file), Path(vocab_file)
        for path in (model_file, vocab_file):
            if not path.exists():
                raise FileNotFoundError(f"tokenizer file not found: {path}")
        vocab = read_tokenizer_json(vocab_file, model_section=False)  # RunFileError (a UserError) when bad
        if not isinstance(vocab, dict) or not all(isinstance(i, int) for i in vocab.values()):
            raise UserError(f"{vocab_file} must map pieces to integer ids")
        try:
            return cls(read_bytes(model_file, limit=MAX_TOKENIZER_BYTES), vocab, **settings)
        except ValueError as err:
            raise UserError(f"{model_file} / {vocab_file}: {err}") from None

    @classmethod
    def load(cls, path: str | os.PathLike) -> SentencePieceTokenizer:
        """Read a tokenizer written by :meth:`save`; FileNotFoundError / UserError on a bad file."""
        model = read_tokenizer_json(path)["model"]
        if model.get("type") != MODEL_TYPE:
            raise UserError(f"{path} holds a {model.get('type')!r} model, not {MODEL_TYPE}")
        try:
            proto = base64.b64decode(model["spm_model"], validate=True)
            return cls(proto, model["vocab"], start_token=model["start_token"], append_eos=model["append_eos"],
                       pad_token=model["pad_token"], eos_token=model["eos_token"], unk_token=model["unk_token"])
        except (KeyError, TypeError, ValueError, AttributeError) as err:  # AttributeError: a vocab that is no mapping
            raise UserError(f"{path} is not a valid SentencePiece tokenizer file: {err!r}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer as one JSON file (model in base64, vocabulary, settings), atomically."""
        data = {"model": {
            "type": MODEL_TYPE, "start_token": self.start_token, "append_eos": self.append_eos,
            "pad_token": self._tokens["pad"], "eos_token": self._tokens["eos"], "unk_token": self._tokens["unk"],
            "vocab": self._vocab, "spm_model": base64.b64encode(self._proto).decode("ascii"),
        }}
        write_atomic(path, json.dumps(data, ensure_ascii=False))

    @property
    def model_proto(self) -> bytes:
        """The serialized SentencePiece model (what a ``.spm`` file holds)."""
        return self._proto

    @property
    def vocab(self) -> dict[str, int]:
        """A copy of the piece -> id vocabulary."""
        return dict(self._vocab)

    def same_as(self, other: SentencePieceTokenizer) -> bool:
        """True when ``other`` segments, numbers and frames text exactly like this one."""
        return (self._proto == other._proto and self._vocab == other._vocab and self.start_token == other.start_token
                and self.append_eos == other.append_eos and self._tokens == other._tokens)

    @property
    def vocab_size(self) -> int:
        return len(self._vocab)

    # -- text <-> ids ----------------------------------------------------------------------
    def normalize(self, text: str) -> str:
        """SentencePiece's normalization (NFKC, whitespace runs to one space, stripped)."""
        code, rest = split_language_code(self._check_str(text))
        normalized = self._sp.normalize(rest).replace(WORD_BOUNDARY, " ").strip()
        return " ".join(code + ([normalized] if normalized else []))

    def encode(self, text: str) -> list[int]:
        """Ids of the language code (if any) and the pieces of ``text``; ``</s>`` last when ``append_eos``.

        An empty (or whitespace-only) text is ``[</s>]`` with ``append_eos``, as ``MarianTokenizer``
        gives it: no text to translate (``Translator`` gives "" for it, never a made-up sentence)."""
        code, rest = split_language_code(self._check_str(text))
        ids = [self._vocab.get(piece, self._unk) for piece in code + self._sp.encode(rest, out_type=str)]
        return ids + [self._eos] if self.append_eos else ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("encode_batch expects a sequence of str, not a single str")
        return [self.encode(t) for t in texts]

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        """Text of ``ids``: runs of ordinary pieces are detokenized by SentencePiece; specials are
        dropped with ``skip_special``, else written as themselves followed by a space (as Marian does)."""
        out, run = "", []
        for i in self._check_ids(ids):
            if i in self._special:
                if not skip_special:
                    out += self._sp.decode_pieces(run) + self._pieces[i] + " "
                    run = []
                continue
            run.append(self._pieces[i])
        out += self._sp.decode_pieces(run)
        return out.replace(WORD_BOUNDARY, " ").strip()

    def decode_batch(self, batch: Sequence[Sequence[int]], *, skip_special: bool = True) -> list[str]:
        return [self.decode(ids, skip_special=skip_special) for ids in batch]

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self._pieces[i] for i in self._check_ids(ids)]

    def __repr__(self) -> str:
        return (f"SentencePieceTokenizer(vocab_size={len(self._vocab)}, start_token={self.start_token!r}, "
                f"append_eos={self.append_eos})")

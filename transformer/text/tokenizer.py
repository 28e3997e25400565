"""Subword tokenizers: byte-pair encoding (paper 5.1: shared source-target BPE) on Hugging Face ``tokenizers``.

Pipeline of every trained :class:`BPETokenizer`:

* **Normalization** (``normalize``): Unicode NFKC, then every run of whitespace (tabs, newlines,
  U+00A0 and the narrow no-break space U+202F that French puts before ``? ! : ;`` and inside
  ``« »``) becomes one plain space, and leading/trailing whitespace is stripped. NFKC also folds
  compatibility forms: ``ﬁ`` -> ``fi``, ``…`` -> ``...``, full-width ``Ａ`` -> ``A``, ``½`` -> ``1⁄2``.
  Accents, curly quotes/apostrophes, ``« »`` and ``€`` are kept. Zero-width characters are kept.
* **Pre-tokenization**: Metaspace: each space becomes the word-boundary mark ``▁`` (U+2581)
  prefixed to the next word, so pieces read like ``▁chat``, ``s`` and decoding is exact:
  ``decode(encode(x)) == normalize(x)``. A literal ``▁`` in the text (which Metaspace would
  take for a space) is encoded as its three UTF-8 byte tokens ``<0xE2> <0x96> <0x81>``, and the
  decoder turns the marks of the pieces into spaces before it turns byte tokens into text, so
  it comes back as ``▁``.
* **Model**: BPE with *byte fallback*: a character never seen in training is encoded as its
  UTF-8 bytes (tokens ``<0x00>`` .. ``<0xFF>``, always in the vocabulary), so nothing becomes
  ``<unk>`` and decoding still restores it. An invalid byte sequence (a model emitting a lone
  ``<0xE2>``) decodes to U+FFFD.

Ids are fixed at training time: ``<pad>`` 0, ``<s>`` 1, ``</s>`` 2, ``<unk>`` 3, then the 256 byte
tokens, then the learned alphabet and merges. Code elsewhere reads ``pad_id`` etc. from the
tokenizer; on load they are looked up in the vocabulary, never assumed. Special-token strings
appearing in input text (a literal ``"<s>"``) are encoded as ordinary text, not as the special.
"""

from __future__ import annotations

import abc
import json
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from tokenizers import Regex, decoders, models, normalizers, pre_tokenizers, trainers
from tokenizers import Tokenizer as HFTokenizer

from transformer.run_files import MAX_TOKENIZER_BYTES, RunFileError, read_json, write_atomic
from transformer.errors import UserError

PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS, UNK)
BYTE_TOKENS: tuple[str, ...] = tuple(f"<0x{b:02X}>" for b in range(256))
WORD_BOUNDARY = "\u2581"  # "▁"
_MARK_BYTES = tuple(f"<0x{b:02X}>" for b in WORD_BOUNDARY.encode("utf-8"))  # a literal "▁": <0xE2> <0x96> <0x81>

JOINT_FILE = "tokenizer.json"
SRC_FILE = "tokenizer.src.json"
TGT_FILE = "tokenizer.tgt.json"


def _check_texts(texts: Iterable[str], what: str) -> list[str]:
    """Materialize training ``texts``; TypeError on non-str items, UserError if all are blank."""
    if isinstance(texts, str):
        raise TypeError(f"{what} must be an iterable of strings, not a single str")
    texts = list(texts)
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"{what} must contain str, got {type(t).__name__}")
    if not any(t.strip() for t in texts):
        raise UserError(f"{what} is empty: need at least one non-blank training text")
    return texts


def read_tokenizer_json(path: str | os.PathLike, *, model_section: bool = True) -> Any:
    """The JSON in a tokenizer's file, read without trusting it: a regular file of at most
    ``MAX_TOKENIZER_BYTES``, nested at most ``run_files.MAX_DEPTH`` deep.

    Args:
        path: the file.
        model_section: True for a tokenizer file (what ``save`` writes): an object with a
            ``model`` object, any problem a UserError "PATH is not a valid tokenizer JSON: ...".
            False for another JSON file of a tokenizer (Marian's ``vocab.json``): any JSON value,
            a problem a ``RunFileError`` (a UserError) naming the file.

    Returns:
        the parsed JSON.

    Raises:
        FileNotFoundError: "tokenizer file not found: PATH".
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"tokenizer file not found: {path}")
    if not model_section:
        return read_json(path, limit=MAX_TOKENIZER_BYTES)
    try:
        data = read_json(path, limit=MAX_TOKENIZER_BYTES)
    except RunFileError as e:
        raise UserError(f"{path} is not a valid tokenizer JSON: {e}") from None
    if not isinstance(data, dict) or not isinstance(data.get("model"), dict):
        raise UserError(f"{path} is not a valid tokenizer JSON: no 'model' section")
    return data


class Tokenizer(abc.ABC):
    """Text <-> token ids. Backends: :class:`BPETokenizer`, ``transformer.text.sentencepiece.SentencePieceTokenizer``."""

    @staticmethod
    def _check_str(text: str) -> str:
        if not isinstance(text, str):
            raise TypeError(f"expected str, got {type(text).__name__}")
        return text

    def _check_ids(self, ids: Sequence[int]) -> list[int]:
        """Ids as a list of Python ints (accepts tensor/numpy elements); ValueError if out of range."""
        ids = [int(i) for i in ids]
        if ids and (min(ids) < 0 or max(ids) >= self.vocab_size):
            raise ValueError(f"token ids must lie in [0, {self.vocab_size}), got min {min(ids)}, max {max(ids)}")
        return ids

    # Backends set ``_pad``, ``_bos``, ``_eos`` and ``_unk`` when they load their vocabulary.
    _pad: int
    _bos: int
    _eos: int
    _unk: int

    @property
    def pad_id(self) -> int:
        """Id of ``<pad>``."""
        return self._pad

    @property
    def bos_id(self) -> int:
        """Id of the decoder's start token (``<s>``, or ``<pad>`` for Marian models); prepended by
        the data pipeline, not by ``encode``."""
        return self._bos

    @property
    def eos_id(self) -> int:
        """Id of ``</s>`` (end of sequence; appended by the data pipeline, not by ``encode``)."""
        return self._eos

    @property
    def unk_id(self) -> int:
        """Id of ``<unk>``."""
        return self._unk

    @property
    @abc.abstractmethod
    def vocab_size(self) -> int:
        """Number of ids, specials included: valid ids are ``0 .. vocab_size - 1``."""

    @abc.abstractmethod
    def normalize(self, text: str) -> str:
        """The text ``encode`` actually sees; ``decode(encode(x)) == normalize(x)``."""

    @abc.abstractmethod
    def encode(self, text: str) -> list[int]:
        """Token ids of ``text``, without ``<s>``/``</s>``."""

    @abc.abstractmethod
    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """``[encode(t) for t in texts]``, computed in parallel by the backend."""

    @abc.abstractmethod
    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        """Text of ``ids``; with ``skip_special`` the specials are dropped (callers cut at eos)."""

    @abc.abstractmethod
    def decode_batch(self, batch: Sequence[Sequence[int]], *, skip_special: bool = True) -> list[str]:
        """``[decode(ids) for ids in batch]``, computed in parallel by the backend."""

    @abc.abstractmethod
    def pieces(self, ids: Sequence[int]) -> list[str]:
        """Readable subword strings of ``ids`` (``"▁chat"``, ``"s"``, ``"<s>"``), e.g. for plot axes."""

    @abc.abstractmethod
    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer to ``path`` atomically."""

    @classmethod
    @abc.abstractmethod
    def load(cls, path: str | os.PathLike) -> Tokenizer:
        """Read a tokenizer written by :meth:`save`."""

    @property
    def special_ids(self) -> dict[str, int]:
        """``{"<pad>": pad_id, "<s>": bos_id, "</s>": eos_id, "<unk>": unk_id}``."""
        return {PAD: self.pad_id, BOS: self.bos_id, EOS: self.eos_id, UNK: self.unk_id}


class BPETokenizer(Tokenizer):
    """Byte-pair-encoding tokenizer (NFKC, Metaspace ``▁`` word marks, byte fallback)."""

    def __init__(self, hf: HFTokenizer) -> None:
        """Wrap a Hugging Face BPE tokenizer; UserError if it lacks a special token."""
        missing = [t for t in SPECIAL_TOKENS if hf.token_to_id(t) is None]
        if missing:
            raise UserError(f"tokenizer vocabulary lacks special tokens {missing}")
        self._hf = hf
        self._hf.encode_special_tokens = True  # literal "<s>" in text is text (not serialized: set here)
        self._pad, self._bos, self._eos, self._unk = (hf.token_to_id(t) for t in SPECIAL_TOKENS)
        self._size = hf.get_vocab_size(with_added_tokens=True)
        mark = [hf.token_to_id(t) for t in _MARK_BYTES]
        self._mark_ids: list[int] | None = None if None in mark else mark  # a literal "▁" as byte tokens

    @classmethod
    def train(cls, texts: Iterable[str], *, vocab_size: int, min_frequency: int = 2) -> BPETokenizer:
        """Learn BPE on ``texts``; the result has at most ``vocab_size`` ids (specials and bytes included).

        Where the training text has more characters than ``vocab_size`` leaves room for, the most
        frequent ones make the alphabet and the others are written as byte tokens.

        Raises UserError if ``vocab_size`` cannot hold the 4 specials, the 256 byte tokens and one
        character, or if ``texts`` holds no non-blank string.
        """
        if isinstance(vocab_size, bool) or not isinstance(vocab_size, int):
            raise TypeError(f"vocab_size must be an int, got {type(vocab_size).__name__}")
        reserved = len(SPECIAL_TOKENS) + len(BYTE_TOKENS)
        if vocab_size <= reserved:
            raise UserError(f"vocab_size={vocab_size} too small: {reserved} ids are reserved for "
                             f"{len(SPECIAL_TOKENS)} special and {len(BYTE_TOKENS)} byte tokens")
        if min_frequency < 1:
            raise UserError(f"min_frequency must be >= 1, got {min_frequency}")
        texts = _check_texts(texts, "training texts")

        hf = HFTokenizer(models.BPE(unk_token=UNK))
        hf.normalizer = normalizers.Sequence(
            [normalizers.NFKC(), normalizers.Replace(Regex(r"\s+"), " "), normalizers.Strip()])
        hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement=WORD_BOUNDARY, prepend_scheme="always")
        # Metaspace first: the marks of the pieces become spaces, then the byte tokens become text,
        # so the byte tokens of a literal "▁" stay "▁".
        hf.decoder = decoders.Sequence(
            [decoders.Metaspace(replacement=WORD_BOUNDARY, prepend_scheme="always"), decoders.ByteFallback()])
        trainer = trainers.BpeTrainer(vocab_size=vocab_size - len(BYTE_TOKENS), min_frequency=min_frequency,
                                      special_tokens=list(SPECIAL_TOKENS), show_progress=False,
                                      limit_alphabet=vocab_size - reserved)  # rarer characters: byte tokens
        hf.train_from_iterator(texts, trainer, length=len(texts))

        # Re-number: specials, then the 256 byte tokens, then alphabet and merges in learned order.
        # Merges are stored as strings, so they survive the re-numbering unchanged.
        data = json.loads(hf.to_str())
        model = data["model"]
        learned = sorted(model["vocab"], key=model["vocab"].__getitem__)
        alphabet = len(learned) - len(SPECIAL_TOKENS) - len(model["merges"])
        if vocab_size < reserved + alphabet:
            raise UserError(f"vocab_size={vocab_size} too small: specials, byte tokens and the "
                             f"{alphabet}-character alphabet need at least {reserved + alphabet}")
        seen = set(SPECIAL_TOKENS) | set(BYTE_TOKENS)
        order = [*SPECIAL_TOKENS, *BYTE_TOKENS, *(t for t in learned if t not in seen)]
        model["vocab"] = {tok: i for i, tok in enumerate(order)}
        model["byte_fallback"] = True
        for added in data["added_tokens"]:
            added["id"] = model["vocab"][added["content"]]
        return cls(HFTokenizer.from_str(json.dumps(data)))

    @classmethod
    def load(cls, path: str | os.PathLike) -> BPETokenizer:
        """Read a tokenizer saved by :meth:`save`; FileNotFoundError / UserError on a bad file."""
        data = read_tokenizer_json(path)
        if data["model"].get("type") != "BPE":
            raise UserError(f"{path} holds a {data['model'].get('type')!r} model, not BPE")
        decoder = data.get("decoder")
        steps = decoder.get("decoders") if isinstance(decoder, dict) and decoder.get("type") == "Sequence" else None
        if isinstance(steps, list) and [d.get("type") if isinstance(d, dict) else None for d in steps] == [
                "ByteFallback", "Metaspace"]:
            decoder["decoders"] = steps[::-1]  # saved before a literal "▁" was kept: the order that keeps it
        try:
            hf = HFTokenizer.from_str(json.dumps(data))
        except Exception as e:  # the Rust side raises a plain Exception
            raise UserError(f"{path} is not a valid tokenizer JSON: {' '.join(str(e).split())}") from None
        if hf.normalizer is None or hf.pre_tokenizer is None or hf.decoder is None:
            raise UserError(f"{path} is not a tokenizer of this project: it lacks a normalizer, pre-tokenizer "
                             "or decoder")
        return cls(hf)

    def save(self, path: str | os.PathLike) -> None:
        """Write the tokenizer as JSON (the ``tokenizers`` format) to ``path`` atomically."""
        write_atomic(path, self._hf.to_str(pretty=True))

    @property
    def vocab_size(self) -> int:
        return self._size

    def normalize(self, text: str) -> str:
        return self._hf.normalizer.normalize_str(self._check_str(text))

    def encode(self, text: str) -> list[int]:
        if WORD_BOUNDARY in self._check_str(text) and self._mark_ids:
            return self._encode_marked(text)
        return self._hf.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        if isinstance(texts, str):
            raise TypeError("encode_batch expects a sequence of str, not a single str")
        texts = [self._check_str(t) for t in texts]
        out = [e.ids for e in self._hf.encode_batch(texts, add_special_tokens=False)]
        if self._mark_ids:
            for i, text in enumerate(texts):
                if WORD_BOUNDARY in text:
                    out[i] = self._encode_marked(text)
        return out

    def _encode_marked(self, text: str) -> list[int]:
        """Ids of a text holding a literal ``▁``: each one becomes its byte tokens; the parts between
        them go through the pipeline's own pre-tokenizer and model, a part after a literal ``▁``
        continuing its word (without the mark Metaspace prepends to a text's first word)."""
        hf = self._hf
        ids: list[int] = []
        for k, part in enumerate(hf.normalizer.normalize_str(text).split(WORD_BOUNDARY)):
            if k:
                ids += self._mark_ids or []
            words = [w for w, _ in hf.pre_tokenizer.pre_tokenize_str(part)] if part else []
            if k and words and not part.startswith(" ") and words[0].startswith(WORD_BOUNDARY):
                words[0] = words[0][len(WORD_BOUNDARY):]
            for word in words:
                if word:
                    ids += [t.id for t in hf.model.tokenize(word)]
        return ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        return self._hf.decode(self._check_ids(ids), skip_special_tokens=skip_special)

    def decode_batch(self, batch: Sequence[Sequence[int]], *, skip_special: bool = True) -> list[str]:
        return self._hf.decode_batch([self._check_ids(ids) for ids in batch], skip_special_tokens=skip_special)

    def pieces(self, ids: Sequence[int]) -> list[str]:
        return [self._hf.id_to_token(i) for i in self._check_ids(ids)]

    def __repr__(self) -> str:
        return f"BPETokenizer(vocab_size={self._size})"

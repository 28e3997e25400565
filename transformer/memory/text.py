"""Text as the translation memory stores and compares it.

- :func:`normalise`: the form matching uses (Unicode NFC, each run of whitespace one space, none
  at the ends); exact matches are equal in this form.
- :func:`check_text`: what may be stored (a string not empty after normalisation,
  at most ``MAX_CHARS`` characters, no control characters other than tab and line breaks, valid
  Unicode), refused with a one-line :class:`~transformer.memory.errors.TMError`.
- :func:`language_code`: a language code as stored (``en``, ``pt-br``: lower case, ``-``).
- :func:`features`: what the fuzzy index holds for a source text: its words and pairs of
  neighbouring words, each hashed together with the language pair.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata

from transformer.memory.errors import TMError

MAX_CHARS = 10_000
"""The longest source or target text taken, in characters (after normalisation): a sentence or a
paragraph; a TMX segment or TSV field longer than this is refused with its line."""

_SPACE = re.compile(r"\s+")
# C0 controls other than tab, line feed and carriage return, and DEL: no TMX (XML 1.0) can carry them.
CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")
# A language code as CAT tools and clients write them: ISO 639 with up to three subtags
# (en, pt-BR, zh_Hant, sr-Latn-RS).
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}")
# Scripts written without spaces between words (Han, kana): each character counts as a word, so
# that pairs of neighbouring characters are the features, as search engines index them.
_NO_SPACES = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_WORD = re.compile(rf"[{_NO_SPACES}]|[^\W{_NO_SPACES}]+")


def normalise(text: str) -> str:
    """``text`` in Unicode NFC with each run of whitespace as one space and none at the ends: the
    form in which two sources are the same for an exact match."""
    return _SPACE.sub(" ", unicodedata.normalize("NFC", text)).strip()


def check_text(text: object, what: str, *, max_chars: int = MAX_CHARS) -> str:
    """``text`` normalised (:func:`normalise`), or a :class:`TMError` saying why it cannot be stored.

    Args:
        text: the source or target text given.
        what: names it in the message (``"source"``, ``"line 12: target"``).
        max_chars: the most characters taken after normalisation.
    """
    if not isinstance(text, str):
        raise TMError(f"the {what} must be text, not {type(text).__name__}")
    if CONTROL.search(text):
        raise TMError(f"the {what} holds a control character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # a lone surrogate, which a JSON body or a file name can carry
        raise TMError(f"the {what} is not valid Unicode text") from None
    norm = normalise(text)
    if not norm:
        raise TMError(f"the {what} is empty")
    if len(norm) > max_chars:
        raise TMError(f"the {what} is {len(norm)} characters long; at most {max_chars} are taken")
    return norm


def language_code(code: object, what: str = "language") -> str:
    """``code`` as the memory stores it (lower case, subtags joined by ``-``), or a :class:`TMError`.

    Codes are compared as stored: ``en`` and ``en-us`` are two languages (TMX import picks the
    variants it reads by prefix: :func:`transformer.memory.tmx.pick`).
    """
    if not isinstance(code, str) or not _LANGUAGE.fullmatch(code):
        raise TMError(f"the {what} {str(code)[:20]!r} is not a language code (such as en, fr, pt-BR)")
    return code.lower().replace("_", "-")


def source_key(norm: str) -> int:
    """A 64-bit hash of a normalised source, the exact-match index's key (equal texts, equal keys)."""
    digest = hashlib.blake2b(norm.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def words(norm: str) -> list[str]:
    """The words of a normalised text, case-folded, punctuation left out (Han and kana one character each)."""
    return _WORD.findall(norm.casefold())


def features(norm: str, source_lang: str, target_lang: str) -> list[int]:
    """The fuzzy index's features of a normalised source: its words and each pair of neighbouring
    words (the first and last words also paired with the text's start and end), each a 48-bit hash
    of the language pair and the feature, distinct, in order of first appearance.

    A one-word edit changes the word and the two pairs around it; the others still lead to the
    entry. Hashing the pair in keeps each language pair's postings apart in one index.
    """
    found = words(norm)
    if not found:
        return []
    tokens = ["\x02", *found, "\x03"]  # the text's start and end, as words no text has
    prefix = f"{source_lang}\t{target_lang}\t"
    grams = [*found, *(f"{a} {b}" for a, b in zip(tokens, tokens[1:]))]
    hashed = (hashlib.blake2b((prefix + gram).encode("utf-8"), digest_size=6).digest() for gram in grams)
    return list(dict.fromkeys(int.from_bytes(digest, "big") for digest in hashed))


def pair_total_feature(source_lang: str, target_lang: str) -> int:
    """The key under which the index counts a language pair's entries (no word hashes to it: a
    feature's text never holds a tab)."""
    digest = hashlib.blake2b(f"{source_lang}\t{target_lang}\t\t".encode("utf-8"), digest_size=6).digest()
    return int.from_bytes(digest, "big")

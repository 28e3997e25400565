"""What every translatable file format offers: its units of text, and the file written back.

A file is read into a :class:`TranslatableFile`; :meth:`~TranslatableFile.units` lists, in
document order, the pieces of text to translate (:class:`Unit`), and
:meth:`~TranslatableFile.write` gives the file's bytes with one translation in place of each
unit. Everything that is not a unit's text (markup, styles, timings, pictures, other parts of
an archive) is written back as it was read, byte for byte where the format allows.

A unit is either plain text (translated as ``translate_document`` translates a text: cut into
sentences, its lines and spacing kept) or an HTML fragment whose inline tags carry the
formatting inside a paragraph (bold, italics, links, runs of a word processor), translated as
``translate_html`` translates a page so the tags stay around the words they marked.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from transformer.errors import UserError


MAX_FILE_CHARS = 10_000_000
"""The most characters a file's units may hold together (their text and inline tags: about 3,000
pages), checked as they are read: what cutting them into sentences and translating them holds
in memory grows with it (about 60 bytes a character for an HTML page)."""


class FileFormatError(UserError):
    """A file that cannot be translated: a format not supported, or a corrupt or unreadable file.
    The message names the file and the problem in one line."""


def too_many_chars(name: str, count: int, limit: int) -> FileFormatError:
    """The refusal of a file whose units hold ``count`` characters, over ``limit`` (:data:`MAX_FILE_CHARS`)."""
    return FileFormatError(f"{name}: more than {limit:,} characters of text to translate ({count:,} counted), "
                           "over the limit for a file")


@dataclass(frozen=True)
class Unit:
    """One piece of a file to translate.

    Attributes:
        text: the text, or an HTML fragment when ``html``.
        html: True when ``text`` is HTML (inline tags are formatting to keep), False for plain text.
        where: how a message names this unit in the file (``"paragraph 12"``, ``"cue 40"``).
    """

    text: str
    html: bool
    where: str


class TranslatableFile(ABC):
    """A file read for translation (one subclass per format)."""

    kind: ClassVar[str]  # the format's short name: "docx", "srt", ...
    extensions: ClassVar[tuple[str, ...]]  # the file name endings it reads, lowercase with the dot
    media_type: ClassVar[str]  # the MIME type a server answers it with

    @classmethod
    @abstractmethod
    def read(cls, data: bytes, name: str) -> TranslatableFile:
        """Parse ``data`` (the file's bytes; ``name`` names it in errors): :class:`FileFormatError`
        when it is not a readable file of this format."""

    @abstractmethod
    def units(self) -> list[Unit]:
        """The texts to translate, in document order (the same list on every call)."""

    @abstractmethod
    def write(self, translations: Sequence[str], *, target_lang: str | None = None) -> bytes:
        """The file with ``translations[i]`` in place of ``units()[i]`` (:class:`ValueError` when
        the count differs). A translation equal to its unit leaves the file's bytes for it as they
        were. ``target_lang`` (a language code): where the format records the document's
        language, it is set to this; None leaves it."""

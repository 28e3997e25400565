"""Translating files: the formats, chosen by the file's name, and the one way their units are translated.

::

    read_file(data, name, *, kind=None) -> TranslatableFile   # by extension, case-insensitive
    translate_units(units, translate_texts, translate_pages) -> list[str]
    translate_file(data, name, translator, *, target_lang=None, src_lang=None, glossary=None,
                   progress=None) -> bytes
    translate_parsed(file, translator, ...) -> bytes        # the same, for a file already read
    FileSentences(units, lang): .texts, .where, .rebuild(translations)  # a file's sentences and back
    translated_name(name, target_lang) -> str          # "report.docx", "de" -> "report_de.docx"

A file is read into a :class:`~transformer.translate.files.base.TranslatableFile` (one class per
format, :data:`FORMATS`), whose units are translated in (at most) two calls, the plain texts in
one and the HTML fragments in the other (:func:`translate_units`: what the command line and the
server share), and written back with the translations in place (``TranslatableFile.write``).
:func:`translate_file` does all of it with a :class:`~transformer.translate.translator.Translator`:
the plain texts cut into sentences as ``translate_document`` cuts them, the fragments translated
as ``translate_html`` translates a page, every sentence of the file batched together.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import PurePath, PureWindowsPath

from transformer.errors import UserError
from transformer.translate.files.base import MAX_FILE_CHARS, FileFormatError, TranslatableFile, Unit, too_many_chars
from transformer.translate.files.docx import DocxFile
from transformer.translate.files.epub import EpubFile
from transformer.translate.files.markdown import MarkdownFile
from transformer.translate.files.odt import OdtFile
from transformer.translate.files.po import PoFile
from transformer.translate.files.pptx import PptxFile
from transformer.translate.files.srt import SrtFile
from transformer.translate.files.text import HtmlFile, TextFile
from transformer.translate.inputs import not_text

__all__ = ["FORMATS", "KINDS", "SUPPORTED_EXTENSIONS", "ARCHIVE_EXTENSIONS", "MAX_FILE_BYTES", "MAX_FILE_CHARS",
           "FileFormatError", "TooManySentences", "TranslatableFile", "Unit", "read_file", "format_for",
           "translate_units", "translate_units_async", "FileSentences", "translate_file", "translate_parsed",
           "translated_name"]

_CLASSES: list[type[TranslatableFile]] = [TextFile, HtmlFile, MarkdownFile, SrtFile, PoFile, DocxFile, PptxFile,
                                          OdtFile, EpubFile]

FORMATS: dict[str, type[TranslatableFile]] = {ext: cls for cls in _CLASSES for ext in cls.extensions}
"""Each file name ending read (lowercase, with the dot) and the class that reads it."""
KINDS: dict[str, type[TranslatableFile]] = {cls.kind: cls for cls in _CLASSES}
"""Each format's short name (``"markdown"``, ``"srt"``, ``"docx"``...) and its class."""
SUPPORTED_EXTENSIONS: tuple[str, ...] = tuple(sorted(FORMATS))
ARCHIVE_EXTENSIONS = frozenset({".docx", ".pptx", ".odt", ".epub"})
"""The formats that are zip archives (binary files: not for a terminal)."""
MAX_FILE_BYTES = 50 * 1024 * 1024
"""The largest file :func:`read_file` reads (50 MiB): a word processor's file with its pictures
fits; its text is what costs time to translate."""

_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # an archive with files, an empty archive
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def _extension(name: str) -> str:
    return PurePath(PureWindowsPath(name).name).suffix.lower()


def format_for(name: str) -> type[TranslatableFile]:
    """The class that reads a file called ``name`` (its extension, case-insensitive);
    :class:`FileFormatError` listing the supported extensions for another one."""
    ext = _extension(name)
    cls = FORMATS.get(ext)
    if cls is None:
        what = f"a {ext} file" if ext else "a file without an extension"
        raise FileFormatError(f"{name}: {what} cannot be translated; the formats read are "
                              f"{', '.join(SUPPORTED_EXTENSIONS)}")
    return cls


def read_file(data: bytes, name: str, *, kind: str | None = None) -> TranslatableFile:
    """Read a file for translation, its format told by the extension of ``name``.

    Args:
        data: the file's bytes (at most :data:`MAX_FILE_BYTES`).
        name: its name (a path is fine: only the last part is used); messages name it.
        kind: the format (a key of :data:`KINDS`), whatever the name's extension says.

    Returns:
        The file, whose ``units()`` are the texts to translate.

    Raises:
        FileFormatError: an unknown extension, a file too large (over :data:`MAX_FILE_BYTES`, or
            with units of more than :data:`MAX_FILE_CHARS` characters), or one that is not what its
            extension says (a ``.docx`` that is not a zip archive, a ``.srt`` that is one, a PDF),
            or a malformed file of its format, or one nested deeper than its format's limit
            (:data:`~transformer.translate.files.package.MAX_XML_DEPTH` and ``MAX_ELEMENTS``,
            :data:`~transformer.translate.files.markdown.MAX_MARKDOWN_DEPTH`, HTML's
            :data:`~transformer.translate.html.MAX_HTML_DEPTH` when its sentences are cut); the
            message names the file and the problem.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise TypeError(f"data must be bytes, got {type(data).__name__}")
    data = bytes(data)
    if kind is None:
        cls = format_for(name)
    elif kind in KINDS:
        cls = KINDS[kind]
    else:
        raise FileFormatError(f"{kind!r} is not a file format; the formats are {', '.join(sorted(KINDS))}")
    if len(data) > MAX_FILE_BYTES:
        raise FileFormatError(f"{name}: {len(data):,} bytes, over the limit of {MAX_FILE_BYTES:,} bytes for a file "
                              "to translate")
    ext = cls.extensions[0] if kind is not None else _extension(name)
    if ext in ARCHIVE_EXTENSIONS:
        if not data.startswith(_ZIP_MAGIC):
            raise FileFormatError(f"{name} is not a {ext} file: a {ext} file is a zip archive, and this one "
                                  "does not start like one")
    else:
        binary = not_text(data)  # the check the command line's text path makes too
        if binary is not None:
            raise FileFormatError(f"{name} is {binary}, not a {ext} text file")
        if data.startswith(_UTF16_BOMS):
            raise FileFormatError(f"{name} is UTF-16 (it starts with a UTF-16 byte-order mark); {ext} files are "
                                  "read as UTF-8: convert it first, e.g. iconv -f UTF-16 -t UTF-8")
        nul = data.find(b"\x00", 0, 1 << 16)
        if nul >= 0:
            raise FileFormatError(f"{name} holds a NUL byte at offset {nul}: a binary file, not a {ext} text file")
        if len(data) > MAX_FILE_CHARS:  # a text's characters, counted before it is parsed
            count = len(data.decode("utf-8", "replace"))
            if count > MAX_FILE_CHARS:
                raise too_many_chars(name, count, MAX_FILE_CHARS)
    document = cls.read(data, name)
    count = sum(len(unit.text) for unit in document.units())
    if count > MAX_FILE_CHARS:
        raise too_many_chars(name, count, MAX_FILE_CHARS)
    return document


TranslateMany = Callable[[list[str]], Sequence[str]]


def _grouped(units: Sequence[Unit]) -> tuple[list[int], list[int]]:
    for unit in units:
        if not isinstance(unit, Unit):
            raise TypeError(f"units must be Unit objects, got {type(unit).__name__}")
    texts = [i for i, unit in enumerate(units) if not unit.html]
    pages = [i for i, unit in enumerate(units) if unit.html]
    return texts, pages


def _place(out: list, units: Sequence[Unit], indices: list[int], results, what: str) -> None:
    results = list(results)
    if len(results) != len(indices):
        raise ValueError(f"{what} returned {len(results)} translations for {len(indices)} texts")
    for i, result in zip(indices, results):
        if not isinstance(result, str):
            raise TypeError(f"{what} must return str, got {type(result).__name__}")
        out[i] = result


def translate_units(units: Sequence[Unit], translate_texts: TranslateMany, translate_pages: TranslateMany) -> list[str]:
    """The translation of each unit, in the units' order.

    Args:
        units: a file's units (``TranslatableFile.units()``).
        translate_texts: plain texts -> their translations, in order, each text's structure kept
            (lines, blank lines: as ``translate_document`` does); called once, with every plain
            unit's text, and not at all when there is none.
        translate_pages: HTML fragments -> their translations, markup kept (as
            ``translate_html`` does); called once, with every HTML unit's text, or not at all.

    Raises:
        ValueError: a function returned another number of translations than it was given texts.
    """
    texts, pages = _grouped(units)
    out: list[str] = [""] * len(units)
    if texts:
        _place(out, units, texts, translate_texts([units[i].text for i in texts]), "translate_texts")
    if pages:
        _place(out, units, pages, translate_pages([units[i].text for i in pages]), "translate_pages")
    return out


async def translate_units_async(units: Sequence[Unit], translate_texts: Callable[[list[str]], Awaitable[Sequence[str]]],
                                translate_pages: Callable[[list[str]], Awaitable[Sequence[str]]]) -> list[str]:
    """:func:`translate_units` for coroutine functions (a server's): the same calls, awaited."""
    texts, pages = _grouped(units)
    out: list[str] = [""] * len(units)
    if texts:
        _place(out, units, texts, await translate_texts([units[i].text for i in texts]), "translate_texts")
    if pages:
        _place(out, units, pages, await translate_pages([units[i].text for i in pages]), "translate_pages")
    return out


# Sentences given to the translator at a time: big enough for its batching by length, small enough
# for the progress to move.
SENTENCES_PER_CALL = 512

OnProgress = Callable[[int, int], None]  # (sentences translated so far, sentences in all)


class _Sentences:
    """The sentences of a whole file, translated in calls of ``SENTENCES_PER_CALL`` with the progress
    reported after each (``progress(done, total)``)."""

    def __init__(self, translator, glossary, progress: OnProgress | None, total: int) -> None:
        self.translator, self.glossary, self.progress = translator, glossary, progress
        self.total, self.done = total, 0

    def translate(self, items: list[tuple[str, str, str]]) -> list[str]:
        from transformer.translate.document import translate_with_notes

        out: list[str] = []
        for start in range(0, len(items), SENTENCES_PER_CALL):
            part = items[start:start + SENTENCES_PER_CALL]
            out += [t.hyps[0][0] if t.hyps else "" for t in translate_with_notes(self.translator, part,
                                                                                 glossary=self.glossary)]
            self.done += len(part)
            if self.progress is not None:
                self.progress(self.done, self.total)
        return out


def translate_file(data: bytes, name: str, translator, *, target_lang: str | None = None,
                   src_lang: str | None = None, glossary=None, progress: OnProgress | None = None) -> bytes:
    """Translate a file with a :class:`~transformer.translate.translator.Translator`.

    Args:
        data: the file's bytes; ``name``: its name (the extension tells its format).
        translator: what translates the sentences.
        target_lang: the language code written where the format records the document's language
            (``<html lang>``, a PO file's ``Language:``); default: the translator's ``tgt_lang``.
        src_lang: the source language, for cutting sentences (default: the translator's).
        glossary: terms the translations must use (a :class:`~transformer.translate.glossary.Glossary`
            or pairs); a term that cannot be placed gives a ``TermWarning`` naming the unit.
        progress: called as ``progress(done, total)`` (sentences) after each call to the translator.

    Returns:
        The translated file's bytes.

    Raises:
        FileFormatError: the file cannot be read (see :func:`read_file`).
    """
    return translate_parsed(read_file(data, name), translator, target_lang=target_lang, src_lang=src_lang,
                            glossary=glossary, progress=progress)


class TooManySentences(UserError):
    """A file with more sentences than the limit it is cut under (``FileSentences``'s ``max_sentences``)."""


class FileSentences:
    """The sentences of a file's units, in unit order, and the units rebuilt from their translations:
    a plain unit cut as ``translate_document`` cuts a text (its lines and spacing kept), an HTML unit
    as ``translate_html`` cuts a page (its tags put back around the translated words).

    Args:
        units: the file's units (``TranslatableFile.units()``).
        lang: the source language, for the sentence splitting rules.
        max_sentences: the most sentences the file may hold, counted unit by unit as they are cut
            (:class:`TooManySentences` as soon as there are more); None for no limit.
        whole: a plain unit's line of several sentences it says yes to stays one sentence
            (``segment_text``'s ``whole``).
    """

    def __init__(self, units: Sequence[Unit], lang: str | None, *, max_sentences: int | None = None,
                 whole: Callable[[str], bool] | None = None) -> None:
        from transformer.translate.html import html_sentences
        from transformer.translate.segment import segment_text

        self.units, self.lang = list(units), lang
        self.documents: list = []
        self.sentences: list[list[str]] = []
        count = 0
        for unit in self.units:
            document = None if unit.html else segment_text(unit.text, lang, whole=whole)
            found = html_sentences(unit.text, lang=lang) if document is None else [s.text for s in document.segments]
            count += len(found)
            if max_sentences is not None and count > max_sentences:
                raise TooManySentences(f"the file holds more than {max_sentences:,} sentences ({count:,} sentences "
                                       f"up to {unit.where}); at most {max_sentences:,} are translated per file")
            self.documents.append(document)
            self.sentences.append(found)
        self.where = self._names()  # how a warning names each sentence: its unit, and its line or number there

    def _names(self) -> list[str]:
        names = []
        for unit, document, found in zip(self.units, self.documents, self.sentences):
            if document is not None:
                names += [_where(unit, s.line) for s in document.segments]
            else:
                names += [f"{unit.where}, sentence {k + 1}" for k in range(len(found))]
        return names

    @property
    def texts(self) -> list[str]:
        """Every sentence of the file, in order."""
        return [s for found in self.sentences for s in found]

    def rebuild(self, translations: Sequence[str]) -> list[str]:
        """Each unit's translation from its sentences' ``translations`` (one per :attr:`texts`)."""
        from transformer.translate.html import translate_html

        out, k = [], 0
        for unit, document, found in zip(self.units, self.documents, self.sentences):
            given = list(translations[k:k + len(found)])
            k += len(found)
            if document is not None:
                out.append(document.rebuild(given))
            else:  # translate_html refuses a count that differs from the sentences it finds
                out.append(translate_html(unit.text, lambda _sentences, given=given: given, lang=self.lang)
                           if found else unit.text)
        if k != len(translations):
            raise ValueError(f"{len(translations)} translations for {k} sentences")
        return out


def translate_parsed(document: TranslatableFile, translator, *, target_lang: str | None = None,
                     src_lang: str | None = None, glossary=None, progress: OnProgress | None = None) -> bytes:
    """:func:`translate_file` for a file already read (:func:`read_file`)."""
    from transformer.translate.document import kept_whole

    cut = FileSentences(document.units(), src_lang or translator.src_lang, whole=kept_whole(translator))
    texts = cut.texts
    sentences = _Sentences(translator, glossary, progress, len(texts))
    translations = sentences.translate([(text, where, "") for text, where in zip(texts, cut.where)])
    return document.write(cut.rebuild(translations), target_lang=target_lang or getattr(translator, "tgt_lang", None))


def _where(unit: Unit, line: int) -> str:
    return unit.where if "\n" not in unit.text.strip("\n") else f"{unit.where}, line {line + 1}"


def translated_name(name: str, target_lang: str) -> str:
    """The name of a translated file, as LibreTranslate names its downloads: the target language's
    code after the name's stem (``"report.docx"``, ``"de"`` -> ``"report_de.docx"``); a path's
    folders are dropped."""
    base = PurePath(PureWindowsPath(name).name)
    return f"{base.stem}_{target_lang}{base.suffix}"


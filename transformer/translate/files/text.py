"""Plain text (``.txt``) and HTML pages (``.html``, ``.htm``) as translatable files.

A text file is one plain unit, translated as ``translate_document`` translates a text: its lines,
blank lines, indentation and line ends (CRLF too) kept. An HTML page is one HTML unit, translated
as ``translate_html`` translates a page, its markup kept byte for byte; with a target language,
the ``lang`` attribute of its ``<html>`` tag is set to it (only that attribute's bytes change;
the attribute is added when the tag has none).

Both are read as UTF-8, as ``transformer translate`` reads text: a byte-order mark is kept for
the output, and bytes that are not UTF-8 are replaced by U+FFFD with a ``TranslationWarning``
naming the line and byte offset. An HTML page whose ``<meta charset>`` names another encoding
is read and written in that encoding (characters it cannot hold as character references).
"""

from __future__ import annotations

import codecs
import re
import warnings
from collections.abc import Sequence

from transformer.errors import UserError
from transformer.translate.files.base import FileFormatError, TranslatableFile, Unit
from transformer.translate.warning import TranslationWarning

UTF8_BOM = b"\xef\xbb\xbf"


def decode_text(data: bytes, name: str, encoding: str = "utf-8") -> tuple[str, bytes]:
    """The text of a file and the byte-order mark it started with (b"" for none).

    Bytes that do not decode are replaced by U+FFFD, with one ``TranslationWarning`` naming the
    first one's line and byte offset and how many there were."""
    bom = UTF8_BOM if encoding == "utf-8" and data.startswith(UTF8_BOM) else b""
    body = data[len(bom):]
    try:
        return body.decode(encoding), bom
    except UnicodeDecodeError as err:
        line = body.count(b"\n", 0, err.start) + 1
        text = body.decode(encoding, errors="replace")
        bad = text.count("\ufffd") - body.decode(encoding, errors="ignore").count("\ufffd")
        warnings.warn(TranslationWarning(
            f"{name}: line {line}: invalid {encoding} at byte {len(bom) + err.start} ({err.reason}); "
            f"{bad} undecodable byte sequence{'s' if bad != 1 else ''} replaced by U+FFFD"), stacklevel=2)
        return text, bom


# Printable ASCII and the line ends: what a declared charset must read and write as ASCII does, so
# that the markup around the text is found, and copied, as bytes.
_ASCII_PROBE = "".join(map(chr, range(0x20, 0x7F))) + "\t\n\r"


def text_encoding(label: str, where: str) -> str | None:
    """The Python codec of a charset a file declares (``label``): None when Python knows no
    codec of that name (the caller reads the file as UTF-8, as a browser would); a
    ``FileFormatError`` naming ``where`` when the codec is not a text encoding that writes ASCII
    as ASCII (zlib, base64, rot13, undefined, idna, punycode, UTF-7, UTF-16 without its
    byte-order mark...)."""
    try:
        info = codecs.lookup(label)
    except LookupError:
        return None
    if info.name == "utf-8-sig":  # UTF-8 that skips a byte-order mark: read as UTF-8, which keeps it
        return "utf-8"
    try:
        ascii_bytes = _ASCII_PROBE.encode("ascii")
        usable = (getattr(info, "_is_text_encoding", True) and _ASCII_PROBE.encode(info.name) == ascii_bytes
                  and ascii_bytes.decode(info.name) == _ASCII_PROBE)
    except (LookupError, UnicodeError, TypeError, ValueError):
        usable = False
    if not usable:
        raise FileFormatError(f"{where} declares the charset {label!r}, which is not a text encoding that files are "
                              "read in (UTF-8, ISO-8859-x, windows-125x, ...)")
    return info.name


def check_count(translations: Sequence[str], units: Sequence[Unit]) -> list[str]:
    """``translations`` as a list, ValueError when it does not hold one string per unit."""
    translations = list(translations)
    if len(translations) != len(units):
        raise ValueError(f"{len(translations)} translations for {len(units)} units")
    for t in translations:
        if not isinstance(t, str):
            raise TypeError(f"translations must be str, got {type(t).__name__}")
    return translations


class TextFile(TranslatableFile):
    """A plain text file: one plain unit, the whole text."""

    kind = "text"
    extensions = (".txt",)
    media_type = "text/plain; charset=utf-8"

    def __init__(self, data: bytes, text: str, bom: bytes) -> None:
        self.data, self.text, self.bom = data, text, bom

    @classmethod
    def read(cls, data: bytes, name: str) -> TextFile:
        text, bom = decode_text(data, name)
        return cls(data, text, bom)

    def units(self) -> list[Unit]:
        return [Unit(self.text, False, "text")]

    def write(self, translations: Sequence[str], *, target_lang: str | None = None) -> bytes:
        (translation,) = check_count(translations, self.units())
        if translation == self.text:
            return self.data
        return self.bom + translation.encode("utf-8")


# <meta charset="..."> or <meta http-equiv="Content-Type" content="text/html; charset=...">, in the
# first bytes of a page (where browsers look for it too).
_META_CHARSET = re.compile(rb"<meta[^>]*?charset\s*=\s*[\"']?\s*([A-Za-z0-9._:-]+)", re.IGNORECASE)
_PRESCAN_BYTES = 1024
_HTML_TAG = re.compile(r"<html(?=[\s/>])[^>]*>", re.IGNORECASE)
_LANG = re.compile(r"(?<=[\s\"'])lang\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s\"'=<>`]+)", re.IGNORECASE)


def _page_encoding(data: bytes, name: str) -> str:
    if data.startswith(UTF8_BOM):
        return "utf-8"
    match = _META_CHARSET.search(data[:_PRESCAN_BYTES])
    if match:
        codec = text_encoding(match.group(1).decode("ascii"), name)
        if codec is None:
            return "utf-8"
        # Pages that say ASCII or Latin-1 are read as browsers read them: windows-1252.
        return "cp1252" if codec in ("ascii", "latin-1", "iso8859-1") else codec
    return "utf-8"


def set_html_lang(page: str, lang: str) -> str:
    """``page`` with the ``lang`` attribute of its ``<html>`` tag set to ``lang`` (added when the
    tag has none); a page without an ``<html>`` tag is returned as it is."""
    from transformer.translate.html_tokens import tokenize

    tag = next((t for t in tokenize(page) if t.kind in ("start", "empty") and t.name == "html"), None)
    if tag is None or tag.end is None:
        return page
    raw = page[tag.start:tag.end]
    if not _HTML_TAG.fullmatch(raw):
        return page
    match = _LANG.search(raw)
    if match:
        value = match.group(1)
        quote = value[0] if value[0] in "\"'" else '"'
        raw = raw[:match.start(1)] + quote + lang + quote + raw[match.end(1):]
    else:
        raw = raw[:5] + f' lang="{lang}"' + raw[5:]
    return page[:tag.start] + raw + page[tag.end:]


class HtmlFile(TranslatableFile):
    """An HTML page: one HTML unit, the whole page."""

    kind = "html"
    extensions = (".html", ".htm")
    media_type = "text/html; charset=utf-8"

    def __init__(self, data: bytes, text: str, bom: bytes, encoding: str) -> None:
        self.data, self.text, self.bom, self.encoding = data, text, bom, encoding

    @classmethod
    def read(cls, data: bytes, name: str) -> HtmlFile:
        encoding = _page_encoding(data, name)
        text, bom = decode_text(data, name, encoding)
        return cls(data, text, bom, encoding)

    def units(self) -> list[Unit]:
        return [Unit(self.text, True, "page")]

    def write(self, translations: Sequence[str], *, target_lang: str | None = None) -> bytes:
        (translation,) = check_count(translations, self.units())
        if translation == self.text and not target_lang:
            return self.data
        if target_lang:
            if not re.fullmatch(r"[A-Za-z0-9-]{1,35}", target_lang):
                raise UserError(f"target_lang {target_lang!r} is not a language code")
            translation = set_html_lang(translation, target_lang)
        return self.bom + translation.encode(self.encoding, errors="xmlcharrefreplace")

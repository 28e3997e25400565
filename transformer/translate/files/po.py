"""gettext catalogues (``.po``, ``.pot``) as translatable files.

Each message that has no translation yet becomes units: its ``msgid`` (for ``msgstr``, or
``msgstr[0]``) and its ``msgid_plural`` (for ``msgstr[1]`` and the other plural forms the entry
holds). Messages already translated, those marked ``fuzzy`` (a translation waiting for review),
obsolete ones (``#~``) and the header (``msgid ""``) are left as they are; the header's
``Language:`` is set to the target language (added when missing). The translations written are
not marked ``fuzzy``: ``msgfmt`` uses them as they are, so review them first
(``msgattrib --only-fuzzy`` lists nothing new to review).

Placeholders must come through unchanged: printf formats (``%s``, ``%d``, ``%(name)s``,
``%1$s``), braces (``{0}``, ``{name}``) and tags in the message (``<b>``) are kept elements of
the unit's HTML (``<code>%s</code>``), which ``translate_html`` writes back as written, so the
model sees them and cannot change them.

polib parses the file (its messages, flags, plural forms and escapes; a syntax error is a
``FileFormatError`` naming the line); the output is the source with only the filled ``msgstr``
lines and the ``Language:`` line rewritten (in polib's layout), so comments, references, order,
wrapping and every message left alone stay byte for byte. The file is read in the charset its
header declares and written in it, or in UTF-8 (the header saying so) when a translation holds a
character that charset lacks.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from transformer.errors import UserError
from transformer.translate.files.base import FileFormatError, TranslatableFile, Unit
from transformer.translate.files.inline import Fragment, MarkupMismatch
from transformer.translate.files.srt import split_lines
from transformer.translate.files.text import check_count, decode_text, text_encoding
from transformer.translate.warning import TranslationWarning

# printf conversions (with Python's %(name)s and positional %1$s), braces ({0}, {name}, {}),
# tags and character references: kept as written.
PLACEHOLDER = re.compile(
    r"%(?:\d+\$|\([^()\s]*\))?[-+ #0']*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|q|j|z|t|I64|I32)?"
    r"[diouxXeEfFgGaAcspnr%@]"
    r"|\{[^{}\s]*\}"
    r"|</?[A-Za-z][^<>]*>"
    r"|&(?:[A-Za-z][A-Za-z0-9]*|#[0-9]+|#x[0-9A-Fa-f]+);")
_CHARSET = re.compile(rb"charset=([A-Za-z0-9._:-]+)")
_LANGUAGE = re.compile(r'^"Language:[^"\\]*(?:\\.[^"\\]*)*?\\n"', re.MULTILINE)


def fragment(message: str) -> Fragment:
    """A message as a fragment, its placeholders kept elements."""
    f = Fragment()
    position = 0
    for match in PLACEHOLDER.finditer(message):
        f.text(message[position:match.start()])
        f.kept(match.group(), match.group())
        position = match.end()
    f.text(message[position:])
    return f


@dataclass
class _Message:
    first: int  # index of its first msgstr line
    end: int  # index after its last msgstr line (continuations included)
    entry: object  # the polib.POEntry
    units: list[tuple[Fragment, str]]  # (fragment, where) for msgid, then msgid_plural


class PoFile(TranslatableFile):
    """A gettext catalogue: one HTML unit per untranslated msgid (and msgid_plural)."""

    kind = "po"
    extensions = (".po", ".pot")
    media_type = "text/x-gettext-translation"

    def __init__(self, data: bytes, bom: bytes, encoding: str, lines: list[str], messages: list[_Message],
                 header: _Message | None, name: str) -> None:
        self.data, self.bom, self.encoding, self.lines = data, bom, encoding, lines
        self.messages, self.header, self.name = messages, header, name

    @classmethod
    def read(cls, data: bytes, name: str) -> PoFile:
        import polib

        encoding = _charset(data, name)
        text, bom = decode_text(data, name, encoding)
        try:
            # The text and a line end: polib reads its argument as a path when a file of that name exists.
            catalogue = polib.pofile(text + "\n", encoding=encoding)
        except (OSError, ValueError) as err:
            raise FileFormatError(f"{name}: not a readable PO file ({_polib_message(err)})") from None
        entries = [e for e in catalogue if not e.obsolete]
        lines = split_lines(text)
        groups = _msgstr_groups(lines)
        header_entry = _has_header(lines)
        expected = len(entries) + (1 if header_entry else 0)
        if len(groups) != expected:
            raise FileFormatError(f"{name}: not a readable PO file ({len(groups)} msgstr fields for {expected} "
                                  "messages)")
        header = _Message(*groups[0], None, []) if header_entry else None
        messages = []
        for (first, end), entry in zip(groups[1:] if header_entry else groups, entries):
            if entry.msgstr or any(entry.msgstr_plural.values()) or "fuzzy" in entry.flags:
                continue
            where = f"line {first + 1}"
            units = [(fragment(entry.msgid), f"{where} (msgid)")]
            if entry.msgid_plural:
                units.append((fragment(entry.msgid_plural), f"{where} (msgid_plural)"))
            messages.append(_Message(first, end, entry, [u for u in units]))
        return cls(data, bom, encoding, lines, messages, header, name)

    def _units(self) -> list[tuple[_Message, int, Unit]]:
        out = []
        for message in self.messages:
            for k, (f, where) in enumerate(message.units):
                if f.has_text:
                    out.append((message, k, Unit(f.html, True, where)))
        return out

    def units(self) -> list[Unit]:
        return [unit for _, _, unit in self._units()]

    def write(self, translations: Sequence[str], *, target_lang: str | None = None) -> bytes:
        import polib

        found = self._units()
        translations = check_count(translations, [u for _, _, u in found])
        chosen: dict[int, dict[int, str]] = {}  # message index -> {0: msgid's, 1: msgid_plural's}
        index = {id(m): i for i, m in enumerate(self.messages)}
        for (message, k, unit), translation in zip(found, translations):
            if translation == unit.text:
                continue
            try:
                pieces = message.units[k][0].restore(translation)
            except MarkupMismatch as err:
                warnings.warn(TranslationWarning(f"{self.name}: {unit.where}: kept untranslated ({err})"),
                              stacklevel=2)
                continue
            chosen.setdefault(index[id(message)], {})[k] = "".join(p for p, _ in pieces)
        replaced: dict[int, tuple[int, list[str]]] = {}
        newline = "\r\n" if self.lines and self.lines[0].endswith("\r\n") else "\n"
        for i, values in chosen.items():
            message = self.messages[i]
            entry = message.entry
            if entry.msgid_plural:
                if 0 not in values or 1 not in values:
                    continue  # a plural message is filled whole or not at all
                forms = sorted(entry.msgstr_plural) or [0, 1]
                new = polib.POEntry(msgid="x", msgid_plural="y",
                                    msgstr_plural={n: values[0] if n == 0 else values[1] for n in forms})
            else:
                new = polib.POEntry(msgid="x", msgstr=values[0])
            body = str(new).split("\n")
            start = next(j for j, line in enumerate(body) if line.startswith("msgstr"))
            replaced[message.first] = (message.end, [line + newline for line in body[start:] if line])
        if target_lang and self.header is not None:
            replaced[self.header.first] = (self.header.end, _with_language(
                self.lines[self.header.first:self.header.end], target_lang, newline))
        if not replaced:
            return self.data
        out, i = [], 0
        while i < len(self.lines):
            if i in replaced:
                end, new_lines = replaced[i]
                if end == len(self.lines) and not self.lines[-1].endswith("\n"):
                    new_lines[-1] = new_lines[-1].rstrip("\r\n")
                out += new_lines
                i = end
            else:
                out.append(self.lines[i])
                i += 1
        text = "".join(out)
        try:
            return self.bom + text.encode(self.encoding)
        except UnicodeEncodeError:
            text = re.sub(r"(charset=)[A-Za-z0-9._:-]+", r"\1UTF-8", text, count=1)
            return self.bom + text.encode("utf-8")


def _charset(data: bytes, where: str) -> str:
    """The charset a PO file's header declares (UTF-8 when none, or one Python lacks: a template's
    ``charset=CHARSET``); ``FileFormatError`` for a codec that is not a text encoding."""
    match = _CHARSET.search(data[:8192])
    if not match:
        return "utf-8"
    name = text_encoding(match.group(1).decode("ascii"), where)
    return "utf-8" if name in (None, "ascii", "utf-8") else name


def _polib_message(err: Exception) -> str:
    message = str(err)
    match = re.search(r"\(line (\d+)\)", message)
    return f"syntax error at line {match.group(1)}" if match else message


def _has_header(lines: list[str]) -> bool:
    """Whether the first live message is the header (``msgid ""`` without context), which polib
    reads into the catalogue's metadata rather than its messages."""
    for k, line in enumerate(lines):
        if line.startswith(("msgctxt", "msgid")):
            return (not line.startswith("msgctxt") and line.rstrip() == 'msgid ""'
                    and k + 1 < len(lines) and lines[k + 1].startswith("msgstr"))
    return False


def _msgstr_groups(lines: list[str]) -> list[tuple[int, int]]:
    """The ``msgstr`` fields of the live messages: ``(first line, end)`` index ranges, each the
    msgstr (or all msgstr[N]) lines of one message with their continuation lines."""
    groups: list[tuple[int, int]] = []
    i = 0
    while i < len(lines):
        if lines[i].startswith("msgstr"):
            first = i
            i += 1
            while i < len(lines) and (lines[i].lstrip().startswith('"') or lines[i].startswith("msgstr[")):
                i += 1
            groups.append((first, i))
        else:
            i += 1
    return groups


def _with_language(lines: list[str], lang: str, newline: str) -> list[str]:
    """The header's msgstr lines with ``Language:`` set to ``lang``."""
    if not re.fullmatch(r"[A-Za-z0-9_@.-]{1,35}", lang):
        raise UserError(f"target_lang {lang!r} is not a language code")
    out = list(lines)
    for k, line in enumerate(out):
        if _LANGUAGE.match(line):
            ending = line[len(line.rstrip("\r\n")):]
            out[k] = f'"Language: {lang}\\n"' + ending
            return out
    ending = out[-1][len(out[-1].rstrip("\r\n")):] or newline
    at = next((k + 1 for k, line in enumerate(out) if line.startswith('"Language-Team:')), len(out))
    if at == len(out) and not out[-1].endswith(("\n", "\r")):
        out[-1] += newline
        ending = newline
    out.insert(at, f'"Language: {lang}\\n"' + ending)
    return out

"""TMX 1.4b, the translation memory exchange format of CAT tools: reading it safely and as a
stream, writing it.

A TMX file::

    <tmx version="1.4">
      <header srclang="en" creationtool="..." .../>
      <body>
        <tu tuid="1">
          <tuv xml:lang="en"><seg>Press <bpt i="1">&lt;b&gt;</bpt>Save<ept i="1">&lt;/b&gt;</ept></seg></tuv>
          <tuv xml:lang="fr-FR"><seg>Cliquez <bpt i="1">&lt;b&gt;</bpt>Sauver<ept i="1">&lt;/b&gt;</ept></seg></tuv>
        </tu>
      </body>
    </tmx>

Reading (:func:`read_tmx`)
    The file is parsed by expat (the standard library's parser) in 64 KiB pieces, and each
    translation unit (``<tu>``) is handed on as soon as it ends, so a file of any size is read in
    little memory. Each ``<tuv>``'s language is its ``xml:lang`` (TMX 1.4) or ``lang`` (TMX 1.1)
    attribute; its text is the ``<seg>``'s text with the inline markup reduced to text: ``<hi>``
    keeps its text, while ``<bpt>``, ``<ept>``, ``<it>``, ``<ph>`` and ``<ut>`` hold the original
    format's codes (``<b>``, ``{1}``), which are left out, with any ``<sub>`` inside them.
    ``<prop>``, ``<note>`` and the header's contents are not read.

    Nothing outside the file is read and nothing expands: a document type declaration is allowed
    (CAT tools write ``<!DOCTYPE tmx SYSTEM "tmx14.dtd">``) but its DTD is not fetched, and a
    declared entity (the "billion laughs" and external-entity attacks start with one) refuses the
    file at once, as does a reference to an entity that is not XML's own. A segment longer than
    ``max_chars`` characters is refused while it is read. Every refusal is a
    :class:`~transformer.memory.errors.TMFormatError` naming the file and the line.

Writing (:func:`write_tmx`)
    UTF-8, a TMX 1.4b header (``creationtool="transformer"`` and the package's version, the
    source language or ``*all*``), one ``<tu>`` per unit with its id, dates and properties;
    text escaped (a carriage return as ``&#13;``, which XML would otherwise turn into a line feed).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO
from xml.parsers import expat

from transformer import __version__
from transformer.memory.errors import TMFormatError
from transformer.memory.text import MAX_CHARS

CHUNK_BYTES = 1 << 16
# Inline elements whose content is the original format's code, not text (TMX 1.4b, section 3.7).
CODE_ELEMENTS = frozenset({"bpt", "ept", "it", "ph", "ut"})


@dataclass
class TMXUnit:
    """One translation unit (``<tu>``): its text in each language.

    Attributes:
        segments: language (as the file writes it, ``en-US``) -> the segment's text, in the
            order of the file; of two variants in one language the first.
        line: the line of the ``<tu>`` in the file it was read from (0 when not read).
        tuid: the unit's ``tuid`` attribute, if any.
        created: its creation time, ISO 8601 UTC (``2026-11-29T04:07:00Z``), if known.
        changed: its last change, likewise.
        props: ``<prop type="...">`` values written with it (reading leaves them out).
    """

    segments: dict[str, str]
    line: int = 0
    tuid: str | None = None
    created: str | None = None
    changed: str | None = None
    props: dict[str, str] = field(default_factory=dict)


def pick(segments: dict[str, str], language: str) -> str | None:
    """The segment of ``segments`` in ``language``: the variant whose code equals it (case and
    ``_``/``-`` aside), else, for a code without a region (``en``), the first regional variant
    (``en-US``, ``en-GB``); ``None`` where there is none."""
    wanted = language.lower().replace("_", "-")
    fallback = None
    for code, text in segments.items():
        code = code.lower().replace("_", "-")
        if code == wanted:
            return text
        if fallback is None and "-" not in wanted and code.split("-", 1)[0] == wanted:
            fallback = text
    return fallback


def open_regular(path: str | os.PathLike[str], what: str) -> BinaryIO:
    """``path`` opened for reading in binary, refused with a :class:`TMFormatError` unless it is a
    regular file (a FIFO would block, a device never end)."""
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise TMFormatError(f"{path}: no such {what} file") from None
    except OSError as err:
        raise TMFormatError(f"{path}: cannot read it ({err.strerror or err})") from None
    if stat.S_ISDIR(mode):
        raise TMFormatError(f"{path} is a folder, not a {what} file")
    if not stat.S_ISREG(mode):
        raise TMFormatError(f"{path} is not a regular file")
    try:
        return open(path, "rb")
    except OSError as err:
        raise TMFormatError(f"{path}: cannot read it ({err.strerror or err})") from None


class _Reader:
    """expat's handlers for one TMX file; completed units collect in ``ready``."""

    def __init__(self, where: str, max_chars: int) -> None:
        self.where, self.max_chars = where, max_chars
        self.parser = expat.ParserCreate()
        self.parser.buffer_text = True
        # Parameter entities and the external DTD subset are never read (expat's default, said here).
        self.parser.SetParamEntityParsing(expat.XML_PARAM_ENTITY_PARSING_NEVER)
        self.parser.StartElementHandler = self.start
        self.parser.EndElementHandler = self.end
        self.parser.CharacterDataHandler = self.characters
        self.parser.EntityDeclHandler = self.refuse_entity
        self.parser.SkippedEntityHandler = self.refuse_skipped
        self.parser.ExternalEntityRefHandler = self.refuse_external
        self.ready: list[TMXUnit] = []
        self.depth = 0
        self.root_seen = False
        self.unit: TMXUnit | None = None
        self.language: str | None = None
        self.text: list[str] | None = None  # the open <seg>'s text, None outside a <seg>
        self.length = 0
        self.inside_seg = 0  # depth of elements open inside the <seg>
        self.code_depth = 0  # how many code elements (<bpt>, <ph>...) are open around the text

    def fail(self, message: str) -> TMFormatError:
        return TMFormatError(f"{self.where}:{self.parser.CurrentLineNumber}: {message}")

    def start(self, name: str, attributes: dict[str, str]) -> None:
        self.depth += 1
        if self.depth == 1:
            if name != "tmx":
                raise self.fail(f"not a TMX file: its root element is <{name[:40]}>, not <tmx>")
            self.root_seen = True
        elif self.text is not None:
            self.inside_seg += 1
            if name in CODE_ELEMENTS or self.code_depth:
                self.code_depth += 1
        elif name == "tu":
            self.unit = TMXUnit({}, line=self.parser.CurrentLineNumber, tuid=attributes.get("tuid"))
        elif name == "tuv" and self.unit is not None:
            self.language = attributes.get("xml:lang") or attributes.get("lang")
            if not self.language:
                raise self.fail("a <tuv> without a language (xml:lang)")
        elif name == "seg" and self.language is not None:
            self.text, self.length = [], 0

    def end(self, name: str) -> None:
        self.depth -= 1
        if self.text is not None and self.inside_seg:
            self.inside_seg -= 1
            if self.code_depth:
                self.code_depth -= 1
        elif self.text is not None:  # the </seg>
            if self.unit is not None and self.language is not None:
                self.unit.segments.setdefault(self.language, "".join(self.text))
            self.text = None
        elif name == "tuv":
            self.language = None
        elif name == "tu" and self.unit is not None:
            self.ready.append(self.unit)
            self.unit = None

    def characters(self, data: str) -> None:
        if self.text is not None and not self.code_depth:
            self.length += len(data)
            if self.length > self.max_chars:
                raise self.fail(f"a segment longer than {self.max_chars} characters")
            self.text.append(data)

    def refuse_entity(self, name: str, *_args: object) -> None:
        raise self.fail(f"the file declares an entity ({name[:40]}); entities are not read")

    def refuse_skipped(self, name: str, *_args: object) -> None:
        raise self.fail(f"the entity &{name[:40]}; is not defined in the file; entities are not read")

    def refuse_external(self, *_args: object) -> int:
        raise self.fail("the file refers to an external entity, which is not read")


def read_tmx(path: str | os.PathLike[str], *, max_chars: int = MAX_CHARS) -> Iterator[TMXUnit]:
    """The translation units of the TMX file at ``path``, one at a time as the file is read
    (reading rules in the module doc).

    Raises:
        TMFormatError: the file is missing, not a regular file, not well-formed XML, not TMX,
            declares or uses entities, or has a segment longer than ``max_chars`` characters;
            the message names the file and the line. Units before the problem have been yielded.
    """
    reader = _Reader(str(path), max_chars)
    with open_regular(path, "TMX") as file:
        try:
            while chunk := file.read(CHUNK_BYTES):
                reader.parser.Parse(chunk, False)
                yield from reader.ready
                reader.ready.clear()
            reader.parser.Parse(b"", True)
        except expat.ExpatError as err:
            raise TMFormatError(f"{path}:{err.lineno}: not well-formed XML ({expat.errors.messages[err.code]}, "
                                f"column {err.offset + 1})") from None
        except OSError as err:
            raise TMFormatError(f"{path}: cannot read it ({err.strerror or err})") from None
    yield from reader.ready


def _escape(text: str, *, attribute: bool = False) -> str:
    text = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("\r", "&#13;")
    if attribute:
        text = text.replace('"', "&quot;").replace("\n", "&#10;").replace("\t", "&#9;")
    return text


def _tmx_date(iso: str) -> str:
    """``2026-11-29T04:07:00.123Z`` -> ``20261129T040700Z`` (TMX's date format, whole seconds)."""
    return iso[:19].replace("-", "").replace(":", "") + "Z"


def write_tmx(file: BinaryIO, units: Iterable[TMXUnit], *, srclang: str) -> int:
    """Write ``units`` to ``file`` (opened for writing in binary) as a TMX 1.4b document.

    Args:
        file: where the UTF-8 bytes go.
        units: the units, each with its segments by language code.
        srclang: the header's source language: a code, or ``*all*`` where units have different ones.

    Returns:
        the number of units written.
    """
    header = (f'<?xml version="1.0" encoding="UTF-8"?>\n<tmx version="1.4">\n'
              f'  <header creationtool="transformer" creationtoolversion="{_escape(__version__, attribute=True)}" '
              f'segtype="sentence" o-tmf="transformer" adminlang="en" srclang="{_escape(srclang, attribute=True)}" '
              f'datatype="plaintext"/>\n  <body>\n')
    file.write(header.encode("utf-8"))
    count = 0
    for unit in units:
        attributes = "".join(f' {name}="{_escape(value, attribute=True)}"' for name, value in (
            ("tuid", unit.tuid), ("creationdate", unit.created and _tmx_date(unit.created)),
            ("changedate", unit.changed and _tmx_date(unit.changed))) if value)
        parts = [f"    <tu{attributes}>\n"]
        parts += [f'      <prop type="{_escape(kind, attribute=True)}">{_escape(value)}</prop>\n'
                  for kind, value in unit.props.items()]
        parts += [f'      <tuv xml:lang="{_escape(language, attribute=True)}"><seg>{_escape(text)}</seg></tuv>\n'
                  for language, text in unit.segments.items()]
        parts.append("    </tu>\n")
        file.write("".join(parts).encode("utf-8"))
        count += 1
    file.write(b"  </body>\n</tmx>\n")
    return count


def tmx_pairs(path: str | os.PathLike[str], source_lang: str, target_lang: str, *,
              max_chars: int = MAX_CHARS) -> Iterator[tuple[int, str | None, str | None]]:
    """``(line, source, target)`` for each unit of the TMX file at ``path``, its segments in the two
    languages chosen by :func:`pick` (``None`` where the unit has none in that language)."""
    for unit in read_tmx(Path(path), max_chars=max_chars):
        yield unit.line, pick(unit.segments, source_lang), pick(unit.segments, target_lang)

"""ZIP packages and their XML parts, for the office and e-book formats (docx, pptx, odt, epub).

An archive is read without trusting it: its members are counted and their declared sizes added
up before anything is decompressed (:data:`MAX_MEMBERS`, :data:`MAX_UNCOMPRESSED`: a zip bomb is
refused), an encrypted member is refused, and a member is never read past its declared size.
Written back, the members keep their order, names, dates, compression and attributes (an
OpenDocument's or e-book's ``mimetype`` stays first and stored), and a member not changed keeps
its content byte for byte; a package with nothing changed is given back as it was read.

An XML part is parsed by expat (the standard library's parser) into a tree of :class:`Element`
where every element knows its byte extent in the part, so that a change is a splice: the bytes of
one paragraph replaced, every other byte of the part kept as written (no re-serialisation: the
namespace prefixes, quotes and attribute order of the original stay). A document type declaration
is allowed (an EPUB 2 table of contents has one), an entity declaration is refused (nothing is
expanded, nothing fetched), and so is a reference to an entity the part does not declare.

A part is parsed as it is decompressed, and the parse counts as it goes: an archive whose parts
hold more than :data:`MAX_ELEMENTS` elements together, or a part that nests them more than
:data:`MAX_XML_DEPTH` deep, is refused there, before the tree (about 250 bytes an element) grows
past it. The declared encoding must be a text encoding that writes ASCII as ASCII.
"""

from __future__ import annotations

import bisect
import io
import itertools
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from types import MappingProxyType
from xml.parsers import expat

from transformer.errors import UserError
from transformer.translate.files.base import MAX_FILE_CHARS, FileFormatError, TranslatableFile, Unit, too_many_chars
from transformer.translate.files.text import text_encoding

MAX_MEMBERS = 10_000
"""The most members an archive may have."""
MAX_UNCOMPRESSED = 200 * 1024 * 1024
"""The most bytes an archive's members may hold uncompressed, all together (200 MiB)."""
MAX_ELEMENTS = 1_000_000
"""The most XML elements the parts of an archive that are read may hold, all together: a Word
document has about 25 a paragraph, so this is some 2,500 pages; a million take about 250 MB as
a tree."""
MAX_XML_DEPTH = 200
"""The most elements an XML part may nest in one another (a table in a text box in a table cell
is about 20 deep)."""
_CHUNK = 1 << 20  # a member is decompressed and parsed a MiB at a time

_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, RuntimeError, EOFError,
               zlib.error, OSError, ValueError, struct.error)


class Package:
    """A ZIP archive read for translation (see the module doc).

    Args:
        data: the archive's bytes.
        name: the file's name, for messages.
        kind: what it should be (``"Word document"``), for messages.
    """

    def __init__(self, data: bytes, name: str, kind: str):
        self.data, self.name, self.kind = data, name, kind
        a_kind = f"{'an' if kind[:1] in 'AEIOU' else 'a'} {kind}"
        if data.startswith(b"\xd0\xcf\x11\xe0"):  # an OLE compound file: what Office encrypts into
            raise FileFormatError(f"{name} is encrypted (password-protected) or in an old binary format, "
                                  f"not {a_kind} in a zip archive")
        try:
            self._zip = zipfile.ZipFile(io.BytesIO(data))
            infos = self._zip.infolist()
        except _ZIP_ERRORS as error:
            raise FileFormatError(f"{name} is not {a_kind}: a corrupt zip archive ({error})") from None
        if len(infos) > MAX_MEMBERS:
            raise FileFormatError(f"{name}: {len(infos):,} members in its archive, over the limit of {MAX_MEMBERS:,}")
        total = sum(info.file_size for info in infos)
        if total > MAX_UNCOMPRESSED:
            raise FileFormatError(f"{name}: its archive holds {total:,} bytes uncompressed, over the limit of "
                                  f"{MAX_UNCOMPRESSED:,} bytes")
        self.infos, self.a_kind = infos, a_kind
        self.elements_left = MAX_ELEMENTS  # what the parts still to be parsed may hold
        self.members: dict[str, zipfile.ZipInfo] = {}
        for info in infos:
            if info.flag_bits & 0x1:
                raise FileFormatError(f"{name} is encrypted (password-protected): {info.filename}")
            if info.filename in self.members:
                raise FileFormatError(f"{name}: its archive has two members named {info.filename}")
            self.members[info.filename] = info

    def __contains__(self, member: str) -> bool:
        return member in self.members

    def read(self, member: str) -> bytes:
        """The content of ``member`` (:class:`FileFormatError` when missing or unreadable)."""
        info = self.members.get(member)
        if info is None:
            raise FileFormatError(f"{self.name} is not {self.a_kind}: it has no {member}")
        try:
            with self._zip.open(info) as stream:
                return stream.read(info.file_size + 1)[: info.file_size]
        except _ZIP_ERRORS as error:
            raise FileFormatError(f"{self.name}: {member} cannot be read from the archive ({error})") from None

    def chunks(self, member: str) -> Iterator[bytes]:
        """The content of ``member`` a MiB at a time (:class:`FileFormatError` when missing or
        unreadable), never past its declared size."""
        info = self.members.get(member)
        if info is None:
            raise FileFormatError(f"{self.name} is not {self.a_kind}: it has no {member}")
        left = info.file_size
        try:
            with self._zip.open(info) as stream:
                while left > 0:
                    chunk = stream.read(min(_CHUNK, left))
                    if not chunk:
                        break
                    left -= len(chunk)
                    yield chunk
        except _ZIP_ERRORS as error:
            raise FileFormatError(f"{self.name}: {member} cannot be read from the archive ({error})") from None

    def xml(self, member: str) -> XmlPart:
        """``member`` parsed as it is decompressed (see :class:`XmlPart`), its elements counted
        against the archive's :data:`MAX_ELEMENTS`."""
        where = f"{self.name}: {member}"
        part = XmlPart(self.chunks(member), where, max_elements=self.elements_left,
                       too_many=f"{self.name}: more than {MAX_ELEMENTS:,} XML elements (counted up to {member}), "
                                "more than a file to translate may hold")
        self.elements_left -= part.elements
        return part

    def write(self, changed: dict[str, bytes]) -> bytes:
        """The archive with the members in ``changed`` given their new content, every other
        member as it was; the bytes read when ``changed`` is empty."""
        if not changed:
            return self.data
        out = io.BytesIO()
        with zipfile.ZipFile(out, "w") as archive:
            for info in self.infos:
                content = changed.get(info.filename)
                if content is None:
                    content = self.read(info.filename)
                copy = zipfile.ZipInfo(info.filename, info.date_time)
                copy.compress_type = info.compress_type
                copy.comment = info.comment
                copy.extra = _without_zip64(info.extra)
                copy.create_system = info.create_system
                copy.create_version = info.create_version
                copy.external_attr = info.external_attr
                copy.internal_attr = info.internal_attr
                archive.writestr(copy, content)
            archive.comment = self._zip.comment
        return out.getvalue()


def _without_zip64(extra: bytes) -> bytes:
    """An extra field without its ZIP64 record (zipfile writes its own where it needs one)."""
    kept, i = [], 0
    while i + 4 <= len(extra):
        kind, size = struct.unpack("<HH", extra[i : i + 4])
        if kind != 0x0001:
            kept.append(extra[i : i + 4 + size])
        i += 4 + size
    return b"".join(kept)


# --- XML parts -------------------------------------------------------------------------

# A start tag (well-formed: attribute values quoted) and whether it closes itself.
_START_TAG = re.compile(rb"""<[^\s/>]+(?:\s+[^\s=/>]+\s*=\s*(?:"[^"]*"|'[^']*'))*\s*(/?)>""")
# Characters XML 1.0 does not allow in a document, even as references (a translation may hold one).
NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")
_ENCODING = re.compile(rb"""^(?:\xef\xbb\xbf)?<\?xml[^>]*?encoding\s*=\s*["']([A-Za-z0-9._-]+)["']""")


def declared_encoding(data: bytes, where: str) -> str:
    """The codec of the encoding the XML declaration at the start of ``data`` names, UTF-8 without one."""
    declared = _ENCODING.match(data)
    if declared is None:
        return "utf-8"
    label = declared.group(1).decode("ascii")
    codec = text_encoding(label, where)
    if codec is None:
        raise FileFormatError(f"{where}: unknown XML encoding {label!r}")
    return codec


class Element:
    """An element of an XML part, with its byte extent.

    ``name`` is ``{namespace}local`` (or ``local`` outside any namespace) and ``qname`` the name
    as written (``w:p``); ``attrs`` holds the attribute values by ``{namespace}local`` name and
    ``qnames`` their names as written. ``start`` and ``open_end`` are where the start tag begins
    and ends (after its ``>``), ``close_start`` and ``end`` where the end tag begins and ends
    (both ``open_end`` for ``<x/>``). ``content`` holds the children and the text between them
    (text merged, entities decoded). Elements without attributes share one empty mapping, those
    without content one empty tuple, and equal names one string: a tree of many small elements
    stays small.
    """

    __slots__ = ("name", "qname", "attrs", "qnames", "start", "open_end", "close_start", "end", "content", "parent")

    def __init__(self, name: str, qname: str, attrs: Mapping[str, str], qnames: Mapping[str, str], start: int,
                 open_end: int, parent: Element | None):
        self.name, self.qname, self.attrs, self.qnames = name, qname, attrs, qnames
        self.start, self.open_end = start, open_end
        self.close_start = self.end = open_end
        self.content: Sequence[Element | str] = ()
        self.parent = parent

    @property
    def local(self) -> str:
        return self.name.rpartition("}")[2]

    @property
    def prefix(self) -> str:
        """The namespace prefix as written, with its colon (``"w:"``), or ``""``."""
        return self.qname[: self.qname.index(":") + 1] if ":" in self.qname else ""

    def children(self) -> list[Element]:
        return [child for child in self.content if isinstance(child, Element)]

    def iter(self, name: str | None = None) -> Iterator[Element]:
        """This element and its descendants in document order (those called ``name``)."""
        stack = [self]
        while stack:
            element = stack.pop()
            if name is None or element.name == name:
                yield element
            stack.extend(reversed(element.children()))

    def find(self, name: str) -> Element | None:
        return next((child for child in self.children() if child.name == name), None)

    def text(self) -> str:
        return "".join(part if isinstance(part, str) else part.text() for part in self.content)

    def within(self, name: str) -> bool:
        """Whether an ancestor is called ``name``."""
        parent = self.parent
        while parent is not None:
            if parent.name == name:
                return True
            parent = parent.parent
        return False


_NO_ATTRIBUTES: Mapping[str, str] = MappingProxyType({})


class XmlPart:
    """An XML document's bytes and its tree (:class:`Element`, the root as ``root``).

    Args:
        data: the bytes (UTF-8, or another encoding that writes ASCII as ASCII, as declared), or
            its pieces in order (a member as it is decompressed): the parse stops at the first
            piece that breaks a limit, before the rest is read.
        where: names it in messages (``"report.docx: word/document.xml"``).
        max_elements: the most elements it may hold; ``too_many``: the message beyond that.

    Attributes:
        elements: how many elements it holds.

    Raises:
        FileFormatError: not well-formed XML, UTF-16, an encoding that is not a text encoding,
            an entity declared or not declared, more than ``max_elements`` elements, or elements
            nested more than :data:`MAX_XML_DEPTH` deep.
    """

    def __init__(self, data: bytes | Iterable[bytes], where: str, *, max_elements: int = MAX_ELEMENTS,
                 too_many: str | None = None):
        self.where = where
        chunks = iter([data] if isinstance(data, (bytes, bytearray)) else data)
        first = bytes(next(chunks, b""))
        if first.startswith((b"\xff\xfe", b"\xfe\xff")) or first[:4] in (b"<\x00?\x00", b"\x00<\x00?"):
            raise FileFormatError(f"{where} is UTF-16 XML; only UTF-8 XML parts are read")
        self.encoding = declared_encoding(first, where)
        self.elements = 0
        self.root = self._parse(first, chunks, max_elements,
                                too_many or f"{where}: more than {max_elements:,} XML elements")

    def _parse(self, first: bytes, chunks: Iterator[bytes], max_elements: int, too_many: str) -> Element:
        where = self.where
        parser = expat.ParserCreate(namespace_separator=" ")
        parser.namespace_prefixes = True
        parser.buffer_text = True
        data = bytearray()  # what was read so far: the tags' extents are found in it
        stack: list[Element] = []
        roots: list[Element] = []
        texts: list[str] = []  # the text since the last tag, joined at the next one
        names: dict[str, tuple[str, str]] = {}  # expat's name -> (``{ns}local``, as written), one string each

        def clark(name: str) -> tuple[str, str]:
            found = names.get(name)
            if found is None:
                parts = name.split(" ")
                if len(parts) == 1:
                    found = name, name
                else:
                    found = f"{{{parts[0]}}}{parts[1]}", f"{parts[2]}:{parts[1]}" if len(parts) == 3 else parts[1]
                found = names[name] = found
            return found

        def flush_text() -> None:
            if texts and stack:
                element, text = stack[-1], "".join(texts)
                if not element.content:
                    element.content = [text]
                elif isinstance(element.content[-1], str):
                    element.content[-1] += text
                else:
                    element.content.append(text)
            texts.clear()

        def start(name: str, attributes: dict[str, str]) -> None:
            self.elements += 1
            if self.elements > max_elements:
                raise FileFormatError(too_many)
            if len(stack) >= MAX_XML_DEPTH:
                raise FileFormatError(f"{where}: elements nested more than {MAX_XML_DEPTH} deep, deeper than a "
                                      "file to translate may nest them")
            flush_text()
            index = parser.CurrentByteIndex
            tag = _START_TAG.match(data, index)
            if tag is None:  # expat accepted it, so this is an encoding the pattern does not read
                raise FileFormatError(f"{where}: a start tag at byte {index} could not be read")
            full, qname = clark(name)
            attrs, qnames = _NO_ATTRIBUTES, _NO_ATTRIBUTES
            if attributes:
                attrs, qnames = {}, {}
                for key, value in attributes.items():
                    attr, attr_qname = clark(key)
                    attrs[attr], qnames[attr] = value, attr_qname
            parent = stack[-1] if stack else None
            element = Element(full, qname, attrs, qnames, index, tag.end(), parent)
            element.close_start = -1 if not tag.group(1) else tag.end()  # -1: closed by an end tag
            if parent is None:
                roots.append(element)
            elif parent.content:
                parent.content.append(element)
            else:
                parent.content = [element]
            stack.append(element)

        def end(name: str) -> None:
            flush_text()
            element = stack.pop()
            if element.close_start == -1:
                index = parser.CurrentByteIndex
                element.close_start, element.end = index, data.index(b">", index) + 1

        def refuse_entity(*_args) -> None:
            raise FileFormatError(f"{where} declares entities, which are not read")

        def refuse_undeclared(name: str, *_args) -> None:
            raise FileFormatError(f"{where} refers to the entity &{name}; which it does not declare")

        parser.StartElementHandler = start
        parser.EndElementHandler = end
        parser.CharacterDataHandler = texts.append
        parser.EntityDeclHandler = refuse_entity
        parser.SkippedEntityHandler = refuse_undeclared
        try:
            for chunk in itertools.chain([first], chunks):
                data += chunk
                parser.Parse(chunk, False)
            parser.Parse(b"", True)
        except expat.ExpatError as error:
            raise FileFormatError(f"{where} is not well-formed XML: {error}") from None
        except FileFormatError:  # a handler's refusal
            raise
        except ValueError as error:  # expat reads UTF-8 and one-byte encodings only
            raise FileFormatError(f"{where}: its encoding {self.encoding!r} cannot be read in XML ({error})") from None
        self.data = bytes(data)
        return roots[0]

    def escape(self, text: str, *, quote: bool = False) -> bytes:
        """``text`` as character data (or an attribute value) of this part, in its encoding
        (characters XML does not allow left out)."""
        text = NOT_XML.sub("", text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
        if quote:
            text = text.replace('"', "&quot;")
        return text.encode(self.encoding, "xmlcharrefreplace")

    def set_attribute(self, element: Element, name: str, value: str, qname: str | None = None) -> Edit:
        """The edit that gives ``element`` the attribute ``name`` (``{namespace}local``) with
        ``value``: its value replaced where it has it, else added as ``qname``."""
        tag = self.data[element.start : element.open_end]
        escaped = self.escape(value, quote=True)
        written = element.qnames.get(name)
        if written is not None:
            pattern = re.compile(rb"(\s" + re.escape(written.encode()) + rb"""\s*=\s*)("[^"]*"|'[^']*')""")
            tag = pattern.sub(lambda m: m.group(1) + b'"' + escaped + b'"', tag, count=1)
        elif qname is not None:
            cut = len(tag) - (2 if tag.endswith(b"/>") else 1)
            tag = tag[:cut].rstrip() + b" " + qname.encode() + b'="' + escaped + b'"' + tag[cut:]
        return Edit(element.start, element.open_end, lambda: tag)

    def set_text(self, element: Element, text: str) -> Edit | None:
        """The edit that makes ``text`` the content of ``element`` (None for ``<x/>``)."""
        if element.close_start == element.open_end and element.end == element.open_end:
            return None
        escaped = self.escape(text)
        return Edit(element.open_end, element.close_start, lambda: escaped)


class Edit:
    """The bytes ``[start, end)`` of a part replaced by what ``render()`` gives (called when the
    part is written, so that it may splice in the edits nested in its extent)."""

    __slots__ = ("start", "end", "render")

    def __init__(self, start: int, end: int, render: Callable[[], bytes]):
        self.start, self.end, self.render = start, end, render


_LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,8}(?:-[A-Za-z0-9]{1,8})*")


class ArchiveFile(TranslatableFile):
    """A translatable file that is a ZIP package of XML parts: each unit is written back as an
    :class:`Edit` of one member (see :meth:`write`). Subclasses fill ``_units``, ``_members``
    (the member each unit is in) and ``_editors`` (each unit's edit, given its translation, the
    splicers of all changed members, for nested edits, and the target language), and may add
    the edits that record the target language (:meth:`_language_edits`)."""

    def __init__(self, package: Package):
        self.package = package
        self._units: list[Unit] = []
        self._members: list[str] = []
        self._editors: list[Callable[[str, dict[str, Splicer], str | None], Edit]] = []
        self._data: dict[str, bytes] = {}  # the content of every member a unit or an edit is in
        self._parts: dict[str, XmlPart] = {}
        self._chars = 0  # the units' characters so far, against MAX_FILE_CHARS

    def _part(self, member: str) -> XmlPart:
        """``member`` parsed, once (its bytes kept for writing)."""
        part = self._parts.get(member)
        if part is None:
            part = self._parts[member] = self.package.xml(member)
            self._data[member] = part.data
        return part

    def _add(self, unit: Unit, member: str, editor: Callable[[str, dict[str, Splicer], str | None], Edit]) -> None:
        self._chars += len(unit.text)
        if self._chars > MAX_FILE_CHARS:
            raise too_many_chars(self.package.name, self._chars, MAX_FILE_CHARS)
        self._units.append(unit)
        self._members.append(member)
        self._editors.append(editor)

    def units(self) -> list[Unit]:
        return list(self._units)

    def _language_edits(self, lang: str) -> dict[str, list[Edit]]:
        """The edits that record ``lang`` as the document's language, by member."""
        return {}

    def write(self, translations: Sequence[str], *, target_lang: str | None = None) -> bytes:
        translations = list(translations)
        if len(translations) != len(self._units):
            raise ValueError(f"{len(translations)} translations for {len(self._units)} units")
        if target_lang is not None and not _LANGUAGE_CODE.fullmatch(target_lang):
            raise UserError(f"target_lang {target_lang!r} is not a language code")
        edits: dict[str, list[Edit]] = {}
        splicers: dict[str, Splicer] = {}  # filled before any edit is rendered
        for unit, member, editor, translation in zip(self._units, self._members, self._editors, translations):
            if not isinstance(translation, str):
                raise TypeError(f"translations must be str, got {type(translation).__name__}")
            if translation != unit.text:
                edits.setdefault(member, []).append(editor(translation, splicers, target_lang))
        if target_lang is not None:
            for member, more in self._language_edits(target_lang).items():
                edits.setdefault(member, []).extend(more)
        for member, member_edits in edits.items():
            splicers[member] = Splicer(self._data[member], member_edits)
        changed = {}
        for member, splicer in splicers.items():
            content = splicer.bytes()
            if content != self._data[member]:
                changed[member] = content
        return self.package.write(changed)


class Splicer:
    """A part's bytes with edits applied. Edits may nest (a paragraph in a text box inside a
    changed paragraph): an edit inside another one is applied when the outer one's ``render``
    asks for its bytes with :meth:`bytes`. Of two edits with the same extent, the first given is
    applied."""

    def __init__(self, data: bytes, edits: list[Edit]):
        self.data = data
        self.edits = sorted(edits, key=lambda edit: (edit.start, -edit.end))
        self._starts = [edit.start for edit in self.edits]

    def bytes(self, start: int = 0, end: int | None = None) -> bytes:
        """The bytes ``[start, end)`` with the outermost edits inside them applied."""
        end = len(self.data) if end is None else end
        out, position = [], start
        i = bisect.bisect_left(self._starts, start)
        while i < len(self.edits) and self.edits[i].start < end:
            edit = self.edits[i]
            i += 1
            if edit.start < position or edit.end > end:  # nested in one applied already
                continue
            out.append(self.data[position : edit.start])
            out.append(edit.render())
            position = edit.end
        out.append(self.data[position:end])
        return b"".join(out)

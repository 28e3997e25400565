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
is refused (office parts never have one: entity expansion is refused with it), or allowed without
entity declarations where the format may have one (XHTML).
"""

from __future__ import annotations

import bisect
import io
import re
import struct
import zipfile
import zlib
from collections.abc import Callable, Iterator, Sequence
from xml.parsers import expat

from transformer.translate.files.base import FileFormatError, TranslatableFile, Unit

MAX_MEMBERS = 10_000
"""The most members an archive may have."""
MAX_UNCOMPRESSED = 200 * 1024 * 1024
"""The most bytes an archive's members may hold uncompressed, all together (200 MiB)."""

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

    def xml(self, member: str, *, doctype: bool = False) -> XmlPart:
        """``member`` parsed (see :func:`parse_xml`)."""
        return XmlPart(self.read(member), f"{self.name}: {member}", doctype=doctype)

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


class Element:
    """An element of an XML part, with its byte extent.

    ``name`` is ``{namespace}local`` (or ``local`` outside any namespace) and ``qname`` the name
    as written (``w:p``); ``attrs`` holds the attribute values by ``{namespace}local`` name and
    ``qnames`` their names as written. ``start`` and ``open_end`` are where the start tag begins
    and ends (after its ``>``), ``close_start`` and ``end`` where the end tag begins and ends
    (both ``open_end`` for ``<x/>``). ``content`` holds the children and the text between them
    (text merged, entities decoded).
    """

    __slots__ = ("name", "qname", "attrs", "qnames", "start", "open_end", "close_start", "end", "content", "parent")

    def __init__(self, name: str, qname: str, attrs: dict[str, str], qnames: dict[str, str], start: int,
                 open_end: int, parent: Element | None):
        self.name, self.qname, self.attrs, self.qnames = name, qname, attrs, qnames
        self.start, self.open_end = start, open_end
        self.close_start = self.end = open_end
        self.content: list[Element | str] = []
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


class XmlPart:
    """An XML document's bytes and its tree (:class:`Element`, the root as ``root``).

    Args:
        data: the bytes (UTF-8, or another encoding that writes ASCII as ASCII, as declared).
        where: names it in messages (``"report.docx: word/document.xml"``).
        doctype: whether a document type declaration (without entity declarations) is allowed.
    """

    def __init__(self, data: bytes, where: str, *, doctype: bool = False):
        self.data, self.where = data, where
        if data.startswith((b"\xff\xfe", b"\xfe\xff")) or data[:4] in (b"<\x00?\x00", b"\x00<\x00?"):
            raise FileFormatError(f"{where} is UTF-16 XML; only UTF-8 XML parts are read")
        declared = _ENCODING.match(data)
        self.encoding = declared.group(1).decode("ascii").lower() if declared else "utf-8"
        try:
            "".encode(self.encoding)
        except LookupError:
            raise FileFormatError(f"{where}: unknown XML encoding {self.encoding!r}") from None
        self.root = self._parse(doctype)

    def _parse(self, doctype: bool) -> Element:
        data, where = self.data, self.where
        parser = expat.ParserCreate(namespace_separator=" ")
        parser.namespace_prefixes = True
        parser.buffer_text = True
        stack: list[Element] = []
        roots: list[Element] = []

        def clark(name: str) -> tuple[str, str]:
            parts = name.split(" ")
            if len(parts) == 1:
                return name, name
            qname = f"{parts[2]}:{parts[1]}" if len(parts) == 3 else parts[1]
            return f"{{{parts[0]}}}{parts[1]}", qname

        def start(name: str, attributes: dict[str, str]) -> None:
            index = parser.CurrentByteIndex
            tag = _START_TAG.match(data, index)
            if tag is None:  # expat accepted it, so this is an encoding the pattern does not read
                raise FileFormatError(f"{where}: a start tag at byte {index} could not be read")
            full, qname = clark(name)
            attrs, qnames = {}, {}
            for key, value in attributes.items():
                attr, attr_qname = clark(key)
                attrs[attr], qnames[attr] = value, attr_qname
            element = Element(full, qname, attrs, qnames, index, tag.end(), stack[-1] if stack else None)
            element.close_start = -1 if not tag.group(1) else tag.end()  # -1: closed by an end tag
            if stack:
                stack[-1].content.append(element)
            else:
                roots.append(element)
            stack.append(element)

        def end(name: str) -> None:
            element = stack.pop()
            if element.close_start == -1:
                index = parser.CurrentByteIndex
                element.close_start, element.end = index, data.index(b">", index) + 1

        def characters(text: str) -> None:
            content = stack[-1].content
            if content and isinstance(content[-1], str):
                content[-1] += text
            else:
                content.append(text)

        def refuse_doctype(*_args) -> None:
            raise FileFormatError(f"{where} has a document type declaration, which this format never has")

        def refuse_entity(*_args) -> None:
            raise FileFormatError(f"{where} declares entities, which are not read")

        parser.StartElementHandler = start
        parser.EndElementHandler = end
        parser.CharacterDataHandler = characters
        if doctype:
            parser.EntityDeclHandler = refuse_entity
        else:
            parser.StartDoctypeDeclHandler = refuse_doctype
        try:
            parser.Parse(data, True)
        except expat.ExpatError as error:
            raise FileFormatError(f"{where} is not well-formed XML: {error}") from None
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

    def _part(self, member: str, *, doctype: bool = False) -> XmlPart:
        """``member`` parsed, once (its bytes kept for writing)."""
        part = self._parts.get(member)
        if part is None:
            part = self._parts[member] = self.package.xml(member, doctype=doctype)
            self._data[member] = part.data
        return part

    def _add(self, unit: Unit, member: str, editor: Callable[[str, dict[str, Splicer], str | None], Edit]) -> None:
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
            raise ValueError(f"target_lang {target_lang!r} is not a language code")
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

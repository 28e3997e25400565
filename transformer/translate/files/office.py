"""What the office formats share (Word's ``.docx``, PowerPoint's ``.pptx``, OpenDocument text's
``.odt``: :mod:`~transformer.translate.files.docx`, :mod:`~transformer.translate.files.pptx`,
:mod:`~transformer.translate.files.odt`): a paragraph read as an HTML fragment and written back
with its translation, its formatting kept.

Each paragraph with text is one HTML unit (``Unit.html``): its text, and its formatting as inline
tags that ``translate_html`` keeps around the words they marked.

- Text in runs of one formatting (Word's ``w:r``, PowerPoint's ``a:r``: the same run
  properties, byte for byte) is one style: the style with the most text in the paragraph is bare
  text, every other one is ``<span data-r="k">``. Written back, each piece of translated text
  becomes a run with its style's start tag and properties as they were read (with a target
  language, a language in them is set to it).
- Elements that hold runs (a hyperlink, which keeps its relationship id, a content control, a
  field, a tracked insertion; OpenDocument's ``text:span`` and ``text:a``) are
  ``<a data-g="k">``/``<span data-g="k">``: their start (with their properties) and end are
  written where the translation puts the tags.
- Everything else is a point between words, written back whole: a tab or line break
  (``<br data-p="k">``: a sentence boundary), a picture, a footnote reference, a bookmark, a
  field's code, a comment mark (``<img data-p="k">``). Points keep their order (a field's parts
  stay in sequence); one the translation lost is written at the paragraph's end. Spell-check
  marks and last-rendered page breaks are left out of a translated paragraph (the word processor
  makes them again).

A paragraph whose translation equals its unit is not touched: its bytes stay as they were, so a
translator that returns its input gives back the file byte for byte. Paragraphs inside another
one (a text box, a footnote or comment in OpenDocument) are units of their own, spliced into the
outer paragraph whether it changed or not. Each format's module says where its text is.
"""

from __future__ import annotations

import html
import posixpath
import re
from urllib.parse import unquote

from transformer.translate.files.base import FileFormatError, Unit
from transformer.translate.files.package import NOT_XML, ArchiveFile, Edit, Element, Package, Splicer, XmlPart

__all__ = ["Text", "Paragraph", "ParagraphFile", "OoxmlFile", "set_xml_attribute", "natural_key", "DC"]

_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
DC = "http://purl.org/dc/elements/1.1/"


# --- A paragraph as an HTML fragment, and back ------------------------------------------


class Text:
    __slots__ = ("style", "text")

    def __init__(self, style: int, text: str):
        self.style, self.text = style, text


class _Point:
    __slots__ = ("index",)

    def __init__(self, index: int):
        self.index = index


class _Group:
    __slots__ = ("index", "content")

    def __init__(self, index: int, content: list):
        self.index, self.content = index, content


# A tag of a translated fragment, and the index it carries.
_FRAGMENT_TAG = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9-]*)([^<>]*)>")
_DATA_INDEX = re.compile(r"""\sdata-([rpg])\s*=\s*["']?(\d+)""")
_VOID = frozenset("area base br col embed hr img input link meta param source track wbr".split())


class Paragraph:
    """One paragraph of a part: what it reads as (:meth:`html`) and how a translation of that is
    written back (:meth:`rebuild`). Subclasses read their format's paragraph (``_read``) and
    write its text (``_text``)."""

    def __init__(self, part: XmlPart, element: Element):
        self.part, self.element = part, element
        self.head_end, self.tail_start = element.open_end, element.close_start
        self.styles: list[bytes] = []  # what opens a run of each style (closing it: ``_style_ends``)
        self._style_ends: list[bytes] = []
        self._style_index: dict[bytes, int] = {}
        self.points: list[tuple[bytes, int, int, bytes]] = []  # before, extent in the part, after
        self._breaks: set[int] = set()  # the points that are line breaks or tabs
        self.groups: list[tuple[bytes, bytes, str]] = []  # start, end, the fragment's tag
        self.content: list = []
        self._read()
        lengths = [0] * len(self.styles)
        for node in self._texts(self.content):
            lengths[node.style] += len(node.text)
        self.base = max(range(len(lengths)), key=lengths.__getitem__) if lengths else 0
        self.has_text = any(node.text.strip() for node in self._texts(self.content))

    def _read(self) -> None:
        raise NotImplementedError

    def _texts(self, content: list):
        for node in content:
            if isinstance(node, Text):
                yield node
            elif isinstance(node, _Group):
                yield from self._texts(node.content)

    def style(self, properties: bytes, opening: bytes, closing: bytes) -> int:
        """The style of a run with these ``properties`` (runs that differ in their start tag only,
        by revision ids, are one style: the first one's start tag is written)."""
        index = self._style_index.get(properties)
        if index is None:
            index = self._style_index[properties] = len(self.styles)
            self.styles.append(opening)
            self._style_ends.append(closing)
        return index

    def point(self, element: Element, before: bytes = b"", after: bytes = b"", *, line_break: bool = False) -> _Point:
        if line_break:
            self._breaks.add(len(self.points))
        self.points.append((before, element.start, element.end, after))
        return _Point(len(self.points) - 1)

    def group(self, start: bytes, end: bytes, tag: str, content: list) -> _Group:
        self.groups.append((start, end, tag))
        return _Group(len(self.groups) - 1, content)

    def raw(self, start: int, end: int) -> bytes:
        return self.part.data[start:end]

    def html(self) -> str:
        """The paragraph as an HTML fragment (see the module doc)."""
        return "".join(self._html(self.content))

    def _html(self, content: list) -> list[str]:
        out: list[str] = []
        i = 0
        while i < len(content):
            node = content[i]
            if isinstance(node, Text):
                text = [node.text]
                while i + 1 < len(content) and isinstance(content[i + 1], Text) and content[i + 1].style == node.style:
                    i += 1
                    text.append(content[i].text)
                escaped = html.escape("".join(text), quote=False)
                out.append(escaped if node.style == self.base else f'<span data-r="{node.style}">{escaped}</span>')
            elif isinstance(node, _Point):
                out.append(f'<{"br" if node.index in self._breaks else "img"} data-p="{node.index}">')
            else:
                tag = self.groups[node.index][2]
                out.append(f'<{tag} data-g="{node.index}">')
                out.extend(self._html(node.content))
                out.append(f"</{tag}>")
            i += 1
        return out

    def rebuild(self, translation: str, splicer: Splicer, lang: str | None) -> bytes:
        """The paragraph's bytes with ``translation`` (a translation of :meth:`html`) in it."""
        events = self._events(translation)
        out = [self.raw(self.element.start, self.head_end)]
        state = self._start_text()
        for i, (kind, value, text) in enumerate(events):
            if kind == "text":
                # Pieces of one style in a row are one run.
                while i + 1 < len(events) and events[i + 1][0] == "text" and events[i + 1][1] == value:
                    text += events[i + 1][2]
                    events[i + 1] = ("skip", None, "")
                    i += 1
                if text:
                    out.append(self._text(value, text, state, lang))
            elif kind == "point":
                before, start, end, after = self.points[value]
                out += [before, splicer.bytes(start, end), after]
                self._after_point(state, value)
            elif kind == "raw":
                out.append(value)
        out.append(self._tail(lang))
        return b"".join(out)

    def _events(self, translation: str) -> list[tuple[str, object, str]]:
        """The translated fragment read back: ``("text", style, text)``, ``("point", index, "")``
        and ``("raw", bytes, "")`` (a group's start or end), every group once and well nested,
        every point once and in its original order."""
        events: list[tuple[str, object, str]] = []
        stack: list[tuple[str, str, int]] = []  # (tag, "r" / "g" / "", index)
        opened: set[int] = set()
        position = 0

        def style() -> int:
            return next((index for _tag, kind, index in reversed(stack) if kind == "r"), self.base)

        def close_to(depth: int) -> None:
            for _tag, kind, index in reversed(stack[depth:]):
                if kind == "g":
                    events.append(("raw", self.groups[index][1], ""))
            del stack[depth:]

        for match in _FRAGMENT_TAG.finditer(translation):
            text = translation[position : match.start()]
            position = match.end()
            if text:
                events.append(("text", style(), NOT_XML.sub("", html.unescape(text))))
            closing, tag = match.group(1), match.group(2).lower()
            found = _DATA_INDEX.search(match.group(3))
            if closing:
                depth = next((d for d in range(len(stack) - 1, -1, -1) if stack[d][0] == tag), None)
                if depth is not None:
                    close_to(depth)
                continue
            kind, index = (found.group(1), int(found.group(2))) if found else ("", -1)
            if kind == "p" and index < len(self.points):
                events.append(("point", index, ""))
            elif kind == "r" and index < len(self.styles):
                stack.append((tag, "r", index))
            elif kind == "g" and index < len(self.groups) and index not in opened:
                opened.add(index)
                events.append(("raw", self.groups[index][0], ""))
                stack.append((tag, "g", index))
            elif tag not in _VOID and not match.group(3).rstrip().endswith("/"):
                stack.append((tag, "", -1))
        text = translation[position:]
        if text:
            events.append(("text", style(), NOT_XML.sub("", html.unescape(text))))
        close_to(0)
        # Points once each, in their order: a field's begin, code, separator and end stay in sequence.
        seen: set[int] = set()
        slots = []
        for k, (kind, index, _text) in enumerate(events):
            if kind == "point":
                if index in seen:
                    events[k] = ("skip", None, "")
                else:
                    seen.add(index)
                    slots.append(k)
        missing = [i for i in range(len(self.points)) if i not in seen]
        for index in missing:
            slots.append(len(events))
            events.append(("point", index, ""))
        for k, index in zip(slots, sorted(seen) + missing):
            events[k] = ("point", index, "")
        return events

    # Format hooks: writing text.
    def _start_text(self) -> dict:
        return {}

    def _after_point(self, state: dict, index: int) -> None:
        pass

    def _text(self, style: int, text: str, state: dict, lang: str | None) -> bytes:
        raise NotImplementedError

    def _tail(self, lang: str | None) -> bytes:
        return self.raw(self.tail_start, self.element.end)


def set_xml_attribute(tag: bytes, qname: bytes, value: str) -> bytes:
    """``tag`` (a start tag's bytes) with the value of its attribute ``qname`` set to ``value``
    (a language code: nothing to escape); unchanged when it has no such attribute."""
    pattern = re.compile(rb"(\s" + re.escape(qname) + rb"""\s*=\s*)("[^"]*"|'[^']*')""")
    return pattern.sub(lambda m: m.group(1) + b'"' + value.encode("ascii") + b'"', tag, count=1)


def natural_key(name: str) -> list:
    """A sort key that puts slide2.xml before slide10.xml."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class ParagraphFile(ArchiveFile):
    """A package whose units are the paragraphs of some of its XML parts."""

    _what: str  # the format in words, for messages
    _paragraph: type[Paragraph]

    def _is_paragraph(self, element: Element) -> bool:
        raise NotImplementedError

    def _add_part(self, member: str, within: str | None = None) -> None:
        """Every paragraph with text of ``member`` (those inside an element called ``within``) a unit."""
        part = self._part(member)
        count = 0
        for element in part.root.iter():
            if not element.content:  # an empty paragraph (<w:p/>) has no text: not read any further
                continue
            if not self._is_paragraph(element) or (within is not None and not element.within(within)):
                continue
            paragraph = self._paragraph(part, element)
            if not paragraph.has_text:
                continue
            count += 1
            self._add(Unit(paragraph.html(), True, f"{member}, paragraph {count}"), member,
                      self._editor(paragraph, member))

    @staticmethod
    def _editor(paragraph: Paragraph, member: str):
        def edit(translation: str, splicers: dict[str, Splicer], lang: str | None) -> Edit:
            return Edit(paragraph.element.start, paragraph.element.end,
                        lambda: paragraph.rebuild(translation, splicers[member], lang))
        return edit


class OoxmlFile(ParagraphFile):
    """What Word and PowerPoint files share: the package's content types, its relationships,
    the core properties' language."""

    _paragraph_names: frozenset[str]  # a paragraph element's name, in the transitional and strict namespaces

    def _is_paragraph(self, element: Element) -> bool:
        return element.name in self._paragraph_names and not element.within(f"{{{_MC}}}Fallback")

    @classmethod
    def _open(cls, data: bytes, name: str) -> tuple[OoxmlFile, dict[str, str]]:
        self = cls(Package(data, name, cls._what))
        if "[Content_Types].xml" not in self.package:
            raise FileFormatError(f"{name} is not {self.package.a_kind}: it has no [Content_Types].xml")
        types = {}
        for element in self._part("[Content_Types].xml").root.children():
            if element.local == "Override":
                part = unquote(element.attrs.get("PartName", "")).lstrip("/")
                if part in self.package:
                    types[part] = element.attrs.get("ContentType", "")
        return self, types

    def _main(self, types: dict[str, str], words: tuple[str, ...], usual: str) -> str:
        """The main part: its content type ends in main+xml and names the application."""
        for part, content_type in types.items():
            if content_type.endswith("main+xml") and any(word in content_type for word in words):
                return part
        if usual in self.package:
            return usual
        raise FileFormatError(f"{self.package.name} is not {self.package.a_kind}: it has no main part ({usual})")

    def _relationships(self, member: str) -> dict[str, str]:
        """The targets of ``member``'s relationships inside the package, by id, as member names."""
        folder, base = posixpath.split(member)
        rels = posixpath.join(folder, "_rels", base + ".rels")
        if rels not in self.package:
            return {}
        targets = {}
        for element in self._part(rels).root.children():
            if element.local == "Relationship" and element.attrs.get("TargetMode") != "External":
                target = unquote(element.attrs.get("Target", ""))
                if target.startswith("/"):
                    path = target.lstrip("/")
                else:
                    path = posixpath.normpath(posixpath.join(folder, target))
                targets[element.attrs.get("Id", "")] = path
        return targets

    def _core_language(self, lang: str) -> dict[str, list[Edit]]:
        """The core properties' ``dc:language`` set to ``lang``, where the file has one."""
        member = "docProps/core.xml"
        if member not in self.package:
            return {}
        part = self._part(member)
        edits = [part.set_text(element, lang) for element in part.root.iter(f"{{{DC}}}language")]
        return {member: [edit for edit in edits if edit is not None]}


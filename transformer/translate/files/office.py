"""Word (``.docx``), PowerPoint (``.pptx``) and OpenDocument text (``.odt``) files, translated
paragraph by paragraph with their formatting kept.

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
outer paragraph whether it changed or not.

Where the text is: docx: the body, headers, footers, footnotes, endnotes and comments, tables
and text boxes in them (a text box's fallback copy for old readers, ``mc:Fallback``, is left as
it was); pptx: every slide in presentation order, then the speaker notes, tables and text boxes
in them (not charts, SmartArt or the masters' placeholder texts); odt: the body (``content.xml``:
paragraphs, headings, lists, tables, frames, notes, comments) and the page headers and footers
(``styles.xml``), not tracked deletions.
"""

from __future__ import annotations

import html
import posixpath
import re
from urllib.parse import unquote

from transformer.translate.files.base import FileFormatError, Unit
from transformer.translate.files.package import NOT_XML, ArchiveFile, Edit, Element, Package, Splicer, XmlPart

__all__ = ["DocxFile", "PptxFile", "OdtFile"]

_MC = "http://schemas.openxmlformats.org/markup-compatibility/2006"
_DC = "http://purl.org/dc/elements/1.1/"
_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
_FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


# --- A paragraph as an HTML fragment, and back ------------------------------------------


class _Text:
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


class _Paragraph:
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
            if isinstance(node, _Text):
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
            if isinstance(node, _Text):
                text = [node.text]
                while i + 1 < len(content) and isinstance(content[i + 1], _Text) and content[i + 1].style == node.style:
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


def _set_xml_attribute(tag: bytes, qname: bytes, value: str) -> bytes:
    """``tag`` (a start tag's bytes) with the value of its attribute ``qname`` set to ``value``
    (a language code: nothing to escape); unchanged when it has no such attribute."""
    pattern = re.compile(rb"(\s" + re.escape(qname) + rb"""\s*=\s*)("[^"]*"|'[^']*')""")
    return pattern.sub(lambda m: m.group(1) + b'"' + value.encode("ascii") + b'"', tag, count=1)


# --- Word ------------------------------------------------------------------------------

# Elements holding runs: written as a group (their start, the properties they begin with, their end).
_DOCX_GROUPS = frozenset("hyperlink smartTag customXml ins moveTo fldSimple dir bdo".split())
_DOCX_BREAKS = frozenset("tab br cr ptab".split())
_DOCX_DROPPED = frozenset(("proofErr", "lastRenderedPageBreak"))


class _DocxParagraph(_Paragraph):
    def _read(self) -> None:
        p = self.element
        children = p.children()
        if children and children[0].local == "pPr":
            self.head_end = children[0].end
            children = children[1:]
        self.content = self._walk(children)

    def _walk(self, elements: list[Element]) -> list:
        content: list = []
        for element in elements:
            local = element.local
            if local == "r":
                content += self._run(element)
            elif local in _DOCX_DROPPED:
                continue
            elif local in _DOCX_GROUPS and element.close_start != element.open_end:
                children = element.children()
                start = element.open_end
                while children and children[0].local.endswith("Pr"):
                    start = children.pop(0).end
                content.append(self.group(self.raw(element.start, start), self.raw(element.close_start, element.end),
                                          "a" if local == "hyperlink" else "span", self._walk(children)))
            elif local == "sdt" and element.find(element.name[: -len("sdt")] + "sdtContent") is not None:
                inner = element.find(element.name[: -len("sdt")] + "sdtContent")
                content.append(self.group(self.raw(element.start, inner.open_end),
                                          self.raw(inner.close_start, element.end),
                                          "span", self._walk(inner.children())))
            else:
                content.append(self.point(element))
        return content

    def _run(self, run: Element) -> list:
        if run.close_start == run.open_end:  # <w:r/>
            return []
        children = run.children()
        properties = b""
        if children and children[0].local == "rPr":
            properties = self.raw(children[0].start, children[0].end)
            children = children[1:]
        opening = self.raw(run.start, run.open_end) + properties
        closing = self.raw(run.close_start, run.end)
        style = self.style(properties, opening, closing)
        content: list = []
        for child in children:
            local = child.local
            if local == "t":
                content.append(_Text(style, child.text()))
            elif local in _DOCX_DROPPED:
                continue
            else:
                content.append(self.point(child, opening, closing, line_break=local in _DOCX_BREAKS))
        return content

    def _text(self, style: int, text: str, state: dict, lang: str | None) -> bytes:
        opening = self.styles[style]
        prefix = self.element.prefix.encode()
        if lang:  # the run's language (w:lang w:val) becomes the target language
            opening = re.sub(rb"<" + re.escape(prefix) + rb"lang\b[^>]*>",
                             lambda m: _set_xml_attribute(m.group(), prefix + b"val", lang), opening)
        space = b' xml:space="preserve"' if text != text.strip() or "  " in text else b""
        t = prefix + b"t"
        return opening + b"<" + t + space + b">" + self.part.escape(text) + b"</" + t + b">" + self._style_ends[style]


def _natural(name: str) -> list:
    """A sort key that puts slide2.xml before slide10.xml."""
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


class _ParagraphFile(ArchiveFile):
    """A package whose units are the paragraphs of some of its XML parts."""

    _what: str  # the format in words, for messages
    _paragraph: type[_Paragraph]

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
    def _editor(paragraph: _Paragraph, member: str):
        def edit(translation: str, splicers: dict[str, Splicer], lang: str | None) -> Edit:
            return Edit(paragraph.element.start, paragraph.element.end,
                        lambda: paragraph.rebuild(translation, splicers[member], lang))
        return edit


class _OoxmlFile(_ParagraphFile):
    """What Word and PowerPoint files share: the package's content types, its relationships,
    the core properties' language."""

    _paragraph_names: frozenset[str]  # a paragraph element's name, in the transitional and strict namespaces

    def _is_paragraph(self, element: Element) -> bool:
        return element.name in self._paragraph_names and not element.within(f"{{{_MC}}}Fallback")

    @classmethod
    def _open(cls, data: bytes, name: str) -> tuple[_OoxmlFile, dict[str, str]]:
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
        edits = [part.set_text(element, lang) for element in part.root.iter(f"{{{_DC}}}language")]
        return {member: [edit for edit in edits if edit is not None]}


_W = ("http://schemas.openxmlformats.org/wordprocessingml/2006/main",
      "http://purl.oclc.org/ooxml/wordprocessingml/main")


class DocxFile(_OoxmlFile):
    """A Word document (``.docx``, Office Open XML): each paragraph with text is an HTML unit (see
    the module doc); with a target language, the language of the translated runs, of the
    document's default style and of its core properties is set to it."""

    kind = "docx"
    extensions = (".docx",)
    media_type = "application/vnd.openxmlformats-officedocument.wordprocessingml.document"
    _what = "Word document"
    _paragraph = _DocxParagraph
    _paragraph_names = frozenset(f"{{{ns}}}p" for ns in _W)

    @classmethod
    def read(cls, data: bytes, name: str) -> DocxFile:
        self, types = cls._open(data, name)
        self._add_part(self._main(types, ("wordprocessingml", "ms-word"), "word/document.xml"))
        for what in ("header", "footer", "footnotes", "endnotes", "comments"):
            ending = f"wordprocessingml.{what}+xml"
            for part in sorted((p for p, t in types.items() if t.endswith(ending)), key=_natural):
                self._add_part(part)
        self._styles = next((p for p, t in types.items() if t.endswith("wordprocessingml.styles+xml")), None)
        return self

    def _language_edits(self, lang: str) -> dict[str, list[Edit]]:
        edits = self._core_language(lang)
        if self._styles is not None:
            part = self._part(self._styles)
            found = []
            for ns in _W:
                for defaults in part.root.iter(f"{{{ns}}}docDefaults"):
                    for element in defaults.iter(f"{{{ns}}}lang"):
                        if f"{{{ns}}}val" in element.attrs:
                            found.append(part.set_attribute(element, f"{{{ns}}}val", lang))
            if found:
                edits[self._styles] = found
        return edits


# --- PowerPoint --------------------------------------------------------------------------

_A = ("http://schemas.openxmlformats.org/drawingml/2006/main", "http://purl.oclc.org/ooxml/drawingml/main")


class _PptxParagraph(_Paragraph):
    def _read(self) -> None:
        children = self.element.children()
        if children and children[0].local == "pPr":
            self.head_end = children[0].end
            children = children[1:]
        if children and children[-1].local == "endParaRPr":
            self.tail_start = children[-1].start
            children = children[:-1]
        for element in children:
            if element.local == "r" and element.close_start != element.open_end:
                parts = element.children()
                properties = b""
                if parts and parts[0].local == "rPr":
                    properties = self.raw(parts[0].start, parts[0].end)
                    parts = parts[1:]
                opening = self.raw(element.start, element.open_end) + properties
                style = self.style(properties, opening, self.raw(element.close_start, element.end))
                for part in parts:
                    if part.local == "t":
                        self.content.append(_Text(style, part.text()))
                    else:
                        self.content.append(self.point(part, opening, self.raw(element.close_start, element.end)))
            else:
                self.content.append(self.point(element, line_break=element.local == "br"))

    def _set_lang(self, data: bytes, lang: str | None) -> bytes:
        if not lang:
            return data
        prefix = re.escape(self.element.prefix.encode())
        return re.sub(rb"<" + prefix + rb"(?:rPr|endParaRPr)\b[^>]*>",
                      lambda m: _set_xml_attribute(m.group(), b"lang", lang), data)

    def _text(self, style: int, text: str, state: dict, lang: str | None) -> bytes:
        t = self.element.prefix.encode() + b"t"
        return (self._set_lang(self.styles[style], lang) + b"<" + t + b">" + self.part.escape(text) + b"</" + t + b">"
                + self._style_ends[style])

    def _tail(self, lang: str | None) -> bytes:
        return self._set_lang(super()._tail(lang), lang)


class PptxFile(_OoxmlFile):
    """A PowerPoint presentation (``.pptx``): each paragraph with text on the slides and in the
    speaker notes is an HTML unit (see the module doc); with a target language, the language of
    the translated runs and of the core properties is set to it."""

    kind = "pptx"
    extensions = (".pptx",)
    media_type = "application/vnd.openxmlformats-officedocument.presentationml.presentation"
    _what = "PowerPoint presentation"
    _paragraph = _PptxParagraph
    _paragraph_names = frozenset(f"{{{ns}}}p" for ns in _A)

    @classmethod
    def read(cls, data: bytes, name: str) -> PptxFile:
        self, types = cls._open(data, name)
        main = self._main(types, ("presentationml", "ms-powerpoint"), "ppt/presentation.xml")
        slides = {p for p, t in types.items() if t.endswith("presentationml.slide+xml")}
        targets = self._relationships(main)
        ordered = []
        for element in self._part(main).root.iter():
            if element.local == "sldId":
                rid = next((v for k, v in element.attrs.items() if k.endswith("}id")), None)
                if targets.get(rid) in slides and targets[rid] not in ordered:
                    ordered.append(targets[rid])
        ordered += sorted(slides - set(ordered), key=_natural)
        notes = sorted((p for p, t in types.items() if t.endswith("presentationml.notesSlide+xml")), key=_natural)
        for part in ordered + notes:
            self._add_part(part)
        return self

    def _language_edits(self, lang: str) -> dict[str, list[Edit]]:
        return self._core_language(lang)


# --- OpenDocument text -------------------------------------------------------------------


class _OdtParagraph(_Paragraph):
    def _read(self) -> None:
        self.style(b"", b"", b"")  # the one style: text is written where it stands, in its spans
        self._space = True  # whether a space read now is collapsed (at the start, after a space)
        self.content = self._walk(self.element.content)

    def _walk(self, nodes: list) -> list:
        content: list = []
        for node in nodes:
            if isinstance(node, str):  # OpenDocument collapses XML white space, as HTML does
                text = re.sub(r"[ \t\r\n]+", " ", node)
                if self._space and text.startswith(" "):
                    text = text[1:]
                if text:
                    content.append(_Text(0, text))
                    self._space = text.endswith(" ")
                continue
            local = node.local if node.name.startswith(f"{{{_TEXT}}}") else ""
            if local == "s":
                count = node.attrs.get(f"{{{_TEXT}}}c", "1")
                content.append(_Text(0, " " * min(int(count) if count.isdigit() else 1, 1000)))
                self._space = False
            elif local in ("tab", "line-break"):
                content.append(self.point(node, line_break=True))
                self._space = False
            elif local == "soft-page-break":
                continue
            elif local in ("span", "a") and node.close_start != node.open_end:
                content.append(self.group(self.raw(node.start, node.open_end), self.raw(node.close_start, node.end),
                                          local if local == "a" else "span", self._walk(node.content)))
            else:
                content.append(self.point(node))
        return content

    def _start_text(self) -> dict:
        return {"space": True}

    def _after_point(self, state: dict, index: int) -> None:
        if index in self._breaks:
            state["space"] = False

    def _text(self, style: int, text: str, state: dict, lang: str | None) -> bytes:
        """The text, each space that OpenDocument would collapse written as ``text:s``."""
        s = self.element.prefix + "s"
        out, run, spaces = [], [], 0

        def flush_spaces() -> None:
            nonlocal spaces
            if spaces:
                out.append(f"<{s}/>" if spaces == 1 else f'<{s} {self.element.prefix}c="{spaces}"/>')
                spaces = 0

        for char in re.sub(r"[\t\r\n]", " ", text):
            if char == " " and state["space"]:
                if run:
                    out.append(html.escape("".join(run), quote=False))
                    run = []
                spaces += 1
                continue
            flush_spaces()
            run.append(char)
            state["space"] = char == " "
        if run:
            out.append(html.escape("".join(run), quote=False))
        flush_spaces()
        return "".join(out).encode(self.part.encoding, "xmlcharrefreplace")


class OdtFile(_ParagraphFile):
    """An OpenDocument text (``.odt``, LibreOffice Writer): each paragraph and heading with text
    is an HTML unit (see the module doc); with a target language, the document's language
    (``meta.xml``) and that of its default styles are set to it."""

    kind = "odt"
    extensions = (".odt",)
    media_type = "application/vnd.oasis.opendocument.text"
    _what = "OpenDocument text"
    _paragraph = _OdtParagraph
    _names = frozenset((f"{{{_TEXT}}}p", f"{{{_TEXT}}}h"))

    def _is_paragraph(self, element: Element) -> bool:
        return element.name in self._names and not element.within(f"{{{_TEXT}}}tracked-changes")

    @classmethod
    def read(cls, data: bytes, name: str) -> OdtFile:
        self = cls(Package(data, name, cls._what))
        if "mimetype" in self.package:
            mimetype = self.package.read("mimetype").decode("ascii", "replace").strip()
            if not mimetype.startswith("application/vnd.oasis.opendocument.text"):
                raise FileFormatError(f"{name} is not an OpenDocument text: its mimetype is {mimetype!r}")
        self._add_part("content.xml")
        if "styles.xml" in self.package:
            self._add_part("styles.xml", within=f"{{{_OFFICE}}}master-styles")
        return self

    def _language_edits(self, lang: str) -> dict[str, list[Edit]]:
        edits: dict[str, list[Edit]] = {}
        if "meta.xml" in self.package:
            part = self._part("meta.xml")
            found = [part.set_text(element, lang) for element in part.root.iter(f"{{{_DC}}}language")]
            edits["meta.xml"] = [edit for edit in found if edit is not None]
        if "styles.xml" in self.package:
            language, _, rest = lang.partition("-")
            region = next((tag for tag in rest.split("-") if len(tag) == 2 or (len(tag) == 3 and tag.isdigit())), None)
            part = self._part("styles.xml")
            found = []
            for default in part.root.iter(f"{{{_STYLE}}}default-style"):
                for properties in default.iter(f"{{{_STYLE}}}text-properties"):
                    if f"{{{_FO}}}language" in properties.attrs:
                        tag_edit = part.set_attribute(properties, f"{{{_FO}}}language", language.lower())
                        tag = tag_edit.render()
                        if f"{{{_FO}}}country" in properties.attrs:
                            country = (region or "none").upper() if region else "none"
                            tag = _set_xml_attribute(tag, properties.qnames[f"{{{_FO}}}country"].encode(), country)
                        found.append(Edit(properties.start, properties.open_end, lambda tag=tag: tag))
            edits["styles.xml"] = found
        return edits

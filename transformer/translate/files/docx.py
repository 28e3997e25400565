"""Word documents (``.docx``, Office Open XML), translated paragraph by paragraph with their
formatting kept (:mod:`~transformer.translate.files.office`).

Where the text is: the body, headers, footers, footnotes, endnotes and comments, tables and text
boxes in them (a text box's fallback copy for old readers, ``mc:Fallback``, is left as it was).
"""

from __future__ import annotations

import re

from transformer.translate.files.office import OoxmlFile, Paragraph, Text, natural_key, set_xml_attribute
from transformer.translate.files.package import Edit, Element

__all__ = ["DocxFile"]

# Elements holding runs: written as a group (their start, the properties they begin with, their end).
_DOCX_GROUPS = frozenset("hyperlink smartTag customXml ins moveTo fldSimple dir bdo".split())
_DOCX_BREAKS = frozenset("tab br cr ptab".split())
_DOCX_DROPPED = frozenset(("proofErr", "lastRenderedPageBreak"))


class _DocxParagraph(Paragraph):
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
                content.append(Text(style, child.text()))
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
                             lambda m: set_xml_attribute(m.group(), prefix + b"val", lang), opening)
        space = b' xml:space="preserve"' if text != text.strip() or "  " in text else b""
        t = prefix + b"t"
        return opening + b"<" + t + space + b">" + self.part.escape(text) + b"</" + t + b">" + self._style_ends[style]


_W = ("http://schemas.openxmlformats.org/wordprocessingml/2006/main",
      "http://purl.oclc.org/ooxml/wordprocessingml/main")


class DocxFile(OoxmlFile):
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
            for part in sorted((p for p, t in types.items() if t.endswith(ending)), key=natural_key):
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


"""PowerPoint presentations (``.pptx``), translated paragraph by paragraph with their formatting
kept (:mod:`~transformer.translate.files.office`).

Where the text is: every slide in presentation order, then the speaker notes, tables and text
boxes in them (not charts, SmartArt or the masters' placeholder texts).
"""

from __future__ import annotations

import re

from transformer.translate.files.office import OoxmlFile, Paragraph, Text, natural_key, set_xml_attribute
from transformer.translate.files.package import Edit

__all__ = ["PptxFile"]

_A = ("http://schemas.openxmlformats.org/drawingml/2006/main", "http://purl.oclc.org/ooxml/drawingml/main")


class _PptxParagraph(Paragraph):
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
                        self.content.append(Text(style, part.text()))
                    else:
                        self.content.append(self.point(part, opening, self.raw(element.close_start, element.end)))
            else:
                self.content.append(self.point(element, line_break=element.local == "br"))

    def _set_lang(self, data: bytes, lang: str | None) -> bytes:
        if not lang:
            return data
        prefix = re.escape(self.element.prefix.encode())
        return re.sub(rb"<" + prefix + rb"(?:rPr|endParaRPr)\b[^>]*>",
                      lambda m: set_xml_attribute(m.group(), b"lang", lang), data)

    def _text(self, style: int, text: str, state: dict, lang: str | None) -> bytes:
        t = self.element.prefix.encode() + b"t"
        return (self._set_lang(self.styles[style], lang) + b"<" + t + b">" + self.part.escape(text) + b"</" + t + b">"
                + self._style_ends[style])

    def _tail(self, lang: str | None) -> bytes:
        return self._set_lang(super()._tail(lang), lang)


class PptxFile(OoxmlFile):
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
        ordered += sorted(slides - set(ordered), key=natural_key)
        notes = sorted((p for p, t in types.items() if t.endswith("presentationml.notesSlide+xml")), key=natural_key)
        for part in ordered + notes:
            self._add_part(part)
        return self

    def _language_edits(self, lang: str) -> dict[str, list[Edit]]:
        return self._core_language(lang)


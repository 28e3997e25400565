"""OpenDocument texts (``.odt``, LibreOffice Writer), translated paragraph by paragraph with their
formatting kept (:mod:`~transformer.translate.files.office`).

Where the text is: the body (``content.xml``: paragraphs, headings, lists, tables, frames, notes,
comments) and the page headers and footers (``styles.xml``), not tracked deletions.
"""

from __future__ import annotations

import html
import re

from transformer.translate.files.base import FileFormatError
from transformer.translate.files.office import DC, Paragraph, ParagraphFile, Text, set_xml_attribute
from transformer.translate.files.package import Edit, Element, Package

__all__ = ["OdtFile"]

_TEXT = "urn:oasis:names:tc:opendocument:xmlns:text:1.0"
_STYLE = "urn:oasis:names:tc:opendocument:xmlns:style:1.0"
_FO = "urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0"
_OFFICE = "urn:oasis:names:tc:opendocument:xmlns:office:1.0"


class _OdtParagraph(Paragraph):
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
                    content.append(Text(0, text))
                    self._space = text.endswith(" ")
                continue
            local = node.local if node.name.startswith(f"{{{_TEXT}}}") else ""
            if local == "s":
                count = node.attrs.get(f"{{{_TEXT}}}c", "1")
                content.append(Text(0, " " * min(int(count) if count.isdigit() else 1, 1000)))
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


class OdtFile(ParagraphFile):
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
            found = [part.set_text(element, lang) for element in part.root.iter(f"{{{DC}}}language")]
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
                            tag = set_xml_attribute(tag, properties.qnames[f"{{{_FO}}}country"].encode(), country)
                        found.append(Edit(properties.start, properties.open_end, lambda tag=tag: tag))
            edits["styles.xml"] = found
        return edits

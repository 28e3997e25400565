"""E-books (``.epub``, EPUB 2 and 3), translated page by page with their markup kept.

Each XHTML content document of the book (those of the spine, in reading order, then the others
of the manifest: the EPUB 3 navigation document) is one HTML unit, the whole page, translated as
``translate_html`` translates a page: its markup kept byte for byte, its inline tags around the
words they marked. The output stays well-formed XML: ``translate_html`` escapes ``&``, ``<`` and
``>`` in translated text and copies every tag as written (``<br/>`` and ``<a id="p1"/>`` too);
a non-breaking space it writes as ``&nbsp;`` becomes ``&#160;`` unless the page already used
that entity (declared by its DTD). A page is written in the encoding it was read in.

The EPUB 2 table of contents (the NCX file's ``docTitle`` and ``navLabel`` texts) gives one
plain unit per label. With a target language, the first ``dc:language`` of the package
document and the ``xml:lang``/``lang`` attributes of each page's ``<html>`` tag are set to it
(``xml:lang`` added where it has neither). The book's other metadata (title, author), its
style sheets, pictures and fonts are left as they are.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable
from urllib.parse import unquote

from transformer.translate.files.base import FileFormatError, Unit
from transformer.translate.files.package import NOT_XML, ArchiveFile, Edit, Package, Splicer, declared_encoding

__all__ = ["EpubFile"]

_DC = "http://purl.org/dc/elements/1.1/"
_NCX = "http://www.daisy.org/z3986/2005/ncx/"
_PAGE_TYPES = frozenset(("application/xhtml+xml", "text/html"))
_NCX_TYPE = "application/x-dtbncx+xml"
# The <html> start tag of a page, and one attribute in it.
_HTML_TAG = re.compile(r"""<html(?=[\s>/])(?:[^>"']|"[^"]*"|'[^']*')*>""")
_BOMS = ((b"\xef\xbb\xbf", "utf-8"), (b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be"))


def _attribute(name: str) -> re.Pattern:
    return re.compile(r"(?<=\s)(" + re.escape(name) + r"""\s*=\s*)("[^"]*"|'[^']*')""")


_LANG_ATTRIBUTES = (_attribute("xml:lang"), _attribute("lang"))


def set_page_language(page: str, lang: str) -> str:
    """``page`` (XHTML) with the ``xml:lang`` and ``lang`` attributes of its ``<html>`` tag set to
    ``lang``; ``xml:lang`` is added where the tag has neither. A page without one is returned as
    it is."""
    match = _HTML_TAG.search(page)
    if match is None:
        return page
    tag = match.group()
    changed = tag
    for pattern in _LANG_ATTRIBUTES:
        changed = pattern.sub(lambda m: m.group(1) + '"' + lang + '"', changed, count=1)
    if changed == tag and not any(pattern.search(tag) for pattern in _LANG_ATTRIBUTES):
        changed = f'<html xml:lang="{lang}"' + tag[len("<html"):]
    return page[: match.start()] + changed + page[match.end():]


class _Page:
    """An XHTML content document: its text, and how its bytes are written."""

    def __init__(self, data: bytes, where: str):
        self.bom, self.encoding = b"", "utf-8"
        for bom, encoding in _BOMS:
            if data.startswith(bom):
                self.bom, self.encoding = bom, encoding
                break
        else:
            self.encoding = declared_encoding(data, where)
        try:
            self.text = data[len(self.bom):].decode(self.encoding)
        except (UnicodeDecodeError, LookupError) as error:
            raise FileFormatError(f"{where} cannot be read as {self.encoding}: {error}") from None
        self.size = len(data)

    def encode(self, page: str, lang: str | None) -> bytes:
        if page != self.text:
            page = NOT_XML.sub("", page)
        if "&nbsp;" not in self.text:  # XML knows no &nbsp; unless the page's DTD declares it
            page = page.replace("&nbsp;", "&#160;")
        if lang:
            page = set_page_language(page, lang)
        return self.bom + page.encode(self.encoding, "xmlcharrefreplace")


class EpubFile(ArchiveFile):
    """An EPUB e-book (see the module doc)."""

    kind = "epub"
    extensions = (".epub",)
    media_type = "application/epub+zip"
    _what = "EPUB e-book"

    @classmethod
    def read(cls, data: bytes, name: str) -> EpubFile:
        self = cls(Package(data, name, cls._what))
        self._pages: dict[str, _Page] = {}
        package = self.package
        if "mimetype" in package:
            mimetype = package.read("mimetype").decode("ascii", "replace").strip()
            if mimetype != "application/epub+zip":
                raise FileFormatError(f"{name} is not an EPUB e-book: its mimetype is {mimetype!r}")
        container = self._part("META-INF/container.xml")
        rootfiles = [e for e in container.root.iter() if e.local == "rootfile" and e.attrs.get("full-path")]
        rootfiles.sort(key=lambda e: e.attrs.get("media-type") != "application/oebps-package+xml")
        if not rootfiles:
            raise FileFormatError(f"{name} is not an EPUB e-book: META-INF/container.xml names no package document")
        self._opf = unquote(rootfiles[0].attrs["full-path"]).lstrip("/")
        opf = self._part(self._opf)
        folder = posixpath.dirname(self._opf)
        items: dict[str, tuple[str, str]] = {}  # id -> (member, media type)
        order: list[str] = []
        for element in opf.root.iter():
            if element.local == "item" and element.attrs.get("href"):
                href = unquote(element.attrs["href"].partition("#")[0])
                member = posixpath.normpath(posixpath.join(folder, href)).lstrip("/")
                items[element.attrs.get("id", "")] = (member, element.attrs.get("media-type", ""))
                order.append(element.attrs.get("id", ""))
        spine = [e.attrs.get("idref", "") for e in opf.root.iter() if e.local == "itemref"]
        seen: set[str] = set()
        for item in spine + order:
            member, media_type = items.get(item, ("", ""))
            if media_type in _PAGE_TYPES and member in package and member not in seen:
                seen.add(member)
                self._add_page(member)
        for member, media_type in items.values():
            if media_type == _NCX_TYPE and member in package and member not in seen:
                seen.add(member)
                self._add_table_of_contents(member)
        return self

    def _add_page(self, member: str) -> None:
        data = self.package.read(member)
        self._data[member] = data
        page = self._pages[member] = _Page(data, f"{self.package.name}: {member}")

        def edit(translation: str, splicers: dict[str, Splicer], lang: str | None) -> Edit:
            return Edit(0, page.size, lambda: page.encode(translation, lang))

        self._add(Unit(page.text, True, member), member, edit)

    def _add_table_of_contents(self, member: str) -> None:
        part = self._part(member)
        count = 0
        for element in part.root.iter(f"{{{_NCX}}}text"):
            parent = element.parent.local if element.parent is not None else ""
            if parent not in ("docTitle", "navLabel") or not element.text().strip():
                continue
            count += 1
            self._add(Unit(element.text(), False, f"{member}, label {count}"), member,
                      self._label_editor(part, element))

    @staticmethod
    def _label_editor(part, element) -> Callable[[str, dict[str, Splicer], str | None], Edit]:
        def edit(translation: str, splicers: dict[str, Splicer], lang: str | None) -> Edit:
            return part.set_text(element, translation)
        return edit

    def _language_edits(self, lang: str) -> dict[str, list[Edit]]:
        # A page changed by its translation has its language set there already: that edit, given
        # first, is the one applied of the two with the same extent.
        edits: dict[str, list[Edit]] = {
            member: [Edit(0, page.size, lambda page=page: page.encode(page.text, lang))]
            for member, page in self._pages.items()
        }
        opf = self._part(self._opf)
        language = next(opf.root.iter(f"{{{_DC}}}language"), None)
        if language is not None:
            edit = opf.set_text(language, lang)
            if edit is not None:
                edits[self._opf] = [edit]
        return edits

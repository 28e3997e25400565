"""E-books translated page by page with their markup kept (transformer/translate/files/epub.py)."""

import io
import warnings
from xml.etree import ElementTree

import pytest

from epub_helpers import CHAPTER_ONE, epub_bytes, opf
from office_helpers import infos, members, reverse_words, translate, upper
from transformer.translate.files.base import FileFormatError
from transformer.translate.files.epub import EpubFile, set_page_language


def test_pages_in_reading_order_and_the_table_of_contents():
    file = EpubFile.read(epub_bytes(), "book.epub")
    units = file.units()
    assert [(u.where, u.html) for u in units] == [
        ("OEBPS/ch1.xhtml", True), ("OEBPS/ch2.xhtml", True), ("OEBPS/nav.xhtml", True),
        ("OEBPS/toc.ncx, label 1", False), ("OEBPS/toc.ncx, label 2", False)]
    assert units[0].text == CHAPTER_ONE
    assert [u.text for u in units[3:]] == ["Le livre", "Chapitre un"]  # not the author


def test_translated_pages_keep_their_markup_and_stay_well_formed_xml():
    data = epub_bytes()
    file = EpubFile.read(data, "book.epub")
    for fn in (upper, reverse_words, lambda sentences: [s + "\x0c" for s in sentences]):
        out = members(file.write(translate(file, fn)))
        for name in ("OEBPS/ch1.xhtml", "OEBPS/ch2.xhtml", "OEBPS/nav.xhtml", "OEBPS/toc.ncx", "OEBPS/content.opf"):
            ElementTree.fromstring(out[name])
    out = members(file.write(translate(file)))
    page = out["OEBPS/ch1.xhtml"].decode()
    assert page.startswith('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html PUBLIC')
    assert ('<p>IL ÉTAIT <b>UNE FOIS</b> UN <a href="ch2.xhtml#x">ROI</a>&#160;SAGE.<br/>FIN &amp; SUITE.'
            '<a id="page2"/></p>') in page
    assert '<img src="images/a.png" alt="une image"/>' in page and "<title>CHAPITRE UN</title>" in page
    assert "<navLabel><text>CHAPITRE UN</text></navLabel>" in out["OEBPS/toc.ncx"].decode()
    assert "<docAuthor><text>Jean Dupont</text></docAuthor>" in out["OEBPS/toc.ncx"].decode()


def test_non_breaking_spaces_are_written_as_xml_knows_them():
    page = CHAPTER_ONE.replace("&#160;", "\u00a0")
    file = EpubFile.read(epub_bytes(chapter_one=page), "book.epub")
    written = members(file.write(translate(file)))["OEBPS/ch1.xhtml"].decode()
    assert "ROI</a>&#160;SAGE" in written and "&nbsp;" not in written
    ElementTree.fromstring(written.encode())
    # A page that uses &nbsp; (its DTD declares it) keeps the entity.
    page = CHAPTER_ONE.replace("&#160;", "&nbsp;")
    file = EpubFile.read(epub_bytes(chapter_one=page), "book.epub")
    assert "ROI</a>&nbsp;SAGE" in members(file.write(translate(file)))["OEBPS/ch1.xhtml"].decode()


def test_identity_is_byte_identical_and_untouched_members_keep_their_bytes():
    data = epub_bytes()
    file = EpubFile.read(data, "book.epub")
    assert file.write([u.text for u in file.units()]) == data
    out = file.write([u.text if u.where != "OEBPS/ch2.xhtml" else u.text.replace("Le roi", "The king")
                      for u in file.units()])
    before, after = members(data), members(out)
    assert list(after) == list(before)
    assert {name for name in before if before[name] != after[name]} == {"OEBPS/ch2.xhtml"}
    assert infos(out)[0].filename == "mimetype" and infos(out)[0].compress_type == 0
    assert [(i.filename, i.date_time, i.compress_type) for i in infos(out)] == \
        [(i.filename, i.date_time, i.compress_type) for i in infos(data)]


def test_target_language_is_set_in_the_package_and_every_page():
    data = epub_bytes()
    file = EpubFile.read(data, "book.epub")
    out = members(file.write([u.text for u in file.units()], target_lang="en"))
    assert "<dc:language>en</dc:language>" in out["OEBPS/content.opf"].decode()
    assert '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="en">' in out["OEBPS/ch1.xhtml"].decode()
    assert '<html xml:lang="en" xmlns="http://www.w3.org/1999/xhtml" xmlns:epub=' in out["OEBPS/ch2.xhtml"].decode()
    assert 'lang="en" xml:lang="en"' in out["OEBPS/nav.xhtml"].decode()
    translated = members(file.write(translate(file), target_lang="en"))["OEBPS/ch1.xhtml"].decode()
    assert 'xml:lang="en"' in translated and "SAGE" in translated
    assert out["OEBPS/style.css"] == members(data)["OEBPS/style.css"]
    assert set_page_language("<p>no html tag</p>", "en") == "<p>no html tag</p>"
    assert set_page_language("<html lang='fr'><body/></html>", "de") == '<html lang="de"><body/></html>'


def test_pages_in_other_encodings_are_written_in_them():
    latin = CHAPTER_ONE.replace('encoding="utf-8"', 'encoding="iso-8859-1"').encode("iso-8859-1")
    file = EpubFile.read(epub_bytes(chapter_one=latin), "book.epub")
    assert "Il était" in file.units()[0].text
    written = members(file.write(translate(file)))["OEBPS/ch1.xhtml"]
    assert "IL ÉTAIT".encode("iso-8859-1") in written
    ElementTree.fromstring(written)
    utf16 = "\ufeff".encode("utf-16-le") + CHAPTER_ONE.replace('encoding="utf-8"', 'encoding="utf-16"').encode("utf-16-le")
    file = EpubFile.read(epub_bytes(chapter_one=utf16), "book.epub")
    written = members(file.write(translate(file)))["OEBPS/ch1.xhtml"]
    assert written.startswith(b"\xff\xfe") and "UNE FOIS".encode("utf-16-le") in written
    ElementTree.fromstring(written)
    with pytest.raises(FileFormatError, match="book.epub: OEBPS/ch1.xhtml cannot be read as utf-8"):
        EpubFile.read(epub_bytes(chapter_one=b"<html>\xff</html>"), "book.epub")


def test_books_that_are_not_readable_are_refused_in_one_line():
    cases = [
        (b"PK\x03\x04 broken", "book.epub is not an EPUB e-book: a corrupt zip archive"),
        (epub_bytes(mimetype="application/zip"), "book.epub is not an EPUB e-book: its mimetype is 'application/zip'"),
        (epub_bytes(leave_out=("META-INF/container.xml",)), "book.epub is not an EPUB e-book: it has no "
                                                            "META-INF/container.xml"),
        (epub_bytes(container="<container/>"), "META-INF/container.xml names no package document"),
        (epub_bytes(container="<container><rootfiles>"), "book.epub: META-INF/container.xml is not well-formed XML"),
        (epub_bytes(leave_out=("OEBPS/content.opf",)), "book.epub is not an EPUB e-book: it has no OEBPS/content.opf"),
        (epub_bytes(package="<package><manifest>"), "book.epub: OEBPS/content.opf is not well-formed XML"),
        (epub_bytes(package='<!DOCTYPE p [<!ENTITY x "y">]><package/>'), "OEBPS/content.opf declares entities"),
    ]
    for data, message in cases:
        with pytest.raises(FileFormatError, match=message) as caught:
            EpubFile.read(data, "book.epub")
        assert "\n" not in str(caught.value)


def test_a_missing_page_is_skipped_and_a_book_without_language_gets_none():
    data = epub_bytes(leave_out=("OEBPS/ch2.xhtml",), package=opf(language=""))
    file = EpubFile.read(data, "book.epub")
    assert [u.where for u in file.units()][:2] == ["OEBPS/ch1.xhtml", "OEBPS/nav.xhtml"]
    out = members(file.write([u.text for u in file.units()], target_lang="en"))
    assert out["OEBPS/content.opf"] == members(data)["OEBPS/content.opf"]


def test_book_built_by_ebooklib_round_trips():
    epub = pytest.importorskip("ebooklib.epub")
    book = epub.EpubBook()
    book.set_identifier("id1")
    book.set_title("Le livre")
    book.set_language("fr")
    chapter = epub.EpubHtml(title="Un", file_name="un.xhtml", lang="fr")
    chapter.content = "<h1>Un</h1><p>Il était <i>une fois</i>.</p>"
    book.add_item(chapter)
    book.toc = (epub.Link("un.xhtml", "Un", "un"),)
    book.add_item(epub.EpubNcx())
    book.add_item(epub.EpubNav())
    book.spine = ["nav", chapter]
    buffer = io.BytesIO()
    epub.write_epub(buffer, book)
    data = buffer.getvalue()
    file = EpubFile.read(data, "book.epub")
    assert file.write([u.text for u in file.units()]) == data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # ebooklib's own deprecation warnings
        reread = epub.read_epub(io.BytesIO(file.write(translate(file), target_lang="en")))
    assert reread.get_metadata("DC", "language") == [("en", {})]
    content = reread.get_item_with_href("un.xhtml").get_content().decode()
    assert "<p>IL ÉTAIT <i>UNE FOIS</i>.</p>" in content

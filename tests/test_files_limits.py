"""What the file readers (transformer/translate/files/) refuse and what they bound: depth, elements,
characters, sentences, encodings, document type declarations; hostile inputs give a one-line
``FileFormatError`` (a ``UserError``), never another exception, never a silent loss. Fake
translators only (no model), except the slow test at the end, which runs the command line."""

from __future__ import annotations

import re

import pytest

from epub_helpers import CHAPTER_ONE, CONTAINER, NCX, opf
from office_helpers import docx_bytes, members, odt_bytes, paragraph, run, zip_bytes

from transformer.translate import files
from transformer.translate.files import FileSentences, TooManySentences, Unit, package, read_file, translate_units
from transformer.translate.files.base import FileFormatError
from transformer.translate.files.markdown import MAX_MARKDOWN_DEPTH
from transformer.translate.files.package import MAX_XML_DEPTH
from transformer.translate.html import translate_html


def upper(sentences):
    return [s.upper() for s in sentences]


def translated(data: bytes, name: str) -> bytes:
    document = read_file(data, name)
    out = translate_units(document.units(), upper, lambda pages: [translate_html(p, upper) for p in pages])
    return document.write(out)


# --- Markdown: every block translated up to the depth limit, a deeper file refused ------------


def test_markdown_quoted_twenty_deep_is_translated():
    data = ("> " * 20 + "Le chien mange.\n").encode()
    assert translated(data, "q.md") == ("> " * 20 + "LE CHIEN MANGE.\n").encode()


def test_markdown_list_as_deep_as_the_limit_is_translated_whole():
    source = "".join("  " * i + f"- Le chien {i}.\n" for i in range(MAX_MARKDOWN_DEPTH))
    out = translated(source.encode(), "l.md").decode()
    assert out == source.upper()
    assert len(re.findall(r"LE CHIEN \d+\.", out)) == MAX_MARKDOWN_DEPTH


@pytest.mark.parametrize("source, line", [
    ("".join("  " * i + "- Le chien mange.\n" for i in range(2000)), MAX_MARKDOWN_DEPTH + 1),
    ("Avant.\n\n" + "> " * (MAX_MARKDOWN_DEPTH + 1) + "Le chien mange.\n", 3),
])
def test_markdown_nested_deeper_than_the_limit_is_refused(source, line):
    with pytest.raises(FileFormatError, match=rf"^d\.md: line {line}: block quotes and list items nested more "
                                              rf"than {MAX_MARKDOWN_DEPTH} deep"):
        read_file(source.encode(), "d.md")


def test_markdown_emphasis_nested_deeper_than_the_limit_is_refused():
    at_limit = "*" * (2 * MAX_MARKDOWN_DEPTH) + "Le chien." + "*" * (2 * MAX_MARKDOWN_DEPTH) + "\n"
    assert translated(at_limit.encode(), "e.md") == at_limit.upper().encode()
    deeper = "Texte.\n\n" + "*" * 400_000 + "a" + "*" * 400_000 + "\n"
    with pytest.raises(FileFormatError, match=rf"^e\.md: line 3: emphasis and links nested more than "
                                              rf"{MAX_MARKDOWN_DEPTH} deep"):
        read_file(deeper.encode(), "e.md")


# --- Office files and e-books: elements and depth counted as the parts are parsed ------------


def test_a_docx_of_millions_of_empty_paragraphs_is_refused_as_it_is_parsed(monkeypatch):
    # 20 MiB of <w:p/> (3.5 million elements) compressed to some 30 KB: the element count stops
    # the parse at the limit, before the rest of the part is even decompressed.
    monkeypatch.setattr(package, "MAX_ELEMENTS", 10_000)
    decompressed = []
    chunks = package.Package.chunks

    def counted(self, member):
        for chunk in chunks(self, member):
            decompressed.append(len(chunk))
            yield chunk

    monkeypatch.setattr(package.Package, "chunks", counted)
    data = docx_bytes("<w:p/>" * (20 * 1024 * 1024 // 6))
    assert len(data) < 100_000
    with pytest.raises(FileFormatError, match=r"^r\.docx: more than 10,000 XML elements \(counted up to "
                                              r"word/document\.xml\), more than a file to translate may hold$"):
        read_file(data, "r.docx")
    assert sum(decompressed) <= 2 * package._CHUNK  # of the part's 20 MiB


def test_the_element_limit_counts_every_part_of_the_archive(monkeypatch):
    body = paragraph(run("Le chat dort.")) * 100
    document = read_file(docx_bytes(body, header=body), "r.docx")
    counted = package.MAX_ELEMENTS - document.package.elements_left
    monkeypatch.setattr(package, "MAX_ELEMENTS", counted)
    assert len(read_file(docx_bytes(body, header=body), "r.docx").units()) == 200
    monkeypatch.setattr(package, "MAX_ELEMENTS", counted - 1)
    with pytest.raises(FileFormatError, match=f"more than {counted - 1:,} XML elements"):
        read_file(docx_bytes(body, header=body), "r.docx")


@pytest.mark.parametrize("depth", [150, 1000])
def test_runs_nested_in_a_thousand_tracked_insertions(depth):
    data = docx_bytes(paragraph("<w:ins>" * depth + run("Le chat dort.") + "</w:ins>" * depth))
    if depth + 5 < MAX_XML_DEPTH:  # the document, its body, the paragraph, the run and its text around them
        out = members(translated(data, "r.docx"))["word/document.xml"].decode()
        assert "<w:ins>" * depth + '<w:r w:rsidR="00AB12CD"><w:t>LE CHAT DORT.</w:t></w:r>' + "</w:ins>" * depth in out
    else:
        with pytest.raises(FileFormatError, match=rf"^r\.docx: word/document\.xml: elements nested more than "
                                                  rf"{MAX_XML_DEPTH} deep"):
            read_file(data, "r.docx")


@pytest.mark.parametrize("depth", [150, 1000])
def test_an_odt_paragraph_of_a_thousand_nested_spans(depth):
    data = odt_bytes("<text:p>" + "<text:span>" * depth + "Le chat dort." + "</text:span>" * depth + "</text:p>")
    if depth + 5 < MAX_XML_DEPTH:
        out = members(translated(data, "r.odt"))["content.xml"].decode()
        assert "<text:span>" * depth + "LE CHAT DORT." + "</text:span>" * depth in out
    else:
        with pytest.raises(FileFormatError, match=rf"^r\.odt: content\.xml: elements nested more than "
                                                  rf"{MAX_XML_DEPTH} deep"):
            read_file(data, "r.odt")


def test_units_over_the_character_limit_are_refused_as_they_are_read(monkeypatch):
    monkeypatch.setattr(package, "MAX_FILE_CHARS", 1000)
    body = paragraph(run("Le chat dort. " * 10)) * 20  # 140 characters a paragraph
    with pytest.raises(FileFormatError, match=r"^r\.docx: more than 1,000 characters of text to translate "
                                              r"\(1,\d\d\d counted\), over the limit for a file$"):
        read_file(docx_bytes(body), "r.docx")


def test_a_text_over_the_character_limit_is_refused_before_it_is_parsed(monkeypatch):
    monkeypatch.setattr(files, "MAX_FILE_CHARS", 1000)
    parsed = []
    monkeypatch.setattr(files.MarkdownFile, "read", classmethod(lambda cls, data, name: parsed.append(name)))
    with pytest.raises(FileFormatError, match=r"^r\.md: more than 1,000 characters of text to translate "
                                              r"\(1,400 counted\)"):
        read_file(("Le chat dort. " * 100).encode(), "r.md")
    assert parsed == []
    assert read_file("é".join(["x"] * 500).encode(), "s.txt").units()  # 999 characters in 1,498 bytes


def test_the_sentence_limit_stops_the_cut_at_the_unit_that_passes_it():
    units = [Unit(f"Le chat dort. Le chien mange. Il pleut {i}.", False, f"line {i + 1}") for i in range(1000)]
    with pytest.raises(TooManySentences, match=r"^the file holds more than 10 sentences \(12 sentences up to line 4\); "
                                               r"at most 10 are translated per file$"):
        FileSentences(units, "fr", max_sentences=10)
    assert len(FileSentences(units[:3], "fr", max_sentences=9).texts) == 9


# --- Document type declarations: allowed without entities ----------------------------------

NCX_DOCTYPE = '<!DOCTYPE ncx PUBLIC "-//NISO//DTD ncx 2005-1//EN" "http://www.daisy.org/z3986/2005/ncx-2005-1.dtd">'


def epub_with_table_of_contents(ncx: str) -> bytes:
    return zip_bytes([("mimetype", "application/epub+zip"), ("META-INF/container.xml", CONTAINER),
                      ("OEBPS/content.opf", opf(spine=("ch1",))), ("OEBPS/ch1.xhtml", CHAPTER_ONE),
                      ("OEBPS/toc.ncx", ncx)])


def test_an_epub2_table_of_contents_with_its_standard_doctype_is_read():
    ncx = NCX.replace("\n", "\n" + NCX_DOCTYPE + "\n", 1)
    document = read_file(epub_with_table_of_contents(ncx), "book.epub")
    assert [u.text for u in document.units() if not u.html] == ["Le livre", "Chapitre un"]
    out = members(translated(epub_with_table_of_contents(ncx), "book.epub"))["OEBPS/toc.ncx"].decode()
    assert NCX_DOCTYPE in out and "<text>LE LIVRE</text>" in out and "<text>Jean Dupont</text>" in out


@pytest.mark.parametrize("doctype, message", [
    ('<!DOCTYPE ncx [<!ENTITY a "aaaaaaaaaa">]>', "declares entities"),
    ('<!DOCTYPE ncx SYSTEM "http://127.0.0.1:9/x.dtd">', "refers to the entity &x; which it does not declare"),
])
def test_entities_stay_refused_with_a_doctype(doctype, message):
    ncx = NCX.replace("\n", "\n" + doctype + "\n", 1).replace("Le livre", "Le &x; livre")
    if "ENTITY" in doctype:
        ncx = ncx.replace("&x;", "&a;")
    with pytest.raises(FileFormatError, match=f"book.epub: OEBPS/toc.ncx {re.escape(message)}"):
        read_file(epub_with_table_of_contents(ncx), "book.epub")


# --- Declared encodings: text encodings only ------------------------------------------------

NOT_TEXT_ENCODINGS = ["zlib", "rot13", "base64", "undefined", "idna", "punycode", "utf-7", "unicode_escape", "utf-16"]


@pytest.mark.parametrize("charset", NOT_TEXT_ENCODINGS)
def test_a_po_file_declaring_a_codec_that_is_not_a_text_encoding_is_refused(charset):
    po = (f'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset={charset}\\n"\n\n'
          'msgid "Le chat dort."\nmsgstr ""\n').encode()
    with pytest.raises(FileFormatError, match=f"^m.po declares the charset '{charset}', which is not a text encoding"):
        read_file(po, "m.po")


@pytest.mark.parametrize("charset", NOT_TEXT_ENCODINGS)
def test_an_html_page_declaring_a_codec_that_is_not_a_text_encoding_is_refused(charset):
    page = f'<html><head><meta charset="{charset}"></head><body><p>Le chat dort.</p></body></html>'.encode()
    with pytest.raises(FileFormatError, match=f"^p.html declares the charset '{charset}', which is not a text"):
        read_file(page, "p.html")


def test_unknown_charsets_are_read_as_utf8_and_real_ones_as_declared():
    po = 'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=CHARSET\\n"\n\nmsgid "Le café"\nmsgstr ""\n'
    assert translated(po.encode(), "m.po").decode().endswith('msgid "Le café"\nmsgstr "LE CAFÉ"\n')
    page = '<meta charset="windows-1251"><p>Кот спит.</p>'.encode("cp1251")
    assert translated(page, "p.html") == '<meta charset="windows-1251"><p>КОТ СПИТ.</p>'.encode("cp1251")


@pytest.mark.parametrize("encoding", ["idna", "rot13", "utf-7"])
def test_xml_parts_and_pages_declaring_a_codec_that_is_not_a_text_encoding_are_refused(encoding):
    declaration = f'<?xml version="1.0" encoding="{encoding}"?>'
    parts = members(docx_bytes(paragraph(run("Le chat dort."))))
    parts["word/document.xml"] = parts["word/document.xml"].replace(
        b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>', declaration.encode())
    with pytest.raises(FileFormatError, match=f"r.docx: word/document.xml declares the charset '{encoding}'"):
        read_file(zip_bytes(parts.items()), "r.docx")
    page = CHAPTER_ONE.replace('<?xml version="1.0" encoding="utf-8"?>', declaration)
    book = zip_bytes([("mimetype", "application/epub+zip"), ("META-INF/container.xml", CONTAINER),
                      ("OEBPS/content.opf", opf(spine=("ch1",))), ("OEBPS/ch1.xhtml", page)])
    with pytest.raises(FileFormatError, match=f"book.epub: OEBPS/ch1.xhtml declares the charset '{encoding}'"):
        read_file(book, "book.epub")


# --- What is not text: one check for the command line's text path and the file formats -----


@pytest.fixture(scope="module")
def run_dir(tiny_run):
    return tiny_run()


@pytest.mark.parametrize("head, what", [(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n1 0 obj", "a PDF document"),
                                        (b"PK\x03\x04\x14\x00\x00\x00", "a zip archive")])
def test_the_command_line_refuses_a_txt_that_is_a_pdf_or_an_archive_as_the_server_does(run_dir, tmp_path, capsys, head,
                                                                                       what):
    from transformer.cli import main

    source = tmp_path / "notes.txt"
    source.write_bytes(head + b"\nLe chat dort.\n" * 10)
    capsys.readouterr()
    status = main(["translate", str(run_dir), "--input", str(source), "--output", str(tmp_path / "out.txt"),
                   "--greedy", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and f"{source} is {what}, not text" in err and "Traceback" not in err
    assert not (tmp_path / "out.txt").exists()
    with pytest.raises(FileFormatError, match=f"^notes.txt is {what}, not a .txt text file$"):
        read_file(source.read_bytes(), "notes.txt")


# --- The memory and time they take, measured (slow) -------------------------------------------

# The command line's peak RSS on each hostile file, imports (torch: about 300 MiB) included: the
# default tests check the limits that bound it (the element count, the depth) more cheaply, above.
PEAK_RSS_BOUND_MIB = 1024
CPU_BOUND_S = 120  # user + system time of the process: before, these inputs took 180 s to over 400 s


@pytest.mark.slow
@pytest.mark.parametrize("name, make, refusal", [
    ("empty.docx", lambda: docx_bytes("<w:p/>" * (20 * 1024 * 1024 // 6)), "more than 1,000,000 XML elements"),
    ("deep.html", lambda: ("<p>" + "<b>" * 200_000 + "Le chat." + "</b>" * 200_000 + "</p>").encode(),
     "more than 10,000 elements open at once"),
    ("stars.md", lambda: ("*" * 400_000 + "a" + "*" * 400_000 + "\n").encode(), "emphasis and links nested more"),
    ("list.md", lambda: "".join("  " * i + "- Le chien mange.\n" for i in range(2000)).encode(),
     "block quotes and list items nested more"),
])
def test_the_command_line_refuses_hostile_files_in_bounded_memory_and_time(run_dir, tmp_path, name, make, refusal):
    import subprocess
    import sys

    source = tmp_path / name
    source.write_bytes(make())
    command = [sys.executable, "-m", "transformer.cli", "translate", str(run_dir), "--input", str(source), "--output",
               str(tmp_path / f"out-{name}"), "--greedy", "--no-progress"]
    # A process of its own around the command, so that RUSAGE_CHILDREN holds this command's figures only.
    probe = ("import resource, subprocess, sys; done = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
             "usage = resource.getrusage(resource.RUSAGE_CHILDREN); "
             "print(done.returncode, usage.ru_maxrss, usage.ru_utime + usage.ru_stime); print(done.stderr)")
    out = subprocess.run([sys.executable, "-c", probe, *command], capture_output=True, text=True, timeout=900).stdout
    status, peak_kib, cpu_s = out.split("\n", 1)[0].split()
    assert int(status) == 2 and refusal in out and "Traceback" not in out, out
    assert int(peak_kib) / 1024 < PEAK_RSS_BOUND_MIB, out
    assert float(cpu_s) < CPU_BOUND_S, out

"""Word, PowerPoint and OpenDocument files translated with their formatting kept
(transformer/translate/files/office.py, docx.py, pptx.py, odt.py, package.py)."""

import io
import random
import re

import pytest

from office_helpers import (docx_bytes, encrypted, infos, members, odt_bytes, paragraph, pptx_bytes, reverse_words,
                            run, slide, translate, zip_bytes)
from transformer.translate.files import package
from transformer.translate.files.base import FileFormatError
from transformer.translate.files.docx import DocxFile
from transformer.translate.files.odt import OdtFile
from transformer.translate.files.pptx import PptxFile
from transformer.translate.html import translate_html

BOLD = "<w:b/>"
LINK = '<w:rStyle w:val="Hyperlink"/>'


def document_xml(data):
    return members(data)["word/document.xml"].decode()


def word_runs(data):
    """(text, bold, italic) of each run of each body paragraph, read back by python-docx."""
    docx = pytest.importorskip("docx")
    document = docx.Document(io.BytesIO(data))
    return [[(r.text, r.bold, r.italic) for r in p.runs] for p in document.paragraphs]


# --- Word ------------------------------------------------------------------------------


def test_docx_runs_keep_their_formatting_around_the_translated_words():
    data = docx_bytes(paragraph(run("Hello "), run("bold", BOLD), run(" world, "), run("in italics", "<w:i/>"),
                                run(".")))
    file = DocxFile.read(data, "a.docx")
    (unit,) = file.units()
    assert unit.html and unit.where == "word/document.xml, paragraph 1"
    assert unit.text == 'Hello <span data-r="1">bold</span> world, <span data-r="2">in italics</span>.'
    out = file.write(translate(file))
    assert word_runs(out) == [[("HELLO ", None, None), ("BOLD", True, None), (" WORLD, ", None, None),
                               ("IN ITALICS", None, True), (".", None, None)]]
    xml = document_xml(out)
    assert '<w:p><w:pPr><w:jc w:val="center"/></w:pPr>' in xml  # paragraph properties as they were
    assert xml.count('<w:r w:rsidR="00AB12CD"><w:rPr><w:b/></w:rPr><w:t>BOLD</w:t></w:r>') == 1


def test_docx_runs_follow_their_words_when_the_translation_reorders_them():
    data = docx_bytes(paragraph(run("one two "), run("three", BOLD), run(" four")))
    file = DocxFile.read(data, "a.docx")
    (page,) = [u.text for u in file.units()]

    def align(sources, targets):  # the reversed sentence: word i of the target is word n-1-i of the source
        return [[len(t.split()) - 1 - i for i in range(len(t.split()))] for t in targets]

    translation = translate_html(page, reverse_words, align=align)
    assert translation == 'four <span data-r="1">three</span> two one'
    assert word_runs(file.write([translation])) == [[("four ", None, None), ("three", True, None),
                                                     (" two one", None, None)]]


def test_docx_identity_translation_gives_the_same_bytes():
    data = docx_bytes(paragraph(run("Un "), run("deux", BOLD)) + paragraph(run("trois")),
                      header=paragraph(run("En-tête")), footnotes='<w:footnote w:id="1">' + paragraph(run("Note")) +
                      "</w:footnote>")
    file = DocxFile.read(data, "a.docx")
    assert len(file.units()) == 4
    assert file.write([u.text for u in file.units()]) == data
    assert file.write([u.text for u in file.units()], target_lang=None) is data


def test_docx_untouched_paragraphs_and_members_keep_their_bytes():
    kept = paragraph(run("Keep  this &amp; that", BOLD), ppr="")
    data = docx_bytes(kept + paragraph(run("change me")), header=paragraph(run("header stays")))
    file = DocxFile.read(data, "a.docx")
    only_second = [u.text if "change" not in u.text else u.text.upper() for u in file.units()]
    out = file.write(only_second)
    before, after = members(data), members(out)
    assert list(after) == list(before)
    assert {name for name in before if before[name] != after[name]} == {"word/document.xml"}
    assert kept in document_xml(out)
    assert "CHANGE ME" in document_xml(out)
    assert [(i.filename, i.date_time, i.compress_type, i.external_attr) for i in infos(out)] == \
        [(i.filename, i.date_time, i.compress_type, i.external_attr) for i in infos(data)]


def test_docx_hyperlink_keeps_its_relationship_and_wraps_the_link_text():
    link = f'<w:hyperlink r:id="rId5" w:history="1">{run("the site", LINK)}</w:hyperlink>'
    data = docx_bytes(paragraph(run("See "), link, run(" for more.")))
    file = DocxFile.read(data, "a.docx")
    (unit,) = file.units()
    assert unit.text == 'See <a data-g="0"><span data-r="1">the site</span></a> for more.'
    xml = document_xml(file.write(translate(file)))
    assert re.search(r'<w:hyperlink r:id="rId5" w:history="1"><w:r [^>]*><w:rPr><w:rStyle w:val="Hyperlink"/>'
                     r"</w:rPr><w:t>THE SITE</w:t></w:r></w:hyperlink>", xml)


def test_docx_tables_headers_footnotes_and_text_boxes_are_translated():
    table = f"<w:tbl><w:tr><w:tc>{paragraph(run('cell'))}</w:tc></w:tr></w:tbl>"
    box = (f'<w:r><w:drawing><wp:inline><a:graphic><a:graphicData><wps:wsp><wps:txbx><w:txbxContent>'
           f'{paragraph(run("in the box"))}</w:txbxContent></wps:txbx></wps:wsp></a:graphicData></a:graphic>'
           f"</wp:inline></w:drawing></w:r>")
    fallback = (f"<w:r><mc:AlternateContent><mc:Choice Requires=\"wps\">{box[5:-6]}</mc:Choice><mc:Fallback>"
                f"<w:pict><v:textbox><w:txbxContent>{paragraph(run('old copy'))}</w:txbxContent></v:textbox>"
                f"</w:pict></mc:Fallback></mc:AlternateContent></w:r>")
    body = table + paragraph(run("Around "), box, run(" the box.")) + paragraph(run("Second "), fallback)
    data = docx_bytes(body, header=paragraph(run("header")),
                      footnotes=f'<w:footnote w:id="1">{paragraph(run("a note"))}</w:footnote>')
    file = DocxFile.read(data, "a.docx")
    assert [u.text for u in file.units()] == [
        "cell", 'Around <img data-p="0"> the box.', "in the box", 'Second <img data-p="0">', "in the box",
        "header", "a note"]
    assert [u.where for u in file.units()][-2:] == ["word/header1.xml, paragraph 1", "word/footnotes.xml, paragraph 1"]
    out = file.write(translate(file))
    xml = document_xml(out)
    # The box's paragraph is translated inside its translated paragraph; the fallback copy is left.
    assert "AROUND " in xml and "IN THE BOX" in xml and xml.count("in the box") == 0 and "old copy" in xml
    assert xml.count("<w:drawing>") == 2 and "CELL" in xml
    assert "HEADER" in members(out)["word/header1.xml"].decode()
    assert "A NOTE" in members(out)["word/footnotes.xml"].decode()
    # Only the box changed: the paragraph around it keeps its bytes.
    only_box = [u.text.upper() if u.text == "in the box" else u.text for u in file.units()]
    xml = document_xml(file.write(only_box))
    rebuilt = box.replace(run("in the box"), '<w:r w:rsidR="00AB12CD"><w:t>IN THE BOX</w:t></w:r>')
    assert paragraph(run("Around "), rebuilt, run(" the box.")) in xml


def test_docx_fields_pictures_breaks_and_bookmarks_are_kept_in_order():
    field = ('<w:r><w:fldChar w:fldCharType="begin"/></w:r><w:r><w:instrText xml:space="preserve"> PAGE </w:instrText>'
             '</w:r><w:r><w:fldChar w:fldCharType="separate"/></w:r><w:r><w:t>3</w:t></w:r>'
             '<w:r><w:fldChar w:fldCharType="end"/></w:r>')
    data = docx_bytes(paragraph('<w:bookmarkStart w:id="0" w:name="b"/>', run("Page "), field,
                                '<w:bookmarkEnd w:id="0"/>', '<w:proofErr w:type="spellStart"/>',
                                run("of the report"), '<w:r><w:tab/></w:r>', run("next")))
    file = DocxFile.read(data, "a.docx")
    (unit,) = file.units()
    assert unit.text == ('<img data-p="0">Page <img data-p="1"><img data-p="2"><img data-p="3">3<img data-p="4">'
                         '<img data-p="5">of the report<br data-p="6">next')
    # Points come back in their order whatever the translation did with them; a lost one at the end.
    scrambled = '<img data-p="3">SEITE <img data-p="1"><img data-p="0">3 <img data-p="4"><img data-p="2">VOM BERICHT'
    xml = document_xml(file.write([scrambled]))
    order = [m.group(1) or m.group() for m in re.finditer(r'fldCharType="\w+"|PAGE|bookmark\w+|<w:tab/>|<w:t[^>]*>([^<]*)', xml)]
    assert order == ["bookmarkStart", "SEITE ", 'fldCharType="begin"', "PAGE", "3 ", 'fldCharType="separate"',
                     'fldCharType="end"', "VOM BERICHT", "bookmarkEnd", "<w:tab/>"]
    assert "proofErr" not in xml  # spell-check marks are the word processor's to make again


def test_docx_text_is_escaped_and_spaces_preserved():
    data = docx_bytes(paragraph(run("a &lt; b", space=False), run(" c", BOLD)))
    file = DocxFile.read(data, "a.docx")
    (unit,) = file.units()
    assert unit.text == 'a &lt; b<span data-r="1"> c</span>'
    xml = document_xml(file.write(['<span data-r="1">x &amp; y </span>&lt;z&gt; &quot;q&quot;&nbsp;!']))
    assert '<w:t xml:space="preserve">x &amp; y </w:t>' in xml
    assert '<w:t>&lt;z&gt; "q"\u00a0!</w:t>' in xml
    assert word_runs(file.write(['<span data-r="1">x &amp; y </span>&lt;z&gt;\x0b\x00'])) == [
        [("x & y ", True, None), ("<z>", None, None)]]  # characters XML does not allow are left out


def test_docx_translation_that_lost_or_added_tags_still_writes_a_valid_paragraph():
    link = f'<w:hyperlink r:id="rId5">{run("link", LINK)}</w:hyperlink>'
    data = docx_bytes(paragraph(run("A "), link, run(" and a picture "), '<w:r><w:drawing><wp:inline/></w:drawing></w:r>'))
    file = DocxFile.read(data, "a.docx")
    out = file.write(['<b>EIN</b> <a data-g="0">LINK</a> <a data-g="0">wieder</a> <span data-r="9">x</span></i>'])
    xml = document_xml(out)
    assert xml.count("<w:hyperlink") == 1 and xml.count("<w:drawing>") == 1
    assert xml.index("</w:hyperlink>") < xml.index("<w:drawing>")
    assert "".join(re.findall(r"<w:t[^>]*>([^<]*)", xml)) == "EIN LINK wieder x"
    assert word_runs(out)  # python-docx reads it
    xml = document_xml(file.write(['EIN <a data-g="0"><span data-r="1">LINK</span> offen']))  # never closed
    assert re.search(r"<w:hyperlink r:id=\"rId5\">.*LINK.* offen</w:t></w:r></w:hyperlink><w:r><w:drawing>", xml)


def test_docx_target_language_is_set_in_translated_runs_styles_and_properties():
    data = docx_bytes(paragraph(run("Bonjour", '<w:lang w:val="fr-FR" w:eastAsia="ja-JP"/>')) + paragraph(run("Merci")))
    file = DocxFile.read(data, "a.docx")
    out = file.write([file.units()[0].text.upper(), file.units()[1].text], target_lang="en-GB")
    after = members(out)
    assert '<w:lang w:val="en-GB" w:eastAsia="ja-JP"/>' in after["word/document.xml"].decode()
    assert '<w:lang w:val="en-GB" w:eastAsia="zh-CN"/>' in after["word/styles.xml"].decode()
    assert "<dc:language>en-GB</dc:language>" in after["docProps/core.xml"].decode()
    assert after["word/media/image1.png"] == members(data)["word/media/image1.png"]
    with pytest.raises(ValueError, match="not a language code"):
        file.write([u.text for u in file.units()], target_lang='en"><x')
    with pytest.raises(ValueError, match="1 translations for 2 units"):
        file.write(["x"])


def test_docx_built_by_python_docx_round_trips():
    docx = pytest.importorskip("docx")
    document = docx.Document()
    p = document.add_paragraph("The ")
    p.add_run("quick").bold = True
    p.add_run(" fox.")
    document.add_table(rows=1, cols=1).cell(0, 0).text = "table cell"
    document.sections[0].header.paragraphs[0].text = "the header"
    buffer = io.BytesIO()
    document.save(buffer)
    data = buffer.getvalue()
    file = DocxFile.read(data, "a.docx")
    assert file.write([u.text for u in file.units()]) == data
    reread = docx.Document(io.BytesIO(file.write(translate(file), target_lang="de")))
    assert [(r.text, r.bold) for r in reread.paragraphs[0].runs] == [("THE ", None), ("QUICK", True), (" FOX.", None)]
    assert reread.tables[0].cell(0, 0).text == "TABLE CELL"
    assert reread.sections[0].header.paragraphs[0].text == "THE HEADER"


# --- Errors ------------------------------------------------------------------------------


def test_archives_that_are_not_readable_are_refused_in_one_line():
    good = docx_bytes(paragraph(run("x")))
    no_document = zip_bytes([(n, c) for n, c in members(good).items() if n != "word/document.xml"])
    no_types = zip_bytes([(n, c) for n, c in members(good).items() if n != "[Content_Types].xml"])
    broken = zip_bytes([(n, c if n != "word/document.xml" else b"<w:document><w:body>") for n, c in members(good).items()])
    doctype = zip_bytes([(n, c if n != "word/document.xml" else
                          b'<!DOCTYPE d [<!ENTITY a "aaaa">]><d>&a;</d>') for n, c in members(good).items()])
    cases = [
        (b"PK\x03\x04 not really a zip", "a.docx is not a Word document: a corrupt zip archive"),
        (good[: len(good) // 2], "a.docx is not a Word document: a corrupt zip archive"),
        (no_document, "a.docx is not a Word document: it has no main part"),
        (no_types, r"a.docx is not a Word document: it has no \[Content_Types\].xml"),
        (broken, "a.docx: word/document.xml is not well-formed XML"),
        (doctype, "a.docx: word/document.xml declares entities, which are not read"),
        (encrypted(good, "word/document.xml"), "a.docx is encrypted"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500), "a.docx is encrypted .password-protected. or in an old"),
    ]
    for data, message in cases:
        with pytest.raises(FileFormatError, match=message) as caught:
            DocxFile.read(data, "a.docx")
        assert "\n" not in str(caught.value)
    with pytest.raises(FileFormatError, match="a.pptx is not a PowerPoint presentation: it has no main part"):
        PptxFile.read(good, "a.pptx")
    with pytest.raises(FileFormatError, match="a.odt is not an OpenDocument text: it has no content.xml"):
        OdtFile.read(good, "a.odt")


def test_zip_bombs_and_archives_of_too_many_members_are_refused(monkeypatch):
    data = docx_bytes(paragraph(run("x" * 5000)))
    monkeypatch.setattr(package, "MAX_UNCOMPRESSED", 4000)
    with pytest.raises(FileFormatError, match=r"a.docx: its archive holds [\d,]+ bytes uncompressed, over the limit "
                                              r"of 4,000 bytes"):
        DocxFile.read(data, "a.docx")
    monkeypatch.setattr(package, "MAX_UNCOMPRESSED", 10**6)
    DocxFile.read(data, "a.docx")
    monkeypatch.setattr(package, "MAX_MEMBERS", 5)
    with pytest.raises(FileFormatError, match="a.docx: 7 members in its archive, over the limit of 5"):
        DocxFile.read(data, "a.docx")


def test_the_registry_reads_the_office_formats():
    from transformer.translate.files import read_file

    assert isinstance(read_file(docx_bytes(paragraph(run("x"))), "Report.DOCX"), DocxFile)
    assert isinstance(read_file(odt_bytes("<text:p>x</text:p>"), "a.odt"), OdtFile)


# --- PowerPoint --------------------------------------------------------------------------


def test_pptx_slides_in_presentation_order_then_notes():
    first = slide('<a:p><a:pPr algn="ctr"/><a:r><a:rPr lang="fr-FR" b="1"/><a:t>Le</a:t></a:r>'
                  '<a:r><a:rPr lang="fr-FR"/><a:t> titre</a:t></a:r><a:endParaRPr lang="fr-FR"/></a:p>')
    second = slide('<a:p><a:r><a:rPr lang="fr-FR"/><a:t>Deux</a:t></a:r><a:br><a:rPr lang="fr-FR"/></a:br>'
                   '<a:fld id="{1}" type="slidenum"><a:rPr lang="fr-FR"/><a:t>2</a:t></a:fld></a:p><a:p><a:endParaRPr/></a:p>')
    notes = slide("<a:p><a:r><a:t>Une note</a:t></a:r></a:p>")
    data = pptx_bytes([first, second], order=[2, 1], notes=[notes])
    file = PptxFile.read(data, "a.pptx")
    assert [(u.where, u.text) for u in file.units()] == [
        ("ppt/slides/slide2.xml, paragraph 1", 'Deux<br data-p="0"><img data-p="1">'),
        ("ppt/slides/slide1.xml, paragraph 1", '<span data-r="0">Le</span> titre'),
        ("ppt/notesSlides/notesSlide1.xml, paragraph 1", "Une note"),
    ]
    assert file.write([u.text for u in file.units()]) == data
    out = members(file.write(translate(file), target_lang="de"))
    assert ('<a:p><a:pPr algn="ctr"/><a:r><a:rPr lang="de" b="1"/><a:t>LE</a:t></a:r><a:r><a:rPr lang="de"/>'
            '<a:t> TITRE</a:t></a:r><a:endParaRPr lang="de"/></a:p>') in out["ppt/slides/slide1.xml"].decode()
    assert ('<a:r><a:rPr lang="de"/><a:t>DEUX</a:t></a:r><a:br><a:rPr lang="fr-FR"/></a:br><a:fld id="{1}" '
            'type="slidenum"><a:rPr lang="fr-FR"/><a:t>2</a:t></a:fld></a:p><a:p><a:endParaRPr/></a:p>'
            ) in out["ppt/slides/slide2.xml"].decode()
    assert "UNE NOTE" in out["ppt/notesSlides/notesSlide1.xml"].decode()


def test_pptx_built_by_python_pptx_round_trips():
    pptx = pytest.importorskip("pptx")
    from pptx.util import Inches

    presentation = pptx.Presentation()
    page = presentation.slides.add_slide(presentation.slide_layouts[1])
    page.shapes.title.text = "The title"
    body = page.placeholders[1].text_frame
    body.text = "A point"
    bold = body.add_paragraph().add_run()
    bold.text, bold.font.bold = "strong words", True
    link = body.paragraphs[1].add_run()
    link.text, link.hyperlink.address = " and a link", "https://example.com/"
    page.shapes.add_table(1, 1, Inches(1), Inches(1), Inches(2), Inches(1)).table.cell(0, 0).text = "a cell"
    page.notes_slide.notes_text_frame.text = "speaker notes"
    buffer = io.BytesIO()
    presentation.save(buffer)
    data = buffer.getvalue()
    file = PptxFile.read(data, "a.pptx")
    assert file.write([u.text for u in file.units()]) == data
    reread = pptx.Presentation(io.BytesIO(file.write(translate(file))))
    shapes = reread.slides[0].shapes
    assert shapes.title.text == "THE TITLE"
    runs = [(r.text, r.font.bold, r.hyperlink.address) for r in shapes[1].text_frame.paragraphs[1].runs]
    assert runs == [("STRONG WORDS", True, None), (" AND A LINK", None, "https://example.com/")]
    assert shapes[2].table.cell(0, 0).text == "A CELL"
    assert reread.slides[0].notes_slide.notes_text_frame.text == "SPEAKER NOTES"


# --- OpenDocument text -------------------------------------------------------------------


def test_odt_spans_links_spaces_and_breaks():
    body = ('<text:h text:outline-level="1">Le titre</text:h>'
            '<text:p text:style-name="P1">\n  Un <text:span text:style-name="T1">mot gras</text:span> et un '
            '<text:a xlink:type="simple" xlink:href="https://example.com/">lien</text:a>.<text:s text:c="2"/>Deux'
            '<text:tab/>trois<text:line-break/>quatre <text:bookmark text:name="m"/>&amp; cinq<text:soft-page-break/></text:p>')
    data = odt_bytes(body, header="<text:p>En-tête</text:p>")
    file = OdtFile.read(data, "a.odt")
    assert [u.text for u in file.units()] == [
        "Le titre",
        'Un <span data-g="0">mot gras</span> et un <a data-g="1">lien</a>.  Deux<br data-p="0">trois<br data-p="1">'
        'quatre <img data-p="2">&amp; cinq',
        "En-tête"]
    assert file.write([u.text for u in file.units()]) == data
    translation = ('  UN <span data-g="0">MOT GRAS</span> ET UN <a data-g="1">LIEN</a>.   DEUX<br data-p="0">TROIS'
                   '<br data-p="1">QUATRE <img data-p="2">&amp; CINQ')
    out = file.write(["LE TITRE", translation, "EN-TÊTE"])
    content = members(out)["content.xml"].decode()
    assert ('<text:p text:style-name="P1"><text:s text:c="2"/>UN <text:span text:style-name="T1">MOT GRAS</text:span>'
            ' ET UN <text:a xlink:type="simple" xlink:href="https://example.com/">LIEN</text:a>. <text:s text:c="2"/>'
            'DEUX<text:tab/>TROIS<text:line-break/>QUATRE <text:bookmark text:name="m"/>&amp; CINQ</text:p>') in content
    assert '<text:h text:outline-level="1">LE TITRE</text:h>' in content
    assert "<text:p>EN-TÊTE</text:p>" in members(out)["styles.xml"].decode()


def test_odt_notes_and_frames_hold_paragraphs_of_their_own():
    body = ('<text:p>Texte<text:note text:id="n1" text:note-class="footnote"><text:note-citation>1</text:note-citation>'
            '<text:note-body><text:p>La note</text:p></text:note-body></text:note> suite.'
            '<draw:frame draw:name="f"><draw:image xlink:href="Pictures/a.png"/></draw:frame></text:p>'
            '<text:tracked-changes><text:changed-region><text:deletion><text:p>effacé</text:p></text:deletion>'
            '</text:changed-region></text:tracked-changes>')
    data = odt_bytes(body)
    file = OdtFile.read(data, "a.odt")
    assert [u.text for u in file.units()] == ['Texte<img data-p="0"> suite.<img data-p="1">', "La note"]
    out = members(file.write(translate(file)))["content.xml"].decode()
    assert "<text:p>TEXTE<text:note " in out and "<text:p>LA NOTE</text:p>" in out and " SUITE." in out
    assert "<text:note-citation>1</text:note-citation>" in out and "effacé" in out


def test_odt_language_mimetype_and_members():
    data = odt_bytes("<text:p>Bonjour</text:p>")
    file = OdtFile.read(data, "a.odt")
    out = file.write(["HELLO"], target_lang="en-US")
    after, before = members(out), members(data)
    assert infos(out)[0].filename == "mimetype" and infos(out)[0].compress_type == 0
    assert "<dc:language>en-US</dc:language>" in after["meta.xml"].decode()
    styles = after["styles.xml"].decode()
    assert '<style:default-style style:family="paragraph"><style:text-properties fo:language="en" fo:country="US"/>' in styles
    assert '<style:text-properties fo:language="fr"/>' in styles  # only the default style's
    assert after["Pictures/a.png"] == before["Pictures/a.png"]
    assert after["META-INF/manifest.xml"] == before["META-INF/manifest.xml"]
    assert '<style:text-properties fo:language="de" fo:country="none"/>' in members(
        file.write(["HALLO"], target_lang="de"))["styles.xml"].decode()
    with pytest.raises(FileFormatError, match="a.odt is not an OpenDocument text: its mimetype is "
                                              "'application/vnd.oasis.opendocument.spreadsheet'"):
        OdtFile.read(odt_bytes("", mimetype="application/vnd.oasis.opendocument.spreadsheet"), "a.odt")


def test_odt_built_by_odfpy_round_trips():
    pytest.importorskip("odf")
    from odf import teletype
    from odf.opendocument import OpenDocumentText, load
    from odf.style import Style, TextProperties
    from odf.text import A, P, S, Span

    document = OpenDocumentText()
    bold = Style(name="Bold", family="text")
    bold.addElement(TextProperties(fontweight="bold"))
    document.automaticstyles.addElement(bold)
    p = P(text="Hello ")
    p.addElement(Span(stylename=bold, text="bold words"))
    p.addText(" and a ")
    p.addElement(A(href="https://example.com/", text="link"))
    p.addElement(S(c=2))
    p.addText("end")
    document.text.addElement(p)
    buffer = io.BytesIO()
    document.save(buffer)
    data = buffer.getvalue()
    file = OdtFile.read(data, "a.odt")
    assert file.write([u.text for u in file.units()]) == data
    reread = load(io.BytesIO(file.write(translate(file))))
    (paragraph_,) = reread.getElementsByType(P)
    assert teletype.extractText(paragraph_) == "HELLO BOLD WORDS AND A LINK END"
    assert teletype.extractText(reread.getElementsByType(Span)[0]) == "BOLD WORDS"
    assert reread.getElementsByType(A)[0].getAttribute("href") == "https://example.com/"


def test_paragraphs_without_text_are_not_units():
    data = docx_bytes(paragraph() + paragraph(run("  ")) + paragraph('<w:r><w:tab/></w:r>') + paragraph(run("x")))
    assert [u.text for u in DocxFile.read(data, "a.docx").units()] == ["x"]


def test_any_translation_of_a_paragraph_gives_well_formed_xml_with_every_point_once():
    from xml.etree import ElementTree

    rng = random.Random(7)
    pieces = [lambda: run(rng.choice(["one two", " three ", "four. Five", "&amp; six"]), rng.choice(["", BOLD, "<w:i/>"])),
              lambda: f'<w:hyperlink r:id="rId5">{run("link text", LINK)}</w:hyperlink>',
              lambda: '<w:r><w:tab/></w:r>', lambda: '<w:bookmarkStart w:id="1" w:name="b"/>',
              lambda: '<w:r><w:drawing><wp:inline/></w:drawing></w:r>']
    for _ in range(30):
        body = "".join(paragraph(*(rng.choice(pieces)() for _ in range(rng.randint(1, 8)))) for _ in range(3))
        data = docx_bytes(body)
        file = DocxFile.read(data, "a.docx")

        def scramble(sentences):  # words shuffled, some dropped, some new
            out = []
            for sentence in sentences:
                words = sentence.split()
                rng.shuffle(words)
                out.append(" ".join(words[: rng.randint(0, len(words))] + ["neu"] * rng.randint(0, 2)))
            return out

        def align(sources, targets):
            return [[rng.randint(-1, len(s.split()) - 1) for _ in t.split()] for s, t in zip(sources, targets)]

        translations = [translate_html(u.text, scramble, align=align if rng.random() < 0.5 else None)
                        for u in file.units()]
        if rng.random() < 0.3:  # a translator that mangles the tags themselves
            translations = [re.sub(r"</?(a|span|img|br)[^>]*>", "", t, count=rng.randint(0, 3)) for t in translations]
        xml = members(file.write(translations))["word/document.xml"]
        ElementTree.fromstring(xml)
        for element in (b"<w:tab/>", b"<w:bookmarkStart", b"<w:drawing>"):
            assert xml.count(element) == members(data)["word/document.xml"].count(element)

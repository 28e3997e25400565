"""A small e-book (EPUB 3 with an NCX table of contents, two chapters, a style sheet and an image) and
its parts, built as bytes for the tests of the e-book format and of the file limits."""

from office_helpers import zip_bytes

CONTAINER = ('<?xml version="1.0"?>\n<container version="1.0" xmlns="urn:oasis:names:tc:opendocument:xmlns:container">'
             '<rootfiles><rootfile full-path="OEBPS/content.opf" media-type="application/oebps-package+xml"/>'
             "</rootfiles></container>")
CHAPTER_ONE = ('<?xml version="1.0" encoding="utf-8"?>\n'
               '<!DOCTYPE html PUBLIC "-//W3C//DTD XHTML 1.1//EN" "http://www.w3.org/TR/xhtml11/DTD/xhtml11.dtd">\n'
               '<html xmlns="http://www.w3.org/1999/xhtml" xml:lang="fr">\n<head><title>Chapitre un</title>'
               '<link rel="stylesheet" type="text/css" href="style.css"/></head>\n<body>\n'
               '<h1 id="c1">Chapitre un</h1>\n<p>Il était <b>une fois</b> un <a href="ch2.xhtml#x">roi</a>&#160;sage.'
               '<br/>Fin &amp; suite.<a id="page2"/></p>\n<p><img src="images/a.png" alt="une image"/></p>\n'
               "</body>\n</html>\n")
CHAPTER_TWO = ('<?xml version="1.0" encoding="utf-8"?>\n<!DOCTYPE html>\n'
               '<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">'
               '<head><title>Deux</title></head><body><section epub:type="chapter"><p id="x">Le roi dort.</p>'
               "</section></body></html>")
NCX = ('<?xml version="1.0" encoding="UTF-8"?>\n<ncx xmlns="http://www.daisy.org/z3986/2005/ncx/" version="2005-1">'
       '<head><meta name="dtb:uid" content="b1"/></head><docTitle><text>Le livre</text></docTitle>'
       '<docAuthor><text>Jean Dupont</text></docAuthor><navMap><navPoint id="n1" playOrder="1"><navLabel>'
       '<text>Chapitre un</text></navLabel><content src="ch1.xhtml"/></navPoint></navMap></ncx>')


def opf(language="<dc:language>fr</dc:language>", spine=("ch1", "ch2")):
    """The package document, with ``language`` in its metadata and the pages of ``spine`` in reading order."""
    return ('<?xml version="1.0" encoding="UTF-8"?>\n<package xmlns="http://www.idpf.org/2007/opf" version="3.0" '
            'unique-identifier="uid"><metadata xmlns:dc="http://purl.org/dc/elements/1.1/">'
            f'<dc:identifier id="uid">b1</dc:identifier><dc:title>Le livre</dc:title>{language}</metadata>'
            '<manifest><item id="ch2" href="ch2.xhtml" media-type="application/xhtml+xml"/>'
            '<item id="ch1" href="ch1.xhtml" media-type="application/xhtml+xml"/>'
            '<item id="nav" href="nav.xhtml" media-type="application/xhtml+xml" properties="nav"/>'
            '<item id="ncx" href="toc.ncx" media-type="application/x-dtbncx+xml"/>'
            '<item id="css" href="style.css" media-type="text/css"/>'
            '<item id="img" href="images/a.png" media-type="image/png"/></manifest>'
            f'<spine toc="ncx">{"".join(f"<itemref idref={chr(34)}{i}{chr(34)}/>" for i in spine)}</spine></package>')


def epub_bytes(*, chapter_one=CHAPTER_ONE, package=None, container=CONTAINER, mimetype="application/epub+zip",
               leave_out=()):
    """The book as bytes; each part can be replaced, and members named in ``leave_out`` left out."""
    parts = [
        ("mimetype", mimetype),
        ("META-INF/container.xml", container),
        ("OEBPS/content.opf", package or opf()),
        ("OEBPS/ch1.xhtml", chapter_one),
        ("OEBPS/ch2.xhtml", CHAPTER_TWO),
        ("OEBPS/nav.xhtml", '<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml" '
         'xmlns:epub="http://www.idpf.org/2007/ops" lang="fr" xml:lang="fr"><head><title>Table</title></head><body>'
         '<nav epub:type="toc"><ol><li><a href="ch1.xhtml">Chapitre un</a></li></ol></nav></body></html>'),
        ("OEBPS/toc.ncx", NCX),
        ("OEBPS/style.css", "p { margin: 0 }\n"),
        ("OEBPS/images/a.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256))),
    ]
    return zip_bytes([(name, content) for name, content in parts if name not in leave_out])

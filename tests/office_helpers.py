"""Small office documents and e-books written member by member, and fake translators, shared by
test_files_office.py and test_files_epub.py (transformer/translate/files/office.py, epub.py)."""

import io
import struct
import zipfile

from transformer.translate.html import translate_html


def zip_bytes(members, *, stored=("mimetype",)):
    """A zip archive of ``members`` ((name, str or bytes) in order), deflated but for ``stored``."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        for name, content in members:
            info = zipfile.ZipInfo(name, (2024, 5, 6, 7, 8, 10))
            info.compress_type = zipfile.ZIP_STORED if name in stored else zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, content.encode() if isinstance(content, str) else content)
    return out.getvalue()


def members(data):
    """Each member's content by name, in archive order."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return {info.filename: archive.read(info) for info in archive.infolist()}


def infos(data):
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        return archive.infolist()


def encrypted(data, member):
    """``data`` with the encryption flag set on ``member`` (local and central headers)."""
    data = bytearray(data)
    info = next(i for i in infos(bytes(data)) if i.filename == member)
    data[info.header_offset + 6] |= 1
    position = data.find(b"PK\x01\x02")
    while position >= 0:
        name_length = struct.unpack("<H", data[position + 28 : position + 30])[0]
        if data[position + 46 : position + 46 + name_length] == member.encode():
            data[position + 8] |= 1
        position = data.find(b"PK\x01\x02", position + 4)
    return bytes(data)


def upper(sentences):
    return [s.upper() for s in sentences]


def reverse_words(sentences):
    return [" ".join(reversed(s.split())) for s in sentences]


def translate(file, fn=upper, text_fn=None):
    """Each unit of ``file`` translated by ``fn`` (sentences -> translations): HTML units through
    translate_html, plain ones whole."""
    return [translate_html(u.text, fn) if u.html else (text_fn or fn)([u.text])[0] for u in file.units()]


# --- Word ------------------------------------------------------------------------------

W = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
NAMESPACES = (
    'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main" '
    'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
    'xmlns:mc="http://schemas.openxmlformats.org/markup-compatibility/2006" '
    'xmlns:wp="http://schemas.openxmlformats.org/drawingml/2006/wordprocessingDrawing" '
    'xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
    'xmlns:wps="http://schemas.microsoft.com/office/word/2010/wordprocessingShape" '
    'xmlns:v="urn:schemas-microsoft-com:vml" mc:Ignorable="wps"'
)
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_MAIN = "application/vnd.openxmlformats-officedocument.wordprocessingml"


def docx_bytes(body, *, header=None, footnotes=None, language="fr-FR", core_language="fr", extra=()):
    """A Word document with ``body`` (the XML inside ``w:body``), optionally a header's and the
    footnotes' paragraphs, a picture and the core properties."""
    types = [
        f'<Override PartName="/word/document.xml" ContentType="{_MAIN}.document.main+xml"/>',
        f'<Override PartName="/word/styles.xml" ContentType="{_MAIN}.styles+xml"/>',
        '<Override PartName="/docProps/core.xml" ContentType="application/vnd.openxmlformats-package.core-properties+xml"/>',
    ]
    rels = [
        f'<Relationship Id="rId1" Type="{_REL}/styles" Target="styles.xml"/>',
        f'<Relationship Id="rId5" Type="{_REL}/hyperlink" Target="https://example.com/a?b=1&amp;c=2" TargetMode="External"/>',
        f'<Relationship Id="rId7" Type="{_REL}/image" Target="media/image1.png"/>',
    ]
    parts = []
    if header is not None:
        types.append(f'<Override PartName="/word/header1.xml" ContentType="{_MAIN}.header+xml"/>')
        rels.append(f'<Relationship Id="rId6" Type="{_REL}/header" Target="header1.xml"/>')
        parts.append(("word/header1.xml", f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
                                          f'<w:hdr {NAMESPACES}>{header}</w:hdr>'))
    if footnotes is not None:
        types.append(f'<Override PartName="/word/footnotes.xml" ContentType="{_MAIN}.footnotes+xml"/>')
        rels.append(f'<Relationship Id="rId8" Type="{_REL}/footnotes" Target="footnotes.xml"/>')
        parts.append(("word/footnotes.xml", f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
                                            f'<w:footnotes {NAMESPACES}>{footnotes}</w:footnotes>'))
    return zip_bytes([
        ("[Content_Types].xml", '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
         '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
         '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
         '<Default Extension="xml" ContentType="application/xml"/><Default Extension="png" ContentType="image/png"/>'
         + "".join(types) + "</Types>"),
        ("_rels/.rels", '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
         '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
         f'<Relationship Id="rId1" Type="{_REL}/officeDocument" Target="word/document.xml"/>'
         '<Relationship Id="rId2" Type="http://schemas.openxmlformats.org/package/2006/relationships/metadata/'
         'core-properties" Target="docProps/core.xml"/></Relationships>'),
        ("docProps/core.xml", '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
         '<cp:coreProperties xmlns:cp="http://schemas.openxmlformats.org/package/2006/metadata/core-properties" '
         'xmlns:dc="http://purl.org/dc/elements/1.1/"><dc:title>Rapport</dc:title>'
         f'<dc:language>{core_language}</dc:language></cp:coreProperties>'),
        ("word/document.xml", '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\r\n'
         f'<w:document {NAMESPACES}><w:body>{body}<w:sectPr/></w:body></w:document>'),
        ("word/_rels/document.xml.rels", '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
         '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
         + "".join(rels) + "</Relationships>"),
        ("word/styles.xml", f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:styles {NAMESPACES}>'
         f'<w:docDefaults><w:rPrDefault><w:rPr><w:lang w:val="{language}" w:eastAsia="zh-CN"/></w:rPr>'
         '</w:rPrDefault></w:docDefaults></w:styles>'),
        ("word/media/image1.png", b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4),
        *parts,
        *extra,
    ])


def paragraph(*runs, ppr='<w:pPr><w:jc w:val="center"/></w:pPr>'):
    return f"<w:p>{ppr}{''.join(runs)}</w:p>"


def run(text, props="", space=True):
    attribute = ' xml:space="preserve"' if space else ""
    return f'<w:r w:rsidR="00AB12CD">{f"<w:rPr>{props}</w:rPr>" if props else ""}<w:t{attribute}>{text}</w:t></w:r>'


# --- PowerPoint ----------------------------------------------------------------------------

_P = ('xmlns:a="http://schemas.openxmlformats.org/drawingml/2006/main" '
      'xmlns:r="http://schemas.openxmlformats.org/officeDocument/2006/relationships" '
      'xmlns:p="http://schemas.openxmlformats.org/presentationml/2006/main"')
_PML = "application/vnd.openxmlformats-officedocument.presentationml"


def slide(*paragraphs):
    return (f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<p:sld {_P}><p:cSld><p:spTree><p:sp><p:txBody>'
            f'<a:bodyPr/>{"".join(paragraphs)}</p:txBody></p:sp></p:spTree></p:cSld></p:sld>')


def pptx_bytes(slides, order, notes=()):
    """A presentation of ``slides`` (slide XML, stored as slide1.xml, slide2.xml...) shown in
    ``order`` (1-based slide numbers), and notes slides (their XML)."""
    types = [f'<Override PartName="/ppt/presentation.xml" ContentType="{_PML}.presentation.main+xml"/>']
    rels, parts = [], []
    for n, xml in enumerate(slides, 1):
        types.append(f'<Override PartName="/ppt/slides/slide{n}.xml" ContentType="{_PML}.slide+xml"/>')
        rels.append(f'<Relationship Id="rId{10 + n}" Type="{_REL}/slide" Target="slides/slide{n}.xml"/>')
        parts.append((f"ppt/slides/slide{n}.xml", xml))
    for n, xml in enumerate(notes, 1):
        types.append(f'<Override PartName="/ppt/notesSlides/notesSlide{n}.xml" ContentType="{_PML}.notesSlide+xml"/>')
        parts.append((f"ppt/notesSlides/notesSlide{n}.xml", xml.replace("p:sld", "p:notes")))
    ids = "".join(f'<p:sldId id="{255 + n}" r:id="rId{10 + n}"/>' for n in order)
    return zip_bytes([
        ("[Content_Types].xml", '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
         '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">' + "".join(types) + "</Types>"),
        ("ppt/presentation.xml", f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<p:presentation {_P}>'
         f"<p:sldIdLst>{ids}</p:sldIdLst></p:presentation>"),
        ("ppt/_rels/presentation.xml.rels", '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
         '<Relationships xmlns="http://schemas.openxmlformats.org/package/2006/relationships">'
         + "".join(rels) + "</Relationships>"),
        *parts,
    ])


# --- OpenDocument text -------------------------------------------------------------------------

_ODF = ('xmlns:office="urn:oasis:names:tc:opendocument:xmlns:office:1.0" '
        'xmlns:text="urn:oasis:names:tc:opendocument:xmlns:text:1.0" '
        'xmlns:style="urn:oasis:names:tc:opendocument:xmlns:style:1.0" '
        'xmlns:fo="urn:oasis:names:tc:opendocument:xmlns:xsl-fo-compatible:1.0" '
        'xmlns:draw="urn:oasis:names:tc:opendocument:xmlns:drawing:1.0" '
        'xmlns:xlink="http://www.w3.org/1999/xlink" xmlns:dc="http://purl.org/dc/elements/1.1/" '
        'xmlns:meta="urn:oasis:names:tc:opendocument:xmlns:meta:1.0" office:version="1.3"')


def odt_bytes(body, *, header="", mimetype="application/vnd.oasis.opendocument.text"):
    """An OpenDocument text with ``body`` (inside ``office:text``) and a page header's paragraphs."""
    return zip_bytes([
        ("mimetype", mimetype),
        ("content.xml", f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-content {_ODF}>'
         f"<office:body><office:text>{body}</office:text></office:body></office:document-content>"),
        ("styles.xml", f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-styles {_ODF}><office:styles>'
         '<style:default-style style:family="paragraph"><style:text-properties fo:language="fr" fo:country="FR"/>'
         '</style:default-style><style:style style:name="Standard" style:family="paragraph">'
         '<style:text-properties fo:language="fr"/></style:style></office:styles>'
         '<office:master-styles><style:master-page style:name="Standard"><style:header>'
         f"{header}</style:header></style:master-page></office:master-styles></office:document-styles>"),
        ("meta.xml", f'<?xml version="1.0" encoding="UTF-8"?>\n<office:document-meta {_ODF}><office:meta>'
         "<dc:title>Titre</dc:title><dc:language>fr-FR</dc:language></office:meta></office:document-meta>"),
        ("Pictures/a.png", b"\x89PNG\r\n\x1a\n" + bytes(200)),
        ("META-INF/manifest.xml", '<?xml version="1.0" encoding="UTF-8"?>\n<manifest:manifest '
         'xmlns:manifest="urn:oasis:names:tc:opendocument:xmlns:manifest:1.0" manifest:version="1.3">'
         '<manifest:file-entry manifest:full-path="/" manifest:media-type="application/vnd.oasis.opendocument.text"/>'
         '<manifest:file-entry manifest:full-path="content.xml" manifest:media-type="text/xml"/>'
         '<manifest:file-entry manifest:full-path="styles.xml" manifest:media-type="text/xml"/>'
         '<manifest:file-entry manifest:full-path="meta.xml" manifest:media-type="text/xml"/>'
         '<manifest:file-entry manifest:full-path="Pictures/a.png" manifest:media-type="image/png"/>'
         "</manifest:manifest>"),
    ])

"""Fuzzing the file readers (transformer/translate/files/): any bytes under a format's name, and
small real files of every format with their bytes (or, for an archive, one member's bytes)
mutated, are either read, cut into sentences, translated by a fake translator and written back,
or refused with a ``UserError`` (``FileFormatError`` among them): never another exception. The
examples are few and small, so the test takes seconds."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from epub_helpers import epub_bytes
from office_helpers import docx_bytes, members, odt_bytes, paragraph, pptx_bytes, run, slide, zip_bytes

from transformer.errors import UserError
from transformer.translate.files import FileSentences, read_file, translate_units
from transformer.translate.html import translate_html

TEXTS = {
    "page.html": b'<html><head><meta charset="utf-8"><title>Le titre</title></head><body><p>Il pleut <b>fort</b>, '
                 b'<a href="x">nous</a> restons.<br>Le chat&nbsp;dort.</p><pre>code</pre></body></html>',
    "notes.md": b"# Le titre\n\n> Une **citation** avec [un lien](http://x.y).\n\n- Un *point*\n  - `code` ici\n\n"
                b"| a | b |\n|---|---|\n| c | d |\n",
    "film.srt": b"1\n00:00:01,000 --> 00:00:03,500\n<i>Il pleut fort,\nnous restons.</i>\n\n"
                b"2\n00:00:04,000 --> 00:00:05,000\nLe chat dort.\n",
    "messages.po": b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n\n#: a.c:1\n'
                   b'msgid "Le chat %s dort."\nmsgstr ""\n\nmsgid "Un fichier"\nmsgid_plural "%d fichiers"\n'
                   b'msgstr[0] ""\nmsgstr[1] ""\n',
    "notes.txt": b"Il pleut fort.\r\nNous restons.\n\n  Le chat dort.\n",
}
ARCHIVES = {
    "report.docx": docx_bytes(paragraph(run("Il pleut fort."), run("Nous restons.", "<w:b/>"))
                              + '<w:p><w:hyperlink r:id="rId5"><w:r><w:t>Le lien</w:t></w:r></w:hyperlink></w:p>'),
    "report.odt": odt_bytes('<text:p>Il pleut <text:span text:style-name="b">fort</text:span>.<text:tab/>Fin.'
                            "</text:p><text:h>Un titre</text:h>"),
    "slides.pptx": pptx_bytes([slide('<a:p><a:r><a:rPr lang="fr-FR" b="1"/><a:t>Le titre</a:t></a:r><a:br/>'
                                     '<a:r><a:t>Il pleut.</a:t></a:r></a:p>')], order=[1],
                              notes=[slide("<a:p><a:r><a:t>Une note</a:t></a:r></a:p>")]),
    "book.epub": epub_bytes(),
}


def upper(sentences):
    return [s.upper() for s in sentences]


def through(data: bytes, name: str) -> None:
    """Read, cut, translate and write ``data``: only a UserError may stop it."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            document = read_file(data, name)
            units = document.units()
            FileSentences(units, "fr")
            translations = translate_units(units, upper, lambda pages: [translate_html(p, upper) for p in pages])
            document.write(translations, target_lang="en")
        except UserError:
            pass


@st.composite
def mutated(draw, data: bytes) -> bytes:
    """``data`` with a few bytes changed, inserted or deleted, or cut short."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        action = draw(st.sampled_from(["flip", "insert", "delete", "cut"]))
        if action == "flip" and out:
            out[at] = draw(st.integers(0, 255))
        elif action == "insert":
            out[at:at] = draw(st.sampled_from([b"<", b">", b"&", b"<b>", b"</p>", b"\x00", b"\xff", b"*", b"]]>",
                                               b"&#0;", b"<!DOCTYPE x>", b"\n", b"-->", b"%PDF-"]))
        elif action == "delete":
            del out[at:at + draw(st.integers(1, 8))]
        elif action == "cut":
            del out[at:]
    return bytes(out)


FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FUZZ
@given(st.data())
def test_mutated_text_files_are_read_or_refused(data):
    name = data.draw(st.sampled_from(sorted(TEXTS)))
    through(data.draw(mutated(TEXTS[name])), name)


@FUZZ
@given(st.data())
def test_archives_with_a_mutated_member_are_read_or_refused(data):
    name = data.draw(st.sampled_from(sorted(ARCHIVES)))
    parts = members(ARCHIVES[name])
    member = data.draw(st.sampled_from(sorted(m for m in parts if m.endswith((".xml", ".xhtml", ".opf", ".ncx")))))
    parts[member] = data.draw(mutated(parts[member]))
    through(zip_bytes(parts.items()), name)


@FUZZ
@given(st.sampled_from(sorted(TEXTS) + sorted(ARCHIVES)), st.data())
def test_mutated_archive_bytes_and_any_bytes_are_read_or_refused(name, data):
    seed = TEXTS.get(name) or ARCHIVES[name]
    through(data.draw(st.one_of(mutated(seed), st.binary(max_size=300))), name)


@pytest.mark.parametrize("name", sorted(TEXTS) + sorted(ARCHIVES))
def test_the_seeds_themselves_are_translated(name):
    data = TEXTS.get(name) or ARCHIVES[name]
    document = read_file(data, name)
    assert document.units()
    out = document.write(translate_units(document.units(), upper,
                                         lambda pages: [translate_html(p, upper) for p in pages]))
    assert out != data

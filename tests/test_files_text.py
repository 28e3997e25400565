"""The registry of translatable files (transformer/translate/files) and its text formats: .txt,
.html, .md, .srt, .po. Translations come from fake translators (uppercase, words reversed,
placeholders dropped) so that what must be kept can be checked exactly."""

from __future__ import annotations

import asyncio
import re
import warnings
from types import SimpleNamespace

import pytest

from transformer.translate import files
from transformer.translate.files import (
    FileFormatError, Unit, read_file, translate_file, translate_units, translate_units_async, translated_name,
)
from transformer.translate.html import translate_html


def upper(sentences):
    """Each word uppercased, placeholders (%s, {name}) as they are: as a model copies them."""
    return [" ".join(w if re.search(r"[%{}]", w) else w.upper() for w in s.split(" ")) for s in sentences]


def reverse(sentences):
    return [" ".join(reversed(s.split())) for s in sentences]


def translated(data: bytes, name: str, sentences=upper, target_lang=None) -> bytes:
    """The file with its plain units uppercased and its HTML units translated by ``sentences``."""
    document = read_file(data, name)
    out = translate_units(document.units(), lambda texts: [t.upper() for t in texts],
                          lambda pages: [translate_html(p, sentences) for p in pages])
    return document.write(out, target_lang=target_lang)


def unchanged(data: bytes, name: str) -> bytes:
    document = read_file(data, name)
    return document.write([u.text for u in document.units()])


# --------------------------------------------------------------------------------------------- registry
def test_unknown_extensions_are_refused_with_the_supported_ones():
    for name in ("report.pdf", "notes", "archive.tar.gz"):
        with pytest.raises(FileFormatError, match=r"cannot be translated; the formats read are .*\.md.*\.srt"):
            read_file(b"text", name)
    assert type(read_file(b"# Title\n", "README.MD")).__name__ == "MarkdownFile"  # case-insensitive
    assert type(read_file(b"# Title\n", "dir/notes.txt", kind="markdown")).__name__ == "MarkdownFile"


@pytest.mark.parametrize("data, name, message", [
    (b"not a zip", "report.docx", "is not a .docx file: a .docx file is a zip archive"),
    (b"PK\x03\x04rest", "notes.md", "is a zip archive, not a .md text file"),
    (b"%PDF-1.7\n", "paper.txt", "is a PDF document"),
    (b"\xff\xfeh\x00i\x00", "subs.srt", "is UTF-16"),
    (b"abc\x00def", "notes.txt", "NUL byte at offset 3"),
])
def test_a_file_that_is_not_what_its_name_says_is_refused(data, name, message):
    with pytest.raises(FileFormatError, match=re.escape(message)):
        read_file(data, name)


def test_the_size_limit(monkeypatch):
    monkeypatch.setattr(files, "MAX_FILE_BYTES", 10)
    with pytest.raises(FileFormatError, match="11 bytes, over the limit of 10 bytes"):
        read_file(b"x" * 11, "a.txt")
    read_file(b"x" * 10, "a.txt")


def test_translated_name_follows_libretranslate():
    assert translated_name("report.docx", "de") == "report_de.docx"
    assert translated_name("/home/me/subs.en.srt", "fr") == "subs.en_fr.srt"
    assert translated_name("C:\\docs\\notes.md", "en") == "notes_en.md"


def test_translate_units_groups_by_kind_in_two_calls_and_keeps_the_order():
    units = [Unit("a", False, "1"), Unit("<b>b</b>", True, "2"), Unit("c", False, "3"), Unit("d", True, "4")]
    calls = []

    def texts(batch):
        calls.append(("texts", batch))
        return [t + "!" for t in batch]

    def pages(batch):
        calls.append(("pages", batch))
        return [p + "?" for p in batch]

    assert translate_units(units, texts, pages) == ["a!", "<b>b</b>?", "c!", "d?"]
    assert calls == [("texts", ["a", "c"]), ("pages", ["<b>b</b>", "d"])]
    assert translate_units([Unit("x", False, "1")], texts, None) == ["x!"]  # no HTML unit: no call

    async def atexts(batch):
        return texts(batch)

    async def apages(batch):
        return pages(batch)

    assert asyncio.run(translate_units_async(units, atexts, apages)) == ["a!", "<b>b</b>?", "c!", "d?"]
    with pytest.raises(ValueError, match="translate_texts returned 1 translations for 2 texts"):
        translate_units(units, lambda batch: ["one"], pages)


class FakeTranslator:
    """What translate_file needs of a Translator: each sentence uppercased."""

    src_lang, tgt_lang, max_input_tokens = "en", "de", 1000
    vocab = SimpleNamespace(src=SimpleNamespace(encode=lambda text: text.split()))

    def __init__(self):
        self.calls = 0

    def translate_n_best(self, texts, **options):
        self.calls += 1
        return [[SimpleNamespace(text=t.upper(), score=0.0, confidence=None, unmet=())] for t in texts]

    def detokenize(self, hypothesis):
        return hypothesis.text


def test_translate_file_with_a_translator_batches_the_whole_file():
    source = b"# A title\n\nSome *text*. And more.\n\n```\ncode stays\n```\n"
    translator, seen = FakeTranslator(), []
    out = translate_file(source, "doc.md", translator, progress=lambda done, total: seen.append((done, total)))
    assert out == b"# A TITLE\n\nSOME *TEXT*. AND MORE.\n\n```\ncode stays\n```\n"
    assert translator.calls == 1 and seen == [(3, 3)]
    page = b'<html lang="en"><body><p>Hello <b>you</b>.</p></body></html>'
    assert translate_file(page, "p.html", translator) == b'<html lang="de"><body><p>HELLO <b>YOU</b>.</p></body></html>'
    assert translate_file(b"One. Two.\r\nThree.\r\n", "a.txt", translator) == b"ONE. TWO.\r\nTHREE.\r\n"


# --------------------------------------------------------------------------------------------- .txt
def test_text_keeps_its_byte_order_mark_and_crlf():
    data = "\ufeffBonjour le monde.\r\n\r\n  Deux phrases. Ici.\r\n".encode()
    assert unchanged(data, "a.txt") == data
    assert translated(data, "a.txt") == "\ufeffBONJOUR LE MONDE.\r\n\r\n  DEUX PHRASES. ICI.\r\n".encode()


def test_invalid_utf8_is_replaced_with_a_warning_naming_the_line_and_byte():
    data = b"fine\ncaf\xe9 au lait\n"
    with pytest.warns(UserWarning, match=r"a.txt: line 2: invalid utf-8 at byte 8 .*1 undecodable byte sequence"):
        document = read_file(data, "a.txt")
    assert document.units()[0].text == "fine\ncaf\ufffd au lait\n"
    assert document.write([document.units()[0].text]) == data  # untranslated: the bytes as they were


# --------------------------------------------------------------------------------------------- .html
def test_html_sets_only_the_lang_attribute():
    page = b"<!DOCTYPE html>\n<HTML class='x' LANG=fr>\n<p>Il pleut <b>fort</b>.</p>\n</HTML>\n"
    assert unchanged(page, "p.htm") == page
    assert translated(page, "p.htm", target_lang="en") == \
        b"<!DOCTYPE html>\n<HTML class='x' LANG=\"en\">\n<p>IL PLEUT <b>FORT</b>.</p>\n</HTML>\n"
    bare = b"<html><body><p>Oui.</p></body></html>"
    document = read_file(bare, "p.html")
    assert document.write([document.units()[0].text], target_lang="de") == \
        b'<html lang="de"><body><p>Oui.</p></body></html>'
    fragment = b"<p>No html tag.</p>"
    assert translated(fragment, "f.html", target_lang="de") == b"<p>NO HTML TAG.</p>"


def test_html_in_its_declared_charset():
    page = '<html><head><meta charset="iso-8859-1"></head><body><p>Café</p></body></html>'.encode("latin-1")
    assert unchanged(page, "p.html") == page
    out = translated(page, "p.html", sentences=lambda s: ["Ωmega"])
    assert out.endswith(b"<p>&#937;mega</p></body></html>")  # what Latin-1 lacks, as a reference


# --------------------------------------------------------------------------------------------- .md
MARKDOWN = """\
---
title: Front matter stays
---
# A **bold** title

> A quote with *emphasis* on
> two lines, `inline code` and [a link](https://example.com/a_b "Its title").

- An item with [a reference][ref] and <kbd>raw</kbd> html \\* &amp; escapes,  
  after a hard break.
- ![An image](img/pic.png) then text.

| Column one | Column **two** |
|-----------:|----------------|
| left cell  | right cell     |

```python
print("code block untouched")
```

    indented code untouched

<div class="note">
<p>An HTML <em>block</em>.</p>
</div>

Visit <https://auto.link/x> now, ~~struck~~ words.

[ref]: https://example.com/ref
"""


def test_markdown_identity_is_byte_identical_crlf_too():
    data = MARKDOWN.encode()
    assert unchanged(data, "a.md") == data
    crlf = MARKDOWN.replace("\n", "\r\n").encode()
    assert unchanged(crlf, "a.md") == crlf


def test_markdown_keeps_its_syntax_and_translates_the_text():
    out = translated(MARKDOWN.encode(), "a.md").decode()
    assert out == MARKDOWN.replace("A **bold** title", "A **BOLD** TITLE") \
        .replace("A quote with *emphasis* on\n> two lines, `inline code` and [a link]",
                 "A QUOTE WITH *EMPHASIS* ON\n> TWO LINES, `inline code` AND [A LINK]") \
        .replace("An item with [a reference][ref] and <kbd>raw</kbd> html \\* &amp; escapes,  \n  after",
                 "AN ITEM WITH [A REFERENCE][ref] AND <kbd>RAW</kbd> HTML \\* &amp; ESCAPES,  \n  AFTER") \
        .replace("a hard break.", "A HARD BREAK.") \
        .replace(") then text.", ") THEN TEXT.") \
        .replace("| Column one | Column **two** |", "| COLUMN ONE | COLUMN **TWO** |") \
        .replace("| left cell  | right cell     |", "| LEFT CELL  | RIGHT CELL     |") \
        .replace("An HTML <em>block</em>.", "AN HTML <em>BLOCK</em>.") \
        .replace("Visit <https://auto.link/x> now, ~~struck~~ words.",
                 "VISIT <https://auto.link/x> NOW, ~~STRUCK~~ WORDS.")


def test_markdown_with_words_reordered_keeps_every_url_and_delimiter():
    out = translated(MARKDOWN.encode(), "a.md", sentences=reverse).decode()
    for kept in ["---\ntitle: Front matter stays\n---\n", '](https://example.com/a_b "Its title")', "`inline code`",
                 "][ref]", "<kbd>", "</kbd>", "\\*", "&amp;", "  \n  ", "![An image](img/pic.png)",
                 "|-----------:|----------------|", '```python\nprint("code block untouched")\n```',
                 "    indented code untouched", "<https://auto.link/x>", "[ref]: https://example.com/ref\n"]:
        assert kept in out, kept
    assert out.count("**") == 4 and out.count("~~") == 2 and re.search(r"^# ", out, re.M)
    assert out.count("\n") == MARKDOWN.count("\n")  # each block on as many lines as before


def test_markdown_block_the_parser_cannot_match_is_kept_with_a_warning():
    data = b"| a \\| b | c |\n|---|---|\n| d | e |\n"
    with pytest.warns(UserWarning, match=r"t.md: line 1: kept untranslated"):
        document = read_file(data, "t.md")
    assert [u.text for u in document.units()] == ["c", "d", "e"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert translated(data, "t.md") == b"| a \\| b | C |\n|---|---|\n| D | E |\n"


# --------------------------------------------------------------------------------------------- .srt
SRT = ("1\r\n00:00:01,000 --> 00:00:03,500\r\n<i>It is raining hard,\r\nwe stay at home.</i>\r\n\r\n"
       "2\r\n00:00:04,000 --> 00:00:05,000 X1:100 X2:200\r\n{\\an8}Tom & Jerry.\r\n\r\n"
       "3\r\n00:00:06,000 --> 00:00:07,000\r\n...\r\n\r\n"
       "4\r\n00:00:08,000 --> 00:00:09,000\r\nLast one.\r\n")


def test_srt_keeps_numbers_timings_and_line_count():
    data = SRT.encode()
    assert unchanged(data, "a.srt") == data
    assert [u.where for u in read_file(data, "a.srt").units()] == ["cue 1", "cue 2", "cue 3", "cue 4"]
    assert translated(data, "a.srt").decode() == SRT.replace("It is raining hard,\r\nwe stay at home.",
                                                             "IT IS RAINING HARD,\r\nWE STAY AT HOME.") \
        .replace("Tom & Jerry.", "TOM & JERRY.").replace("Last one.", "LAST ONE.")


def test_srt_rebreaks_a_translation_into_the_cues_lines():
    out = translated(SRT.encode(), "a.srt", sentences=lambda s: ["Il pleut très fort, nous restons à la maison"
                                                                 if "raining" in t else t for t in s]).decode()
    assert "<i>Il pleut très fort,\r\nnous restons à la maison</i>\r\n\r\n2\r\n" in out


@pytest.mark.parametrize("text, message", [
    ("1\n00:00:01,000 -> 00:00:02,000\nHi\n", "line 2: not a timing line"),
    ("1\n00:00:01,000 --> 00:00:02,000\nHi\n\n2\n00:00:0x,000 --> 00:00:03,000\nHo\n", "line 6: not a timing line"),
    ("Hello\n", "line 1: expected a subtitle"),
])
def test_srt_malformed_timing_names_the_line(text, message):
    with pytest.raises(FileFormatError, match=message):
        read_file(text.encode(), "bad.srt")


# --------------------------------------------------------------------------------------------- .po
PO = r'''# A catalogue.
msgid ""
msgstr ""
"Project-Id-Version: demo 1.0\n"
"Language-Team: French\n"
"Content-Type: text/plain; charset=UTF-8\n"
"Plural-Forms: nplurals=2; plural=(n != 1);\n"

#: app.py:10
#, python-format
msgid "Hello %(name)s, you have %d new messages in {folder}."
msgstr ""

#, fuzzy
msgid "A draft"
msgstr "Un brouillon"

msgid "Done"
msgstr "Fait"

msgid "One file"
msgid_plural "%d files"
msgstr[0] ""
msgstr[1] ""

msgid ""
"A long message that the file wraps "
"over two lines.\n"
msgstr ""

#~ msgid "Obsolete"
#~ msgstr ""
'''


def test_po_identity_is_byte_identical():
    assert unchanged(PO.encode(), "fr.po") == PO.encode()
    units = read_file(PO.encode(), "fr.po").units()
    assert [u.where for u in units] == ["line 12 (msgid)", "line 23 (msgid)", "line 23 (msgid_plural)",
                                        "line 29 (msgid)"]
    assert units[0].text == "Hello <code>%(name)s</code>, you have <code>%d</code> new messages in " \
                            "<code>{folder}</code>."


def test_po_fills_empty_msgstr_and_plurals_and_sets_the_language():
    out = translated(PO.encode(), "fr.po", target_lang="de").decode()
    assert '"Language-Team: French\\n"\n"Language: de\\n"\n' in out
    assert 'msgstr "HELLO %(name)s, YOU HAVE %d NEW MESSAGES IN {folder}."' in out
    assert 'msgid_plural "%d files"\nmsgstr[0] "ONE FILE"\nmsgstr[1] "%d FILES"\n' in out
    assert 'msgstr "A LONG MESSAGE THAT THE FILE WRAPS OVER TWO LINES.\\n"' in out
    for kept in ['#, fuzzy\nmsgid "A draft"\nmsgstr "Un brouillon"\n', 'msgid "Done"\nmsgstr "Fait"\n',
                 '#~ msgid "Obsolete"\n#~ msgstr ""\n', "#: app.py:10\n#, python-format\n"]:
        assert kept in out
    again = out.replace('"Language: de\\n"', '"Language: fr\\n"').encode()
    document = read_file(again, "fr.po")
    assert document.units() == []  # everything translated now
    assert b'"Language: en\\n"' in document.write([], target_lang="en")


def test_po_placeholders_survive_a_translation_that_drops_them():
    def drop(sentences):  # a model that leaves the placeholders out and moves words around
        return [" ".join(w for w in reversed(s.split()) if not re.search(r"[%{}]", w)) for s in sentences]

    out = translated(PO.encode(), "fr.po", sentences=drop).decode()
    line = next(line for line in out.splitlines() if line.startswith("msgstr") and "folder" in line)
    for placeholder in ["%(name)s", "%d", "{folder}"]:
        assert line.count(placeholder) == 1, line


def test_po_syntax_error_and_charset():
    with pytest.raises(FileFormatError, match=r"bad.po: not a readable PO file \(syntax error at line 2\)"):
        read_file(b'msgid "a"\nmsgstr\n', "bad.po")
    latin = PO.replace("charset=UTF-8", "charset=ISO-8859-1").replace("A draft", "Brouillé").encode("latin-1")
    assert unchanged(latin, "l.po") == latin
    out = translated(latin, "l.po", sentences=lambda s: ["Ωmega" for _ in s])
    assert b"charset=UTF-8" in out and 'msgstr[0] "Ωmega"'.encode() in out and "Brouillé".encode() in out

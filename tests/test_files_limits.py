"""What the file readers (transformer/translate/files/) refuse and what they bound: depth, elements,
characters, sentences, encodings, document type declarations; hostile inputs give a one-line
``FileFormatError`` (a ``UserError``), never another exception, never a silent loss. Fake
translators only (no model), except the slow test at the end, which runs the command line."""

from __future__ import annotations

import re

import pytest

from transformer.translate.files import read_file, translate_units
from transformer.translate.files.base import FileFormatError
from transformer.translate.files.markdown import MAX_MARKDOWN_DEPTH
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

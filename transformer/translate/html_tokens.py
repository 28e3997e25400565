"""HTML tokens: every construct of a page (tag, text, comment, declaration...) with its exact extent
in the source, so that :mod:`transformer.translate.html` can copy markup byte for byte."""

from __future__ import annotations

import bisect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from html.parser import HTMLParser

__all__ = ["Token", "Tokenizer", "tokenize"]


@dataclass(slots=True)
class Token:
    kind: str  # start empty end data comment decl pi cdata junk
    start: int
    end: int | None
    name: str = ""
    attrs: Sequence = ()  # a tag's (name, value) pairs; slots and one shared empty tuple keep a page's tokens small


class Tokenizer(HTMLParser):
    """html.parser, recording where each construct starts (``getpos``) and, where it can be
    known exactly, ends (a start tag: ``get_starttag_text``)."""

    def __init__(self, source: str, newlines: list[int], base: int = 0):
        super().__init__(convert_charrefs=True)  # text as a browser reads it: "&#<p>" is "&#" + <p>
        self.source, self.newlines, self.base = source, newlines, base
        self.first_newline = bisect.bisect_left(newlines, base)  # of the text fed: source[base:]
        self.tokens: list[Token] = []

    def _pos(self) -> int:
        line, column = self.getpos()
        return (self.base if line == 1 else self.newlines[self.first_newline + line - 2] + 1) + column

    def _add(self, kind, end=None, name="", attrs=()):
        start = self._pos()
        self.tokens.append(Token(kind, start, None if end is None else start + end, name, attrs or ()))

    def handle_starttag(self, tag, attrs):
        self._add("start", len(self.get_starttag_text() or "") or None, tag, attrs)

    def handle_startendtag(self, tag, attrs):
        self._add("empty", len(self.get_starttag_text() or "") or None, tag, attrs)

    def handle_endtag(self, tag):
        self._add("end", None, tag)

    def handle_data(self, data):
        self._add("data")

    def handle_comment(self, data):
        self._add("comment")

    def handle_decl(self, decl):
        self._add("decl")

    def handle_pi(self, data):
        self._add("pi")

    def unknown_decl(self, data):
        self._add("cdata")


def tokenize(source: str) -> list[Token]:
    """Every construct of ``source`` in order; their extents tile the source exactly. Whatever
    the parser skipped (``</>``, an unterminated construct at the end) becomes a ``junk`` token."""
    newlines = [m.start() for m in re.finditer("\n", source)]
    raw: list[Token] = []
    base = 0
    while True:
        parser = Tokenizer(source, newlines, base)
        try:
            parser.feed(source[base:])
            # html.parser may stop early, waiting for more data: let it go on, so that the rest
            # is parsed rather than dumped as text by close().
            while parser.rawdata:
                left = len(parser.rawdata)
                parser.feed("")
                if len(parser.rawdata) >= left:
                    break
            parser.close()
            raw += parser.tokens
            break
        except Exception:  # html.parser gives up on some input ("<![<" in 3.11): that "<" is text
            at = max(parser._pos(), base)
            raw += [t for t in parser.tokens if t.start < at]
            if at >= len(source):
                break
            raw.append(Token("data", at, at + 1))
            base = at + 1
    tokens, position = [], 0
    for k, token in enumerate(raw):
        if token.start < position:  # cannot happen with html.parser; be safe
            continue
        if token.start > position:
            tokens.append(Token("junk", position, token.start))
        following = raw[k + 1].start if k + 1 < len(raw) else len(source)
        following = max(following, token.start)
        if token.kind == "data" and source[token.start] != "<":
            # Text runs to the next "<" (what the parser skipped after it is junk); text that
            # starts with "<" is a construct the parser gave up on, up to the next token.
            less_than = source.find("<", token.start + 1, following)
            token.end = following if less_than < 0 else less_than
        elif token.end is None or token.end > following or token.kind == "data":
            token.end = following
        tokens.append(token)
        position = token.end
    if position < len(source):
        tokens.append(Token("junk", position, len(source)))
    return tokens

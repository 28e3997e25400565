"""Markdown (``.md``, ``.markdown``) as a translatable file: the text translated, the syntax kept.

markdown-it-py (CommonMark, with GitHub's tables and strikethrough) parses the file; it gives
each block's lines. Each block with inline content (a paragraph, a heading, a table cell) is one
HTML unit: its text, with its inline syntax as inline tags that stay around the right words
(``**x**`` as ``<b>``, ``*x*`` as ``<i>``, ``~~x~~`` as ``<s>``, a link's text inside ``<a>``),
and what must come back as written as kept elements: inline code (the model sees it, as
``<code>``), backslash escapes and entities, autolinks, inline HTML and images (points between
words; a picture's alt text is not translated). Each piece of syntax is written back with its
source spelling: delimiters, a link's ``](url "title")`` or ``[ref]`` tail. A block's
translation is written on as many lines as the block had, of about equal length, each with its
line's prefix (the quote marker ``>``, a list item's indentation), hard line breaks kept where they were.

Kept byte for byte: front matter (``---`` ... ``---`` at the top), code blocks, fenced or
indented, link reference definitions, thematic breaks, blank lines, every block's markers
(``#``, ``>``, ``-``, ``1.``, a table's pipes and delimiter row), line ends (CRLF too) and any
block whose translation equals its text. An HTML block at the top level is translated as
``translate_html`` translates a page. A block whose source the parser's tokens cannot be
matched to (a construct spanning lines inside a code span, an escaped pipe in a table cell) is
left untranslated, with a ``TranslationWarning`` naming its line. A file that nests block quotes
and list items, or a block's emphasis and links, more than :data:`MAX_MARKDOWN_DEPTH` (100) deep
is refused (``FileFormatError`` naming the line): every block up to that depth is translated.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

from transformer.translate.files.base import FileFormatError, TranslatableFile, Unit
from transformer.translate.files.inline import Fragment, MarkupMismatch, join_lines
from transformer.translate.files.srt import split_lines
from transformer.translate.files.text import check_count, decode_text
from transformer.translate.warning import TranslationWarning

_ELEMENTS = {"em": "i", "strong": "b", "s": "s"}


class _Mismatch(ValueError):
    """The tokens of a block do not match its source text."""


class _TooDeep(Exception):
    """A block's inline markup nests deeper than ``MAX_MARKDOWN_DEPTH``."""


@dataclass
class _Block:
    """One unit of the file: its source lines, where its text is on each, and how to write it."""

    line: int  # its first line (index)
    html: bool  # a top-level HTML block (translated whole) rather than inline content
    text: str  # the unit's text
    spans: list[tuple[int, int, int]] = field(default_factory=list)  # (line, start, end) of the text on each line
    fragment: Fragment | None = None
    group_lines: list[int] = field(default_factory=list)  # source lines of each run between hard breaks
    end: int = 0  # an HTML block: the index after its last line


MAX_MARKDOWN_DEPTH = 100
"""The most block quotes and list items a Markdown file may nest in one another, and the most
emphasis, strikethrough and links a block's text may nest: a deeper file is refused
(``FileFormatError`` naming the line), never partly translated."""
# The parser's own bound on its nesting levels (a list item is two: the list and the item; a
# paragraph or table inside one a few more), above what MAX_MARKDOWN_DEPTH lets through: the parser
# stops reading blocks deeper than it, silently, so a file must be refused before that.
_PARSER_NESTING = 2 * MAX_MARKDOWN_DEPTH + 10
_CONTAINERS = {"blockquote_open": 1, "list_item_open": 1, "blockquote_close": -1, "list_item_close": -1}


def _parser():
    from markdown_it import MarkdownIt

    md = MarkdownIt("commonmark", {"maxNesting": _PARSER_NESTING}).enable(["table", "strikethrough"])
    md.core.ruler.disable("text_join")  # escapes and entities stay their own tokens, with their source
    return md


def _front_matter(lines: list[str]) -> int:
    """How many lines of front matter the file starts with (0 for none)."""
    if not lines or lines[0].rstrip("\r\n") != "---":
        return 0
    for k in range(1, len(lines)):
        if lines[k].rstrip("\r\n").rstrip() in ("---", "..."):
            return k + 1
    return 0


class MarkdownFile(TranslatableFile):
    """A Markdown file: one HTML unit per block with text (see the module doc)."""

    kind = "markdown"
    extensions = (".md", ".markdown")
    media_type = "text/markdown; charset=utf-8"

    def __init__(self, data: bytes, bom: bytes, lines: list[str], blocks: list[_Block], name: str) -> None:
        self.data, self.bom, self.lines, self.blocks, self.name = data, bom, lines, blocks, name

    @classmethod
    def read(cls, data: bytes, name: str) -> MarkdownFile:
        text, bom = decode_text(data, name)
        lines = split_lines(text)
        bodies = [line.rstrip("\r\n") for line in lines]
        skipped = _front_matter(lines)
        # The parser sees the front matter as blank lines: line numbers stay those of the file.
        source = "\n".join([""] * skipped + bodies[skipped:])
        blocks: list[_Block] = []
        cursors: dict[int, int] = {}  # per line, where the next table cell's text is looked for
        depth = 0  # block quotes and list items open
        for token in _parser().parse(source):
            depth += _CONTAINERS.get(token.type, 0)
            if depth > MAX_MARKDOWN_DEPTH:
                raise FileFormatError(f"{name}: line {token.map[0] + 1}: block quotes and list items nested more than "
                                      f"{MAX_MARKDOWN_DEPTH} deep, deeper than a Markdown file is translated")
            if token.map is None:
                continue
            first, end = token.map
            if token.type == "html_block" and token.level == 0:
                raw = "".join(lines[first:end])
                blocks.append(_Block(first, True, raw.rstrip("\r\n"), end=end))
            elif token.type == "inline" and token.children is not None:
                try:
                    fragment, groups = _inline(token.content, token.children)
                    spans = _locate(token.content, bodies, first, cursors)
                except _TooDeep:
                    raise FileFormatError(f"{name}: line {first + 1}: emphasis and links nested more than "
                                          f"{MAX_MARKDOWN_DEPTH} deep, deeper than a Markdown file is "
                                          "translated") from None
                except _Mismatch as err:
                    warnings.warn(TranslationWarning(f"{name}: line {first + 1}: kept untranslated ({err})"),
                                  stacklevel=2)
                    continue
                if fragment.has_text:
                    blocks.append(_Block(first, False, fragment.html, spans, fragment, groups))
        return cls(data, bom, lines, blocks, name)

    def units(self) -> list[Unit]:
        return [Unit(block.text, True, f"line {block.line + 1}") for block in self.blocks]

    def write(self, translations: Sequence[str], *, target_lang: str | None = None) -> bytes:
        translations = check_count(translations, self.units())
        lines: list[str | None] = list(self.lines)
        changed = False
        for block, translation in zip(self.blocks, translations):
            if translation == block.text:
                continue
            if block.html:
                last = self.lines[block.end - 1]
                lines[block.line] = translation + last[len(last.rstrip("\r\n")):]
                for k in range(block.line + 1, block.end):
                    lines[k] = None
                changed = True
                continue
            try:
                pieces = block.fragment.restore(translation)
            except MarkupMismatch as err:
                warnings.warn(TranslationWarning(f"{self.name}: line {block.line + 1}: kept untranslated ({err})"),
                              stacklevel=2)
                continue
            new = _lines(_without_empty_emphasis(pieces), block.group_lines, [b - a for _, a, b in block.spans])
            # Each source line keeps what is around its text (a prefix, a table's pipes, the line end).
            for k, (line, start, end) in enumerate(block.spans):
                current = lines[line]
                if k < len(new):
                    lines[line] = current[:start] + new[k] + current[end:]
                else:
                    lines[line] = None  # the translation took fewer lines than the source
            changed = True
        if not changed:
            return self.data
        return self.bom + "".join(line for line in lines if line is not None).encode("utf-8")


def _without_empty_emphasis(pieces: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The pieces without emphasis left around no word (``**`` then ``**``: written together, the
    delimiters would mean something else)."""
    out: list[tuple[str, str]] = []
    for piece in pieces:
        tag = piece[1]
        if tag in ("</i>", "</b>", "</s>"):
            k = len(out) - 1
            while k >= 0 and not out[k][1] and not out[k][0].strip():
                k -= 1
            if k >= 0 and out[k][1] == tag.replace("/", ""):
                del out[k]  # the start tag; the whitespace between stays
                continue
        out.append(piece)
    return out


def _lines(pieces: list[tuple[str, str]], group_lines: list[int], widths: list[int]) -> list[str]:
    """The translated pieces on lines: each run between hard line breaks on as many lines as it
    took in the source, in the proportions of those lines' lengths (``widths``), a hard break's
    marker (two spaces, a backslash) ending its run's last line."""
    out: list[str] = []
    group: list[tuple[str, str]] = []
    groups = iter(group_lines)
    for piece in pieces + [("", "<end>")]:
        if piece[1] in ("<br>", "<end>"):
            count = next(groups, 1)
            run = join_lines(group, widths[:count] or [1])
            widths = widths[count:]
            if piece[1] == "<br>":
                run[-1] = run[-1].rstrip(" ") + piece[0]
            out += run
            group = []
        else:
            group.append(piece)
    return out


def _locate(content: str, bodies: list[str], first: int, cursors: dict[int, int]) -> list[tuple[int, int, int]]:
    """Where each line of a block's inline ``content`` is in the file: ``(line, start, end)``."""
    spans = []
    parts = content.split("\n")
    for k, part in enumerate(parts):
        line = first + k
        if line >= len(bodies):
            raise _Mismatch("its text is not on its lines")
        body = bodies[line]
        if k == 0:
            start = body.find(part, cursors.get(line, 0))
        else:  # a continuation line: its text ends the line, after the block's prefix
            trimmed = body.rstrip(" \t") if k == len(parts) - 1 else body
            start = len(trimmed) - len(part) if trimmed.endswith(part) else -1
        if start < 0:
            raise _Mismatch("its text is not on its lines as the parser gives it")
        cursors[line] = start + len(part)
        spans.append((line, start, start + len(part)))
    return spans


def _inline(content: str, children) -> tuple[Fragment, list[int]]:
    """A block's inline tokens matched to its ``content``, as a fragment, and the number of source
    lines of each run between hard line breaks."""
    fragment = Fragment()
    groups = [1]
    pos = 0
    skip_to_close = False
    depth = 0  # emphasis and links open

    def gap(upto: int) -> None:
        """Source between tokens: only whitespace (the parser drops it around line breaks)."""
        nonlocal pos
        between = content[pos:upto]
        if between.strip():
            raise _Mismatch(f"unexpected {between.strip()[:20]!r}")
        if between:
            fragment.text(between)
        pos = upto

    def expect(text: str) -> int:
        """Where ``text`` starts at ``pos``, after whitespace."""
        at = pos
        while at < len(content) and content[at] in " \t" and not content.startswith(text, at):
            at += 1
        if not content.startswith(text, at):
            raise _Mismatch(f"expected {text[:20]!r} at {content[at:at + 20]!r}")
        return at

    def kept_without_newline(source: str) -> None:
        if "\n" in source:
            raise _Mismatch("markup spans lines")

    for token in children:
        kind = token.type
        depth += token.nesting
        if depth > MAX_MARKDOWN_DEPTH:
            raise _TooDeep
        if skip_to_close:
            if kind == "link_close":
                skip_to_close = False
            continue
        if kind == "text":
            if token.content:
                at = expect(token.content)
                gap(at)
                fragment.text(token.content)
                pos = at + len(token.content)
        elif kind == "text_special":
            at = expect(token.markup)
            gap(at)
            fragment.kept(token.markup, token.content)
            pos = at + len(token.markup)
        elif kind in ("softbreak", "hardbreak"):
            newline = content.find("\n", pos)
            if newline < 0:
                raise _Mismatch("a line break that is not there")
            marker = content[pos:newline]
            if kind == "softbreak":
                gap(newline + 1)
                groups[-1] += 1
            else:
                if marker.strip() not in ("", "\\"):
                    raise _Mismatch(f"unexpected {marker!r} before a line break")
                fragment.line_break(marker)
                pos = newline + 1
                groups.append(1)
        elif kind == "code_inline":
            at = expect(token.markup)
            gap(at)
            close = _closing_backticks(content, at + len(token.markup), token.markup)
            source = content[at:close]
            kept_without_newline(source)
            fragment.kept(source, token.content)
            pos = close
        elif kind.endswith(("_open", "_close")) and kind.rsplit("_", 1)[0] in _ELEMENTS:
            at = expect(token.markup)
            gap(at)
            name = _ELEMENTS[kind.rsplit("_", 1)[0]]
            (fragment.open if kind.endswith("_open") else fragment.close)(name, token.markup)
            pos = at + len(token.markup)
        elif kind == "link_open" and token.markup == "autolink":
            at = expect("<")
            gap(at)
            close = content.find(">", at)
            if close < 0:
                raise _Mismatch("an autolink without its '>'")
            source = content[at:close + 1]
            kept_without_newline(source)
            fragment.kept(source, source[1:-1])
            pos = close + 1
            skip_to_close = True
        elif kind == "link_open":
            at = expect("[")
            gap(at)
            fragment.open("a", "[")
            pos = at + 1
        elif kind == "link_close":
            at = expect("]")
            gap(at)
            end = _link_tail(content, at)
            source = content[at:end]
            kept_without_newline(source)
            fragment.close("a", source)
            pos = end
        elif kind == "image":
            at = expect("![")
            gap(at)
            end = _link_tail(content, _label_end(content, at + 1))
            source = content[at:end]
            kept_without_newline(source)
            fragment.kept(source)
            pos = end
        elif kind == "html_inline":
            at = expect(token.content)
            gap(at)
            kept_without_newline(token.content)
            fragment.kept(token.content)
            pos = at + len(token.content)
        else:
            raise _Mismatch(f"a {kind} token")
    gap(len(content))
    return fragment, groups


def _closing_backticks(content: str, start: int, ticks: str) -> int:
    """The end of the code span opened by ``ticks`` whose code starts at ``start``."""
    for match in re.finditer("`+", content[start:]):
        if match.group() == ticks:
            return start + match.end()
    raise _Mismatch("a code span without its closing backticks")


def _label_end(content: str, start: int) -> int:
    """The index of the ``]`` closing the link label opened at ``content[start] == "["``."""
    depth, i = 0, start
    while i < len(content):
        c = content[i]
        if c == "\\":
            i += 2
            continue
        if c == "[":
            depth += 1
        elif c == "]":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    raise _Mismatch("a link label without its ']'")


def _link_tail(content: str, at: int) -> int:
    """The end of a link's tail starting with the ``]`` at ``at``: ``](dest "title")``,
    ``][label]``, or the ``]`` alone."""
    from markdown_it.helpers import parseLinkDestination, parseLinkTitle

    n = len(content)

    def spaces(i: int) -> int:
        while i < n and content[i] in " \t\n":
            i += 1
        return i

    if content.startswith("](", at):
        i = spaces(at + 2)
        if i < n and content[i] == ")":
            return i + 1
        destination = parseLinkDestination(content, i, n)
        if destination.ok:
            i = spaces(destination.pos)
            if i < n and content[i] in "\"'(":
                title = parseLinkTitle(content, i, n)
                if title.ok:
                    i = spaces(title.pos)
            if i < n and content[i] == ")":
                return i + 1
    if content.startswith("][", at):
        close = content.find("]", at + 2)
        if close >= 0:
            return close + 1
    return at + 1

"""Translating HTML: the text of a page is translated, its markup is kept byte for byte.

The API (stable; what ``translate --format html`` and the servers call)::

    translate_html(html, translate, *, lang=None, align=None) -> str
    html_sentences(html, *, lang=None) -> list[str]

- ``translate(sentences: list[str]) -> list[str]``: every translatable sentence of the page, in
  document order, in ONE call; it returns one translation per sentence, in order (a sentence too
  long for the model is its business, as in ``document.translate_document``). It is not called
  when the page has no text to translate.
- ``lang``: the source language, for sentence splitting (``segment.split_sentences``).
- ``align(sources, translations) -> list[list[int]]`` (optional): for each sentence pair, for each
  word of the translation (``translation.split()``), the index of the source word
  (``source.split()``) it is aligned to (attends to most), or -1/None for none. Only called for
  the sentences that hold inline tags. Without it, inline tags go where proportion puts them.
- ``html_sentences``: the sentences ``translate`` would receive (for limits and counting).

What is translated: the text of the page, block by block. A *block* is the text between two
block-level tags (``<p>``, ``<li>``, ``<td>``, ``<h1>``, ``<div>``, ``<title>``, ``<option>``,
``<button>``... : every tag that is not an inline one below). Inside a block, text and inline
elements (``<a> <b> <i> <em> <strong> <span> <sub> <sup> <q> <abbr> <mark> <small> <u> <s>``...)
form one run; the run is split into sentences (``<br>`` is a line break: always a boundary) and
each sentence goes to the model whole, without its tags, whitespace collapsed, entities decoded.
Sentences with no letter outside kept code (numbers, "|", "—", a lone ``<code>``) are left
as they are.

What is kept byte for byte: every tag as written (attributes, quotes, case), comments, the
doctype, processing instructions, CDATA sections, whitespace between sentences and blocks, and
the content of ``<script> <style> <pre> <textarea> <template> <svg> <math> <iframe> <object>
<canvas> <audio> <video> <xmp> <noembed> <noframes> <rt> <rp>``, and of any element with
``translate="no"`` or class ``notranslate``. Attributes are never translated (not ``title``, not
``alt``: LibreTranslate does not either, and a start tag is only ever copied, never rewritten).
A sentence whose translation equals its source is kept byte for byte too, so a translator that
returns its input gives back the page unchanged, and a page with no text comes back identical.

Inline code (``<code> <kbd> <samp> <var>``, and inline elements marked ``translate="no"``) stays
in its sentence, so the model sees the sentence whole; in the output the element comes back as
written, in place of the words that translate it: its own text where the translation has it (a
copied identifier), else the words aligned to it, else the words at its proportional place.
Kept elements joined by punctuation are one (``<kbd>Ctrl</kbd>+<kbd>C</kbd>``); one that is part
of a word (``<code>Foo</code>s``) takes the same part of the translated word.

Where inline tags go: each start tag, end tag, image, comment or kept element inside a sentence
is put at a word boundary of the translation (tags at a sentence's edges stay outside it, as
written). With ``align``, an element wraps the translated words aligned to its source words
(elements may change order, as words do; nesting is kept: a child stays within its parent,
siblings do not overlap). Without it (or where the tags do not nest within the sentence), a tag
after k of the n source words goes after k * m / n of the m translated words (start tags rounded
down, end tags up, a tag inside the sentence kept inside it when m > 1, an element that wrapped
words wrapping at least one): tags keep their order, so the page's tag sequence is unchanged.
Start tags go right before the next word, end tags right after the previous one, and a tag
that touched a word's punctuation only (``word</b>.``, ``(<b>word``) keeps it outside. A tag in
the middle of a word goes to that word's edge. No tag is ever dropped: every start and end tag
of the input is in the output, once.

Entities and characters: text that is not translated is copied as written (``&nbsp;``,
``&eacute;``, ``&#233;`` stay). In translated text ``&``, ``<`` and ``>`` are escaped as
``&amp; &lt; &gt;``, U+00A0 becomes ``&nbsp;`` (invisible otherwise), other characters are
written as characters (the output is a ``str``; encode it as UTF-8).

The parser is Python's ``html.parser`` (standard library, maintained with CPython, tolerant of
malformed pages, no dependency): it reports where each construct starts, so every tag is copied
from the source, not re-serialised (lxml, html5lib and BeautifulSoup rebuild the tree and write
it back: quotes, case, entities and implied tags change). Stray end tags and unclosed tags are
kept as they are; an unclosed ``<pre>``/``<code>`` (or another kept element) keeps everything up
to the end tag of one of its parents untranslated. A page with more than :data:`MAX_HTML_DEPTH`
elements open at once is refused (``UserError``); below that, the time taken is linear in the
page's size whatever its nesting.
"""

from __future__ import annotations

import bisect
import html as _html
import re
from array import array
from typing import Callable, Sequence

from transformer.errors import UserError
from transformer.translate.html_placement import _Atom, _Sentence, render_sentence, sentence_events
from transformer.translate.html_tokens import Token, tokenize
from transformer.translate.segment import split_sentences

__all__ = ["translate_html", "html_sentences", "Translate", "Align", "MAX_HTML_DEPTH"]

Translate = Callable[[list[str]], list[str]]
Align = Callable[[list[str], list[str]], Sequence[Sequence["int | None"]]]

# --- What the tags are ----------------------------------------------------------------

# Phrasing elements: their tags stay inside the sentence they split.
INLINE = frozenset(
    "a abbr acronym b bdi bdo big cite data del dfn em font i ins label mark nobr q ruby s small "
    "span strike strong sub sup time tt u".split()
)
# Kept as written, seen by the model as part of the sentence (see the module doc).
VERBATIM = frozenset("code kbd samp var".split())
# Kept as written and not seen by the model; inside a sentence they are a point between words.
OPAQUE_INLINE = frozenset(
    "script style template textarea svg math iframe object canvas audio video noembed noframes rt rp".split()
)
# Kept as written, block-level.
OPAQUE_BLOCK = frozenset("pre xmp listing plaintext".split())
# Empty inline elements: a point between words.
POINTS = frozenset("img wbr input embed".split())
VOID = frozenset("area base br col embed hr img input keygen link meta param source track wbr".split())
# Elements whose end tag a page may leave out, and the start tags that end one of them when it is
# the innermost open element (the HTML rule, simplified): unclosed paragraphs, list items and
# table cells end where the next one starts instead of piling up.
_CELL_ENDS = frozenset("td th tr tbody thead tfoot".split())
_ENDED_BY = {
    "p": frozenset("address article aside blockquote details div dl fieldset figure footer form h1 h2 h3 h4 h5 h6 "
                   "header hr main menu nav ol p pre section table ul".split()),
    "li": frozenset(["li"]), "dt": frozenset(["dt", "dd"]), "dd": frozenset(["dt", "dd"]),
    "option": frozenset(["option", "optgroup"]), "optgroup": frozenset(["optgroup"]),
    "td": _CELL_ENDS, "th": _CELL_ENDS, "tr": _CELL_ENDS - {"td", "th"},
    "thead": frozenset(["tbody", "tfoot"]), "tbody": frozenset(["tbody", "tfoot"]),
}
MAX_HTML_DEPTH = 10_000
"""The most elements a page may have open at once (started, not yet ended: an element a page
leaves unclosed counts until its parent ends, or, for those whose end tag HTML lets a page leave
out, until the next one starts); a deeper page is refused (``UserError``) before anything is
translated."""
_HTML_SPACE = " \t\n\r\f"
_TO_SPACE = str.maketrans(dict.fromkeys(_HTML_SPACE, " "))
# A character reference, as html.unescape finds them (its own pattern where it has one).
_CHARREF = getattr(_html, "_charref", None) or re.compile(
    r"&(#[0-9]+;?|#[xX][0-9a-fA-F]+;?|[^\t\n\f <&#;]{1,32};?)")


# --- Runs: the text of one block, with its inline tags ---------------------------------


class _Run:
    """Text and inline elements between two block-level tags. ``plain`` is the text the way it
    reads (tags out, entities decoded, HTML whitespace as spaces, ``<br>`` as a line break);
    ``before[i]``/``after[i]`` are where plain character i starts and ends in the source (arrays
    of machine integers: 16 bytes a character where lists of ints take 70)."""

    def __init__(self, source: str, start: int):
        self.source = source
        self.raw_start = self.raw_end = start
        self.plain: list[str] = []
        self.before = array("q")
        self.after = array("q")
        self.atoms: list[_Atom] = []
        self.sentences: list[_Sentence] = []
        self._joined: dict[int, list[str]] = {}  # kept elements joined to the next: their text's pieces

    def _chars(self, text: str, before: int, after: int | None = None) -> None:
        self.plain.extend(text.translate(_TO_SPACE))
        if after is None:  # text as written: one source character each
            self.before.extend(range(before, before + len(text)))
            self.after.extend(range(before + 1, before + len(text) + 1))
        else:  # a reference or a kept element: all its characters come from [before, after)
            self.before.extend(array("q", [before]) * len(text))
            self.after.extend(array("q", [after]) * len(text))

    def add(self, kind: str, start: int, end: int, name: str = "", text: str = "") -> None:
        self.raw_end = end
        raw = self.source[start:end]
        if kind == "data":  # character references decoded, each decoded from its own span
            position = start
            for ref in _CHARREF.finditer(raw):
                self._chars(raw[position - start : ref.start()], position)
                self._chars(_html.unescape(ref.group()), start + ref.start(), start + ref.end())
                position = start + ref.end()
            self._chars(raw[position - start :], position)
        elif kind == "br":
            self._chars("\n", start, end)
            self.plain[-1] = "\n"
        elif kind == "verbatim" and text:
            previous = self.atoms[-1] if self.atoms else None
            between = "".join(self.plain[previous.end :]) if previous and previous.kind == "verbatim" else " "
            if not any(c.isspace() or c.isalpha() for c in between):
                # Kept elements joined by punctuation are one: <kbd>Ctrl</kbd>+<kbd>C</kbd>. Its
                # extent, text and characters' places are set once, in split(): a chain of them
                # costs linear time.
                previous.raw_end = end
                previous.end += len(between) + len(text)
                self._joined.setdefault(len(self.atoms) - 1, [previous.text]).extend((between, text))
                self._chars(text, previous.raw_start, end)
            else:
                offset = len(self.plain)
                self.atoms.append(_Atom("verbatim", offset, raw, name, start, end, offset + len(text), text))
                self._chars(text, start, end)
        else:
            self.atoms.append(_Atom("point" if kind == "verbatim" else kind, len(self.plain), raw, name, start, end))

    def split(self, lang: str | None) -> None:
        for k, pieces in self._joined.items():  # a joined kept element covers all its characters
            atom = self.atoms[k]
            atom.raw, atom.text = self.source[atom.raw_start : atom.raw_end], "".join(pieces)
            self.before[atom.offset : atom.end] = array("q", [atom.raw_start]) * (atom.end - atom.offset)
            self.after[atom.offset : atom.end] = array("q", [atom.raw_end]) * (atom.end - atom.offset)
        self._joined = {}
        self.offsets = [atom.offset for atom in self.atoms]
        plain = "".join(self.plain)
        spans = split_sentences(plain, lang)
        # A kept element's text stays in one sentence.
        kept = [(atom.offset, atom.end) for atom in self.atoms if atom.kind == "verbatim"]
        kept_starts = [a for a, _ in kept]
        merged: list[tuple[int, int]] = []
        for span in spans:
            k = bisect.bisect_left(kept_starts, span[0]) - 1  # the last kept element before it
            if merged and k >= 0 and kept[k][1] > merged[-1][1]:
                merged[-1] = (merged[-1][0], span[1])
            else:
                merged.append(span)
        spans = merged
        inside = [False] * len(plain)
        for atom in self.atoms:
            if atom.kind == "verbatim":
                inside[atom.offset : atom.end] = [True] * (atom.end - atom.offset)
        for a, b in spans:
            text = re.sub(" {2,}", " ", plain[a:b])
            letters = any(plain[i].isalpha() and not inside[i] for i in range(a, b))
            self.sentences.append(_Sentence(self, a, b, text, letters))

    def render(self) -> str:
        out, position = [], self.raw_start
        for sentence in self.sentences:
            a, b = self.before[sentence.start], self.after[sentence.end - 1]
            out.append(self.source[position:a])
            if sentence.translation is None:
                out.append(self.source[a:b])
            else:
                out.append(sentence.translation)
            position = b
        out.append(self.source[position : self.raw_end])
        return "".join(out)


# --- The walk: blocks, runs, kept regions ----------------------------------------------


def _no_translate(attrs) -> bool:
    for name, value in attrs:
        if name == "translate" and (value or "").strip().lower() == "no":
            return True
        if name == "class" and "notranslate" in (value or "").split():
            return True
    return False


def _region_end(tokens: list[Token], i: int, ancestors: dict[str, int]) -> int:
    """The index after the last token of the element opened by ``tokens[i]``: its end tag, or
    (unclosed) the token before the end tag of one of its ancestors (``ancestors``: how many
    elements of each name are open around it), or the end of the page."""
    name, depth = tokens[i].name, 1
    inner: list[str] = []  # the elements open inside it, and how many of each name
    inner_open: dict[str, int] = {}
    for k in range(i + 1, len(tokens)):
        token = tokens[k]
        if token.kind == "start" and token.name not in VOID:
            if token.name == name:
                depth += 1
            else:
                inner.append(token.name)
                inner_open[token.name] = inner_open.get(token.name, 0) + 1
        elif token.kind == "end":
            if token.name == name:
                depth -= 1
                if depth == 0:
                    return k + 1
            elif inner_open.get(token.name):
                _close(inner, inner_open, token.name)
            elif ancestors.get(token.name):
                return k
    return len(tokens)


def _close(stack: list[str], counts: dict[str, int], name: str) -> None:
    """End the innermost open element called ``name`` and those open inside it (``counts[name]``
    is not 0): each element is popped once, so a page's end tags cost linear time in all."""
    while True:
        popped = stack.pop()
        counts[popped] -= 1
        if popped == name:
            return


def _plan(source: str, lang: str | None) -> tuple[list, list[_Sentence]]:
    """The page as a list of raw strings and runs, and all its sentences in order."""
    tokens = tokenize(source)
    parts: list = []
    run: _Run | None = None
    stack: list[str] = []  # the elements open, outermost first
    open_names: dict[str, int] = {}  # how many of each name are in the stack

    def in_run() -> _Run:
        nonlocal run
        if run is None:
            run = _Run(source, token.start)
            parts.append(run)
        return run

    def boundary(end: int) -> None:
        nonlocal run
        run = None
        parts.append(source[token.start : end])

    i = 0
    while i < len(tokens):
        token = tokens[i]
        kind, name = token.kind, token.name
        i += 1
        if kind == "data":
            in_run().add(kind, token.start, token.end)
        elif kind == "start" and name not in VOID and (
            name in VERBATIM or name in OPAQUE_INLINE or name in OPAQUE_BLOCK or _no_translate(token.attrs)
        ):
            j = _region_end(tokens, i - 1, open_names)
            end = tokens[j - 1].end
            if name in VERBATIM or name in INLINE:
                text = "".join(_html.unescape(source[t.start : t.end]) for t in tokens[i:j] if t.kind == "data")
                text = re.sub(" +", " ", text.translate(_TO_SPACE)).strip()  # no space at its ends
                in_run().add("verbatim", token.start, end, name, text)
            elif name in OPAQUE_INLINE:
                in_run().add("point", token.start, end, name)
            else:
                boundary(end)
            i = j
        elif kind in ("start", "empty", "end"):
            if kind == "start" and name not in VOID:
                while stack and name in _ENDED_BY.get(stack[-1], ()):
                    open_names[stack.pop()] -= 1
                if len(stack) >= MAX_HTML_DEPTH:
                    raise UserError(f"the page has more than {MAX_HTML_DEPTH:,} elements open at once at character "
                                    f"{token.start:,} (<{name}>): deeper than a page is translated")
                stack.append(name)
                open_names[name] = open_names.get(name, 0) + 1
            elif kind == "end" and open_names.get(name):
                _close(stack, open_names, name)
            if name == "br":
                in_run().add("br", token.start, token.end)
            elif name in POINTS or (kind != "start" and name in VERBATIM | OPAQUE_INLINE) or (
                kind == "empty" and name in INLINE
            ):
                in_run().add("point", token.start, token.end, name)
            elif name in INLINE:
                in_run().add("open" if kind == "start" else "close", token.start, token.end, name)
            else:
                boundary(token.end)
        elif kind == "decl":
            boundary(token.end)
        else:  # comment, processing instruction, CDATA section, what the parser skipped
            in_run().add("point", token.start, token.end)
    sentences = []
    for part in parts:
        if isinstance(part, _Run):
            part.split(lang)
            sentences += [s for s in part.sentences if s.translate]
    return parts, sentences


# --- The API ---------------------------------------------------------------------------


def html_sentences(html: str, *, lang: str | None = None) -> list[str]:
    """The sentences ``translate_html`` gives to ``translate`` for this page, in order."""
    if not isinstance(html, str):
        raise TypeError(f"html must be a str, got {type(html).__name__}")
    return [s.text for s in _plan(html, lang)[1]]


def translate_html(html: str, translate: Translate, *, lang: str | None = None, align: Align | None = None) -> str:
    """Translate the text of an HTML page and keep its markup (see the module doc).

    ``translate`` gets all the page's sentences in one list and returns their translations in
    order; ``lang`` is the source language (sentence splitting); ``align`` optionally gives word
    alignments that place the inline tags. Raises ``ValueError`` if ``translate`` (or ``align``)
    returns the wrong number of items, ``UserError`` for a page nested deeper than
    :data:`MAX_HTML_DEPTH`.
    """
    if not isinstance(html, str):
        raise TypeError(f"html must be a str, got {type(html).__name__}")
    parts, sentences = _plan(html, lang)
    if sentences:
        translations = list(translate([s.text for s in sentences]))
        if len(translations) != len(sentences):
            raise ValueError(f"translate returned {len(translations)} translations for {len(sentences)} sentences")
        targets = []
        for sentence, translation in zip(sentences, translations):
            if not isinstance(translation, str):
                raise TypeError(f"translate must return str, got {type(translation).__name__}")
            targets.append(re.sub(r"\s*[\r\n]+\s*", " ", translation.strip()))
        changed = [k for k, s in enumerate(sentences) if targets[k] != s.text]
        for k in changed:
            sentences[k].events = sentence_events(sentences[k])
        links: dict[int, list] = {}
        if align is not None:
            asked = [k for k in changed if sentences[k].events]
            if asked:
                answers = list(align([sentences[k].text for k in asked], [targets[k] for k in asked]))
                if len(answers) != len(asked):
                    raise ValueError(f"align returned {len(answers)} alignments for {len(asked)} sentences")
                for k, answer in zip(asked, answers):
                    answer = [None if w is None or w < 0 else int(w) for w in answer]
                    if len(answer) != len(targets[k].split()):
                        raise ValueError(f"align gave {len(answer)} links for a translation of "
                                         f"{len(targets[k].split())} words: {targets[k]!r}")
                    links[k] = answer
        for k in changed:
            sentences[k].translation = render_sentence(sentences[k], targets[k], links.get(k))
    return "".join(part if isinstance(part, str) else part.render() for part in parts)

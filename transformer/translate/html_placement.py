"""Putting the inline tags back into a translated sentence of an HTML page (for ``html.py``).

``html.py`` parses the page into runs of text and inline tags and cuts each run into
sentences; the model translates the sentences without their tags. Here each tag, comment or
kept element inside a source sentence (an *event*, at a source word boundary) is given a word
boundary of the translation, by a word alignment when there is one (``align``: elements wrap the
words aligned to theirs, nesting kept) or else by proportion (tags keep their order); then the
translation is escaped and each tag's markup written at its place. The rules are the "Inline
code" and "Where inline tags go" paragraphs of ``html.py``'s module doc.

Apart from ``html.py`` because it is a separate problem: ``html.py`` reads the page (where each
construct is, what is text and what is kept); this only maps positions in a sentence to
positions in its translation, and knows nothing of parsing. The pieces ``html.py`` hands over
(a run's atoms, its sentences) are defined here, so this module needs nothing of ``html.py``.
"""

from __future__ import annotations

import bisect
import html as _html
import re
import unicodedata
from dataclasses import dataclass, field
from typing import Any


@dataclass
class _Atom:
    """Something inside a run that is not text: a tag, a comment, a kept element."""

    kind: str  # open close point verbatim
    offset: int  # where it is in the run's plain text (verbatim: where its text starts)
    raw: str
    name: str = ""
    raw_start: int = 0
    raw_end: int = 0
    end: int = 0  # verbatim: where its text ends
    text: str = ""  # verbatim: its text as the model sees it


@dataclass
class _Sentence:
    run: Any  # the run of text it was cut from (html.py's _Run: its plain text and atoms)
    start: int
    end: int
    text: str  # what the model sees
    translate: bool
    translation: str | None = None  # the markup that replaces it, None to keep it as written
    events: list = field(default_factory=list)


@dataclass
class _Event:
    atom: _Atom
    kind: str  # open close point verbatim
    b: int  # target word boundary (0..m)
    b2: int  # verbatim: the boundary where its words end
    attach: str  # left right free inner: the whitespace around it in the source
    source_b: int = 0
    source_b2: int = 0
    trim_start: bool = False  # goes after the leading punctuation of its word ("(<b>word")
    trim_end: bool = False  # goes before the trailing punctuation of its word ("word</b>.")
    part: tuple[float, float] | None = None  # kept code that is this part of a source word
    in_word: bool = False  # placed inside a translated word
    loc: int = 0
    loc_end: int = 0
    space_after: bool = False


def _escape(text: str) -> str:
    return _html.escape(text, quote=False).replace("\xa0", "&nbsp;")


def _proportional(k: int, n: int, m: int, way: str = "round") -> int:
    """Source word boundary k of n -> target boundary of m: k * m / n rounded ``way`` (floor,
    ceil, round), a boundary inside the sentence kept inside it (1..m-1) when m > 1."""
    if k <= 0 or m == 0:
        return 0
    if k >= n:
        return m
    t = {"floor": k * m // n, "ceil": -(-k * m // n), "round": (2 * k * m + n) // (2 * n)}[way]
    return min(max(t, 1), m - 1) if m >= 2 else t


def _by_proportion(events: list[_Event], n: int, m: int) -> list[_Event]:
    """Each tag at the proportional word boundary, in source order; an element that wraps words
    in the source wraps at least one in the translation, as long as the translation has a word
    for each of the elements side by side."""
    stack: list[int] = []
    opening_of: dict[int, int] = {}  # close event -> its open event, for elements that wrap words
    for i, event in enumerate(events):
        if event.kind == "open":
            event.b = _proportional(event.source_b, n, m, "floor")
            stack.append(i)
        elif event.kind == "close":
            event.b = _proportional(event.source_b, n, m, "ceil")
            if stack and events[stack[-1]].atom.name == event.atom.name:
                opened = stack.pop()
                if event.source_b > events[opened].source_b:
                    opening_of[i] = opened
        elif event.kind == "verbatim":
            event.b = _proportional(event.source_b, n, m, "floor")
            event.b2 = _proportional(event.source_b2, n, m, "ceil")
        else:
            event.b = _proportional(event.source_b, n, m)
    # The latest boundary each tag may take so that every element after it still gets a word: from
    # the end, a start tag one word before its end tag's bound (never below the sentence's start).
    closing_of = {opened: closed for closed, opened in opening_of.items()}
    upper, bound = [m] * len(events), m
    for i in reversed(range(len(events))):
        if i in closing_of:
            bound = min(bound, upper[closing_of[i]] - 1)
        upper[i] = bound = max(bound, 0)
    last = 0
    for i, event in enumerate(events):  # in order, each tag at or after the previous, within its bound
        b = max(event.b, last)
        if i in opening_of:
            b = max(b, events[opening_of[i]].b + 1)
        event.b = min(b, upper[i])
        if event.kind == "verbatim":  # never widened: it would take the place of more words
            event.b2 = last = min(max(event.b2, event.b), upper[i])
        else:
            event.b2 = last = event.b
    return events


@dataclass
class _Node:
    """An inline element (or a point) of a sentence and the ones it holds."""

    event: _Event | None
    close: _Event | None = None
    children: list = field(default_factory=list)


def _aligned(events: list[_Event], n: int, m: int, links: list[int | None]) -> list[_Event] | None:
    """``events`` re-placed by the word alignment, as a forest laid out without overlap; None
    when the tags of the sentence do not nest within it."""
    root = _Node(None)
    stack = [root]
    for event in events:
        if event.kind == "open":
            node = _Node(event)
            stack[-1].children.append(node)
            stack.append(node)
        elif event.kind == "close":
            if len(stack) == 1 or stack[-1].event.atom.name != event.atom.name:
                return None
            stack[-1].close = event
            stack.pop()
        else:
            stack[-1].children.append(_Node(event))
    if len(stack) != 1:
        return None
    targets: dict[int, list[int]] = {}  # source word -> the target words aligned to it
    for j, w in enumerate(links):
        if w is not None:
            targets.setdefault(w, []).append(j)

    def span(a: int, b: int) -> tuple[int, int]:
        js = [j for w in range(a, b) for j in targets.get(w, ())]
        if js:
            return min(js), max(js) + 1
        return _proportional(a, n, m, "floor"), _proportional(b, n, m, "ceil")

    def wish(node: _Node) -> tuple[int, int]:
        """Where the node would go: the target words aligned to its source words."""
        event = node.event
        if event.kind == "open":
            return span(event.source_b, node.close.source_b)
        if event.kind == "verbatim" and event.source_b2 > event.source_b:
            return span(event.source_b, event.source_b2)
        k = event.source_b  # a point: before the word aligned to the next source word
        after, before = targets.get(k), targets.get(k - 1)
        if before and (event.attach == "left" or not after):
            return max(before) + 1, max(before) + 1
        if after:
            return min(after), min(after)
        return (_proportional(k, n, m),) * 2

    def by_wish(node: _Node):
        return iter(sorted((*wish(child), index, child) for index, child in enumerate(node.children)))

    # Each node's children in the order of their wishes, each within its parent's [low, high), none
    # overlapping; depth first with a stack of frames (children left, cursor, high, the node whose
    # end tag follows them), as tags may nest deeper than Python recurses.
    out: list[_Event] = []
    frames: list[list] = [[by_wish(root), 0, m, None]]
    while frames:
        frame = frames[-1]
        item = next(frame[0], None)
        if item is None:
            frames.pop()
            if frame[3] is not None:
                frame[3].close.b = frame[3].close.b2 = frame[2]
                out.append(frame[3].close)
            continue
        a, b, _, child = item
        start = min(max(a, frame[1]), frame[2])
        end = min(max(b, start), frame[2])
        frame[1] = end
        child.event.b, child.event.b2 = start, end
        out.append(child.event)
        if child.close is not None:
            frames.append([by_wish(child), start, end, child])
    return out


def _place(translation: str, events: list[_Event]) -> str:
    """The translation, escaped, with each event's markup at its word boundary."""
    words = [(w.start(), w.end()) for w in re.finditer(r"\S+", translation)]
    m = len(words)

    def left(j, trim=False):  # right after word j-1 (before its trailing punctuation)
        if j <= 0:
            return 0
        a, b = words[j - 1]
        if trim and not _punctuation(translation[a:b]):
            while _punctuation(translation[b - 1]):
                b -= 1
        return b

    def right(j, trim=False):  # right before word j (after its leading punctuation)
        if j >= m:
            return len(translation)
        a, b = words[j]
        if trim and not _punctuation(translation[a:b]):
            while _punctuation(translation[a]):
                a += 1
        return a

    last, previous_b, state = 0, None, "left"
    for event in events:
        if event.b != previous_b:
            previous_b, state = event.b, "left"
        spans_words = event.kind == "verbatim" and event.b2 > event.b
        if state == "left" and not spans_words and (event.kind == "close" or event.attach == "left" or event.trim_end):
            event.loc = left(event.b, event.trim_end)
        else:
            state = "right"
            event.loc = right(event.b, event.trim_start)
        event.loc = max(event.loc, last)
        event.loc_end = max(left(event.b2, event.trim_end), event.loc) if spans_words else event.loc
        if spans_words and event.part and event.b2 == event.b + 1 and words[event.b][0] >= last:
            # Part of one word: the same part of the translated word (its own text if it is there).
            a, z = words[event.b]
            at = translation.find(event.atom.text, a, z)
            if at >= 0:
                event.loc, event.loc_end = at, at + len(event.atom.text)
            else:
                event.loc = a + round(event.part[0] * (z - a))
                event.loc_end = max(a + round(event.part[1] * (z - a)), event.loc + 1)
            event.in_word = True
        event.space_after = (
            not spans_words
            and event.kind in ("point", "verbatim")
            and event.attach == "free"
            and 0 < event.b < m
            and event.loc == right(event.b)
        )
        last = event.loc_end
    # Kept inline code: where the translation has its text as written, use that.
    for k, event in enumerate(events):
        if event.kind != "verbatim" or event.in_word:
            continue
        low = events[k - 1].loc_end if k else 0
        high = events[k + 1].loc if k + 1 < len(events) else len(translation)
        text, found, at = event.atom.text, None, translation.find(event.atom.text, low)
        while text and at >= 0 and at + len(text) <= high:
            if (at == 0 or not translation[at - 1].isalnum()) and (
                at + len(text) == len(translation) or not translation[at + len(text)].isalnum()
            ):
                if found is None or abs(at - event.loc) < abs(found - event.loc):
                    found = at
            at = translation.find(text, at + 1)
        if found is not None:
            event.loc, event.loc_end, event.space_after = found, found + len(text), False
    out, position = [], 0
    for event in events:
        at = max(event.loc, position)
        out += [_escape(translation[position:at]), event.atom.raw]
        position = max(event.loc_end, at)
        if event.space_after:
            out.append(" ")
    out.append(_escape(translation[position:]))
    return "".join(out)


def sentence_events(sentence: _Sentence) -> list[_Event]:
    """The atoms inside ``sentence`` (not at its edges), with their source word boundaries."""
    run, a, b = sentence.run, sentence.start, sentence.end
    plain = run.plain
    starts, ends = [], []
    i = a
    while i < b:  # the words of the sentence, as the model saw them
        if plain[i].isspace():
            i += 1
            continue
        starts.append(i)
        while i < b and not plain[i].isspace():
            i += 1
        ends.append(i)
    events = []
    first = bisect.bisect_left(run.offsets, a)
    for atom in run.atoms[first : bisect.bisect_left(run.offsets, b, first)]:
        inside = a <= atom.offset < b if atom.kind == "verbatim" else a < atom.offset < b
        if not inside:
            continue
        o, o2 = atom.offset, atom.end if atom.kind == "verbatim" else atom.offset
        space_before = o == a or plain[o - 1].isspace()
        space_after = o2 >= b or plain[o2].isspace()
        attach = {(True, True): "free", (False, True): "left", (True, False): "right"}.get(
            (space_before, space_after), "inner")
        # Inside a word, next to its punctuation only: "word</b>." or "(<b>word".
        w = bisect.bisect_right(starts, o) - 1
        lead = w >= 0 and starts[w] < o < ends[w] and _punctuation("".join(plain[starts[w] : o]))
        w2 = bisect.bisect_right(starts, o2) - 1
        trail = w2 >= 0 and starts[w2] < o2 < ends[w2] and _punctuation("".join(plain[o2 : ends[w2]]))
        event = _Event(atom, atom.kind, 0, 0, attach)
        if atom.kind == "close" or (atom.kind == "point" and trail and not lead):
            event.source_b = event.source_b2 = bisect.bisect_left(starts, o)
            event.trim_end = trail
        else:
            event.source_b = bisect.bisect_right(ends, o)
            event.source_b2 = bisect.bisect_left(starts, o2) if atom.kind == "verbatim" else event.source_b
            event.trim_start = lead
            event.trim_end = trail and atom.kind == "verbatim"
            if atom.kind == "verbatim" and w == w2 >= 0 and not (lead or trail) and (
                starts[w] < o or o2 < ends[w]
            ):  # part of a word with letters around it: <code>foo</code>s
                size = ends[w] - starts[w]
                event.part = ((o - starts[w]) / size, (o2 - starts[w]) / size)
        events.append(event)
    return events


def _punctuation(text: str) -> bool:
    return bool(text) and all(unicodedata.category(c).startswith("P") for c in text)


def render_sentence(sentence: _Sentence, translation: str, links: list | None) -> str:
    events = sentence.events
    n, m = len(sentence.text.split()), len(translation.split())
    placed = _aligned(events, n, m, links) if links is not None and events else None
    if placed is None:
        placed = _by_proportion(events, n, m)
    return _place(translation, placed)

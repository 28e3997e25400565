"""Text with markup in it (a subtitle's ``<i>``, Markdown's ``**`` and links, a PO message's
``%s``), as an HTML fragment for ``translate_html`` and back.

A :class:`Fragment` is built piece by piece from the source: text to translate, and markup to
keep, each piece of markup given with its source spelling and written into the fragment as an
inline tag (emphasis, a link), a line break (``<br>``), or a kept element (``<code>``: the model
sees its text, ``translate_html`` writes it back as written; ``<img>``: a point between words,
unseen). ``translate_html`` keeps every tag of a fragment once, in order (no word alignment is
given to it), so :meth:`Fragment.restore` reads the translated fragment back: its text
unescaped, each tag replaced by the source spelling of the markup it stands for.
"""

from __future__ import annotations

import html
import re

# What translate_html gives back of a fragment made here: a kept element whole, or a tag.
_MARKUP = re.compile(r"<code>[^<]*</code>|<[^<>]*>")


class MarkupMismatch(ValueError):
    """A translated fragment whose tags are not its source's, once each and in order (the model
    dropped, added or moved one): its unit is kept untranslated, with a warning."""


class Fragment:
    """Text and markup, in source order (see the module doc)."""

    def __init__(self) -> None:
        self._html: list[str] = []
        self._markup: list[tuple[str, str]] = []  # (tag in the fragment, source spelling)
        self.has_text = False

    def text(self, text: str) -> None:
        """Text to translate."""
        self._html.append(html.escape(text, quote=False))
        self.has_text = self.has_text or bool(text.strip())

    def kept(self, source: str, visible: str = "") -> None:
        """Markup kept as ``source``; ``visible``: the text the model sees in its place (a code
        span's code, a placeholder), none for a point between words (a picture)."""
        tag = f"<code>{html.escape(visible, quote=False)}</code>" if visible.strip() else "<img>"
        self._add(tag, source)

    def open(self, name: str, source: str) -> None:
        """The start of inline markup (``name``: the HTML element it reads as, ``b``, ``a``...)."""
        self._add(f"<{name}>", source)

    def close(self, name: str, source: str) -> None:
        self._add(f"</{name}>", source)

    def line_break(self, source: str) -> None:
        """A forced line break (a sentence boundary)."""
        self._add("<br>", source)

    def _add(self, tag: str, source: str) -> None:
        self._html.append(tag)
        self._markup.append((tag, source))

    @property
    def html(self) -> str:
        """The fragment to translate."""
        return "".join(self._html)

    def restore(self, translated: str) -> list[tuple[str, str]]:
        """The translated fragment as source pieces, in order: ``(text, "")`` for translated
        text (entities decoded), ``(source, tag)`` for each piece of markup as it was written,
        with the tag that stood for it in the fragment (``"<br>"``, ``"<b>"``...).

        Raises:
            MarkupMismatch: the translation does not hold this fragment's tags once each, in order.
        """
        pieces: list[tuple[str, str]] = []
        position, k = 0, 0
        for match in _MARKUP.finditer(translated):
            if k >= len(self._markup) or match.group() != self._markup[k][0]:
                raise MarkupMismatch(f"the translation's markup differs from its source's at {match.group()!r}")
            pieces.append((html.unescape(translated[position:match.start()]), ""))
            pieces.append((self._markup[k][1], match.group()))
            position, k = match.end(), k + 1
        if k != len(self._markup):
            raise MarkupMismatch(f"the translation holds {k} of its source's {len(self._markup)} tags")
        pieces.append((html.unescape(translated[position:]), ""))
        return [p for p in pieces if p[0]]


def join_lines(pieces: list[tuple[str, str]], widths: list[int], *, after_punctuation: bool = False) -> list[str]:
    """``pieces`` (as :meth:`Fragment.restore` gives them) written on at most ``len(widths)``
    lines, their lengths in the proportions of ``widths`` (the source's lines), broken at spaces of
    the text only (never inside markup); line breaks the translation holds become spaces.
    ``after_punctuation``: prefer a break after a comma or a full stop near the place (as
    subtitles are broken)."""
    text, breakable = [], []
    for piece, tag in pieces:
        is_text = not tag
        if is_text:
            piece = re.sub(r"\s*\n\s*", " ", piece)
        text.append(piece)
        breakable += [is_text and c == " " for c in piece]
    joined = "".join(text)
    count = len(widths)
    if count <= 1:
        return [joined]
    spaces = [i for i, ok in enumerate(breakable) if ok and 0 < i < len(joined) - 1]
    total = max(sum(widths), 1)
    bonus = len(joined) / (4 * count) if after_punctuation else 0.0
    cuts: list[int] = []
    for k in range(1, count):
        target = len(joined) * sum(widths[:k]) / total
        options = [i for i in spaces if not cuts or i > cuts[-1]]
        if not options:
            break
        cuts.append(min(options, key=lambda i: abs(i - target) - (bonus if joined[i - 1] in ",;:.!?" else 0.0)))
    lines, start = [], 0
    for cut in cuts:
        lines.append(joined[start:cut])
        start = cut + 1
    lines.append(joined[start:])
    return lines

"""SubRip subtitles (``.srt``) as a translatable file.

Each cue's text is one HTML unit: its lines joined by spaces, so a sentence that runs over two
lines reaches the model whole, with its tags (``<i>``, ``<b>``, ``<u>``, ``<font ...>``) as inline
tags that stay around their words; other tags and ASS override codes (``{\\an8}``) are kept in
place. The translation is broken again into as many lines as the cue had, of about equal length
(at spaces, never inside a tag), as subtitle editors do. Cue numbers, timings, blank lines, line
ends (CRLF too) and a byte-order mark are kept byte for byte; a cue whose translation equals its
text is left as it was.

The file is parsed here rather than by a subtitle library, so that everything but the cues'
text is copied as written: a cue is an optional number line, a timing line
(``00:01:02,500 --> 00:01:04,000``, maybe with position coordinates after it) and text lines up
to a blank line followed by the next cue (a blank line inside a cue's text is kept in it). A
timing line that does not parse is a ``FileFormatError`` naming its line.
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

from transformer.translate.files.base import FileFormatError, TranslatableFile, Unit
from transformer.translate.files.inline import Fragment, MarkupMismatch, join_lines
from transformer.translate.files.text import check_count, decode_text
from transformer.translate.warning import TranslationWarning

_TIME = r"\d{1,3}:\d{1,2}:\d{1,2}[,.]\d{1,3}"
_TIMING = re.compile(rf"\s*{_TIME}\s*-->\s*{_TIME}(?:\s.*)?")
_NUMBER = re.compile(r"\s*\d+\s*")
# Markup inside a cue: a tag, or an ASS override code such as {\an8}.
_MARKUP = re.compile(r"</?[A-Za-z][^<>]*>|\{\\[^{}]*\}")
_INLINE = frozenset("b i u s font".split())


def split_lines(text: str) -> list[str]:
    """The lines of ``text``, each with its line end ("\\n" or "\\r\\n"; the last maybe none)."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    if parts[-1]:
        lines.append(parts[-1])
    return lines


def _body(line: str) -> str:
    return line.rstrip("\r\n")


@dataclass
class _Cue:
    number: str  # as written, "" when the cue has none
    first: int  # index of its first text line
    end: int  # index after its last text line
    fragment: Fragment


class SrtFile(TranslatableFile):
    """A SubRip file: one HTML unit per cue with text."""

    kind = "srt"
    extensions = (".srt",)
    media_type = "application/x-subrip"

    def __init__(self, data: bytes, bom: bytes, lines: list[str], cues: list[_Cue], name: str) -> None:
        self.data, self.bom, self.lines, self.cues, self.name = data, bom, lines, cues, name

    @classmethod
    def read(cls, data: bytes, name: str) -> SrtFile:
        text, bom = decode_text(data, name)
        lines = split_lines(text)
        bodies = [_body(line) for line in lines]

        def header(i: int) -> int:
            """How many lines the cue header at line i takes (number and timing: 2, timing: 1), 0 for none."""
            if i < len(bodies) and _NUMBER.fullmatch(bodies[i]) and i + 1 < len(bodies) \
                    and _TIMING.fullmatch(bodies[i + 1]):
                return 2
            return 1 if i < len(bodies) and _TIMING.fullmatch(bodies[i]) else 0

        cues: list[_Cue] = []
        i = 0
        while i < len(lines):
            if not bodies[i].strip():
                i += 1
                continue
            size = header(i)
            if size == 0:
                bad = i + 1 if _NUMBER.fullmatch(bodies[i]) and i + 1 < len(bodies) else i
                if bad > i or "-->" in bodies[bad]:
                    raise FileFormatError(f"{name}: line {bad + 1}: not a timing line (HH:MM:SS,mmm --> "
                                          f"HH:MM:SS,mmm): {bodies[bad][:60]!r}")
                raise FileFormatError(f"{name}: line {i + 1}: expected a subtitle (a number and a timing line), "
                                      f"found {bodies[i][:60]!r}")
            number = bodies[i].strip() if size == 2 else ""
            first = end = i + size
            j = first
            while j < len(lines):
                if not bodies[j].strip():
                    k = j
                    while k < len(lines) and not bodies[k].strip():
                        k += 1
                    if k == len(lines) or header(k) or _starts_cue(bodies, k):
                        break
                    j = k
                    continue
                if _TIMING.fullmatch(bodies[j]) and j == first:
                    break  # a cue without text, right before the next timing line
                j += 1
                end = j
            cues.append(_Cue(number, first, end, _fragment(bodies[first:end])))
            i = max(end, first)
        return cls(data, bom, lines, cues, name)

    def _with_text(self) -> list[_Cue]:
        return [cue for cue in self.cues if cue.fragment.has_text]

    def units(self) -> list[Unit]:
        return [Unit(cue.fragment.html, True, f"cue {cue.number or k + 1}")
                for k, cue in enumerate(self._with_text())]

    def write(self, translations: Sequence[str], *, target_lang: str | None = None) -> bytes:
        units = self.units()
        translations = check_count(translations, units)
        lines = list(self.lines)
        replaced: dict[int, list[str]] = {}
        for cue, unit, translation in zip(self._with_text(), units, translations):
            if translation == unit.text:
                continue
            try:
                pieces = cue.fragment.restore(translation)
            except MarkupMismatch as err:
                warnings.warn(TranslationWarning(f"{self.name}: {unit.where}: kept untranslated ({err})"),
                              stacklevel=2)
                continue
            source = lines[cue.first:cue.end]
            new = join_lines(pieces, [len(_body(line)) for line in source], after_punctuation=True)
            endings = [line[len(_body(line)):] for line in source]
            replaced[cue.first] = [text + endings[min(k, len(endings) - 1)] if k < len(new) - 1 else
                                   text + endings[-1] for k, text in enumerate(new)]
        if not replaced:
            return self.data
        out: list[str] = []
        skip_to = 0
        cue_end = {cue.first: cue.end for cue in self.cues}
        for i, line in enumerate(lines):
            if i < skip_to:
                continue
            if i in replaced:
                out += replaced[i]
                skip_to = cue_end[i]
                continue
            out.append(line)
        return self.bom + "".join(out).encode("utf-8")


def _starts_cue(bodies: list[str], k: int) -> bool:
    """Whether line k looks like the start of a cue whose timing line is malformed (a timing arrow on
    it, or a number and then one): it ends the cue before it, and is then refused."""
    return "-->" in bodies[k] or bool(_NUMBER.fullmatch(bodies[k]) and k + 1 < len(bodies)
                                       and "-->" in bodies[k + 1])


def _fragment(lines: list[str]) -> Fragment:
    """A cue's text lines, joined by spaces, as a fragment."""
    fragment = Fragment()
    for k, line in enumerate(lines):
        if k:
            fragment.text(" ")
        position = 0
        for match in _MARKUP.finditer(line):
            fragment.text(line[position:match.start()])
            markup = match.group()
            name = re.match(r"</?([A-Za-z]+)", markup)
            if name and name.group(1).lower() in _INLINE:
                element = name.group(1).lower()
                (fragment.close if markup.startswith("</") else fragment.open)(
                    "font" if element == "font" else element, markup)
            else:
                fragment.kept(markup)
            position = match.end()
        fragment.text(line[position:])
    return fragment

"""Glossaries (terminology): source terms paired with the target text a translation must use, read
from a file, and found in source sentences.

The file
    UTF-8 (a byte-order mark at its start is allowed), one ``source<TAB>target`` pair per line.
    Blank lines and lines whose first non-blank character is ``#`` are skipped (so a source term
    cannot start with ``#``). The whitespace around each column is stripped (and a byte-order
    mark at a term's start or end), and CRLF line ends work. A line with another number of
    tab-separated columns, an empty source or target, a term of more than ``MAX_TERM_CHARS``
    (1,000) characters or holding a control character (U+0000 to U+001F, U+007F to U+009F, the
    line and paragraph separators, a lone surrogate), bytes that are not UTF-8, or a source term
    already given with a different target is refused with a ``GlossaryError`` naming the file
    and the line (``terms.tsv:7: ...``). The file must be a regular file of at most
    ``MAX_GLOSSARY_BYTES`` (64 MiB), read a line at a time (a line over the longest two terms
    can take is refused as soon as it is read). The same pair given twice is kept once. A
    glossary with no terms is allowed and changes nothing. Pairs given in code
    (``Glossary.from_pairs``, what the server takes) follow the same rules.

Matching the source side
    Source terms are found in the sentence case-insensitively: both are compared after NFKC
    normalisation and then Unicode case folding (``unicodedata.normalize("NFKC", s).casefold()``),
    so "auftrag", "AUFTRAG" and "Auftrag" are one term, "STRASSE" matches "Straße" and "ﬁle"
    matches "file"; accents count ("Café" does not match "Cafe"). Two lines whose source terms
    fold alike are one entry: with the same target it is kept once (the first line), with another
    it is refused.

    Terms match whole words: the character before a match and the character after it must not be
    word characters, that is letters, digits and other numbers, combining marks (Unicode
    categories L, N and M) and the underscore. "Auftrag" matches in "Der Auftrag.", "(Auftrag)",
    "Auftrag-Nummer" and "Auftrag's", and not inside "Aufträge", "Auftraggeber", "Großauftrag"
    or "Auftrag_2". Punctuation inside a term is matched as written ("e-mail" does not match
    "e - mail"). Where a source term has whitespace between its words ("New York"), any run of
    whitespace matches it ("New  York", "New\\nYork"); where it has none, the sentence must have
    none either. Scripts written without spaces between words (Chinese, Japanese kana, Thai, Lao,
    Khmer, Myanmar) have no word ends to find, so their letters do not count as word characters:
    "北京" matches in "我爱北京天安门" (a character is never parted from its combining marks).

    Where matches overlap in a sentence, the longest wins (most characters of the folded source
    term, its words joined by single spaces), and of two as long, the leftmost; a match that
    overlaps a chosen one is dropped. ``Glossary.matches`` returns each chosen term once, in the
    order of its first occurrence, and of two terms with the same target only the first.

The target side is not matched but enforced: the translation must contain it exactly as written.

Sentences are matched through an index keyed by each term's first token (folded), so a sentence
costs a dictionary look-up per token whatever the size of the glossary.
"""

from __future__ import annotations

import functools
import os
import re
import unicodedata
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, Mapping

from transformer.errors import UserError
from transformer.run_files import RunFileError, open_regular

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
MAX_GLOSSARY_BYTES = 64 << 20
"""The largest glossary file read (64 MiB: about two million terms)."""
MAX_TERM_CHARS = 1000
"""The most characters a source or target term may have."""
# A line's bytes: two terms of MAX_TERM_CHARS characters of up to 4 bytes, a tab, and room for the
# whitespace around them.
_MAX_LINE_BYTES = 8 * MAX_TERM_CHARS + 1024
# What a term may not hold: control characters, the line and paragraph separators, lone surrogates.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\ud800-\udfff]")


class GlossaryError(UserError):
    """A glossary that cannot be used, with a one-line message naming the file and the line
    (``terms.tsv:7: ...``), or for pairs given in code, the pair (``glossary: pair 3: ...``)."""


@dataclass(frozen=True, slots=True)
class Term:
    """One glossary entry.

    Args:
        source: the source term as written in the glossary (its surrounding whitespace stripped).
        target: the target term as written: the translation must contain exactly this text.
        line: its line in the glossary file, from 1 (None for pairs given in code).
    """

    source: str
    target: str
    line: int | None = None


def fold(text: str) -> str:
    """The form both a term's source side and a sentence are compared in: NFKC, then case folded."""
    return unicodedata.normalize("NFKC", text).casefold()


# Scripts written without spaces between words: Thai, Lao, Myanmar, Khmer, the kana, and the
# Han ideographs (with the iteration marks) of the basic plane and of planes 2 and 3.
_UNSPACED = ("\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff\u19e0-\u19ff\ua9e0-\ua9ff\uaa60-\uaa7f"
             "\u3005-\u3007\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
             "\U00020000-\U0003ffff")


@functools.cache
def _patterns() -> tuple[re.Pattern, re.Pattern]:
    """The token pattern and the pattern of one word character (as the module docstring says).

    A token is a character of an unspaced script with its combining marks, a run of other word
    characters, or any other single non-space character. Python's ``\\w`` holds letters, digits and
    the underscore but not the combining marks that Devanagari, Bengali or Tamil need inside words
    (a vowel sign is a mark), so they are added; Unicode puts marks in planes 0, 1 and 14 only.
    """
    category = unicodedata.category
    marks = [c for plane in (range(0, 0x20000), range(0xE0000, 0xF0000))
             for c in plane if category(chr(c))[0] == "M"]
    ranges, start = [], marks[0]
    for previous, c in zip(marks, marks[1:] + [-1]):
        if c != previous + 1:
            ranges.append(chr(start) + (f"-{chr(previous)}" if previous > start else ""))
            start = c
    marks_class = f"[{''.join(ranges)}]"
    word = rf"(?:[^\W{_UNSPACED}]|{marks_class})"
    return re.compile(rf"[{_UNSPACED}]{marks_class}*|{word}+|\S"), re.compile(word)


def word_character(char: str) -> bool:
    """Whether ``char`` is a word character as terms are matched: a letter, digit or combining
    mark of a script written with spaces between words, or the underscore (a term next to one is
    not a whole word)."""
    return bool(_patterns()[1].fullmatch(char))


def _canonical(text: str) -> str:
    """``text`` folded, with each run of whitespace made one space and none at the ends: a source
    term's key, and the sentence it is looked for in, so that any whitespace matches its spaces."""
    return " ".join(fold(text).split())


class Glossary:
    """Terms found in source sentences (see the module docstring for the rules).

    Build one with ``Glossary.load(path)`` or ``Glossary.from_pairs(pairs)``.

    Args:
        terms: the terms, whose sources are checked and deduplicated by the file's rules.
        name: the glossary's name in messages (the file's path as given).
    """

    def __init__(self, terms: Iterable[Term] = (), *, name: str = "glossary") -> None:
        self.name = name
        self._terms: list[Term] = []
        self._keys: list[str] = []  # each term's source, as sentences are matched (_canonical)
        # The first token of each key -> its terms' positions, longest key first. Plain ints keep
        # a large glossary to few objects for the garbage collector to go through.
        self._index: dict[str, list[int]] = {}
        first_token = _patterns()[0].match
        by_key: dict[str, int] = {}
        for term in terms:
            for side, value in (("source", term.source), ("target", term.target)):
                _check_term(value, side, self._where(term))
            key = _canonical(term.source)
            if not (key and term.target):
                raise GlossaryError(f"{self._where(term)}: empty {'target' if key else 'source'} term")
            if key in by_key:
                first = self._terms[by_key[key]]
                if first.target != term.target:
                    raise GlossaryError(self._conflict(first, term))
                continue  # the same pair again
            by_key[key] = len(self._terms)
            self._index.setdefault(first_token(key).group(), []).append(len(self._terms))
            self._terms.append(term)
            self._keys.append(key)
        for positions in self._index.values():
            if len(positions) > 1:
                positions.sort(key=lambda i: -len(self._keys[i]))  # stable: of two as long, the first given

    def extended(self, terms: Iterable[Term]) -> "Glossary":
        """A new glossary of this one's terms, then those of ``terms`` whose source it does not
        have yet (matched as sentences are: the first of two alike wins, with no conflict)."""
        keys = set(self._keys)
        added = []
        for term in terms:
            key = _canonical(term.source)
            if key and key not in keys:
                keys.add(key)
                added.append(term)
        return Glossary([*self._terms, *added], name=self.name) if added else self

    def _where(self, term: Term) -> str:
        """Where a message about ``term`` points: ``terms.tsv:7``, or the glossary's name."""
        return f"{self.name}:{term.line}" if term.line is not None else self.name

    def _conflict(self, first: Term, term: Term) -> str:
        """The message for two targets of one source: ``term``'s line, naming ``first``'s."""
        written = "" if first.source == term.source else f"written {first.source!r}"
        if term.line is None:
            return (f"{self.name}: the source term {term.source!r} has two targets: {first.target!r}"
                    f"{f' ({written})' if written else ''} and {term.target!r}")
        return (f"{self.name}:{term.line}: the source term {term.source!r} has two targets: {first.target!r} "
                f"(line {first.line}{', ' + written if written else ''}) and {term.target!r} (line {term.line})")

    @classmethod
    def load(cls, path: str | os.PathLike) -> "Glossary":
        """Read a glossary file (the format is in the module docstring).

        Args:
            path: the TSV file.

        Returns:
            The glossary, named by ``path`` as given.

        Raises:
            GlossaryError: the file cannot be read (missing, not a regular file, over
                ``MAX_GLOSSARY_BYTES``), or a line breaks a rule (the message names it).
        """
        name = os.fspath(path)
        if Path(path).is_dir():
            raise GlossaryError(f"{name}: is a directory, not a glossary file")
        try:
            with open_regular(Path(path), missing=f"{name}: no such glossary file") as (f, info):
                if info.st_size > MAX_GLOSSARY_BYTES:
                    raise GlossaryError(f"{name}: {info.st_size:,} bytes, more than the {MAX_GLOSSARY_BYTES:,} a "
                                        "glossary file may have")
                return cls(_read_lines(f, name), name=name)
        except FileNotFoundError as error:
            raise GlossaryError(str(error)) from None
        except RunFileError as error:  # not a regular file (a FIFO, a device), or unreadable
            raise GlossaryError(str(error)) from None
        except OSError as error:
            raise GlossaryError(f"{name}: cannot read the glossary file: {error.strerror or error}") from None

    @classmethod
    def from_pairs(cls, pairs: Iterable[tuple[str, str]] | Mapping[str, str], *,
                   name: str = "glossary") -> "Glossary":
        """A glossary from ``(source, target)`` pairs or a dict, under the file's rules (the
        whitespace around each side stripped, neither empty, no tab or line break inside).

        Args:
            pairs: an iterable of ``(source, target)`` pairs, or a mapping from source to target.
            name: the glossary's name in messages.

        Returns:
            The glossary; its terms' ``line`` is None.

        Raises:
            GlossaryError: a pair breaks a rule (the message names it by its place, from 1).
            TypeError: ``pairs`` is a string.
        """
        if isinstance(pairs, (str, bytes)):
            raise TypeError("from_pairs takes (source, target) pairs or a dict, not a string")
        items = pairs.items() if isinstance(pairs, Mapping) else pairs
        return cls(_checked_pairs(items, name), name=name)

    @property
    def terms(self) -> tuple[Term, ...]:
        """The terms in the order given, each source (folded) once."""
        return tuple(self._terms)

    def __len__(self) -> int:
        return len(self._terms)

    def __bool__(self) -> bool:
        return bool(self._terms)

    def __iter__(self) -> Iterator[Term]:
        return iter(self._terms)

    def __repr__(self) -> str:
        return f"Glossary({self.name!r}, {len(self)} terms)"

    def matches(self, sentence: str) -> list[Term]:
        """The terms whose source side occurs in ``sentence``.

        Args:
            sentence: a source sentence, as given to the translator.

        Returns:
            The matched terms (of overlapping matches the longest, then the leftmost), each once,
            in the order of first occurrence, and of terms with the same target only the first.
        """
        terms, targets = [], set()
        for term in self._find(sentence):
            if term.target not in targets:
                targets.add(term.target)
                terms.append(term)
        return terms

    def _find(self, sentence: str) -> list[Term]:
        """The chosen matches' terms in the order they occur (repeats included)."""
        if not self._index:
            return []
        text = _canonical(sentence)
        tokens, word = _patterns()
        is_word = word.match
        found = []  # (size, start, end, position of the term)
        for token in tokens.finditer(text):
            positions = self._index.get(token.group())
            if positions is None:
                continue
            start = token.start()
            for i in positions:
                key = self._keys[i]
                end = start + len(key)
                # A word token has no word character before it (word runs are maximal), but a
                # term may start or end in punctuation (".NET" in "ASP.NET", "C++" in "C++x").
                if text.startswith(key, start) and not (
                        (start > 0 and is_word(text, start - 1)) or (end < len(text) and is_word(text, end))):
                    found.append((len(key), start, end, i))
        if len(found) > 1:
            found.sort(key=lambda match: (-match[0], match[1]))
            chosen: list[tuple[int, int, int, int]] = []
            for match in found:
                if all(match[2] <= other[1] or other[2] <= match[1] for other in chosen):
                    chosen.append(match)
            found = sorted(chosen, key=lambda match: match[1])
        return [self._terms[match[3]] for match in found]

    def check_lengths(self, count: Callable[[str], int], limit: int, *, what: str = "the output limit",
                      terms: Iterable[Term] | None = None) -> None:
        """Refuse a glossary with a target term longer than ``limit`` tokens, which no translation
        within the limit could contain.

        Args:
            count: the number of target tokens of a text.
            limit: the most tokens a target term may have.
            what: the limit's name in the message.
            terms: only these of its terms (those found in the sentences at hand); default: all.

        Raises:
            GlossaryError: naming the first such term's line.
        """
        for term in self._terms if terms is None else terms:
            n = count(term.target)
            if n > limit:
                of = "" if term.line is not None else f" (source {term.source!r})"
                raise GlossaryError(f"{self._where(term)}: the target term {term.target!r}{of} is {n} tokens, "
                                    f"longer than {what} ({limit})")


def _read_lines(f: BinaryIO, name: str) -> Iterator[Term]:
    """The terms of a glossary file, read a line at a time (a line past ``_MAX_LINE_BYTES``, or a
    file growing past ``MAX_GLOSSARY_BYTES`` as it is read, refused there)."""
    number = size = 0
    while raw := f.readline(_MAX_LINE_BYTES + 1):
        number += 1
        size += len(raw)
        if len(raw) > _MAX_LINE_BYTES:
            raise GlossaryError(f"{name}:{number}: a line of more than {_MAX_LINE_BYTES:,} bytes (terms have at most "
                                f"{MAX_TERM_CHARS:,} characters)")
        if size > MAX_GLOSSARY_BYTES:
            raise GlossaryError(f"{name}: more than the {MAX_GLOSSARY_BYTES:,} bytes a glossary file may have")
        if number == 1 and raw.startswith(UTF8_BOM):
            raw = raw[len(UTF8_BOM):]
        try:
            line = raw.decode("utf-8").removesuffix("\n")
        except UnicodeDecodeError:
            hint = (" (it starts with a UTF-16 byte-order mark: convert it with iconv -f UTF-16 -t UTF-8)"
                    if number == 1 and raw.startswith(UTF16_BOMS) else "")
            raise GlossaryError(f"{name}:{number}: not valid UTF-8{hint}") from None
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        columns = line.split("\t")
        if len(columns) != 2:
            raise GlossaryError(
                f"{name}:{number}: expected 2 tab-separated columns (source, target), found {len(columns)}")
        source, target = _stripped(columns[0]), _stripped(columns[1])
        _check_sides(source, target, f"{name}:{number}")
        yield Term(source, target, number)


def _checked_pairs(items: Iterable, name: str) -> Iterator[Term]:
    """The terms of ``(source, target)`` pairs given in code (a message names a pair by its place)."""
    for number, pair in enumerate(items, 1):
        where = f"{name}: pair {number}"
        if isinstance(pair, (str, bytes)) or not isinstance(pair, Iterable):
            raise GlossaryError(f"{where}: expected a (source, target) pair, got {pair!r}")
        pair = tuple(pair)
        if len(pair) != 2:
            raise GlossaryError(f"{where}: expected a (source, target) pair, got {len(pair)} items")
        for side, value in zip(("source", "target"), pair):
            if not isinstance(value, str):
                raise GlossaryError(f"{where}: the {side} term is a {type(value).__name__}, not a string")
            if _BREAKS.search(value):
                raise GlossaryError(f"{where}: the {side} term {value!r} holds a tab or a line break")
        source, target = (_stripped(value) for value in pair)
        _check_sides(source, target, where)
        yield Term(source, target, None)


# What a glossary file's line cannot hold inside a term: its column separator and line ends.
_BREAKS = re.compile("[\t\n\r]")


def _stripped(term: str) -> str:
    """A term without the whitespace and byte-order marks around it (a spreadsheet or a web form
    may leave a U+FEFF at a term's start, which would keep it from ever matching)."""
    return term.strip().strip("\ufeff").strip()


def _check_term(value: str, side: str, where: str) -> None:
    """Refuse a term that is too long or holds a control character."""
    if len(value) > MAX_TERM_CHARS:
        raise GlossaryError(f"{where}: the {side} term is {len(value):,} characters, more than {MAX_TERM_CHARS:,}")
    control = _CONTROL.search(value)
    if control:
        raise GlossaryError(f"{where}: the {side} term {value!r} holds the control character "
                            f"U+{ord(control.group()):04X}")


def _check_sides(source: str, target: str, where: str) -> None:
    """Refuse an empty source or target term, one too long, one with a control character."""
    for side, value in (("source", source), ("target", target)):
        if not value:
            raise GlossaryError(f"{where}: empty {side} term")
        _check_term(value, side, where)


def per_text(glossary, count: int) -> list[Glossary]:
    """One glossary per text of ``count``: ``glossary`` is a :class:`Glossary`, a dict or
    ``(source, target)`` pairs (the same for every text), or a list of one :class:`Glossary` per
    text (a term base's entries for each segment)."""
    if isinstance(glossary, list) and glossary and all(isinstance(g, Glossary) for g in glossary):
        if len(glossary) != count:
            raise ValueError(f"one glossary per text: {len(glossary)} glossaries for {count} texts")
        return list(glossary)
    return [glossary if isinstance(glossary, Glossary) else Glossary.from_pairs(glossary)] * count

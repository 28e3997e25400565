"""Reading the input of ``transformer translate`` (and ``evaluate``'s files): a stream of lines.

A file or standard input is read line by line, so a file of any length takes bounded memory:
plain or gzip (told by its magic bytes, not its name), UTF-8 with a byte-order mark dropped (a
UTF-16 one is refused with how to convert, and so is a PDF or a zip archive: :func:`not_text`,
the check the file formats and the server make too). Invalid UTF-8 is replaced and NUL bytes removed, each
with a warning naming the line (``Reporter``: the first few of each kind shown, the rest counted),
and the other lines are translated as usual. Each ``Line`` keeps how it ended (CRLF in, CRLF out)
and its size in bytes, which ``--resume`` uses to go on from where a run stopped.

Apart from ``cli.py`` so that the command's options and handlers read without the byte-level
details of decoding its input.
"""

from __future__ import annotations

import gzip
import io
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Iterator, TextIO

from transformer.errors import UserError

GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
WARNINGS_PER_KIND = 10  # then only counted, and the count given at the end
# The first bytes of documents that are not text: a PDF, a zip archive with files or an empty one.
_NOT_TEXT = ((b"%PDF-", "a PDF document"), (b"PK\x03\x04", "a zip archive"), (b"PK\x05\x06", "a zip archive"))


def not_text(head: bytes) -> str | None:
    """What a file starting with ``head`` is, in words (``"a PDF document"``, ``"a zip archive"``),
    when it is a document that is not text; None otherwise. The one check of the command line's
    text input, the file formats' text files and the server's uploads."""
    return next((what for magic, what in _NOT_TEXT if head.startswith(magic)), None)


class Reporter:
    """Warnings on standard error, each naming its line. After ``WARNINGS_PER_KIND`` warnings of
    one kind the others are only counted; ``summary()`` gives the counts."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.counts: dict[str, int] = {}
        self.lines: dict[str, list[int]] = {}

    def warn(self, kind: str, message: str, line: int | None = None) -> None:
        n = self.counts[kind] = self.counts.get(kind, 0) + 1
        if line is not None and len(self.lines.setdefault(kind, [])) < 20:
            self.lines[kind].append(line)
        stream = self.stream or sys.stderr
        if n <= WARNINGS_PER_KIND:
            print(f"warning: {message}", file=stream)
        elif n == WARNINGS_PER_KIND + 1:
            print(f"warning: further warnings like this ({KINDS.get(kind, kind)}) are counted, not shown", file=stream)

    def summary(self) -> None:
        for kind, n in self.counts.items():
            if n > WARNINGS_PER_KIND:
                lines = ", ".join(map(str, self.lines.get(kind, [])))
                print(f"warning: {n} warnings in all: {KINDS.get(kind, kind)}"
                      + (f" (first lines: {lines}{', ...' if n > len(self.lines[kind]) else ''})" if lines else ""),
                      file=self.stream or sys.stderr)


KINDS = {"utf8": "invalid UTF-8 replaced", "nul": "NUL bytes removed", "long-line": "lines copied untranslated",
         "long-sentence": "sentences over the model's input limit",
         "term": "glossary terms that could not be placed",
         "language": "lines detected in another language than the run's source"}


@dataclass(frozen=True)
class Line:
    """One input line: its number (from 1), its text, how it ended ("\\n", "\\r\\n", or "" for a
    last line without a line break) and its size in the (decompressed) input, in bytes."""

    number: int
    text: str
    ending: str
    size: int = 0

    @property
    def newline(self) -> str:
        """The line end its output line gets: CRLF in, CRLF out; "\\n" otherwise."""
        return "\r\n" if self.ending == "\r\n" else "\n"


class _Prefixed(io.RawIOBase):
    """A stream's first bytes, read to tell gzip from text, put back in front of the rest."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = self.rest.read1(len(buffer)) if hasattr(self.rest, "read1") else self.rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class InputText:
    """The lines of a file or of standard input ("-"), read as a stream (see the module doc)."""

    def __init__(self, path: str, reporter: Reporter, *, stream: TextIO | None = None) -> None:
        self.path, self.reporter = path, reporter
        self.name = "standard input" if path == "-" else path
        if path == "-":
            raw = (stream or sys.stdin).buffer
            head = raw.read(2)
            self._closing = None
            binary: BinaryIO = io.BufferedReader(_Prefixed(head, raw))
        else:
            p = Path(path)
            if not p.is_file():
                raise FileNotFoundError(f"input file not found: {path}")
            binary = self._closing = p.open("rb")
            head = binary.read(2)
            binary.seek(0)
        self.gzipped = head == GZIP_MAGIC
        self._file: BinaryIO = gzip.GzipFile(fileobj=binary, mode="rb") if self.gzipped else binary
        self._number = 0
        try:
            first = self._file.peek(2)[:2]
        except (OSError, EOFError) as err:
            raise UserError(f"{self.name}: cannot be read as gzip ({err})") from None
        if first in UTF16_BOMS:
            self._refuse_utf16()
        binary = not_text(self._file.peek(8)[:8])
        if binary is not None:
            self.close()
            hint = " (extract its text first, e.g. with pdftotext)" if binary == "a PDF document" else ""
            raise UserError(f"{self.name} is {binary}, not text: translate reads text{hint}")

    def _refuse_utf16(self) -> None:
        self.close()
        raise UserError(f"{self.name} starts with a UTF-16 byte-order mark; translate reads UTF-8: "
                        f"convert it first, e.g. iconv -f UTF-16 -t UTF-8 {self.path} > converted.txt")

    def close(self) -> None:
        if self._closing is not None:
            self._closing.close()

    def skip(self, lines: int, offset: int) -> None:
        """Go on after the first ``lines`` lines, which end at byte ``offset`` (--resume)."""
        if self.gzipped:
            for _ in range(lines):
                if not self._file.readline():
                    break
        else:
            self._file.seek(offset)
        self._number = lines

    def __iter__(self) -> Iterator[Line]:
        try:
            for raw in self._file:
                self._number += 1
                yield self._decode(self._number, raw)
        except (OSError, EOFError) as err:  # a truncated or corrupt gzip stream
            raise UserError(f"{self.name}: line {self._number + 1}: cannot be read ({err})") from None

    def _decode(self, number: int, raw: bytes) -> Line:
        size = len(raw)
        if raw.endswith(b"\r\n"):
            body, ending = raw[:-2], "\r\n"
        elif raw.endswith(b"\n"):
            body, ending = raw[:-1], "\n"
        else:
            body, ending = raw, ""
        if number == 1:
            if body.startswith(UTF8_BOM):
                body = body[len(UTF8_BOM):]
            elif body.startswith(UTF16_BOMS):
                self._refuse_utf16()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as err:
            self.reporter.warn("utf8", f"{self.name}: line {number}: invalid UTF-8 ({err.reason} at byte {err.start}); "
                               "undecodable bytes replaced by U+FFFD", number)
            text = body.decode("utf-8", errors="replace")
        if "\x00" in text:
            self.reporter.warn("nul", f"{self.name}: line {number}: {text.count(chr(0))} NUL bytes removed "
                               "(binary data?); the rest of the line is translated", number)
            text = text.replace("\x00", "")
        return Line(number, text, ending, size)


def count_lines(path: str) -> int:
    """Lines in a (plain or gzip) file, as ``InputText`` reads them."""
    with open(path, "rb") as f:
        stream: BinaryIO = gzip.GzipFile(fileobj=f) if f.read(2) == GZIP_MAGIC else f
        f.seek(0)
        n, last = 0, b"\n"
        while block := stream.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
        return n + (last != b"\n")


def read_lines(path: str, stream: TextIO | None = None) -> list[str]:
    """Lines of a file (plain or gzip) or stdin ("-"): a byte-order mark dropped, invalid UTF-8
    replaced and NUL bytes removed, each with a warning naming the line."""
    source = InputText(path, Reporter(), stream=stream)
    try:
        return [line.text for line in source]
    finally:
        source.close()

"""Tab-separated pairs, the plainest translation memory file: ``source<TAB>target`` per line.

Reading (:func:`tsv_pairs`)
    UTF-8, a byte-order mark at the start allowed, ``LF`` or ``CRLF`` line ends; blank lines are
    skipped. A line with another number of columns, bytes that are not UTF-8, a control character,
    or a field longer than ``max_chars`` characters is refused with a
    :class:`~transformer.memory.errors.TMFormatError` naming the file and the line
    (``pairs.tsv:12: ...``). The file is read a line at a time, and a line is read no further
    than its longest allowed length, so a file of any size is read in little memory.

Writing (:func:`write_tsv`)
    UTF-8 without a byte-order mark, ``LF`` line ends. A tab or a line break inside a text cannot
    be written in this format: each is written as a space (TMX keeps them).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator
from typing import BinaryIO

from transformer.memory.errors import TMFormatError
from transformer.memory.text import CONTROL, MAX_CHARS
from transformer.memory.tmx import open_regular

UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
_BREAKS = re.compile(r"[\t\r\n\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def tsv_pairs(path: str | os.PathLike[str], *, max_chars: int = MAX_CHARS) -> Iterator[tuple[int, str, str]]:
    """``(line, source, target)`` for each non-blank line of the TSV file at ``path`` (reading rules
    in the module doc).

    Raises:
        TMFormatError: the file is missing, not a regular file, UTF-16, or has a bad line (named).
    """
    # A field of max_chars characters is at most 4 bytes each; two fields, a tab, CR LF.
    longest = 8 * max_chars + 3
    with open_regular(path, "TSV") as file:
        number = 0
        while raw := file.readline(longest + 1):
            number += 1
            if number == 1:
                if raw.startswith(UTF16_BOMS):
                    raise TMFormatError(f"{path}:1: the file is UTF-16; save it as UTF-8")
                raw = raw.removeprefix(UTF8_BOM)
            if len(raw) > longest and not raw.endswith(b"\n"):
                raise TMFormatError(f"{path}:{number}: a line longer than {longest} bytes")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                raise TMFormatError(f"{path}:{number}: not UTF-8 (byte {err.start + 1} of the line)") from None
            line = line.removesuffix("\n").removesuffix("\r")
            if not line.strip():
                continue
            fields = line.split("\t")
            if len(fields) != 2:
                raise TMFormatError(f"{path}:{number}: {len(fields)} column{'s' * (len(fields) != 1)}; "
                                    "a line is source<TAB>target")
            for name, text in zip(("source", "target"), fields):
                if CONTROL.search(text):
                    raise TMFormatError(f"{path}:{number}: the {name} holds a control character")
                if len(text) > max_chars:
                    raise TMFormatError(f"{path}:{number}: the {name} is longer than {max_chars} characters")
            yield number, fields[0], fields[1]


def write_tsv(file: BinaryIO, pairs: Iterable[tuple[str, str]]) -> int:
    """Write ``(source, target)`` pairs to ``file`` (binary) as TSV lines; returns how many."""
    count = 0
    for source, target in pairs:
        line = f"{_BREAKS.sub(' ', source)}\t{_BREAKS.sub(' ', target)}\n"
        file.write(line.encode("utf-8"))
        count += 1
    return count

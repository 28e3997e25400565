"""Suggested translations sent to LibreTranslate's ``POST /suggest``, kept in a JSON Lines file.

Each suggestion is one line, written whole and synced to disk before the server answers::

    {"time": "2026-11-28T03:12:45Z", "source": "de", "target": "en", "q": "Ein Mann fährt Fahrrad.", "s": "A man rides a bicycle."}

``q`` is the text, ``s`` the translation the user suggests, ``source`` and ``target`` their
languages as the client gave them. The file is opened for appending once; every line goes out
in one ``write`` under a lock, so lines never interleave, between threads or (appends to a local
file being atomic) between processes sharing the file. It is the operator's to read, review
and rotate: ``jq``, ``pandas.read_json(path, lines=True)``, or a line at a time (U+2028, U+2029
and U+0085 are written escaped, so that a reader splitting on every line break, as Python's
``str.splitlines`` does, sees one record a line). The file grows to ``max_bytes`` at most
(:class:`SuggestionStoreFull` beyond); a symbolic link is refused rather than followed.
"""

from __future__ import annotations

import json
import os
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from transformer.errors import UserError

# A language code as clients send them: ISO 639 with optional subtags (en, pt-BR, zh_Hant).
_LANGUAGE = re.compile(r"[A-Za-z]{2,3}(?:[-_][A-Za-z0-9]{1,8}){0,3}")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class BadSuggestion(UserError):
    """A suggestion refused before it is written (400): ``str()`` is LibreTranslate-style
    (``Invalid request: missing s parameter``)."""


class SuggestionStoreError(OSError):
    """The suggestions file cannot be opened or written (the message names the file and why)."""


class SuggestionStoreFull(SuggestionStoreError):
    """The suggestions file has reached its size limit (HTTP 507): the operator rotates it."""


# Line breaks to str.splitlines that JSON leaves raw: escaped, so a record is one line to every reader.
_RAW_BREAKS = str.maketrans({"\u2028": "\\u2028", "\u2029": "\\u2029", "\u0085": "\\u0085"})


def _timestamp(seconds: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(seconds))


def check_fields(q: Any, s: Any, source: Any, target: Any, *, max_chars: int) -> None:
    """Raise :class:`BadSuggestion` for a missing, wrong-typed or oversized field of a suggestion,
    in LibreTranslate's order (q, s, source, target); ``q`` and ``s`` hold at most ``max_chars``
    characters."""
    for name, value in (("q", q), ("s", s), ("source", source), ("target", target)):
        if value is None or value == "":
            raise BadSuggestion(f"Invalid request: missing {name} parameter")
        if not isinstance(value, str):
            raise BadSuggestion(f"Invalid request: {name} must be a string")
    for name, value in (("q", q), ("s", s)):
        if len(value) > max_chars:
            raise BadSuggestion(f"Invalid request: {name} is {len(value)} characters long; at most "
                                f"{max_chars} are taken")
        if _CONTROL.search(value):
            raise BadSuggestion(f"Invalid request: {name} holds a control character")
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # a lone surrogate, which a JSON body can carry
            raise BadSuggestion(f"Invalid request: {name} is not valid Unicode text") from None
    for name, value in (("source", source), ("target", target)):
        if not (_LANGUAGE.fullmatch(value) or (name == "source" and value == "auto")):  # as LibreTranslate's page sends
            raise BadSuggestion(f"Invalid request: {name} {value[:20]!r} is not a language code")


class SuggestionStore:
    """Appends suggestions to a JSON Lines file (format in the module doc).

    Args:
        path: the file; created if missing, appended to if present (its folder must exist).
        max_chars: the longest ``q`` or ``s`` taken, in characters.
        max_bytes: the size the file may grow to (:class:`SuggestionStoreFull` beyond).
        clock: seconds since the epoch, for ``time`` (injected by tests).

    Raises:
        SuggestionStoreError: the file cannot be opened for appending, or is a symbolic link.

    :meth:`add` blocks on the disk (``fsync``): an async server calls it in a worker thread.
    """

    def __init__(self, path: str | Path, *, max_chars: int = 5000, max_bytes: int = 64 * 1024 * 1024,
                 clock: Callable[[], float] = time.time) -> None:
        if max_chars < 1 or max_bytes < 1:
            raise UserError(f"max_chars and max_bytes must be >= 1, got {max_chars} and {max_bytes}")
        self.path = Path(path)
        self.max_chars = max_chars
        self.max_bytes = max_bytes
        self._clock = clock
        self._lock = threading.Lock()
        # Checked before opening: opening a FIFO for writing would wait for a reader.
        if self.path.is_symlink():
            raise SuggestionStoreError(f"the suggestions file {self.path} is a symbolic link: name the file itself")
        if self.path.exists() and not self.path.is_file():
            raise SuggestionStoreError(f"the suggestions file {self.path} is not a regular file")
        flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
        try:  # O_NOFOLLOW: a link put there after the check is refused too
            self._fd: int | None = os.open(self.path, flags, 0o644)
        except OSError as err:
            raise SuggestionStoreError(f"cannot open the suggestions file {self.path}: "
                                       f"{err.strerror or err}") from None

    def check(self, q: Any, s: Any, source: Any, target: Any) -> None:
        """Raise :class:`BadSuggestion` for a missing, wrong-typed or oversized field
        (:func:`check_fields`, at most ``max_chars`` characters)."""
        check_fields(q, s, source, target, max_chars=self.max_chars)

    def add(self, q: str, s: str, source: str, target: str) -> dict[str, str]:
        """Check a suggestion (:meth:`check`), append it as one line and sync it to disk.

        Returns:
            the record written.

        Raises:
            BadSuggestion: see :meth:`check` (nothing is written).
            SuggestionStoreError: the line could not be written (a full disk, a closed store);
                :class:`SuggestionStoreFull` when it would pass ``max_bytes``.
        """
        self.check(q, s, source, target)
        record = {"time": _timestamp(self._clock()), "source": source, "target": target, "q": q, "s": s}
        line = (json.dumps(record, ensure_ascii=False).translate(_RAW_BREAKS) + "\n").encode("utf-8")
        with self._lock:
            if self._fd is None:
                raise SuggestionStoreError(f"the suggestions file {self.path} is closed")
            if os.fstat(self._fd).st_size + len(line) > self.max_bytes:
                raise SuggestionStoreFull(f"the suggestions file is full ({self.max_bytes:,} bytes, "
                                          "--max-suggestions-bytes): no more suggestions are taken for now")
            try:
                written = 0
                while written < len(line):
                    written += os.write(self._fd, line[written:])
                os.fsync(self._fd)
            except OSError as err:
                raise SuggestionStoreError(f"cannot write to the suggestions file {self.path}: "
                                           f"{err.strerror or err}") from None
        return record

    def close(self) -> None:
        """Close the file (later :meth:`add` calls raise :class:`SuggestionStoreError`)."""
        with self._lock:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def __enter__(self) -> SuggestionStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

"""What the translation memory hands out: its entries, search matches, import reports, counts,
and the statuses, origins and import states they take."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

STATUSES = ("pending", "accepted", "rejected")
"""An entry's status: only accepted entries are found by
:meth:`~transformer.memory.store.TranslationMemory.lookup` and
:meth:`~transformer.memory.store.TranslationMemory.search`."""
ORIGINS = ("suggestion", "import", "reviewer")
"""Where an entry came from: a user's suggestion (``/suggest``), a TMX or TSV import, a reviewer."""
IMPORT_STATES = ("incomplete", "complete", "failed", "removed")
"""An import's state (:class:`ImportReport`)."""


@dataclass(frozen=True)
class Entry:
    """One translation in the memory.

    Attributes:
        id: its number in the memory (never reused).
        source: the source text, as given.
        target: its translation, as given.
        source_lang: the source's language code (``en``, ``pt-br``).
        target_lang: the target's.
        origin: ``suggestion``, ``import`` or ``reviewer`` (:data:`ORIGINS`).
        status: ``pending``, ``accepted`` or ``rejected`` (:data:`STATUSES`).
        created: when it was added, ISO 8601 UTC with milliseconds (``2026-11-29T04:07:00.123Z``).
        updated: when its status or target last changed (``created`` until then).
        who: who gave it: ``key:`` and a hash of an API key, ``client:`` and an address
            (:func:`identity`), or any text the caller chose; ``None`` if unknown.
        import_id: the import that added it
            (:meth:`~transformer.memory.store.TranslationMemory.imports`), or ``None``.
    """

    id: int
    source: str
    target: str
    source_lang: str
    target_lang: str
    origin: str
    status: str
    created: str
    updated: str
    who: str | None = None
    import_id: int | None = None


@dataclass(frozen=True)
class Match:
    """A search result: an entry and how alike its source is to the text searched for.

    Attributes:
        entry: the entry found.
        similarity: 1.0 for the same normalised source, else rapidfuzz's ``fuzz.ratio`` of the
            two normalised sources over 100 (1 - their insertion-and-deletion distance over their
            total length). For :meth:`~transformer.memory.store.TranslationMemory.near_duplicates`,
            the targets' instead.
    """

    entry: Entry
    similarity: float


@dataclass(frozen=True)
class ImportReport:
    """What an import did (:meth:`~transformer.memory.store.TranslationMemory.import_tmx` and the
    other imports return it).

    Attributes:
        id: the import's number; its entries carry it as ``import_id``.
        name: the file imported (as given), or the name given to the pairs.
        format: ``tmx``, ``tsv`` or ``pairs``.
        source_lang: the source language imported.
        target_lang: the target language.
        state: ``complete``; ``incomplete`` while it runs, and forever if its process was killed:
            its entries are then those of the file's first ``units`` units;
            ``failed``: stopped by an error, its entries taken out again; ``removed``: taken out by
            :meth:`~transformer.memory.store.TranslationMemory.remove_import`.
        started: when it started (ISO 8601 UTC).
        finished: when it ended, ``None`` while incomplete.
        units: the units (TMX) or lines (TSV) read and committed.
        added: entries added.
        duplicates: units left out because an entry with the same pair, normalised source and
            normalised target was there (in any status), or came earlier in the file.
        skipped: units left out because one of the two languages was missing or empty.
        who: who imported it, if given.
    """

    id: int
    name: str
    format: str
    source_lang: str
    target_lang: str
    state: str
    started: str
    finished: str | None
    units: int
    added: int
    duplicates: int
    skipped: int
    who: str | None = None


@dataclass(frozen=True)
class Stats:
    """The memory's size (:meth:`~transformer.memory.store.TranslationMemory.stats`).

    Attributes:
        counts: ``{(source_lang, target_lang): {status: entries}}``, the pairs sorted.
        total: all entries.
        size_bytes: the file's size on disk with its write-ahead log.
    """

    counts: dict[tuple[str, str], dict[str, int]]
    total: int
    size_bytes: int


def identity(api_key: str | None = None, client: str | None = None) -> str | None:
    """Who sent something, as :attr:`Entry.who` stores it: ``key:`` and the first 16 hex digits of
    the API key's SHA-256 where there is a key (the key itself is never stored: a copy of the
    memory must not hand out working keys; the operator finds the key by hashing the keys file's),
    else ``client:`` and the client's address, else ``None``."""
    if api_key:
        return "key:" + hashlib.sha256(api_key.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    if client:
        return f"client:{client}"
    return None

"""The translation memory: translations reviewed once, found again.

::

    from transformer.memory import TranslationMemory

    with TranslationMemory("memory.db") as tm:
        entry = tm.add("Save the file.", "Enregistrez le fichier.", "en", "fr", origin="reviewer", status="accepted")
        tm.lookup("Save  the file.", "en", "fr")        # the entry (whitespace aside, the same source)
        tm.search("Save the files.", "en", "fr")        # [Match(entry, similarity=0.97...)]
        tm.import_tmx("legacy.tmx", "en", "fr")         # a CAT tool's memory
        tm.export_tmx("memory.tmx", source_lang="en")

The file
    One SQLite file the operator names, opened by :class:`TranslationMemory` (created if
    missing), through the standard library's ``sqlite3``; several processes on one host may use it
    at once (WAL mode: readers never wait; writes wait up to a timeout for each other, each one
    short transaction). It holds the entries (source and target as given, their languages, the
    normalised source and its hash, origin, status, times, who), the imports, and the fuzzy
    index. Its schema version (``PRAGMA user_version``) and application id are checked when it is
    opened: another database, a newer schema, a damaged file, a folder, a read-only place are
    refused with a one-line :class:`TMError`.

Matching
    Only ``accepted`` entries are found. :meth:`~TranslationMemory.lookup` is the exact match: the
    same source after :func:`normalise` (Unicode NFC, whitespace runs as one space), through an
    index on the pair and a 64-bit hash of the normalised source. :meth:`~TranslationMemory.search`
    adds fuzzy matches: candidates from the fuzzy index (an SQLite FTS5 table of each source's
    words and neighbouring-word pairs, hashed with the language pair; the rarest of the text's
    features are read first, within a budget of postings, and the entries sharing the most
    weighted by rarity are kept), each scored by rapidfuzz's ``fuzz.ratio`` of the normalised
    sources, returned from ``min_similarity`` up, best first, as :class:`Match` objects.

Files
    TMX 1.4b (:mod:`transformer.memory.tmx`: read as a stream, safely, inline markup reduced to
    text; written with a proper header) and TSV (:mod:`transformer.memory.tsv`). An import commits
    in batches and takes out its entries again if it fails; a killed one stays ``incomplete``
    with the entries of the file's first units (:class:`ImportReport`).
"""

from transformer.memory.errors import TMBusyError, TMError, TMFormatError
from transformer.memory.database import SCHEMA_VERSION
from transformer.memory.records import ORIGINS, STATUSES, Entry, ImportReport, Match, Stats, identity
from transformer.memory.store import TranslationMemory
from transformer.memory.text import MAX_CHARS, normalise

__all__ = [
    "MAX_CHARS",
    "ORIGINS",
    "SCHEMA_VERSION",
    "STATUSES",
    "Entry",
    "ImportReport",
    "Match",
    "Stats",
    "TMBusyError",
    "TMError",
    "TMFormatError",
    "TranslationMemory",
    "identity",
    "normalise",
]

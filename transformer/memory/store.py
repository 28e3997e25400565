"""The translation memory: translations reviewed once, found again, in one SQLite file.

:class:`TranslationMemory` is the whole interface; the package's doc says what it keeps and
promises. The file itself is handled by :mod:`transformer.memory.database`, the fuzzy index by
:mod:`transformer.memory.index`, the TMX and TSV files by :mod:`transformer.memory.tmx` and
:mod:`transformer.memory.tsv`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from rapidfuzz import fuzz

from transformer.memory import index
from transformer.memory.database import Database
from transformer.memory.errors import TMError, TMFormatError
from transformer.memory.records import ORIGINS, STATUSES, Entry, ImportReport, Match, Stats
from transformer.memory.text import MAX_CHARS, check_text, language_code, normalise, source_key
from transformer.memory.tmx import TMXUnit, tmx_pairs, write_tmx
from transformer.memory.tsv import tsv_pairs, write_tsv
from transformer.run_files import replacing

DEFAULT_TIMEOUT = 5.0
MERGE_AFTER = 10_000  # an import that adds this many entries merges the fuzzy index's pieces after it
_PAGE = 1000  # rows per read when walking the entries (exports)
_COLUMNS = "id, source, target, source_lang, target_lang, origin, status, created, updated, who, import_id"
ImportProgress = Callable[[ImportReport], None]  # told of an import's counts after each committed batch
_IMPORT_COLUMNS = ("id, name, format, source_lang, target_lang, state, started, finished, units, added, duplicates, "
                   "skipped, who")


def _timestamp(seconds: float) -> str:
    whole = math.floor(seconds)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)) + f".{int((seconds - whole) * 1000):03d}Z"


def _pair(source_lang: object, target_lang: object) -> tuple[str, str]:
    return language_code(source_lang, "source language"), language_code(target_lang, "target language")


def _choice(value: object, allowed: tuple[str, ...], what: str) -> str:
    if value not in allowed:
        raise TMError(f"unknown {what} {str(value)[:20]!r}; one of {', '.join(allowed)}")
    return value  # type: ignore[return-value]


class TranslationMemory:
    """A translation memory in the SQLite file at ``path``, created if missing.

    Args:
        path: the file (its folder must exist). Several processes on one host may open it at once.
        timeout: seconds a write waits for another process's write to end before
            :class:`~transformer.memory.errors.TMBusyError`.
        max_chars: the longest source or target taken, in characters.
        clock: seconds since the epoch, for the entries' times (tests inject one).

    Raises:
        TMError: the path is a folder or not a regular file, its folder is missing or read-only,
            the file is read-only, not an SQLite database, another application's database, a memory
            of a newer schema, or damaged.
        TMBusyError: another process held the file longer than ``timeout`` while it was created.

    Each method is one transaction (an import one per batch); a method may be called from several
    threads (calls on one object take turns). Close it with :meth:`close` or a ``with`` block.
    """

    def __init__(self, path: str | os.PathLike[str], *, timeout: float = DEFAULT_TIMEOUT,
                 max_chars: int = MAX_CHARS, clock: Callable[[], float] = time.time) -> None:
        if timeout < 0:
            raise TMError(f"timeout must be >= 0 seconds, got {timeout}")
        if max_chars < 1:
            raise TMError(f"max_chars must be >= 1, got {max_chars}")
        self.path = Path(path)
        self.timeout, self.max_chars = timeout, max_chars
        self._clock = clock
        self._db = Database(self.path, timeout)
        self._transaction = self._db.transaction

    def close(self) -> None:
        """Close the file (later calls raise :class:`~transformer.memory.errors.TMError`). Closing twice is allowed."""
        self._db.close()

    def __enter__(self) -> TranslationMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TranslationMemory({str(self.path)!r})"

    # -------------------------------------------------------------------------------- writing
    def _now(self) -> str:
        return _timestamp(self._clock())

    def _check_who(self, who: object) -> str | None:
        if who is None:
            return None
        if not isinstance(who, str) or len(who) > 200 or not who.isprintable():
            raise TMError("who must be printable text of at most 200 characters (an identity(), a name)")
        return who

    def _insert(self, conn: sqlite3.Connection, row: tuple, norm: str, counts: Counter) -> int:
        """Insert one entry (``row``: source, target, source_lang, target_lang, origin, status,
        created, updated, who, import_id) and its postings; its features are counted into ``counts``."""
        source_lang, target_lang = row[2], row[3]
        entry_id = conn.execute(
            "INSERT INTO entries (source, target, source_lang, target_lang, origin, status, created, updated, who, "
            "import_id, source_norm, source_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (*row, None if norm == row[0] else norm, source_key(norm))).lastrowid
        index.add_entry(conn, entry_id, norm, source_lang, target_lang, counts)
        return entry_id

    def add(self, source: str, target: str, source_lang: str, target_lang: str, *, origin: str = "suggestion",
            status: str = "pending", who: str | None = None) -> Entry:
        """Add a translation and return it as stored.

        Args:
            source: the source text (at most ``max_chars`` characters, no control characters
                other than tab and line breaks).
            target: its translation.
            source_lang: the source's language code (``en``, ``pt-BR``; stored in lower case).
            target_lang: the target's.
            origin: ``suggestion``, ``import`` or ``reviewer``.
            status: ``pending`` (found by searches once accepted) or ``accepted``; ``rejected`` too.
            who: who gave it (:func:`identity`), or ``None``.

        Raises:
            TMError: a bad text, language, origin, status or ``who``.
            TMBusyError: another process kept the memory locked past the timeout.

        The entry is added even where the same translation is there already: check first with
        :meth:`near_duplicates` where that matters.
        """
        source_lang, target_lang = _pair(source_lang, target_lang)
        norm = check_text(source, "source", max_chars=self.max_chars)
        check_text(target, "target", max_chars=self.max_chars)
        row = (source, target, source_lang, target_lang, _choice(origin, ORIGINS, "origin"),
               _choice(status, STATUSES, "status"), now := self._now(), now, self._check_who(who), None)
        counts: Counter = Counter()
        with self._transaction() as conn:
            entry_id = self._insert(conn, row, norm, counts)
            index.add_counts(conn, counts)
        return Entry(entry_id, *row)

    def _set(self, entry_id: int, status: str, target: str | None = None) -> Entry:
        if target is not None:
            check_text(target, "target", max_chars=self.max_chars)
        with self._transaction() as conn:
            conn.execute("UPDATE entries SET status = ?, target = coalesce(?, target), updated = ? WHERE id = ?",
                         (status, target, self._now(), entry_id))
            return self._get(conn, entry_id)  # refuses an unknown id

    def accept(self, entry_id: int, *, target: str | None = None) -> Entry:
        """Accept an entry (from then on searches find it), with its target corrected if ``target``
        is given; returns it. Accepting an accepted entry changes only its ``updated`` time.

        Raises:
            TMError: no such entry, or a bad ``target``.
        """
        return self._set(entry_id, "accepted", target)

    def reject(self, entry_id: int) -> Entry:
        """Reject an entry (searches no longer find it; it stays, so the same suggestion can be
        recognised as rejected); returns it.

        Raises:
            TMError: no such entry.
        """
        return self._set(entry_id, "rejected")

    def delete(self, entry_id: int) -> None:
        """Remove an entry for good.

        Raises:
            TMError: no such entry.
        """
        with self._transaction() as conn:
            if conn.execute("DELETE FROM entries WHERE id = ?", (entry_id,)).rowcount == 0:
                raise TMError(f"no entry {entry_id} in the translation memory {self.path}")

    # -------------------------------------------------------------------------------- reading
    def _get(self, conn: sqlite3.Connection, entry_id: int) -> Entry:
        row = conn.execute(f"SELECT {_COLUMNS} FROM entries WHERE id = ?", (entry_id,)).fetchone()
        if row is None:
            raise TMError(f"no entry {entry_id} in the translation memory {self.path}")
        return Entry(*row)

    def get(self, entry_id: int) -> Entry:
        """The entry numbered ``entry_id``.

        Raises:
            TMError: there is none.
        """
        with self._transaction("DEFERRED") as conn:
            return self._get(conn, entry_id)

    def _exact(self, conn: sqlite3.Connection, norm: str, source_lang: str, target_lang: str,
               status: str | None = "accepted") -> list[Entry]:
        """The entries with this normalised source, newest change first."""
        rows = conn.execute(
            f"SELECT {_COLUMNS}, coalesce(source_norm, source) FROM entries "
            "WHERE source_lang = ?1 AND target_lang = ?2 AND source_key = ?3 AND (?4 IS NULL OR status = ?4) "
            "ORDER BY updated DESC, id DESC",
            (source_lang, target_lang, source_key(norm), status)).fetchall()
        return [Entry(*row[:-1]) for row in rows if row[-1] == norm]

    def lookup(self, text: str, source_lang: str, target_lang: str) -> Entry | None:
        """The accepted translation of ``text``: an accepted entry of the pair whose source equals
        ``text`` after normalisation (NFC, whitespace), the most recently changed of several;
        ``None`` where there is none.

        Raises:
            TMError: a bad text or language code.
        """
        source_lang, target_lang = _pair(source_lang, target_lang)
        norm = check_text(text, "text", max_chars=self.max_chars)
        with self._transaction("DEFERRED") as conn:
            found = self._exact(conn, norm, source_lang, target_lang)
        return found[0] if found else None

    def search(self, text: str, source_lang: str, target_lang: str, *, min_similarity: float = 0.75,
               limit: int = 5) -> list[Match]:
        """The accepted entries of the pair whose sources are most like ``text``, best first.

        Args:
            text: the source text to translate.
            source_lang: its language.
            target_lang: the language of the translations wanted.
            min_similarity: the lowest :attr:`Match.similarity` returned (0 to 1; CAT tools' fuzzy
                matches usually start at 0.7 or 0.75).
            limit: the most matches returned.

        Returns:
            up to ``limit`` matches: exact ones (similarity 1.0) first, then by similarity, ties by
            the most recent change; one per distinct normalised (source, target).

        Raises:
            TMError: a bad text, language code, ``min_similarity`` or ``limit``.

        Candidates come from the fuzzy index: the entries sharing the most rare words and word
        pairs with ``text`` (see the package doc), scored by rapidfuzz; a text of only very common
        words, or with most words changed, may miss an entry a full comparison would find.
        """
        source_lang, target_lang = _pair(source_lang, target_lang)
        norm = check_text(text, "text", max_chars=self.max_chars)
        if not 0 <= min_similarity <= 1:
            raise TMError(f"min_similarity must be between 0 and 1, got {min_similarity}")
        if limit < 1:
            raise TMError(f"limit must be >= 1, got {limit}")
        with self._transaction("DEFERRED") as conn:
            found = [Match(entry, 1.0) for entry in self._exact(conn, norm, source_lang, target_lang)]
            if min_similarity < 1:
                seen = {match.entry.id for match in found}
                for entry, entry_norm in self._candidates(conn, norm, source_lang, target_lang):
                    if entry.id not in seen:
                        similarity = fuzz.ratio(norm, entry_norm) / 100
                        if similarity >= min_similarity:
                            found.append(Match(entry, similarity))
        # Best first, the newest change first among equals (two stable sorts).
        found.sort(key=lambda match: (match.entry.updated, match.entry.id), reverse=True)
        found.sort(key=lambda match: -match.similarity)
        distinct, kept = set(), []
        for match in found:
            key = (normalise(match.entry.source), normalise(match.entry.target))
            if key not in distinct:
                distinct.add(key)
                kept.append(match)
                if len(kept) == limit:
                    break
        return kept

    def _candidates(self, conn: sqlite3.Connection, norm: str, source_lang: str,
                    target_lang: str) -> list[tuple[Entry, str]]:
        """The accepted entries of the pair the fuzzy index proposes for ``norm``, with their
        normalised sources."""
        ids = index.candidates(conn, norm, source_lang, target_lang)
        if not ids:
            return []
        # CROSS JOIN: each candidate looked up by its id (left alone, SQLite would rather scan the
        # pair's whole index for the language terms).
        columns = ", ".join(f"e.{column}" for column in _COLUMNS.split(", "))
        rows = conn.execute(
            f"SELECT {columns}, coalesce(e.source_norm, e.source) FROM json_each(?) AS j "
            "CROSS JOIN entries AS e ON e.id = j.value "
            "WHERE e.status = 'accepted' AND e.source_lang = ? AND e.target_lang = ?",
            (json.dumps(ids), source_lang, target_lang)).fetchall()
        return [(Entry(*row[:-1]), row[-1]) for row in rows]

    def near_duplicates(self, source: str, target: str, source_lang: str, target_lang: str, *,
                        min_similarity: float = 0.9, status: str | None = "pending") -> list[Match]:
        """The entries of the pair with the same normalised source as ``source`` whose targets are
        at least ``min_similarity`` alike to ``target`` (rapidfuzz's ratio of the normalised
        targets), most alike first: what a new suggestion would repeat.

        Args:
            source: the source text.
            target: its translation.
            source_lang: the source's language code.
            target_lang: the target's.
            min_similarity: the lowest target similarity returned (0 to 1).
            status: only entries in this status (``pending`` by default), or ``None`` for all.

        Raises:
            TMError: a bad text, language code, threshold or status.
        """
        source_lang, target_lang = _pair(source_lang, target_lang)
        norm = check_text(source, "source", max_chars=self.max_chars)
        target_norm = check_text(target, "target", max_chars=self.max_chars)
        if not 0 <= min_similarity <= 1:
            raise TMError(f"min_similarity must be between 0 and 1, got {min_similarity}")
        if status is not None:
            _choice(status, STATUSES, "status")
        with self._transaction("DEFERRED") as conn:
            same = self._exact(conn, norm, source_lang, target_lang, status)
        found = [Match(entry, fuzz.ratio(target_norm, normalise(entry.target)) / 100) for entry in same]
        found = [match for match in found if match.similarity >= min_similarity]
        found.sort(key=lambda match: -match.similarity)
        return found

    def entries(self, *, status: str | None = None, source_lang: str | None = None, target_lang: str | None = None,
                origin: str | None = None, limit: int = 100, offset: int = 0) -> list[Entry]:
        """The entries that pass every filter given, in the order they were added.

        Args:
            status: only those in this status.
            source_lang: only those of this source language.
            target_lang: only those of this target language.
            origin: only those of this origin.
            limit: the most returned.
            offset: how many matching entries to pass over first (the next page: ``offset + limit``).

        Raises:
            TMError: an unknown status, origin or language code, a negative limit or offset.
        """
        if limit < 0 or offset < 0:
            raise TMError(f"limit and offset must be >= 0, got {limit} and {offset}")
        where, values = self._filters(status, source_lang, target_lang, origin)
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(f"SELECT {_COLUMNS} FROM entries {where} ORDER BY id LIMIT ? OFFSET ?",
                                (*values, limit, offset)).fetchall()
        return [Entry(*row) for row in rows]

    @staticmethod
    def _filters(status: str | None, source_lang: str | None, target_lang: str | None,
                 origin: str | None) -> tuple[str, list[object]]:
        terms, values = [], []
        if status is not None:
            terms.append("status = ?")
            values.append(_choice(status, STATUSES, "status"))
            if status != "accepted":
                terms.append("status != 'accepted'")  # the same term as entries_review's, so it serves
        for column, value in (("source_lang", source_lang), ("target_lang", target_lang)):
            if value is not None:
                terms.append(f"{column} = ?")
                values.append(language_code(value, column.replace("_lang", " language")))
        if origin is not None:
            terms.append("origin = ?")
            values.append(_choice(origin, ORIGINS, "origin"))
        return ("WHERE " + " AND ".join(terms) if terms else ""), values

    def _walk(self, where: str, values: list[object]) -> Iterator[Entry]:
        """Every entry passing ``where``, a page per short read, so a writer never waits on a
        long export (entries added meanwhile may or may not be included)."""
        last = 0
        while True:
            with self._transaction("DEFERRED") as conn:
                rows = conn.execute(f"SELECT {_COLUMNS} FROM entries {where} {'AND' if where else 'WHERE'} id > ? "
                                    f"ORDER BY id LIMIT {_PAGE}", (*values, last)).fetchall()
            yield from (Entry(*row) for row in rows)
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    def stats(self) -> Stats:
        """The number of entries by pair and status, and the file's size on disk."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute("SELECT source_lang, target_lang, status, entries FROM counts WHERE entries > 0 "
                                "ORDER BY source_lang, target_lang").fetchall()
        counts: dict[tuple[str, str], dict[str, int]] = {}
        for source_lang, target_lang, status, count in rows:
            counts.setdefault((source_lang, target_lang), {})[status] = count
        size = 0
        for part in (self.path, Path(f"{self.path}-wal")):
            with contextlib.suppress(FileNotFoundError):  # the log goes when the last process closes it
                size += part.stat().st_size
        return Stats(counts, sum(count for *_, count in rows), size)

    def origins(self) -> dict[str, dict[str, int]]:
        """The number of entries by origin and status: ``{origin: {status: entries}}``, the origins
        sorted. Counted afresh (a scan of the entries: a fraction of a second at a million)."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute("SELECT origin, status, count(*) FROM entries GROUP BY origin, status "
                                "ORDER BY origin, status").fetchall()
        counts: dict[str, dict[str, int]] = {}
        for origin, status, count in rows:
            counts.setdefault(origin, {})[status] = count
        return counts

    # -------------------------------------------------------------------------------- imports
    def import_pairs(self, pairs: Iterable[tuple[str, str]], source_lang: str, target_lang: str, *,
                     name: str = "pairs", status: str = "accepted", who: str | None = None,
                     batch: int = 1000, progress: ImportProgress | None = None) -> ImportReport:
        """Import ``(source, target)`` pairs given in code (see :meth:`import_tsv` for the rules);
        a bad pair is named by its number (``pair 3: ...``)."""
        rows = ((f"pair {number}", source, target) for number, (source, target) in enumerate(pairs, 1))
        return self._import(rows, name, "pairs", source_lang, target_lang, status, who, batch, progress)

    def import_tsv(self, path: str | os.PathLike[str], source_lang: str, target_lang: str, *,
                   status: str = "accepted", who: str | None = None, batch: int = 1000,
                   progress: ImportProgress | None = None) -> ImportReport:
        """Import a TSV file of ``source<TAB>target`` lines (format: :mod:`transformer.memory.tsv`).

        Args:
            path: the file.
            source_lang: the language of the first column.
            target_lang: the language of the second.
            status: the entries' status (``accepted``: a translator's memory is reviewed work;
                ``pending`` to review them first).
            who: who imports it (stored with the import and its entries).
            batch: lines committed per transaction.
            progress: called with the import's report so far after each batch is committed.

        Returns:
            what the import did, its state ``complete``.

        Raises:
            TMFormatError: a bad line (named); the entries it had added are taken out again.
            TMError: a bad language code, status or ``who``.
            TMBusyError: another process kept the memory locked past the timeout (same as above).

        The import commits ``batch`` lines at a time, so a server sharing the memory is never kept
        waiting long. A line whose pair, normalised source and normalised target are already in
        the memory is left out (a duplicate), as is one with a blank source or target (skipped).
        A process killed meanwhile leaves the import ``incomplete``, with the entries of the lines
        committed before (:class:`ImportReport`; :meth:`remove_import` takes them out). After an
        import of 10,000 entries or more, the fuzzy index's pieces are merged, in steps of a few
        tenths of a second (searches are faster on one piece).
        """
        rows = ((f"{path}:{line}", source, target)
                for line, source, target in tsv_pairs(path, max_chars=self.max_chars))
        return self._import(rows, str(path), "tsv", source_lang, target_lang, status, who, batch, progress)

    def import_tmx(self, path: str | os.PathLike[str], source_lang: str, target_lang: str, *,
                   status: str = "accepted", who: str | None = None, batch: int = 1000,
                   progress: ImportProgress | None = None) -> ImportReport:
        """Import the units of a TMX file that have both languages (reading:
        :mod:`transformer.memory.tmx`).

        ``source_lang`` and ``target_lang`` choose each unit's segments: the variant with that
        code, or for a code without a region (``en``), the first regional one (``en-US``); the
        entries are stored under the codes given. A unit without both is skipped. Otherwise as
        :meth:`import_tsv` (batches, duplicates, a failed import taken out, a killed one incomplete).
        """
        source_lang, target_lang = _pair(source_lang, target_lang)
        rows = ((f"{path}:{line}", source, target)
                for line, source, target in tmx_pairs(path, source_lang, target_lang, max_chars=self.max_chars))
        return self._import(rows, str(path), "tmx", source_lang, target_lang, status, who, batch, progress)

    def _import(self, rows: Iterable[tuple[str, str | None, str | None]], name: str, kind: str, source_lang: str,
                target_lang: str, status: str, who: str | None, batch: int,
                progress: ImportProgress | None = None) -> ImportReport:
        """Import ``(where, source, target)`` rows (``where`` names a row in messages), ``batch``
        rows per transaction, under a new import record (:class:`ImportReport`); ``progress`` is
        given the record after each batch."""
        source_lang, target_lang = _pair(source_lang, target_lang)
        _choice(status, STATUSES, "status")
        who = self._check_who(who)
        if batch < 1:
            raise TMError(f"batch must be >= 1, got {batch}")
        with self._transaction() as conn:
            import_id = conn.execute(
                "INSERT INTO imports (name, format, source_lang, target_lang, state, started, who) "
                "VALUES (?, ?, ?, ?, 'incomplete', ?, ?)",
                (name, kind, source_lang, target_lang, self._now(), who)).lastrowid
        rows = iter(rows)
        try:
            # Rows are read between transactions: the write lock is held only while a batch is written.
            while chunk := list(itertools.islice(rows, batch)):
                with self._transaction() as conn:
                    done = self._import_batch(conn, chunk, import_id, source_lang, target_lang, status, who)
                    conn.execute("UPDATE imports SET units = units + ?, added = added + ?, "
                                 "duplicates = duplicates + ?, skipped = skipped + ?, "
                                 "first_id = coalesce(first_id, ?) WHERE id = ?",
                                 (len(chunk), done["added"], done["duplicates"], done["skipped"], done["first_id"],
                                  import_id))
                    report = self._import_report(conn, import_id) if progress is not None else None
                if report is not None:
                    progress(report)
        except BaseException:
            # An error this process sees takes the import's entries out again: all or nothing.
            with contextlib.suppress(TMError, sqlite3.Error):
                self._remove(import_id, "failed")
            raise
        with self._transaction() as conn:
            conn.execute("UPDATE imports SET state = 'complete', finished = ? WHERE id = ?", (self._now(), import_id))
            report = self._import_report(conn, import_id)
        if report.added >= MERGE_AFTER:
            self._merge_index()
        return report

    def _merge_index(self) -> None:
        first = True
        while True:
            with self._transaction() as conn:
                more = index.merge_step(conn, first)
            if not more:
                return
            first = False

    def _import_batch(self, conn: sqlite3.Connection, chunk: list[tuple[str, str | None, str | None]], import_id: int,
                      source_lang: str, target_lang: str, status: str, who: str | None) -> dict:
        """Add a batch of rows; returns the counts ``added``, ``duplicates``, ``skipped`` and the
        ``first_id`` added (``None`` if none)."""
        done: dict = {"added": 0, "duplicates": 0, "skipped": 0, "first_id": None}
        counts: Counter = Counter()
        now = self._now()
        for where, source, target in chunk:
            if source is None or target is None or not source.strip() or not target.strip():
                done["skipped"] += 1
                continue
            try:
                norm = check_text(source, "source", max_chars=self.max_chars)
                target_norm = check_text(target, "target", max_chars=self.max_chars)
            except TMError as err:
                raise TMFormatError(f"{where}: {err}") from None
            same_source = conn.execute("SELECT target FROM entries WHERE source_lang = ? AND target_lang = ? "
                                       "AND source_key = ? AND coalesce(source_norm, source) = ?",
                                       (source_lang, target_lang, source_key(norm), norm))
            if any(normalise(other) == target_norm for (other,) in same_source):
                done["duplicates"] += 1
                continue
            row = (source, target, source_lang, target_lang, "import", status, now, now, who, import_id)
            entry_id = self._insert(conn, row, norm, counts)
            done["added"] += 1
            done["first_id"] = done["first_id"] or entry_id
        index.add_counts(conn, counts)
        return done

    def _import_report(self, conn: sqlite3.Connection, import_id: int) -> ImportReport:
        row = conn.execute(f"SELECT {_IMPORT_COLUMNS} FROM imports WHERE id = ?", (import_id,)).fetchone()
        if row is None:
            raise TMError(f"no import {import_id} in the translation memory {self.path}")
        return ImportReport(*row)

    def imports(self) -> list[ImportReport]:
        """Every import, oldest first (a killed one ``incomplete``: see :class:`ImportReport`)."""
        with self._transaction("DEFERRED") as conn:
            rows = conn.execute(f"SELECT {_IMPORT_COLUMNS} FROM imports ORDER BY id").fetchall()
        return [ImportReport(*row) for row in rows]

    def _remove(self, import_id: int, state: str) -> int:
        with self._transaction() as conn:
            self._import_report(conn, import_id)  # refuses an unknown import
            first = conn.execute("SELECT first_id FROM imports WHERE id = ?", (import_id,)).fetchone()[0]
            # Its entries all have ids from first_id on: a range of the table instead of a scan.
            removed = 0 if first is None else conn.execute(
                "DELETE FROM entries WHERE id >= ? AND import_id = ?", (first, import_id)).rowcount
            conn.execute("UPDATE imports SET state = ?, finished = coalesce(finished, ?) WHERE id = ?",
                         (state, self._now(), import_id))
        return removed

    def remove_import(self, import_id: int) -> int:
        """Take out the entries an import added (an ``incomplete`` one's, for one), whatever
        their status now; the import stays listed as ``removed``. Returns how many were removed.

        Raises:
            TMError: no such import.
        """
        return self._remove(import_id, "removed")

    # -------------------------------------------------------------------------------- exports
    def export_tmx(self, path: str | os.PathLike[str], *, source_lang: str | None = None,
                   target_lang: str | None = None, status: str | None = "accepted") -> int:
        """Write the entries that pass the filters to a TMX 1.4b file (written whole: a reader sees
        the old file or the new one), one ``<tu>`` each with its source and target, its id as
        ``tuid``, its dates, and its origin and status as ``x-origin`` and ``x-status`` properties.
        The header's ``srclang`` is ``source_lang`` if given, else ``*all*``. Returns how many.

        Raises:
            TMError: a bad language code or status; the file cannot be written.
        """
        where, values = self._filters(status, source_lang, target_lang, None)
        units = (TMXUnit({entry.source_lang: entry.source, entry.target_lang: entry.target}, tuid=str(entry.id),
                         created=entry.created, changed=entry.updated,
                         props={"x-origin": entry.origin, "x-status": entry.status})
                 for entry in self._walk(where, values))
        srclang = language_code(source_lang) if source_lang is not None else "*all*"
        return self._write_file(path, lambda file: write_tmx(file, units, srclang=srclang))

    def export_tsv(self, path: str | os.PathLike[str], source_lang: str, target_lang: str, *,
                   status: str | None = "accepted") -> int:
        """Write the entries of one pair that pass the filter to a TSV file of
        ``source<TAB>target`` lines (format: :mod:`transformer.memory.tsv`; written whole).
        Returns how many."""
        where, values = self._filters(status, source_lang, target_lang, None)
        pairs = ((entry.source, entry.target) for entry in self._walk(where, values))
        return self._write_file(path, lambda file: write_tsv(file, pairs))

    def _write_file(self, path: str | os.PathLike[str], write: Callable) -> int:
        try:
            with replacing(path) as work, open(work, "xb") as file:
                return write(file)
        except OSError as err:
            raise TMError(f"cannot write {path}: {err.strerror or err}") from None

    # -------------------------------------------------------------------------------- upkeep
    def rebuild_index(self) -> None:
        """Rebuild the fuzzy index from the entries, in one transaction: drops the postings that
        deleted entries and removed imports left (they cost searches time, not results) and
        merges the index into one piece. Minutes for millions of entries; searches go on meanwhile."""
        with self._transaction() as conn:
            index.rebuild(conn)

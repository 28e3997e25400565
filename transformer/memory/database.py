"""The translation memory's SQLite file: opened and checked, created once, written in short
transactions, its errors told in one line.

- WAL mode: readers never wait for a writer, and a commit appends to a log beside the file, so
  several processes on one host (a server's workers) share it; the ``-wal`` and ``-shm`` files
  live in the same folder, which must be writable. Not for network file systems (WAL's shared
  memory needs one host).
- ``synchronous = FULL``: each commit is synced to the disk before it returns, so what was added
  survives a power cut, not only a crash or a kill (``NORMAL`` would survive those too, but may lose
  the last commits on a power cut); one ``fsync`` per write, an import's per batch.
- Each write is one ``BEGIN IMMEDIATE`` transaction, which takes the write lock at once or waits
  for it up to the timeout (a deferred one that reads first could be refused it later without
  waiting); SQLite's ``busy_timeout`` does the waiting.
- The file says what it is: ``PRAGMA application_id`` marks a translation memory and
  ``PRAGMA user_version`` its schema; both are checked when it is opened.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

from transformer.memory.errors import TMBusyError, TMError

SCHEMA_VERSION = 1
"""The layout of the tables (``PRAGMA user_version``); a file with a higher one is refused."""
APPLICATION_ID = 0x74724D54  # "trMT" in the file's header (PRAGMA application_id): this is a memory

SCHEMA = (
    # AUTOINCREMENT: an id is never reused, so the fuzzy index's postings of a deleted entry never
    # point at a later one.
    """CREATE TABLE entries (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        source_lang TEXT NOT NULL,
        target_lang TEXT NOT NULL,
        source TEXT NOT NULL,
        target TEXT NOT NULL,
        source_norm TEXT,  -- the normalised source where it differs from the source, else NULL
        source_key INTEGER NOT NULL,
        origin TEXT NOT NULL CHECK (origin IN ('suggestion', 'import', 'reviewer')),
        status TEXT NOT NULL CHECK (status IN ('pending', 'accepted', 'rejected')),
        created TEXT NOT NULL,
        updated TEXT NOT NULL,
        who TEXT,
        import_id INTEGER
    )""",
    # Exact lookups: the pair and a hash of the normalised source.
    "CREATE INDEX entries_exact ON entries (source_lang, target_lang, source_key, status)",
    # The review queue: pending and rejected entries in order, without the accepted mass.
    "CREATE INDEX entries_review ON entries (status, id) WHERE status != 'accepted'",
    """CREATE TABLE imports (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        name TEXT NOT NULL,
        format TEXT NOT NULL,
        source_lang TEXT NOT NULL,
        target_lang TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN ('incomplete', 'complete', 'failed', 'removed')),
        started TEXT NOT NULL,
        finished TEXT,
        units INTEGER NOT NULL DEFAULT 0,
        added INTEGER NOT NULL DEFAULT 0,
        duplicates INTEGER NOT NULL DEFAULT 0,
        skipped INTEGER NOT NULL DEFAULT 0,
        first_id INTEGER,
        who TEXT
    )""",
    # The number of entries by pair and status, kept by triggers in each write's transaction, so
    # that the counts of a memory of millions are read at once.
    """CREATE TABLE counts (
        source_lang TEXT NOT NULL,
        target_lang TEXT NOT NULL,
        status TEXT NOT NULL,
        entries INTEGER NOT NULL,
        PRIMARY KEY (source_lang, target_lang, status)
    ) WITHOUT ROWID""",
    """CREATE TRIGGER entries_added AFTER INSERT ON entries BEGIN
        INSERT INTO counts VALUES (new.source_lang, new.target_lang, new.status, 1)
            ON CONFLICT DO UPDATE SET entries = entries + 1;
    END""",
    """CREATE TRIGGER entries_removed AFTER DELETE ON entries BEGIN
        UPDATE counts SET entries = entries - 1
            WHERE (source_lang, target_lang, status) = (old.source_lang, old.target_lang, old.status);
    END""",
    """CREATE TRIGGER entries_moved AFTER UPDATE OF status ON entries WHEN old.status != new.status BEGIN
        UPDATE counts SET entries = entries - 1
            WHERE (source_lang, target_lang, status) = (old.source_lang, old.target_lang, old.status);
        INSERT INTO counts VALUES (new.source_lang, new.target_lang, new.status, 1)
            ON CONFLICT DO UPDATE SET entries = entries + 1;
    END""",
    # The fuzzy index (transformer/memory/index.py): each entry's features as hex tokens.
    # Contentless (the tokens are not stored twice) and append-only.
    "CREATE VIRTUAL TABLE fuzzy USING fts5 (features, content='', tokenize='ascii', detail='none')",
    # How many postings each feature has in the fuzzy index.
    "CREATE TABLE fuzzy_counts (feature INTEGER PRIMARY KEY, postings INTEGER NOT NULL)",
)


class Database:
    """One connection to the memory's file, checked (and the schema created) when opened.

    Args:
        path: the file.
        timeout: seconds a write waits for another process's before :class:`~transformer.memory.errors.TMBusyError`.

    Raises:
        TMError: see :class:`~transformer.memory.store.TranslationMemory`.
    """

    def __init__(self, path: Path, timeout: float) -> None:
        self.path, self.timeout = path, timeout
        self.lock = threading.RLock()  # one connection, taken in turns by the threads sharing it
        self._check_path()
        try:
            self._conn: sqlite3.Connection | None = sqlite3.connect(
                path, timeout=timeout, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as err:
            raise self.refusal(err) from None
        try:
            self._setup()
        except BaseException:
            self.close()
            raise

    def _check_path(self) -> None:
        """Refuse what SQLite would misread, block on, or fail on later with a vaguer message."""
        path, folder = self.path, self.path.parent
        try:
            mode = os.stat(path).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as err:
            raise TMError(f"cannot open the translation memory {path}: {err.strerror or err}") from None
        if mode is not None and stat.S_ISDIR(mode):
            raise TMError(f"the translation memory {path} is a folder; give a file name (memory.db)")
        if mode is not None and not stat.S_ISREG(mode):
            raise TMError(f"the translation memory {path} is not a regular file")
        if mode is None and not folder.is_dir():
            raise TMError(f"cannot create the translation memory {path}: the folder {folder} does not exist")
        if mode is not None and not os.access(path, os.R_OK | os.W_OK):
            raise TMError(f"the translation memory {path} is read-only (it is opened for reading and writing)")
        if not os.access(folder, os.W_OK | os.X_OK):
            raise TMError(f"the translation memory {path} is in a read-only folder: SQLite writes its "
                          f"-wal and -shm files beside it; choose a writable place")

    def _setup(self) -> None:
        conn = self.connection()
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout * 1000)}")
            # The first statement that reads the file: one that is no database fails here.
            mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]
            conn.execute("PRAGMA synchronous = FULL")
            conn.execute("PRAGMA journal_size_limit = 67108864")  # the log shrinks back to 64 MiB after an import
            conn.execute("PRAGMA cache_size = -16384")  # 16 MiB of pages per connection
            application, version = self._identity(conn)
        except sqlite3.Error as err:
            raise self.refusal(err) from None
        if mode.lower() != "wal":
            raise TMError(f"the translation memory {self.path} could not be put in WAL mode (it is in {mode} mode)")
        if (application, version) == (0, 0):
            with self.transaction() as conn:  # created once, even by processes opening it together
                if self._identity(conn) == (0, 0):
                    if conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()[0]:
                        raise TMError(f"{self.path} is an SQLite database of another application, "
                                      "not a translation memory")
                    for statement in SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                application, version = self._identity(conn)
        if application != APPLICATION_ID:
            raise TMError(f"{self.path} is an SQLite database of another application, not a translation memory")
        if version > SCHEMA_VERSION:
            raise TMError(f"the translation memory {self.path} has schema version {version}, written by a newer "
                          f"transformer (this one reads version {SCHEMA_VERSION}): upgrade transformer")
        if version != SCHEMA_VERSION:
            raise TMError(f"the translation memory {self.path} has an unknown schema version {version}")

    @staticmethod
    def _identity(conn: sqlite3.Connection) -> tuple[int, int]:
        return (conn.execute("PRAGMA application_id").fetchone()[0],
                conn.execute("PRAGMA user_version").fetchone()[0])

    def connection(self) -> sqlite3.Connection:
        """The open connection (:class:`~transformer.memory.errors.TMError` once closed)."""
        if self._conn is None:
            raise TMError(f"the translation memory {self.path} is closed")
        return self._conn

    def refusal(self, err: sqlite3.Error) -> Exception:
        """The one-line :class:`~transformer.memory.errors.TMError` for an SQLite error a user can
        act on, else ``err`` itself (a bug)."""
        name = getattr(err, "sqlite_errorname", "") or ""
        path = self.path
        if name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")):
            return TMBusyError(f"the translation memory {path} is busy: another process kept it locked for more "
                               f"than {self.timeout:g} s; try again")
        if name.startswith("SQLITE_NOTADB"):
            return TMError(f"{path} is not a translation memory (the file is not a database)")
        if name.startswith("SQLITE_CORRUPT"):
            return TMError(f"the translation memory {path} is damaged ({err}); restore it from a copy or export "
                           "what is readable")
        if name.startswith("SQLITE_READONLY"):
            return TMError(f"the translation memory {path} cannot be written: {err}")
        if name.startswith(("SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_AUTH")):
            return TMError(f"cannot open the translation memory {path}: {err}")
        if name.startswith("SQLITE_FULL"):
            return TMError(f"the disk holding the translation memory {path} is full")
        if name.startswith("SQLITE_IOERR"):
            return TMError(f"the translation memory {path} cannot be read or written: {err}")
        if "no such module: fts5" in str(err):
            return TMError(f"this Python's SQLite {sqlite3.sqlite_version} has no FTS5, which the translation "
                           "memory needs")
        return err

    @contextlib.contextmanager
    def transaction(self, mode: str = "IMMEDIATE") -> Iterator[sqlite3.Connection]:
        """One transaction, committed when the block ends and rolled back if it raises:
        ``IMMEDIATE`` for a write, ``DEFERRED`` for a consistent read of several statements."""
        with self.lock:
            conn = self.connection()
            try:
                conn.execute(f"BEGIN {mode}")
            except sqlite3.Error as err:
                raise self.refusal(err) from None
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException as exc:
                if conn.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self.refusal(exc) from None
                raise

    def close(self) -> None:
        """Close the connection; closing twice is allowed."""
        with self.lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

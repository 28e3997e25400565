"""The fuzzy index: where a search finds its candidates among millions of entries.

Each entry's source gives a few dozen features (:func:`transformer.memory.text.features`: its
words and neighbouring-word pairs, hashed with the language pair), written as hex tokens into an
SQLite FTS5 table (``fuzzy``: contentless, positions left out, so a posting costs a byte or two),
and ``fuzzy_counts`` keeps each feature's number of postings.

A search reads the counts of its text's features first, then the postings of the rarest ones
(at most :data:`MAX_FEATURES`), rarest first, until :data:`POSTINGS_BUDGET` postings are read; a
feature too common to fit, or found in more than :data:`COMMON` of the pair's entries, is left
out: it would tell few entries apart. Each entry found scores
the idf weight ``log(1 + entries of the pair / postings)`` of each feature it shares; the
:data:`CANDIDATES` best are handed back to be scored by rapidfuzz. Time is thus bounded by the
budget, whatever the memory's size.

The index is append-only: an entry's postings stay when it is rejected or deleted (searches
read the entries' table for the status), so nothing depends on recomputing an entry's features
exactly as they were written; :func:`rebuild` starts it afresh from the entries.
"""

from __future__ import annotations

import json
import math
import sqlite3
from collections import Counter

from transformer.memory.text import features, pair_total_feature

POSTINGS_BUDGET = 5000
"""The most postings one search reads."""
COMMON = 0.05
"""A feature found in more than this share of the pair's entries (and in more than
:data:`COMMON_FLOOR`) is left out: it tells few entries apart."""
COMMON_FLOOR = 100
MAX_FEATURES = 64
"""The most features one search reads the postings of (a long text's rarest)."""
CANDIDATES = 100
"""The most entries one search hands on to be scored."""
MERGE_PAGES = 500
"""Pages of the index one :func:`merge_step` writes (a few tenths of a second)."""
_PAGE = 1000


def _token(feature: int) -> str:
    return format(feature, "012x")


def add_entry(conn: sqlite3.Connection, entry_id: int, norm: str, source_lang: str, target_lang: str,
              counts: Counter) -> None:
    """Index one entry's normalised source; its features are counted into ``counts`` for
    :func:`add_counts` (once per batch of entries)."""
    found = features(norm, source_lang, target_lang)
    if found:
        conn.execute("INSERT INTO fuzzy (rowid, features) VALUES (?, ?)", (entry_id, " ".join(map(_token, found))))
    counts.update(found)
    counts[pair_total_feature(source_lang, target_lang)] += 1


def add_counts(conn: sqlite3.Connection, counts: Counter) -> None:
    """Add ``counts`` (feature -> new postings) to ``fuzzy_counts``."""
    conn.executemany("INSERT INTO fuzzy_counts (feature, postings) VALUES (?, ?) "
                     "ON CONFLICT (feature) DO UPDATE SET postings = postings + excluded.postings", counts.items())


def candidates(conn: sqlite3.Connection, norm: str, source_lang: str, target_lang: str) -> list[int]:
    """The ids of the entries that share the most (idf-weighted) features with the normalised
    text ``norm``, best first, at most :data:`CANDIDATES` (any status: the caller filters)."""
    wanted = features(norm, source_lang, target_lang)
    if not wanted:
        return []
    total_key = pair_total_feature(source_lang, target_lang)
    postings = dict(conn.execute(
        "SELECT feature, postings FROM fuzzy_counts WHERE feature IN (SELECT value FROM json_each(?))",
        (json.dumps([*wanted, total_key]),)).fetchall())
    total = postings.pop(total_key, 0)
    budget, common, chosen = POSTINGS_BUDGET, max(COMMON_FLOOR, COMMON * total), []
    for count, feature in sorted((postings[f], f) for f in wanted if f in postings)[:MAX_FEATURES]:
        if count > budget or count > common:
            break
        budget -= count
        chosen.append((math.log(1 + total / count), f'"{_token(feature)}"'))
    if not chosen:
        return []
    # The postings are added up by SQLite rather than one by one in Python: a few times faster.
    each = " UNION ALL ".join(["SELECT rowid AS id, ? AS weight FROM fuzzy WHERE fuzzy MATCH ?"] * len(chosen))
    return [entry_id for (entry_id,) in conn.execute(
        f"SELECT id FROM ({each}) GROUP BY id ORDER BY sum(weight) DESC LIMIT {CANDIDATES}",
        [value for weight_and_match in chosen for value in weight_and_match])]


def merge_step(conn: sqlite3.Connection, first: bool) -> bool:
    """Merge the index's pieces a step further (FTS5's ``merge`` command; the ``first`` step of
    a merge takes pieces of every level, as ``optimize`` does); ``True`` while work remains.

    An import writes the index in many small pieces, which each search then reads; merged, a
    search at a million entries costs about a third less. In steps, each its own transaction, a
    merge never keeps other writers waiting long.
    """
    before = conn.total_changes
    conn.execute("INSERT INTO fuzzy (fuzzy, rank) VALUES ('merge', ?)", (-MERGE_PAGES if first else MERGE_PAGES,))
    return conn.total_changes - before >= 2


def rebuild(conn: sqlite3.Connection) -> None:
    """Index every entry afresh (in the caller's transaction), then merge the index into one piece."""
    conn.execute("INSERT INTO fuzzy (fuzzy) VALUES ('delete-all')")
    conn.execute("DELETE FROM fuzzy_counts")
    last, counts = 0, Counter()
    while rows := conn.execute("SELECT id, source_lang, target_lang, coalesce(source_norm, source) FROM entries "
                               f"WHERE id > ? ORDER BY id LIMIT {_PAGE}", (last,)).fetchall():
        for entry_id, source_lang, target_lang, norm in rows:
            add_entry(conn, entry_id, norm, source_lang, target_lang, counts)
        last = rows[-1][0]
    add_counts(conn, counts)
    conn.execute("INSERT INTO fuzzy (fuzzy) VALUES ('optimize')")

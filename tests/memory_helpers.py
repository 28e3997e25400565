"""A check of the translation memory's store shared by the tests of the store and of its commands."""

from __future__ import annotations

import sqlite3

from transformer.memory import TranslationMemory


def assert_counts_true(tm: TranslationMemory) -> None:
    """The counts kept by triggers equal the entries counted afresh."""
    with sqlite3.connect(tm.path) as conn:
        rows = conn.execute("SELECT source_lang, target_lang, status, count(*) FROM entries GROUP BY 1, 2, 3").fetchall()
    expected: dict = {}
    for source_lang, target_lang, status, count in rows:
        expected.setdefault((source_lang, target_lang), {})[status] = count
    assert tm.stats().counts == expected
    assert tm.stats().total == sum(count for *_, count in rows)

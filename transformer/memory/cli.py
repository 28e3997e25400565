"""``transformer tm``: the translation memory on the command line (its parser: ``cli_args.py``).

Every refusal is a :class:`~transformer.errors.UserError` (one line, exit status 2) raised before
the memory is written to, or by an import that then takes its entries out again: a mistake leaves
the memory as it was. A missing memory is created by ``tm import`` only; the other subcommands
refuse it rather than leave an empty file behind a typo.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from transformer.errors import UserError
from transformer.memory.errors import TMError
from transformer.memory.records import STATUSES, Entry, ImportReport
from transformer.memory.store import TranslationMemory
from transformer.memory.text import language_code

PROGRESS_EVERY = 5.0  # seconds between an import's progress lines
_REVIEW_PAGE = 100  # pending entries read at a time by a review


def tm_command(args: argparse.Namespace) -> int:
    """``transformer tm`` without a subcommand."""
    raise UserError("give a subcommand: import, export, list, stats or review (transformer tm --help)")


def _timeout(args: argparse.Namespace) -> float:
    if not (math.isfinite(args.timeout) and args.timeout >= 0):
        raise UserError(f"--timeout must be a number of seconds >= 0, got {args.timeout}")
    return args.timeout


def _existing(args: argparse.Namespace) -> TranslationMemory:
    """The memory of ``--tm``, which must exist (only an import creates one)."""
    path = Path(args.tm)
    timeout = _timeout(args)
    if not path.exists() and not path.is_symlink():
        raise UserError(f"no translation memory at {path}: `transformer tm import FILE --tm {path} --src-lang CODE "
                        "--tgt-lang CODE` makes one")
    return TranslationMemory(path, timeout=timeout)


def _pair(args: argparse.Namespace) -> tuple[str | None, str | None]:
    """The language filter of ``--pair SRC-TGT`` or ``--src-lang``/``--tgt-lang``, checked."""
    source, target = args.src_lang, args.tgt_lang
    if args.pair is not None:
        if source is not None or target is not None:
            raise UserError("give --pair, or --src-lang and --tgt-lang, not both")
        parts = args.pair.split("-")
        if len(parts) != 2 or not all(parts):
            raise UserError(f"--pair takes two language codes as SRC-TGT (fr-en), got {args.pair!r}; for codes "
                            "with a region give --src-lang and --tgt-lang")
        source, target = parts
    return (None if source is None else language_code(source, "--src-lang"),
            None if target is None else language_code(target, "--tgt-lang"))


def _status(value: str | None, *, also: tuple[str, ...] = ()) -> str | None:
    """``--status``, checked: one of the memory's statuses (or of ``also``), or None when not given."""
    if value is not None and value not in (*STATUSES, *also):
        raise UserError(f"unknown status {value[:20]!r}; one of {', '.join((*STATUSES, *also))}")
    return value


def _one_line(text: str) -> str:
    """A text on one line of a listing: tabs and line breaks as spaces."""
    return " ".join(text.replace("\t", " ").splitlines())


def _entry_record(entry: Entry) -> dict:
    return {"id": entry.id, "source": entry.source, "target": entry.target, "source_lang": entry.source_lang,
            "target_lang": entry.target_lang, "origin": entry.origin, "status": entry.status,
            "created": entry.created, "updated": entry.updated, "who": entry.who, "import_id": entry.import_id}


def _size(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:,} {unit}" if unit == "bytes" else f"{size:.1f} {unit}"
        size /= 1024
    return ""  # unreachable: the loop returns at GiB


# -------------------------------------------------------------------------------------------- import
def _file_format(args: argparse.Namespace) -> str:
    if args.format:
        return args.format
    suffix = Path(args.file).suffix.lower()
    if suffix == ".tmx":
        return "tmx"
    if suffix in (".tsv", ".txt"):
        return "tsv"
    raise UserError(f"{args.file}: cannot tell its format from the suffix {suffix or '(none)'!r}; give --format "
                    "tmx or --format tsv")


class _ImportProgress:
    """A progress line on standard error every ``PROGRESS_EVERY`` seconds of an import."""

    def __init__(self, name: str, enabled: bool) -> None:
        self.name, self.enabled = name, enabled
        self.start = self.last = time.monotonic()

    def __call__(self, report: ImportReport) -> None:
        now = time.monotonic()
        if not self.enabled or now - self.last < PROGRESS_EVERY:
            return
        self.last = now
        print(f"progress: {self.name}: {report.units:,} units read, {report.added:,} added, "
              f"{report.duplicates:,} duplicates, {report.skipped:,} skipped "
              f"({report.units / max(now - self.start, 1e-9):,.0f} units/s)", file=sys.stderr, flush=True)


def import_command(args: argparse.Namespace) -> int:
    kind = _file_format(args)
    source_lang, target_lang = language_code(args.src_lang, "--src-lang"), language_code(args.tgt_lang, "--tgt-lang")
    file = Path(args.file)
    if not file.is_file():
        raise UserError(f"{file}: {'a folder, not a file' if file.is_dir() else 'no such file'}")
    timeout = _timeout(args)
    path = Path(args.tm)
    created = not path.exists() and not path.is_symlink()
    status = "accepted" if args.accept else "pending"
    progress = _ImportProgress(str(file), enabled=not args.no_progress)
    tm = TranslationMemory(path, timeout=timeout)
    failed = True
    try:
        read = tm.import_tmx if kind == "tmx" else tm.import_tsv
        start = time.monotonic()
        report = read(file, source_lang, target_lang, status=status, progress=progress)
        failed = False
    finally:
        tm.close()
        if failed and created:
            _remove_new_memory(path)
    print(f"imported {file} into {path} (import {report.id}): {report.added:,} entries added as {status}, "
          f"{report.duplicates:,} duplicates left out, {report.skipped:,} units skipped (a language missing or "
          f"empty), {report.units:,} units in {time.monotonic() - start:.1f} s")
    if status == "pending" and report.added:
        print(f"review them with `transformer tm review --tm {path}` (or import with --accept)")
    return 0


def _remove_new_memory(path: Path) -> None:
    """Take out a memory this import created, when the import failed and nothing else was written to
    it: a mistake leaves no file behind."""
    try:
        with TranslationMemory(path) as tm:
            empty = tm.stats().total == 0 and all(report.state == "failed" for report in tm.imports())
    except TMError:
        return
    if empty:
        for part in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            with contextlib.suppress(FileNotFoundError):
                part.unlink()


# -------------------------------------------------------------------------------------------- export
def export_command(args: argparse.Namespace) -> int:
    out = Path(args.out)
    suffix = out.suffix.lower()
    if suffix not in (".tmx", ".tsv"):
        raise UserError(f"{out}: the output's suffix says its format: .tmx or .tsv")
    status = _status(args.status, also=("all",))
    source_lang, target_lang = _pair(args)
    if suffix == ".tsv" and (source_lang is None or target_lang is None):
        raise UserError("a TSV file holds one language pair: give --pair SRC-TGT (or --src-lang and --tgt-lang)")
    if out.is_dir():
        raise UserError(f"{out} is a folder; give a file name such as {out / ('memory' + suffix)}")
    if (out.exists() or out.is_symlink()) and not args.overwrite:
        raise UserError(f"{out} exists: give --overwrite to replace it")
    if Path(args.tm).exists() and out.exists() and out.resolve() == Path(args.tm).resolve():
        raise UserError(f"{out} is the memory itself: export to another file")
    status = None if status == "all" else status
    with _existing(args) as tm:
        if suffix == ".tmx":
            count = tm.export_tmx(out, source_lang=source_lang, target_lang=target_lang, status=status)
        else:
            count = tm.export_tsv(out, source_lang, target_lang, status=status)
    print(f"exported {count:,} entries ({args.status}) to {out}")
    return 0


# -------------------------------------------------------------------------------------------- list, stats
def list_command(args: argparse.Namespace) -> int:
    if args.limit < 0 or args.offset < 0:
        raise UserError(f"--limit and --offset must be >= 0, got {args.limit} and {args.offset}")
    status = _status(args.status)
    source_lang, target_lang = _pair(args)
    with _existing(args) as tm:
        entries = tm.entries(status=status, source_lang=source_lang, target_lang=target_lang,
                             limit=args.limit, offset=args.offset)
    for entry in entries:
        if args.json:
            print(json.dumps(_entry_record(entry), ensure_ascii=False))
        else:
            print(f"{entry.id}\t{entry.status}\t{entry.source_lang}-{entry.target_lang}\t{entry.origin}\t"
                  f"{_one_line(entry.source)}\t{_one_line(entry.target)}")
    return 0


def stats_command(args: argparse.Namespace) -> int:
    with _existing(args) as tm:
        stats, origins, imports = tm.stats(), tm.origins(), tm.imports()
    if args.json:
        print(json.dumps({
            "path": str(tm.path), "entries": stats.total, "size_bytes": stats.size_bytes,
            "pairs": [{"source_lang": s, "target_lang": t, **counts} for (s, t), counts in stats.counts.items()],
            "origins": origins,
            "imports": [{"id": r.id, "name": r.name, "format": r.format, "state": r.state, "units": r.units,
                         "added": r.added, "duplicates": r.duplicates, "skipped": r.skipped} for r in imports],
        }, ensure_ascii=False))
        return 0
    print(f"{tm.path}: {stats.total:,} entries, {_size(stats.size_bytes)} on disk")
    rows = [("", "accepted", "pending", "rejected")]
    rows += [(f"{s}-{t}", *(f"{counts.get(status, 0):,}" for status in rows[0][1:]))
             for (s, t), counts in stats.counts.items()]
    rows += [(origin, *(f"{counts.get(status, 0):,}" for status in rows[0][1:])) for origin, counts in origins.items()]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    for number, row in enumerate(rows):
        if number == 1 or (number == 1 + len(stats.counts) and origins):
            print("by pair:" if number == 1 else "by origin:")
        print("  " + "  ".join(cell.rjust(width) if i else cell.ljust(width) for i, (cell, width)
                               in enumerate(zip(row, widths))))
    for report in imports:
        print(f"import {report.id}: {report.name} ({report.format}, {report.source_lang}-{report.target_lang}) "
              f"{report.state}: {report.added:,} added, {report.duplicates:,} duplicates, {report.skipped:,} skipped "
              f"of {report.units:,} units")
    return 0


# -------------------------------------------------------------------------------------------- review
def review_command(args: argparse.Namespace) -> int:
    given = bool(args.accept or args.reject or args.accept_all_pending)
    if args.accept_all_pending and (args.accept or args.reject):
        raise UserError("give --accept-all-pending alone, or --accept and --reject with entry ids")
    if set(args.accept) & set(args.reject):
        raise UserError(f"entry {min(set(args.accept) & set(args.reject))} is both in --accept and --reject")
    source_lang, target_lang = _pair(args)
    if (args.accept or args.reject) and (source_lang or target_lang):
        raise UserError("--pair, --src-lang and --tgt-lang choose the entries of --accept-all-pending or of an "
                        "interactive review; --accept and --reject take ids")
    if not given and not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise UserError("an interactive review needs a terminal; in a script give --accept ID..., --reject ID... "
                        "or --accept-all-pending")
    with _existing(args) as tm:
        if not given:
            return _interactive(tm, source_lang, target_lang)
        if args.accept_all_pending:
            count = 0
            for entry in _pending(tm, source_lang, target_lang, lambda: 0):
                tm.accept(entry.id)
                count += 1
            print(f"accepted {count:,} pending entries")
            return 0
        for entry_id in [*args.accept, *args.reject]:
            tm.get(entry_id)  # every id checked before the first decision: a typo changes nothing
        for entry_id in args.accept:
            tm.accept(entry_id)
        for entry_id in args.reject:
            tm.reject(entry_id)
    print(f"accepted {len(args.accept)}, rejected {len(args.reject)} entries")
    return 0


def _pending(tm: TranslationMemory, source_lang: str | None, target_lang: str | None,
             skipped: Callable[[], int]) -> Iterator[Entry]:
    """The pending entries, oldest first, read a page at a time while they are decided: a decided
    entry leaves the pending ones, so a page starts after the ``skipped()`` ones still pending."""
    last = 0
    while True:
        page = [entry for entry in tm.entries(status="pending", source_lang=source_lang, target_lang=target_lang,
                                              limit=_REVIEW_PAGE, offset=skipped())
                if entry.id > last]
        if not page:
            return
        for entry in page:
            last = entry.id
            yield entry


def _interactive(tm: TranslationMemory, source_lang: str | None, target_lang: str | None) -> int:
    """Show each pending entry; a key decides it (a accept, r reject, s skip, q quit)."""
    counts = {"accepted": 0, "rejected": 0, "skipped": 0}
    waiting = sum(c.get("pending", 0) for (s, t), c in tm.stats().counts.items()
                  if source_lang in (None, s) and target_lang in (None, t))
    if not waiting:
        print("no pending entries to review")
        return 0
    with _key_presses() as read_key:
        _decide(tm, _pending(tm, source_lang, target_lang, lambda: counts["skipped"]), waiting, counts, read_key)
    print(f"\naccepted {counts['accepted']}, rejected {counts['rejected']}, skipped {counts['skipped']}")
    return 0


def _decide(tm: TranslationMemory, pending: Iterator[Entry], waiting: int, counts: dict[str, int],
            read_key: Callable[[], str]) -> None:
    """Show each entry and decide it as the key pressed says, counting the decisions in ``counts``."""
    for number, entry in enumerate(pending, 1):
        who = f" from {entry.who}" if entry.who else ""
        print(f"\n[{number} of {waiting}] entry {entry.id}, {entry.source_lang}-{entry.target_lang}, "
              f"{entry.origin}{who}, {entry.created}")
        print(f"  source: {entry.source}")
        print(f"  target: {entry.target}")
        key = _ask("a accept, r reject, s skip, q quit: ", "arsq", read_key)
        if key == "q":
            return
        if key == "a":
            tm.accept(entry.id)
            counts["accepted"] += 1
        elif key == "r":
            tm.reject(entry.id)
            counts["rejected"] += 1
        else:
            counts["skipped"] += 1


def _ask(prompt: str, keys: str, read_key: Callable[[], str]) -> str:
    """One of ``keys``, as ``read_key`` reads it (a key press, or a line); end of input is ``q``."""
    while True:
        sys.stdout.write(prompt)
        sys.stdout.flush()
        key = read_key()
        if not key or key == "\x04":  # end of input, or Ctrl-D on a terminal in single-key mode
            print()
            return "q"
        key = key.strip().lower()[:1]
        print(key)
        if key in keys:
            return key


@contextlib.contextmanager
def _key_presses() -> Iterator[Callable[[], str]]:
    """A function that reads the next key press ("" at the end of input): the terminal is put in
    single-key mode without echo for the whole review (once, so a key typed ahead of its prompt is
    kept) and restored after; standard input that is no POSIX terminal is read a line at a time."""
    try:
        import termios
        import tty
    except ImportError:
        yield sys.stdin.readline
        return
    fd = sys.stdin.fileno()
    try:
        saved = termios.tcgetattr(fd)
    except termios.error:
        yield sys.stdin.readline
        return
    tty.setcbreak(fd, termios.TCSANOW)
    try:
        yield lambda: sys.stdin.read(1)
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)

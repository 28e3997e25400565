"""Reading parallel text: two line-aligned files, or one TSV file, plain or gzip; or two
line-aligned members of a tar archive (:func:`read_archive_parallel`, for corpora published as
``.tgz`` / ``.tar`` archives such as WMT's).

Everything that can go wrong with the input files raises :class:`CorpusError`, whose
message names the file(s), the 1-based line number where relevant, and what to do about it.

Each file is read in one go (``read`` + one ``decode`` + one ``split``), so a few hundred
thousand lines take well under a second. Lines are split on ``"\\n"`` only (not on the
exotic separators ``str.splitlines`` also honours, such as U+2028 or form feed, which would
silently shift the alignment between the two sides), and each side is stripped of
surrounding whitespace, which also removes the ``"\\r"`` of CRLF files. A UTF-8 byte-order
mark at the start of a file is dropped.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator

from transformer.errors import UserError

__all__ = ["CorpusError", "ReadStats", "read_archive_parallel", "read_parallel", "read_tsv", "read_lines"]

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"

PathLike = str | os.PathLike[str]


class CorpusError(UserError):
    """Bad input data: the message names the file(s), line numbers and the fix."""


@dataclass
class ReadStats:
    """What reading a parallel corpus did.

    Attributes:
        n_read: lines (= candidate pairs) read from the input; for two files, the line
            count of each side (they are equal, or reading fails).
        n_kept: pairs returned, ``n_read - n_empty_skipped``.
        n_empty_skipped: pairs skipped because at least one side was empty or whitespace-only.
        n_empty_src: skipped pairs whose source side was empty (a pair empty on both sides
            counts here and in ``n_empty_tgt``).
        n_empty_tgt: skipped pairs whose target side was empty.
        sources: the file(s) read, as given.
        gzipped: for each file in ``sources``, whether it was gzip-compressed.
    """

    n_read: int
    n_kept: int
    n_empty_skipped: int
    n_empty_src: int = 0
    n_empty_tgt: int = 0
    sources: tuple[str, ...] = field(default_factory=tuple)
    gzipped: tuple[bool, ...] = field(default_factory=tuple)


def _read_bytes(path: PathLike) -> tuple[bytes, bool]:
    """Return the (decompressed) contents of ``path`` and whether it was gzip.

    Compression is detected by the gzip magic bytes ``1f 8b``, not by the file name: a
    ``.gz`` file that is really plain text reads as plain text, and a gzip file without the
    suffix is decompressed.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise CorpusError(f"{p}: file not found (check the path; it is resolved against {Path.cwd()})") from None
    except IsADirectoryError:
        raise CorpusError(f"{p}: is a directory, expected a text file (one sentence per line)") from None
    except PermissionError:
        raise CorpusError(f"{p}: permission denied (make the file readable)") from None
    if raw[:2] != _GZIP_MAGIC:
        return raw, False
    try:
        return gzip.decompress(raw), True
    except (EOFError, OSError, zlib.error) as exc:
        raise CorpusError(
            f"{p}: starts with the gzip magic bytes but cannot be decompressed ({exc}); "
            "the file is truncated or corrupt, download or re-compress it"
        ) from None


def read_lines(path: PathLike) -> tuple[list[str], bool]:
    """Read ``path`` (plain or gzip, UTF-8) into a list of lines, and whether it was gzip.

    Lines are split on ``"\\n"``; a final newline does not start an extra line. Lines are
    returned without the ``"\\n"`` but otherwise unstripped (callers strip).

    Raises:
        CorpusError: missing/unreadable file, corrupt gzip, or invalid UTF-8 (with the
            1-based line number of the first bad byte).
    """
    data, gz = _read_bytes(path)
    return _decode_lines(data, str(Path(path))), gz


def _decode_lines(data: bytes, name: str) -> list[str]:
    """``data`` (UTF-8, an optional byte-order mark) split into lines on ``"\\n"``; ``name`` for errors."""
    if data.startswith(_UTF8_BOM):
        data = data[len(_UTF8_BOM) :]
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line_no = data.count(b"\n", 0, exc.start) + 1
        line_start = data.rfind(b"\n", 0, exc.start) + 1
        bad = data[exc.start : exc.end]
        raise CorpusError(
            f"{name}: line {line_no}: invalid UTF-8 (byte {bad!r} at column {exc.start - line_start + 1}, "
            f"{exc.reason}); re-encode the file as UTF-8, e.g. `iconv -f latin1 -t utf-8 IN > OUT`"
        ) from None
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()  # the final newline ends the last line; it does not start a new one
    return lines


def _empty_corpus_error(sources: list[str], n_read: int, n_empty: int) -> CorpusError:
    names = " and ".join(sources)
    if n_read == 0:
        return CorpusError(f"{names}: no lines at all (empty file); point to the data files, not placeholders")
    return CorpusError(
        f"{names}: no sentence pairs left: all {n_read} lines had an empty side ({n_empty} skipped); "
        "check that these are the right files"
    )


def read_parallel(src_path: PathLike, tgt_path: PathLike) -> tuple[list[tuple[str, str]], ReadStats]:
    """Read two line-aligned files (line i of one translates line i of the other).

    Each file may be plain text or gzip (detected by magic bytes) and must be UTF-8. Both
    sides are stripped of surrounding whitespace; a pair where either side is then empty is
    skipped and counted in the returned :class:`ReadStats`.

    Returns:
        ``(pairs, stats)`` with ``pairs`` a list of ``(source, target)`` strings, in file order.

    Raises:
        CorpusError: a file is missing or unreadable, is not valid UTF-8 (file and line
            named), the two files have different line counts (both files and counts named),
            or no pair is left.
    """
    src_lines, src_gz = read_lines(src_path)
    tgt_lines, tgt_gz = read_lines(tgt_path)
    if len(src_lines) != len(tgt_lines):
        raise CorpusError(
            f"line counts differ: {src_path} has {len(src_lines)} lines but {tgt_path} has {len(tgt_lines)}; "
            "the two files must be line-aligned translations of each other (same number of lines, "
            "trailing empty lines included); check that they belong together and were not truncated"
        )
    return _keep_nonempty(zip(src_lines, tgt_lines), n_read=len(src_lines),
                          sources=(str(src_path), str(tgt_path)), gzipped=(src_gz, tgt_gz))


def read_archive_parallel(
    archive: PathLike, src_member: str, tgt_member: str
) -> tuple[list[tuple[str, str]], ReadStats]:
    """Read two line-aligned members of the tar archive ``archive`` (``.tar``, ``.tgz``, ...).

    The archive is read once, as a stream, whatever its size; each of the two members may itself
    be gzip-compressed (detected by its magic bytes, as in :func:`read_parallel`). Member names
    match with or without a leading ``./``. Pairs are kept and counted as :func:`read_parallel`
    does; the sources are named ``ARCHIVE:MEMBER``.

    Raises:
        CorpusError: the archive is missing, truncated or corrupt; a member is missing (a few of
            the archive's members named); a member is not valid UTF-8; the two members have
            different line counts; or no pair is left.
    """
    path = Path(archive)
    wanted = {src_member.removeprefix("./"): None, tgt_member.removeprefix("./"): None}
    found: dict[str, tuple[list[str], bool]] = {}
    seen: list[str] = []
    try:
        with tarfile.open(path, "r|*") as tf:
            for info in tf:
                name = info.name.removeprefix("./")
                if name not in wanted or not info.isfile():
                    if len(seen) < 8:
                        seen.append(name)
                    continue
                src = tf.extractfile(info)
                assert src is not None  # a regular file
                with src:
                    data = src.read()
                if len(data) != info.size:
                    raise EOFError(f"member {name!r} ends after {len(data)} of its {info.size} bytes")
                gz = data[:2] == _GZIP_MAGIC
                if gz:
                    data = gzip.decompress(data)
                found[name] = (_decode_lines(data, f"{path}:{name}"), gz)
                if len(found) == len(wanted):
                    break
    except FileNotFoundError:
        raise CorpusError(f"{path}: file not found (check the path; it is resolved against {Path.cwd()})") from None
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise CorpusError(f"{path}: cannot read the archive ({exc}); it is truncated or corrupt: download it "
                          "again") from None
    missing = [m for m in wanted if m not in found]
    if missing and not seen and not found:
        raise CorpusError(f"{path}: cannot read the archive (no member in it could be read); it is truncated or "
                          "corrupt, or not a tar archive: download it again")
    if missing:
        raise CorpusError(f"{path}: the archive has no member {missing[0]!r} (its first members: {', '.join(seen)}); "
                          "is it the right archive?")
    (src_lines, src_gz), (tgt_lines, tgt_gz) = found[src_member.removeprefix("./")], found[tgt_member.removeprefix("./")]
    src_name, tgt_name = f"{path}:{src_member}", f"{path}:{tgt_member}"
    if len(src_lines) != len(tgt_lines):
        raise CorpusError(
            f"line counts differ: {src_name} has {len(src_lines)} lines but {tgt_name} has {len(tgt_lines)}; "
            "the two members must be line-aligned translations of each other: the archive is not the published one"
        )
    return _keep_nonempty(zip(src_lines, tgt_lines), n_read=len(src_lines), sources=(src_name, tgt_name),
                          gzipped=(src_gz, tgt_gz))


def read_tsv(path: PathLike, *, src_column: int = 0, tgt_column: int = 1) -> tuple[list[tuple[str, str]], ReadStats]:
    """Read sentence pairs from a tab-separated file (plain or gzip, UTF-8).

    Columns are 0-based; columns other than ``src_column`` and ``tgt_column`` are ignored.
    A line that is empty or whitespace-only, or whose chosen source or target field is
    empty after stripping, is skipped and counted. A non-blank line with too few columns is
    an error (it usually means the file is not tab-separated, or a field contains a newline).

    Returns:
        ``(pairs, stats)`` as for :func:`read_parallel`.

    Raises:
        UserError: bad column arguments (negative, or equal).
        CorpusError: missing/unreadable file, invalid UTF-8, a line with too few columns
            (line number and column count named), or no pair left.
    """
    if src_column < 0 or tgt_column < 0:
        raise UserError(f"columns are 0-based and non-negative, got src_column={src_column}, tgt_column={tgt_column}")
    if src_column == tgt_column:
        raise UserError(f"src_column and tgt_column must differ, both are {src_column}")
    lines, gz = read_lines(path)
    need = max(src_column, tgt_column) + 1

    def fields_of_each_line() -> Iterator[tuple[str, str]]:
        for i, line in enumerate(lines):
            fields = line.split("\t")
            if len(fields) < need:
                if not line.strip():
                    yield "", ""  # a blank line: skipped and counted like an empty pair
                    continue
                raise CorpusError(
                    f"{path}: line {i + 1}: found {len(fields)} tab-separated column(s), need at least {need} "
                    f"(src_column={src_column}, tgt_column={tgt_column}); fix or remove the line, "
                    "check that the file is tab- (not space- or comma-) separated, or pass the right columns"
                )
            yield fields[src_column], fields[tgt_column]

    return _keep_nonempty(fields_of_each_line(), n_read=len(lines), sources=(str(path),), gzipped=(gz,))


def _keep_nonempty(
    candidates: Iterable[tuple[str, str]], *, n_read: int, sources: tuple[str, ...], gzipped: tuple[bool, ...]
) -> tuple[list[tuple[str, str]], ReadStats]:
    """Strip both sides; keep pairs with two non-empty sides, count the others; error if none is left."""
    pairs: list[tuple[str, str]] = []
    n_empty_src = n_empty_tgt = n_skipped = 0
    for s, t in candidates:
        s, t = s.strip(), t.strip()
        if s and t:
            pairs.append((s, t))
        else:
            n_skipped += 1
            n_empty_src += not s
            n_empty_tgt += not t
    if not pairs:
        raise _empty_corpus_error(list(sources), n_read, n_skipped)
    stats = ReadStats(
        n_read=n_read, n_kept=len(pairs), n_empty_skipped=n_skipped, n_empty_src=n_empty_src,
        n_empty_tgt=n_empty_tgt, sources=sources, gzipped=gzipped,
    )
    return pairs, stats

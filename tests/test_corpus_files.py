"""Reading parallel corpora: plain/gzip files, TSV, and the error messages for bad input."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from work_helpers import python_lines

from transformer.corpus.files import CorpusError, ReadStats, read_lines, read_parallel, read_tsv


def write(path: Path, text: str, *, gz: bool = False) -> Path:
    data = text.encode("utf-8")
    path.write_bytes(gzip.compress(data) if gz else data)
    return path


def test_read_parallel_plain_strips_and_keeps_order(tmp_path: Path) -> None:
    src = write(tmp_path / "a.de", "Hallo Welt\r\n  Guten Tag  \nTschüss")  # CRLF, spaces, no final newline
    tgt = write(tmp_path / "a.en", "Hello world\nGood day\t\nBye\n")
    pairs, stats = read_parallel(src, tgt)
    assert pairs == [("Hallo Welt", "Hello world"), ("Guten Tag", "Good day"), ("Tschüss", "Bye")]
    assert stats == ReadStats(
        n_read=3, n_kept=3, n_empty_skipped=0, sources=(str(src), str(tgt)), gzipped=(False, False)
    )


def test_gzip_detected_by_magic_bytes_not_suffix(tmp_path: Path) -> None:
    src = write(tmp_path / "train.src", "eins\nzwei\n", gz=True)  # gzip without .gz suffix
    tgt = write(tmp_path / "train.tgt.gz", "one\ntwo\n")  # .gz suffix but plain text
    pairs, stats = read_parallel(src, tgt)
    assert pairs == [("eins", "one"), ("zwei", "two")]
    assert stats.gzipped == (True, False)


def test_utf8_bom_dropped_and_unicode_line_separators_do_not_split(tmp_path: Path) -> None:
    src = tmp_path / "s.txt"
    src.write_bytes(b"\xef\xbb\xbfa\xe2\x80\xa8b\nc\x0cd\n")  # BOM; U+2028 and form feed inside lines
    tgt = write(tmp_path / "t.txt", "x\ny\n")
    pairs, _ = read_parallel(src, tgt)
    assert pairs == [("a\u2028b", "x"), ("c\x0cd", "y")]


def test_mismatched_line_counts_names_both_files_and_counts(tmp_path: Path) -> None:
    src = write(tmp_path / "train.de", "a\nb\nc\n")
    tgt = write(tmp_path / "train.en", "x\ny\n")
    with pytest.raises(CorpusError) as err:
        read_parallel(src, tgt)
    msg = str(err.value)
    assert str(src) in msg and str(tgt) in msg
    assert "3" in msg and "2" in msg and "line-aligned" in msg


def test_empty_lines_skipped_and_counted(tmp_path: Path) -> None:
    src = write(tmp_path / "s", "a\n\nc\n   \ne\n")
    tgt = write(tmp_path / "t", "x\ny\n\n\nz\n")
    pairs, stats = read_parallel(src, tgt)
    assert pairs == [("a", "x"), ("e", "z")]
    assert (stats.n_read, stats.n_kept, stats.n_empty_skipped) == (5, 2, 3)
    assert (stats.n_empty_src, stats.n_empty_tgt) == (2, 2)


def test_invalid_utf8_names_file_and_line(tmp_path: Path) -> None:
    src = write(tmp_path / "s", "a\nb\nc\n")
    tgt = tmp_path / "t.latin1"
    tgt.write_bytes("x\ny\nCafé\n".encode("latin-1"))
    with pytest.raises(CorpusError, match=r"t\.latin1: line 3: invalid UTF-8"):
        read_parallel(src, tgt)


def test_invalid_utf8_inside_gzip_names_line(tmp_path: Path) -> None:
    path = tmp_path / "bad.gz"
    path.write_bytes(gzip.compress(b"ok\n\xff\xfe\n"))
    with pytest.raises(CorpusError, match=r"bad\.gz: line 2: invalid UTF-8"):
        read_lines(path)


def test_missing_file_named(tmp_path: Path) -> None:
    src = write(tmp_path / "s", "a\n")
    with pytest.raises(CorpusError, match=r"nope\.en: file not found"):
        read_parallel(src, tmp_path / "nope.en")


def test_corrupt_gzip_is_corpus_error(tmp_path: Path) -> None:
    path = tmp_path / "trunc.gz"
    path.write_bytes(gzip.compress(b"hello\n" * 100)[:20])
    with pytest.raises(CorpusError, match=r"trunc\.gz: .*gzip"):
        read_lines(path)


@pytest.mark.parametrize("src_text, tgt_text", [("", ""), ("\n \n", "x\ny\n")])
def test_empty_corpus_is_error(tmp_path: Path, src_text: str, tgt_text: str) -> None:
    src, tgt = write(tmp_path / "s", src_text), write(tmp_path / "t", tgt_text)
    with pytest.raises(CorpusError, match="no"):
        read_parallel(src, tgt)


def test_tsv_pairs_extra_columns_and_gzip(tmp_path: Path) -> None:
    text = "Hallo\tHello\tsrc=1\n\n Welt \t world\t\t\nleer\t\nA\tB\n"
    for gz in (False, True):
        path = write(tmp_path / f"d{gz}.tsv", text, gz=gz)
        pairs, stats = read_tsv(path)
        assert pairs == [("Hallo", "Hello"), ("Welt", "world"), ("A", "B")]
        assert (stats.n_read, stats.n_kept, stats.n_empty_skipped, stats.gzipped) == (5, 3, 2, (gz,))
    pairs, _ = read_tsv(path, src_column=1, tgt_column=0)
    assert pairs[0] == ("Hello", "Hallo")


def test_tsv_too_few_columns_names_line(tmp_path: Path) -> None:
    path = write(tmp_path / "d.tsv", "a\tb\nc\td\nno tab here\n")
    with pytest.raises(CorpusError, match=r"d\.tsv: line 3: found 1 tab-separated column"):
        read_tsv(path)
    with pytest.raises(CorpusError, match=r"line 1: found 2 .* need at least 3"):
        read_tsv(path, tgt_column=2)
    with pytest.raises(ValueError):
        read_tsv(path, src_column=1, tgt_column=1)


def test_reading_takes_a_few_python_steps_per_line(tmp_path: Path) -> None:
    """Each file is read, decoded and split in one go; what runs line by line in Python is only the
    stripping and keeping of each pair. Counted in executed Python lines, not seconds, so a loaded
    machine cannot fail it; a reader that decodes or splits line by line in Python runs more."""
    n = 50_000
    src = write(tmp_path / "s.gz", "".join(f"Das ist Satz Nummer {i} , ein wenig länger .\n" for i in range(n)), gz=True)
    tgt = write(tmp_path / "t", "".join(f"This is sentence number {i} , a bit longer .\n" for i in range(n)))
    lines, (pairs, stats) = python_lines(lambda: read_parallel(src, tgt))
    assert stats.n_kept == n and pairs[-1][1].startswith(f"This is sentence number {n - 1} ")
    assert lines <= 6 * n, f"reading {n} line pairs ran {lines / n:.1f} lines of Python per pair"

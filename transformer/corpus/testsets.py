"""Standard test sets by their sacreBLEU names: ``wmt14/full`` en-de is newstest2014, and so on.

:func:`sacrebleu_pairs` returns the source and reference sentences of a sacreBLEU test set for one
language pair, the very text ``sacrebleu -t NAME -l SRC-TGT --echo src`` / ``--echo ref`` print.
It reads sacreBLEU's own cache (``$SACREBLEU``, default ``~/.sacrebleu``), so a copy of that
directory is all an offline machine needs:

1. ``<cache>/<name>/<name_>.<src>-<tgt>.src`` and ``.ref`` (``name_`` is the name with ``/`` as
   ``_``), the plain text sacreBLEU writes, are read as they are;
2. else the test set's raw archive (``<cache>/<name>/raw/<name_>.<archive>``, as sacreBLEU keeps
   it) is checked against sacreBLEU's md5, unpacked there if needed, and turned into those text
   files by sacreBLEU's own code;
3. else the archive is downloaded from sacreBLEU's address into ``raw/`` (streamed to a
   temporary file, its md5 checked, then renamed into place) and step 2 follows.

Text files are written under temporary names and renamed into place, so an interrupted run leaves
nothing that a later one would read as a test set. Every failure is a :class:`CorpusError` of one
line naming the test set, the cache directory and the fix.
"""

from __future__ import annotations

import copy
import difflib
import hashlib
import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path

from transformer.corpus.files import CorpusError, read_lines

__all__ = ["SACREBLEU_ENV", "check_test_set", "sacrebleu_cache_dir", "sacrebleu_pairs"]

SACREBLEU_ENV = "SACREBLEU"
"""sacreBLEU's environment variable naming its cache directory (default ``~/.sacrebleu``)."""


def sacrebleu_cache_dir() -> Path:
    """``$SACREBLEU``, else ``~/.sacrebleu``: where sacreBLEU keeps its test sets (read at each call)."""
    env = os.environ.get(SACREBLEU_ENV)
    return Path(env).expanduser() if env else Path.home() / ".sacrebleu"


def _dataset(name: str, src: str, tgt: str):  # -> sacrebleu.dataset.base.Dataset
    from sacrebleu.dataset import DATASETS

    if name not in DATASETS:
        close = difflib.get_close_matches(name, list(DATASETS), n=6, cutoff=0.5) or ["wmt13", "wmt14/full"]
        raise CorpusError(f"unknown sacreBLEU test set {name!r}; did you mean {', '.join(close)}? "
                          "(`sacrebleu --list` lists them all)")
    dataset = DATASETS[name]
    pair = f"{src}-{tgt}"
    if pair not in dataset.langpairs:
        raise CorpusError(f"sacreBLEU test set {name!r} has no language pair {pair}; it has "
                          f"{', '.join(sorted(dataset.langpairs))}")
    return dataset


def check_test_set(name: str, src: str, tgt: str) -> None:
    """Raise :class:`CorpusError` unless sacreBLEU knows test set ``name`` for ``src``-``tgt``."""
    _dataset(name, src, tgt)


def _text_paths(dataset, root: Path, name: str, pair: str) -> tuple[Path, Path]:
    """Where sacreBLEU keeps the plain text of the source and of the first reference."""
    fields = dataset.fieldnames(pair)
    ref = next(f for f in fields if f.startswith("ref")).replace(":", "-")
    stem = root / name / f"{name.replace('/', '_')}.{pair}"
    return Path(f"{stem}.src"), Path(f"{stem}.{ref}")


def _md5(path: Path) -> str:
    h = hashlib.md5()  # noqa: S324 (sacreBLEU publishes md5 digests; this is an integrity check)
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _unpack(archive: Path, raw: Path, label: str) -> None:
    """Unpack ``archive`` into ``raw`` (members only inside it), through a temporary directory."""
    tmp = Path(tempfile.mkdtemp(prefix=".unpack.", dir=raw))
    try:
        try:
            with tarfile.open(archive) as tf:
                tf.extractall(tmp, filter="data")
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise CorpusError(f"{label}: cannot unpack {archive} ({exc}); delete it and try again") from None
        for entry in tmp.iterdir():
            if not (raw / entry.name).exists():
                os.replace(entry, raw / entry.name)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _download(url: str, dest: Path, md5: str | None, label: str, hint: str, timeout: float) -> None:
    """Stream ``url`` into a temporary file beside ``dest``, check its md5, rename it into place."""
    from transformer.corpus.download import _open  # the registry's opener: one-line network errors

    fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
    tmp = Path(name)
    try:
        h = hashlib.md5()  # noqa: S324
        with os.fdopen(fd, "wb") as out, _open(url, timeout, hint) as resp:
            try:
                for chunk in iter(lambda: resp.read(1 << 16), b""):
                    out.write(chunk)
                    h.update(chunk)
            except OSError as exc:
                raise CorpusError(f"{label}: download of {url} failed ({exc}); {hint}") from None
        if md5 is not None and h.hexdigest() != md5:
            raise CorpusError(f"{label}: download of {url}: md5 mismatch: expected {md5}, got {h.hexdigest()}; "
                              f"nothing was saved; {hint}")
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    finally:
        tmp.unlink(missing_ok=True)


def sacrebleu_pairs(
    name: str, *, src: str, tgt: str, cache_dir: str | os.PathLike[str] | None = None, download: bool = True,
    timeout: float = 60,
) -> list[tuple[str, str]]:
    """The ``(source, reference)`` pairs of sacreBLEU test set ``name`` for ``src``-``tgt``.

    Args:
        name: a sacreBLEU test set, e.g. ``wmt14/full`` (newstest2014 as the paper scored it,
            3,003 sentences for en-de), ``wmt14`` (its filtered version, 2,737), ``wmt13``
            (newstest2013, the paper's development set).
        src, tgt: the languages, in the direction of translation.
        cache_dir: sacreBLEU's cache layout (default :func:`sacrebleu_cache_dir`).
        download: whether the raw archive may be downloaded when the cache lacks it.
        timeout: seconds to wait on the network.

    The first reference is used where a test set has several.

    Raises:
        CorpusError: an unknown test set or language pair (the known ones named); a test set
            neither in the cache nor downloadable (one line: the cache directory and how to fill
            it); an archive failing sacreBLEU's md5; source and reference of different lengths.
    """
    dataset = _dataset(name, src, tgt)
    pair = f"{src}-{tgt}"
    root = Path(cache_dir).expanduser() if cache_dir is not None else sacrebleu_cache_dir()
    label = f"sacreBLEU test set {name} {pair}"
    src_path, ref_path = _text_paths(dataset, root, name, pair)
    if not (src_path.is_file() and ref_path.is_file()):
        _prepare(dataset, root, name, pair, label, download=download, timeout=timeout)
    sources, _ = read_lines(src_path)
    references, _ = read_lines(ref_path)
    if len(sources) != len(references) or not sources:
        raise CorpusError(f"{label}: {src_path} has {len(sources)} lines but {ref_path} has {len(references)}; "
                          f"delete {root / name} and run again")
    return [(s.strip(), r.strip()) for s, r in zip(sources, references)]


def _prepare(dataset, root: Path, name: str, pair: str, label: str, *, download: bool, timeout: float) -> None:
    """Make the text files of ``pair`` in ``root/name`` from the raw archive(s), downloading them if allowed."""
    outdir, raw = root / name, root / name / "raw"
    hint = (f"without network access, copy sacreBLEU's cache from a machine that has it (`sacrebleu -t {name} "
            f"-l {pair} --echo src` fills ~/.sacrebleu/{name}) to {root}/{name}, or set ${SACREBLEU_ENV} to such a copy")
    try:
        raw.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise CorpusError(f"{label}: cannot create {raw} ({exc.strerror or exc}); set ${SACREBLEU_ENV} to a "
                          "writable directory") from None
    md5s = dataset.md5 or [None] * len(dataset.data)
    needed = [raw / f for f in dataset.langpairs[pair]]
    for url, md5 in zip(dataset.data, md5s):
        if all(p.exists() for p in needed):
            break  # already unpacked: the archive is not needed
        archive = raw / dataset._get_tarball_filename(url)
        if not archive.is_file():
            if not download:
                raise CorpusError(f"{label} is not in {root} (no {archive.name} in {raw}); {hint}")
            _download(url, archive, md5, label, hint, timeout)
        elif md5 is not None and _md5(archive) != md5:
            raise CorpusError(f"{label}: {archive}: md5 mismatch: expected {md5}, got {_md5(archive)}; the file is "
                              f"corrupt, truncated or another version: delete it ({hint})")
        if tarfile.is_tarfile(archive):
            _unpack(archive, raw, label)
    # sacreBLEU's own conversion (SGML, XML, TSV, ...) into a temporary directory, then renamed into place.
    work = Path(tempfile.mkdtemp(prefix=".text.", dir=outdir))
    try:
        local = copy.copy(dataset)
        local._outdir, local._rawdir = str(work), str(raw)
        local.maybe_download = lambda: None  # the raw files are in place: nothing to fetch
        try:
            local.process_to_text(pair)
        except (OSError, ValueError, KeyError, IndexError) as exc:
            raise CorpusError(f"{label}: sacreBLEU could not read its files in {raw} ({exc}); delete {outdir} "
                              "and try again") from None
        for produced in work.iterdir():
            os.replace(produced, outdir / produced.name)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    src_path, ref_path = _text_paths(dataset, root, name, pair)
    if not (src_path.is_file() and ref_path.is_file()):
        raise CorpusError(f"{label}: sacreBLEU made no {src_path.name} / {ref_path.name} from {raw}; delete {outdir} "
                          "and try again")

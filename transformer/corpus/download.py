"""Verified downloads: stream to a temporary file beside the target, check sha256, then rename.

A file only ever appears under its final name after its sha256 has been checked: the bytes are
streamed into a temporary ``.<name>.*.part`` file in the destination directory (so the final
:func:`os.replace` is an atomic rename on the same file system), hashed on the way, compared with
the expected digest, and only then renamed into place. On any failure (network error, truncated
body, wrong bytes, bad archive, Ctrl-C) the temporary files are removed and a :class:`CorpusError`
is raised, so a later run starts from a clean state.

A download may be an archive of which one member is wanted: a zip, or a tar (``.tar``,
``.tgz``, ``.tar.gz``, ``.tar.bz2``, ``.tar.xz``; recognised by its contents, not its name). The
member is streamed out of the verified archive into a second temporary file, hashed on the way,
checked against its own digest and only then renamed into place; the archive is not kept.
"""

from __future__ import annotations

import hashlib
import http.client
import os
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
import zipfile
import zlib
from pathlib import Path
from typing import BinaryIO

from transformer.corpus.files import CorpusError

__all__ = ["download_verified", "file_sha256", "verify_file"]

_CHUNK = 1 << 16
_USER_AGENT = "transformer-corpus/0.1 (python urllib)"

# (resolved path, size, mtime_ns) -> sha256 hex: each file is hashed once per process, not on every fetch.
_HASHED: dict[tuple[str, int, int], str] = {}


def _key(path: Path) -> tuple[str, int, int]:
    st = path.stat()
    return (str(path.resolve()), st.st_size, st.st_mtime_ns)


def file_sha256(path: str | os.PathLike[str]) -> str:
    """The sha256 hex digest of ``path``, memoised per process on (path, size, mtime)."""
    p = Path(path)
    key = _key(p)
    digest = _HASHED.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(p, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = _HASHED[key] = h.hexdigest()
    return digest


def verify_file(path: str | os.PathLike[str], expected: str, *, fix: str = "replace it with the original file") -> None:
    """Check that ``path`` has sha256 ``expected``.

    Raises:
        CorpusError: naming the file and both digests, and ending with ``fix``.
    """
    got = file_sha256(path)
    if got != expected:
        raise CorpusError(
            f"{path}: sha256 mismatch: expected {expected}, got {got}; the file is corrupt, truncated "
            f"or a different version: {fix}"
        )


def _open(url: str, timeout: float, hint: str) -> http.client.HTTPResponse:
    request = urllib.request.Request(url, headers={"User-Agent": _USER_AGENT})
    try:
        return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 (URLs come from the registry)
    except urllib.error.HTTPError as exc:
        exc.close()
        raise CorpusError(f"could not download {url}: HTTP {exc.code} {exc.reason}; {hint}") from None
    except (OSError, http.client.HTTPException, ValueError) as exc:  # URLError, timeouts, refused, bad URL
        reason = getattr(exc, "reason", None) or exc
        raise CorpusError(f"could not download {url}: {reason}; {hint}") from None


def _stream(url: str, out: BinaryIO, *, label: str, timeout: float, progress: bool, hint: str) -> tuple[str, int]:
    """Copy the body of ``url`` into ``out``; return (sha256 hex, byte count).

    Raises:
        CorpusError: the connection fails, or the body is shorter than its Content-Length.
    """
    h = hashlib.sha256()
    n = 0
    with _open(url, timeout, hint) as resp:
        length = resp.headers.get("Content-Length", "")
        total = int(length) if length.strip().isdigit() else None
        bar = None
        if progress and sys.stderr.isatty():
            from tqdm import tqdm

            bar = tqdm(total=total, unit="B", unit_scale=True, unit_divisor=1024, desc=label, file=sys.stderr, leave=False)
        try:
            while True:
                try:
                    chunk = resp.read(_CHUNK)
                except http.client.IncompleteRead as exc:
                    chunk = exc.partial
                    out.write(chunk)
                    h.update(chunk)
                    n += len(chunk)
                    break
                except (OSError, http.client.HTTPException) as exc:
                    size = f"of {total} " if total is not None else ""
                    raise CorpusError(f"download of {url} failed after {n} {size}bytes ({exc}); {hint}") from None
                if not chunk:
                    break
                out.write(chunk)
                h.update(chunk)
                n += len(chunk)
                if bar is not None:
                    bar.update(len(chunk))
        finally:
            if bar is not None:
                bar.close()
    if total is not None and n < total:
        raise CorpusError(f"download of {url} was cut short: got {n} of {total} bytes; try again, or {hint}")
    return h.hexdigest(), n


def _copy_hashed(src: BinaryIO, out: BinaryIO) -> str:
    h = hashlib.sha256()
    for chunk in iter(lambda: src.read(1 << 20), b""):
        out.write(chunk)
        h.update(chunk)
    return h.hexdigest()


def _tar_name(name: str) -> str:
    """A tar member's name as listed, without a leading ``./`` (some archivers write one)."""
    return name[2:] if name.startswith("./") else name


def _extract(archive: Path, member: str, out: BinaryIO, url: str) -> str:
    """Copy ``member`` of the zip or tar archive at ``archive`` into ``out``; return its sha256 hex.

    A tar is read as a stream (one pass, any compression tarfile knows), so a multi-gigabyte
    archive is never seeked through or held in memory.
    """
    if zipfile.is_zipfile(archive):
        try:
            with zipfile.ZipFile(archive) as zf:
                try:
                    src = zf.open(member)
                except KeyError:
                    names = ", ".join(zf.namelist()[:10])
                    raise CorpusError(f"{url}: the zip has no member {member!r} (it has: {names})") from None
                with src:
                    return _copy_hashed(src, out)
        except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError) as exc:
            raise CorpusError(f"{url}: cannot extract {member!r} from the zip ({exc})") from None
    seen: list[str] = []
    try:
        with tarfile.open(archive, "r|*") as tf:
            for info in tf:
                name = _tar_name(info.name)
                if name != _tar_name(member):
                    if len(seen) < 10:
                        seen.append(name)
                    continue
                src = tf.extractfile(info)
                if src is None:
                    raise CorpusError(f"{url}: member {member!r} of the tar is not a regular file")
                with src:
                    return _copy_hashed(src, out)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
        raise CorpusError(f"{url}: cannot extract {member!r}: not a zip or tar archive, or a truncated or corrupt "
                          f"one ({exc})") from None
    raise CorpusError(f"{url}: the archive has no member {member!r} (it has: {', '.join(seen)})")


def download_verified(
    url: str,
    dest: Path,
    sha256: str,
    *,
    member: str | None = None,
    member_sha256: str | None = None,
    progress: bool = True,
    timeout: float = 60,
    hint: str = "check the network connection",
) -> Path:
    """Download ``url`` to ``dest``, verified; with ``member``, extract that archive member to ``dest``.

    The download is streamed into a temporary file in ``dest``'s directory and its sha256
    compared with ``sha256``. Without ``member`` that file is renamed to ``dest``. With
    ``member`` the download is a zip or tar archive: ``member`` is extracted into a second temporary
    file, its sha256 compared with ``member_sha256``, and that file is renamed to ``dest`` (the
    archive itself is not kept). ``progress`` shows a tqdm bar when stderr is a terminal, and
    one line per verified file otherwise.

    Returns:
        ``dest``.

    Raises:
        CorpusError: network error (URL named, ``hint`` appended), a body shorter than its
            Content-Length ("was cut short: got N of M bytes"), a sha256 mismatch ("expected
            ... got ..."), or a bad archive / missing member. No temporary file is left behind and
            ``dest`` is not created.
    """
    if member is not None and member_sha256 is None:
        raise ValueError(f"member {member!r} given without member_sha256: extracted files must be verified too")
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    temps: list[Path] = []

    def new_temp() -> tuple[BinaryIO, Path]:
        fd, name = tempfile.mkstemp(prefix=f".{dest.name}.", suffix=".part", dir=dest.parent)
        temps.append(Path(name))
        return os.fdopen(fd, "wb"), Path(name)

    try:
        out, tmp = new_temp()
        with out:
            got, n = _stream(url, out, label=dest.name, timeout=timeout, progress=progress, hint=hint)
        if got != sha256:
            raise CorpusError(
                f"download of {url}: sha256 mismatch: expected {sha256}, got {got} ({n} bytes); the server "
                f"sent different bytes (a changed, corrupted or intercepted file), nothing was saved; {hint}"
            )
        final = tmp
        if member is not None:
            out, final = new_temp()
            with out:
                got_member = _extract(tmp, member, out, url)
            if got_member != member_sha256:
                raise CorpusError(
                    f"{url}: member {member!r}: sha256 mismatch: expected {member_sha256}, got {got_member}; "
                    "nothing was saved"
                )
        os.chmod(final, 0o644)  # mkstemp creates 0600; a cache file is ordinary data
        os.replace(final, dest)
        temps.remove(final)
    finally:
        for path in temps:
            path.unlink(missing_ok=True)
    if progress:
        what = f"{member!r} of " if member else ""
        print(f"{dest.name}: {what}{url} ({n:,} bytes), sha256 verified -> {dest}", file=sys.stderr, flush=True)
    return dest

"""Output paths for the visualisations: clear errors that name the path, atomic text writes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

from transformer.run_files import replacing


def _unwritable(path: Path, err: OSError) -> OSError:
    """An error of a type the CLI reports cleanly (PermissionError / NotADirectoryError), naming ``path``."""
    reason = err.strerror or str(err)
    if isinstance(err, (NotADirectoryError, FileExistsError)) or err.errno in (errno.ENOTDIR, errno.EEXIST):
        return NotADirectoryError(f"cannot write to {path}: a parent path is a file, not a directory ({reason})")
    return PermissionError(f"cannot write to {path}: {reason}")


def writable_dir(path: str | os.PathLike[str]) -> Path:
    """Create directory ``path`` (and parents) if needed and check that files can be written in it.

    Raises ``NotADirectoryError`` when ``path`` or a parent is a file, ``PermissionError`` when the
    directory cannot be created or written; both messages name the path.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise NotADirectoryError(f"cannot write to {path}: it exists and is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _unwritable(path, err) from None
    if not os.access(path, os.W_OK | os.X_OK):
        raise PermissionError(f"cannot write to {path}: permission denied")
    return path


def writable_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as a Path after making sure its directory exists and is writable (see :func:`writable_dir`)."""
    path = Path(path)
    if path.is_dir():
        raise IsADirectoryError(f"cannot write to {path}: it is a directory; give a file name")
    writable_dir(path.parent if str(path.parent) else Path("."))
    return path


def write_text_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write ``text`` (UTF-8) to ``path`` via a temporary file and ``os.replace``; returns the path."""
    path = writable_file(path)
    with replacing(path) as tmp:
        try:
            f = open(tmp, "x", encoding="utf-8")
        except OSError as err:
            raise _unwritable(path, err) from None
        with f:
            f.write(text)
    return path

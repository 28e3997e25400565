"""One writer per run directory, and one-line errors when the run directory cannot be written.

A training run (:class:`transformer.training.trainer.Trainer`) and ``transformer average`` writing
into a run directory hold :class:`RunLock`: an exclusive ``flock`` on ``RUN_DIR/.lock``, taken
before anything in the directory is read or written and kept until the run ends. A second writer
is refused at once with :class:`RunLockedError`, whose one-line message names the holder (pid,
host, start time, command: the holder writes them into the lock file after taking the lock).
The kernel releases the lock when its process dies, so a run killed with SIGKILL never leaves a
stale lock behind; the next writer takes it over. Readers (``translate``, ``evaluate``, ``serve``,
``Translator.from_run_dir``) never take it: they read the model files, which are replaced
atomically.

:func:`storage_errors` turns the file system's refusals while writing a run (a read-only file
system, a full disk, a quota, an I/O error; from Python or from the safetensors writer) into
:class:`RunStorageError`, one line that names the problem and the fix (the command line exits
with status 3 for it: an environment failure, not a mistake in the command).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import socket
import time
import weakref
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator

from transformer.errors import UserError
from transformer.run.layout import LOCK_FILE

try:
    import fcntl
except ImportError:  # not a POSIX system: no lock (the rest works as before)
    fcntl = None  # type: ignore[assignment]


class RunLockedError(UserError):
    """Another process is writing to the run directory (the message names it)."""


class RunStorageError(OSError):
    """The run directory could not be written (read-only, full, ...); the message names the fix."""

    def __init__(self, message: str, number: int | None = None) -> None:
        super().__init__(message)
        self.errno = number


class RunLock:
    """An exclusive, non-blocking OS lock on ``run_dir/.lock`` (created, with ``run_dir``, if needed).

    ``acquire()`` takes it or raises :class:`RunLockedError` at once; ``release()`` (or leaving the
    ``with`` block, or the process ending in any way) gives it back. The lock file is removed on
    release; a lock file left by a killed process is taken over, since its lock died with it.
    """

    def __init__(self, run_dir: str | os.PathLike[str], *, command: str = "train") -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / LOCK_FILE
        self.command = command
        self._fd: int | None = None
        self._finalizer: weakref.finalize | None = None
        self._created: list[Path] = []  # the directories acquire() made, deepest first

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
        if self._fd is not None or fcntl is None:
            return self
        for attempt in range(100):
            self._make_run_dir()
            try:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
            except FileNotFoundError:  # a writer that had just made the directory gave up and removed it
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = _read_holder(fd)
                os.close(fd)
                raise RunLockedError(
                    f"{self.run_dir} is in use by another run ({holder}); a run directory has one writer at a "
                    "time: wait for that run to finish (or stop it), or choose another --run-dir") from None
            except BaseException:
                os.close(fd)
                raise
            # Between our open and our flock the previous holder may have released the lock and removed
            # the file (and another process made a new one): a lock on a removed file guards nothing,
            # so try again on the file that is there now.
            try:
                mine = os.fstat(fd)
                current = os.stat(self.path)
                if (mine.st_ino, mine.st_dev) == (current.st_ino, current.st_dev):
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        else:
            raise OSError(errno.EAGAIN, f"could not lock {self.path}: it keeps being replaced")
        self._fd = fd
        self._finalizer = weakref.finalize(self, os.close, fd)  # closing the file releases the lock
        try:
            _write_holder(fd, self.command)
        except OSError:  # the holder's details are a courtesy; a full disk must not stop the lock
            pass
        return self

    def release(self) -> None:
        """Give the lock back; directories that ``acquire`` made and that stayed empty are removed, so a
        run refused before writing anything leaves no trace."""
        if self._fd is None:
            return
        with contextlib.suppress(OSError):
            self.path.unlink()  # still holding the lock: no one else can be using this file
        assert self._finalizer is not None
        self._finalizer()  # closes the file, which releases the lock
        self._fd = self._finalizer = None
        for directory in self._created:
            try:
                directory.rmdir()  # only if empty
            except OSError:
                break
        self._created = []

    def _make_run_dir(self) -> None:
        if self.run_dir.exists() and not self.run_dir.is_dir():
            raise NotADirectoryError(f"{self.run_dir} is a file, not a directory; choose another --run-dir")
        missing = [d for d in (self.run_dir, *self.run_dir.parents) if not d.exists()]
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._created = self._created or missing  # deepest first

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def _write_holder(fd: int, command: str) -> None:
    info = {"pid": os.getpid(), "host": socket.gethostname(), "command": f"transformer {command}",
            "started": datetime.now(timezone.utc).astimezone().isoformat(timespec="seconds")}
    data = (json.dumps(info) + "\n").encode("utf-8")
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_holder(fd: int, wait: float = 1.0) -> str:
    """The holder's details from the lock file, in words; it writes them just after taking the lock."""
    deadline = time.monotonic() + wait
    while True:
        try:
            info = json.loads(os.pread(fd, 4096, 0).decode("utf-8"))
            return (f"pid {info['pid']} on host {info['host']}, started {info['started']}, "
                    f"{info.get('command', 'transformer train')}")
        except (OSError, ValueError, KeyError, TypeError):
            if time.monotonic() > deadline:
                return "a process that has not yet said who it is"
            time.sleep(0.05)


# ------------------------------------------------------------------------------------------------
# The file system's refusals, in one line.
_FIXES = {
    errno.EROFS: "the file system is read-only; choose a --run-dir on a writable disk "
                 "(to continue a run, copy its directory there first)",
    errno.ENOSPC: "the disk is full; free some space (old runs; fewer checkpoints with train.keep_last) or use "
                  "another disk, then run the same command again (training resumes from its last checkpoint)",
    errno.EDQUOT: "the disk quota is exhausted; free some space or use another disk, then run the same command "
                  "again (training resumes from its last checkpoint)",
    errno.EACCES: "permission denied; choose a --run-dir you may write to",
    errno.EPERM: "operation not permitted; choose a --run-dir you may write to",
    errno.EIO: "input/output error; check the disk or use another one, then run the same command again",
}
_RUST_OS_ERROR = re.compile(r"(?:os error |code: )(\d+)")  # safetensors: "Os { code: 28, ... }" / "(os error 28)"


def os_error_number(err: BaseException) -> int | None:
    """The errno of an ``OSError``, or of a safetensors error that wraps one (it is not an OSError)."""
    if isinstance(err, OSError):
        return err.errno
    if type(err).__name__ == "SafetensorError" and (m := _RUST_OS_ERROR.search(str(err))):
        return int(m.group(1))
    return None


def storage_message(err: BaseException, run_dir: str | os.PathLike[str]) -> str | None:
    """One line naming the problem and the fix, for a file-system error we know on a path in (or
    above) ``run_dir``; None for others (reading a data file that is not there is no run-directory
    matter)."""
    number = os_error_number(err)
    if number not in _FIXES:
        return None
    where = getattr(err, "filename", None)
    if where is not None and not _related(Path(os.fsdecode(where)), Path(run_dir)):
        return None
    return f"cannot write to {where or run_dir}: {_FIXES[number]}"


def _related(path: Path, run_dir: Path) -> bool:
    """Whether ``path`` is ``run_dir``, inside it, or one of the directories above it."""
    path, run_dir = path.absolute(), run_dir.absolute()
    return path == run_dir or run_dir in path.parents or path in run_dir.parents


@contextlib.contextmanager
def storage_errors(run_dir: str | os.PathLike[str]) -> Iterator[None]:
    """Re-raise the file system's refusals of writes to ``run_dir`` inside the block as
    :class:`RunStorageError` (one line naming the fix); other errors pass unchanged."""
    try:
        yield
    except RunStorageError:
        raise
    except Exception as err:  # OSError, or safetensors' SafetensorError wrapping one
        message = storage_message(err, run_dir)
        if message is None:
            raise
        raise RunStorageError(message, os_error_number(err)) from err


def remove_stale_files(run_dir: str | os.PathLike[str], names: Iterable[str]) -> list[Path]:
    """Delete the work files that an atomic write of one of ``names`` leaves when its process is
    killed before the rename (``.NAME.tmp-PID[...]``, ``.NAME.XXXXXXXX.tmp``). Only call it while
    holding the run's lock: then no one else can be writing them. Returns what was removed."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return []
    pattern = re.compile(r"^\.(?:%s)(?:\.tmp-\d+.*|\.[^.]+\.tmp)$" % "|".join(re.escape(n) for n in names))
    removed = []
    for path in run_dir.iterdir():
        if pattern.match(path.name) and path.is_file():
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
                removed.append(path)
    return removed

"""Reading the files of a run or model directory without trusting them, and writing files whole.

A run directory may come from anyone (a download, a shared disk), so its small files are read
only when they are regular files under a size cap: a ``config.json`` that is a link to
``/dev/zero`` would otherwise be read until memory runs out, and a FIFO would block forever.
JSON is parsed with its nesting bounded, and a safetensors file's header (tensor names, dtypes
and shapes) is read without reading any tensor, so the sizes a config implies can be checked
against the weights before anything is allocated. Every refusal is a :class:`RunFileError`
(a ``ValueError``) whose one-line message names the file and the problem.

Every file the package writes for others to read (a run's files, a tokenizer, a page, an output
file, a cache entry) is written whole: into a work file beside it, then renamed onto it in one
step (:func:`replacing`, :func:`write_atomic`), so a reader sees the old file or the new one,
never half of one, and a crash leaves the old one. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import stat
import struct
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from transformer.errors import UserError

MAX_JSON_BYTES = 16 << 20  # config.json, run_config.json, trainer_state.json, .resume files: kilobytes in practice
MAX_TOKENIZER_BYTES = 256 << 20  # a tokenizer's JSON (a 250,000-piece vocabulary is about 20 MB)
MAX_TEXT_BYTES = 256 << 20  # metrics.jsonl, alignments.jsonl
MAX_HEADER_BYTES = 16 << 20  # a safetensors header: about 100 bytes per tensor
MAX_DEPTH = 64  # nesting of JSON arrays and objects; the run's own files nest at most 6 deep
# safetensors dtype names -> bytes per element
SAFETENSORS_DTYPES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1, "I64": 8, "I32": 4,
                      "I16": 2, "I8": 1, "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1}
FLOAT_DTYPES = ("F64", "F32", "F16", "BF16")
UNREADABLE = "is not a readable safetensors file (truncated or corrupt?)"


class RunFileError(UserError):
    """A file of a run or model directory that cannot be read safely; the message names it."""


@contextmanager
def open_regular(path: Path, *, missing: str) -> Iterator[tuple[BinaryIO, os.stat_result]]:
    """``path`` opened for reading with its ``fstat``, after checking that it is a regular file (a
    symbolic link to one is fine). FileNotFoundError(``missing``) when it does not exist."""
    try:
        # O_NONBLOCK: a FIFO swapped in after a check must not block the open
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise FileNotFoundError(missing) from None
    except OSError as err:
        raise RunFileError(f"{path} cannot be opened: {err.strerror}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise RunFileError(f"{path} is not a regular file ({_kind(info.st_mode)}); refusing to read it")
        yield f, info


def read_bytes(path: str | os.PathLike[str], *, limit: int) -> bytes:
    """The contents of ``path``, which must be a regular file (a symbolic link to one is fine) of at
    most ``limit`` bytes. FileNotFoundError when it does not exist; RunFileError otherwise."""
    path = Path(path)
    with open_regular(path, missing=f"{path} not found") as (f, info):
        if info.st_size > limit:
            raise RunFileError(f"{path} is {info.st_size:,} bytes, more than the {limit:,} such a file may have")
        data = f.read(limit + 1)
    if len(data) > limit:  # the file grew while being read
        raise RunFileError(f"{path} is more than the {limit:,} bytes such a file may have")
    return data


def read_text(path: str | os.PathLike[str], *, limit: int = MAX_TEXT_BYTES, errors: str = "strict") -> str:
    """The UTF-8 text of ``path`` (see :func:`read_bytes`); RunFileError for other bytes, unless
    ``errors="replace"`` (a log whose damaged lines are skipped anyway)."""
    try:
        return read_bytes(path, limit=limit).decode("utf-8", errors=errors)
    except UnicodeDecodeError as err:
        raise RunFileError(f"{path} is not UTF-8 text ({err.reason} at byte {err.start})") from None


def parse_json(text: str | bytes, *, where: str) -> Any:
    """``text`` parsed as JSON, nested at most :data:`MAX_DEPTH` deep; RunFileError naming ``where``."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise RunFileError(f"{where} is nested too deeply (more than {MAX_DEPTH} levels)") from None
    except (ValueError, UnicodeDecodeError) as err:  # JSONDecodeError, a number of too many digits
        raise RunFileError(f"{where} is not valid JSON: {' '.join(str(err).split())}") from None
    if _depth(value) > MAX_DEPTH:
        raise RunFileError(f"{where} is nested too deeply (more than {MAX_DEPTH} levels)")
    return value


def read_json(path: str | os.PathLike[str], *, limit: int = MAX_JSON_BYTES) -> Any:
    """The JSON value in ``path``: a regular UTF-8 file of at most ``limit`` bytes, nested at most
    :data:`MAX_DEPTH` deep. FileNotFoundError when missing; RunFileError for anything else."""
    return parse_json(read_text(path, limit=limit), where=str(path))


def read_safetensors_header(path: str | os.PathLike[str]) -> dict[str, tuple[str, tuple[int, ...]]]:
    """``{name: (dtype, shape)}`` from a safetensors file's header, checked to describe tensors that
    lie inside the file; no tensor is read. FileNotFoundError when missing; RunFileError otherwise."""
    path = Path(path)
    with open_regular(path, missing=f"weights file not found: {path}") as (f, info):
        prefix = f.read(8)
        if len(prefix) < 8:
            raise RunFileError(f"{path} {UNREADABLE}: {len(prefix)} bytes, shorter than its header")
        (size,) = struct.unpack("<Q", prefix)
        if size > min(MAX_HEADER_BYTES, info.st_size - 8):
            raise RunFileError(f"{path} {UNREADABLE}: its header claims {size:,} bytes")
        try:
            raw = parse_json(f.read(size), where="its header")
        except RunFileError as err:
            raise RunFileError(f"{path} {UNREADABLE}: {err}") from None
    data_size = info.st_size - 8 - size
    if not isinstance(raw, dict):
        raise RunFileError(f"{path} {UNREADABLE}: its header is not a JSON object")
    tensors: dict[str, tuple[str, tuple[int, ...]]] = {}
    for name, entry in raw.items():
        if name == "__metadata__":
            continue
        tensors[name] = _header_entry(path, name, entry, data_size)
    return tensors


def _header_entry(path: Path, name: str, entry: Any, data_size: int) -> tuple[str, tuple[int, ...]]:
    bad = f"{path} {UNREADABLE}: the header entry {name[:80]!r}"
    if not isinstance(entry, dict):
        raise RunFileError(f"{bad} is not an object")
    dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPES:
        raise RunFileError(f"{bad} has an unknown dtype {dtype!r}")
    if not isinstance(shape, list) or not all(type(n) is int and n >= 0 for n in shape):
        raise RunFileError(f"{bad} has no valid shape (a list of sizes >= 0): {shape!r:.80}")
    if (not isinstance(offsets, list) or len(offsets) != 2 or not all(type(n) is int for n in offsets)
            or not 0 <= offsets[0] <= offsets[1] <= data_size):
        raise RunFileError(f"{bad} points outside the file (truncated or corrupt?)")
    count = 1
    for n in shape:
        count *= n
    if count * SAFETENSORS_DTYPES[dtype] != offsets[1] - offsets[0]:
        raise RunFileError(f"{bad} has shape {tuple(shape)} of {dtype} but {offsets[1] - offsets[0]:,} bytes")
    return dtype, tuple(shape)


@contextmanager
def replacing(path: str | os.PathLike[str], *, suffix: str = "", sync: bool = False) -> Iterator[Path]:
    """A work path beside ``path`` for the block to write, renamed onto ``path`` when the block ends
    and removed when it raises.

    Args:
        path: the file to replace (or create).
        suffix: the work file's ending, for writers that choose a format by it (``.png``).
        sync: flush the written file to the disk before the rename (a file that must survive a
            power cut once it is in place: checkpoints, ``.resume`` files).

    The work file is ``.NAME.tmp-PID-XXXXXXXX`` + ``suffix``, unique even among a process's
    threads; one a killed process left behind in a run directory is removed by the next writer
    (:func:`transformer.run.lock.remove_stale_files`).
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{secrets.token_hex(4)}{suffix}")
    try:
        yield tmp
        if sync:
            _fsync(tmp)
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink()  # only there when the block or the rename failed


def write_atomic(path: str | os.PathLike[str], data: str | bytes, *, sync: bool = False) -> Path:
    """Write ``data`` (text as UTF-8) to ``path`` through :func:`replacing`; returns the path."""
    with replacing(path, sync=sync) as tmp:
        with open(tmp, "xb") as f:
            f.write(data.encode("utf-8") if isinstance(data, str) else data)
    return Path(path)


def plain_permissions(path: str | os.PathLike[str]) -> None:
    """Give ``path`` the permissions a plain ``open`` would have given it (0666 less the umask), for
    a file another library created (safetensors writes 0600)."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o666 & ~umask)


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _depth(value: Any) -> int:
    """How deeply ``value`` nests lists and dicts (a scalar: 0), without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        children = item.values() if isinstance(item, dict) else item if isinstance(item, list) else None
        if children is None:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children if isinstance(child, (dict, list)))
    return deepest


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a plain file"

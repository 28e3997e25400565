"""Streaming translation of ``transformer translate``: chunks, the output sink, --resume, progress.

Lines are translated in chunks (``--chunk-lines``, or about ``CHUNK_CHARS`` characters; all the
chunk's sentences batched together) and written in order as each chunk is done, so a file of any
length takes bounded memory and the output appears as the run goes.

``--output FILE`` gets whole chunks only: each is appended, synced to disk, and recorded in
``FILE.resume`` (the input's size, mtime and a hash of its head; the settings; the lines, bytes
and a hash of the output so far; a checksum of all that, so an edited state file is refused). An interrupted run (Ctrl-C, SIGTERM) leaves only complete lines;
one killed outright may leave part of a chunk after them, which ``--resume`` cuts off before it
continues from the next line: the output is then byte for byte what an uninterrupted run writes.
The state file is removed when the run completes.

Apart from ``cli.py`` so that the crash-safety of the output (what is synced when, what a resume
checks) reads in one place, away from the options and the formatting of translated lines.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator, TextIO

from transformer.errors import UserError
from transformer.run_files import MAX_JSON_BYTES, parse_json, read_text, write_atomic
from transformer.translate.inputs import Line


CHUNK_CHARS = 1_000_000  # a chunk also ends once its lines hold this many characters
PROGRESS_EVERY = 30.0  # seconds between progress lines when standard error is not a terminal
STATE_SUFFIX = ".resume"
STATE_VERSION = 2  # 2: the state carries a checksum of itself
CHECKSUM_KEY = "state_sha256"
HEAD_BYTES = 1 << 20  # the input's first bytes, hashed to recognise it on --resume


def chunks(lines: Iterable[Line], max_lines: int, max_chars: int = CHUNK_CHARS) -> Iterator[list[Line]]:
    """Consecutive lines, at most ``max_lines`` (or about ``max_chars`` characters) at a time."""
    chunk: list[Line] = []
    chars = 0
    for line in lines:
        chunk.append(line)
        chars += len(line.text)
        if len(chunk) >= max_lines or chars >= max_chars:
            yield chunk
            chunk, chars = [], 0
    if chunk:
        yield chunk


# ------------------------------------------------------------------------------------------------ output
class StdoutSink:
    def write(self, text: str, lines: int, input_bytes: int) -> None:
        try:
            sys.stdout.write(text)
            sys.stdout.flush()
        except BrokenPipeError:  # `transformer translate ... | head`: the reader has what it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            raise SystemExit(141) from None

    def interrupted(self) -> str:
        return ""

    def finish(self) -> None:
        pass


def encode_output(text: str) -> bytes:
    try:
        return text.encode("utf-8", errors="surrogateescape")  # bytes of an argument that was not UTF-8, as given
    except UnicodeEncodeError:
        return text.encode("utf-8", errors="replace")


class FileSink:
    """``--output FILE``: whole chunks appended and synced, the progress recorded in the state
    file (``FILE.resume``) after each; the state file removed at the end.

    ``state``: what identifies the run (input, settings), None where it cannot be resumed
    (arguments or standard input). ``done``: ``(lines, bytes, input offset, output hash)``
    already in the file (``--resume``)."""

    def __init__(self, path: Path, state: dict | None, done: tuple[int, int, int, "hashlib._Hash"] | None = None):
        self.path, self.state_path = path, _state_path(path)
        self.run = state
        self.lines, self.bytes, self.offset, self.hash = done or (0, 0, 0, hashlib.sha256())
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o666)
        os.ftruncate(self.fd, self.bytes)  # a resumed file: what a killed run left after its last chunk goes
        os.lseek(self.fd, self.bytes, os.SEEK_SET)
        if state is None:
            self.state_path.unlink(missing_ok=True)
        else:
            self._save_state()

    def write(self, text: str, lines: int, input_bytes: int) -> None:
        data = encode_output(text)
        self.hash.update(data)
        view = memoryview(data)
        while view:
            view = view[os.write(self.fd, view):]
        os.fsync(self.fd)
        self.lines += lines
        self.bytes += len(data)
        self.offset += input_bytes
        if self.run is not None:
            self._save_state()

    def interrupted(self) -> str:
        """Cut off a chunk the interruption left half written; say how to go on."""
        os.ftruncate(self.fd, self.bytes)
        os.close(self.fd)
        self.fd = -1
        how = "; --resume continues from the next line" if self.run is not None else ""
        return f"{self.path} holds the translations of the first {self.lines} lines, all complete{how}"

    def finish(self) -> None:
        os.close(self.fd)
        self.fd = -1
        self.state_path.unlink(missing_ok=True)

    def _save_state(self) -> None:
        state = {**self.run, "lines": self.lines, "output_bytes": self.bytes, "input_offset": self.offset,
                 "output_sha256": self.hash.hexdigest()}
        state[CHECKSUM_KEY] = _checksum(state)
        write_atomic(self.state_path, json.dumps(state, indent=1), sync=True)


def _state_path(output: Path) -> Path:
    return output.with_name(output.name + STATE_SUFFIX)


def _checksum(state: dict) -> str:
    """The hash of everything the state file says but the hash itself (keys sorted, compact)."""
    body = {k: v for k, v in state.items() if k != CHECKSUM_KEY}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _read_state(path: Path) -> tuple[int, int, int, str, dict, dict]:
    """``(lines, output bytes, input offset, output hash, input identity, settings)`` recorded in a
    state file; UserError naming the problem for an unreadable, edited or mistyped one."""
    again = "--overwrite translates again"
    try:
        state = parse_json(read_text(path, limit=MAX_JSON_BYTES), where=str(path))
    except (OSError, UserError) as err:
        raise UserError(f"{path} is not a readable resume state ({err}); {again}") from None
    if not isinstance(state, dict):
        raise UserError(f"{path} is not a readable resume state (not a JSON object); {again}")
    if state.get("version") != STATE_VERSION:
        raise UserError(f"{path} was written by another version of transformer translate; --overwrite")
    # an edited offset or line count would resume at the wrong line and give wrong output silently
    if state.get(CHECKSUM_KEY) != _checksum(state):
        raise UserError(f"{path} was changed after the interrupted run wrote it (its checksum does not match); "
                        f"{again}")
    counts = [state.get(k) for k in ("lines", "output_bytes", "input_offset")]
    digest, recorded_input, settings = state.get("output_sha256"), state.get("input"), state.get("settings")
    if (not all(type(n) is int and n >= 0 for n in counts) or not isinstance(digest, str)
            or not isinstance(recorded_input, dict) or not isinstance(settings, dict)):
        raise UserError(f"{path} is not a readable resume state (a missing or mistyped entry); {again}")
    return (*counts, digest, recorded_input, settings)  # type: ignore[return-value]


def _input_identity(path: str) -> dict:
    st = os.stat(path)
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "head_sha256": head}


def same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def open_output(args: argparse.Namespace,
                settings: Callable[[argparse.Namespace], dict]) -> tuple[Callable[[], FileSink | StdoutSink], int, int]:
    """What opens the sink (called once the model is loaded: a run that fails before leaves no
    file behind), and the lines (and input bytes) already translated when resuming. ``settings``
    gives what the output depends on besides the input (recorded in the state file). Raises
    UserError for an output that is the input, exists without --resume/--overwrite, or does not
    match the state recorded for --resume."""
    if not args.output:
        if args.resume:
            raise UserError("--resume needs --output FILE (the file an interrupted run was writing)")
        return StdoutSink, 0, 0
    output = Path(args.output)
    resumable = bool(args.input) and args.input != "-"
    if resumable and same_file(args.input, args.output):
        raise UserError(f"--output {args.output} is the --input file: write the translation to another file")
    if output.is_dir():
        raise UserError(f"--output {args.output} is a directory")
    if args.resume and not resumable:
        raise UserError("--resume needs --input FILE: it reads the input again from where the output stopped")
    run = {"version": STATE_VERSION, "input": _input_identity(args.input), "settings": settings(args)} \
        if resumable else None
    state_path = _state_path(output)
    if not output.exists() or args.overwrite:
        return (lambda: FileSink(output, run)), 0, 0
    if not args.resume:
        raise UserError(f"{args.output} exists: give --overwrite to replace it, or --resume to continue "
                        "an interrupted run")
    if not state_path.is_file():
        raise UserError(f"{args.output} exists but {state_path.name} does not: nothing to resume (the run "
                        "finished, or the file was not written by an interrupted run); --overwrite translates again")
    lines, size, offset, digest, recorded_input, recorded_settings = _read_state(state_path)
    changed = [k for k in ("size", "mtime_ns", "head_sha256") if recorded_input.get(k) != run["input"][k]]
    if changed:
        raise UserError(f"--resume: {args.input} is not the input {args.output} was translated from "
                        f"({recorded_input.get('path')}: its {', '.join(changed)} changed); --overwrite "
                        "translates it anew")
    differ = [k for k in run["settings"] if recorded_settings.get(k) != run["settings"][k]]
    if differ:
        k = differ[0]
        raise UserError(f"--resume with other settings than the interrupted run ({k}: "
                        f"{recorded_settings.get(k)!r} then, {run['settings'][k]!r} now); give the same options, "
                        "or --overwrite")
    hasher, newlines = hashlib.sha256(), 0
    with open(output, "rb") as f:
        left = size
        while left > 0 and (block := f.read(min(left, 1 << 20))):
            hasher.update(block)
            newlines += block.count(b"\n")
            left -= len(block)
    if left > 0 or hasher.hexdigest() != digest:
        raise UserError(f"--resume: {args.output} no longer starts with the {lines} lines {state_path.name} "
                        "recorded (changed since the run stopped?); --overwrite translates again")
    if newlines < lines:
        raise UserError(f"--resume: {args.output} holds {newlines} complete lines, not {lines}; --overwrite")
    return (lambda: FileSink(output, run, (lines, size, offset, hasher))), lines, offset


# ------------------------------------------------------------------------------------------------ progress
class Progress:
    """A tqdm bar on a terminal (lines, sentences/s, ETA); otherwise a plain line every
    ``every`` seconds (default ``PROGRESS_EVERY``). ``total``: the input's lines, when known."""

    def __init__(self, total: int | None, initial: int, *, enabled: bool, stream: TextIO | None = None,
                 every: float | None = None) -> None:
        self.stream = stream or sys.stderr
        self.every = PROGRESS_EVERY if every is None else every
        self.total, self.initial, self.enabled = total, initial, enabled
        self.lines = self.sentences = 0
        self.start = self.last = time.perf_counter()
        self.bar = None
        if enabled and self.stream.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, unit="line", file=self.stream, dynamic_ncols=True,
                            smoothing=0.1)

    def update(self, lines: int, sentences: int) -> None:
        self.lines += lines
        self.sentences += sentences
        if not self.enabled:
            return
        now = time.perf_counter()
        rate = self.sentences / max(now - self.start, 1e-9)
        if self.bar is not None:
            self.bar.set_postfix_str(f"{rate:,.1f} sentences/s", refresh=False)
            self.bar.update(lines)
        elif now - self.last >= self.every:
            self.last = now
            done = self.initial + self.lines
            text = f"{done:,}" + (f"/{self.total:,} lines ({100 * done / max(self.total, 1):.1f}%)" if self.total
                                  else " lines")
            eta = ""
            if self.total and self.lines:
                seconds = (self.total - done) * (now - self.start) / self.lines
                eta = f", ETA {int(seconds // 3600)}:{int(seconds % 3600 // 60):02d}:{int(seconds % 60):02d}"
            print(f"progress: {text}, {self.sentences:,} sentences, {rate:,.1f} sentences/s{eta}", file=self.stream,
                  flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


@contextlib.contextmanager
def terminate_as_interrupt():
    """SIGTERM handled as Ctrl-C while translating: the output is left with complete lines."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def write_chunks(lines: Iterable[Line], chunk_lines: int,
                 translate_chunk: Callable[[list[Line]], tuple[str, int]],
                 sink: FileSink | StdoutSink, progress: Progress) -> None:
    """Translate ``lines`` a chunk at a time (``translate_chunk``: a chunk's output and its number
    of sentences) and write each chunk as it is done. Ctrl-C or SIGTERM: the sink keeps whole
    chunks only, says how to go on, and KeyboardInterrupt goes up."""
    try:
        with terminate_as_interrupt():
            for chunk in chunks(lines, chunk_lines):
                text, sentences = translate_chunk(chunk)
                sink.write(text, len(chunk), sum(line.size for line in chunk))
                progress.update(len(chunk), sentences)
    except KeyboardInterrupt:
        progress.close()
        if message := sink.interrupted():
            print(f"transformer translate: {message}", file=sys.stderr)
        raise
    progress.close()
    sink.finish()

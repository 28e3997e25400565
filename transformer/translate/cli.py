"""``transformer translate`` and ``transformer evaluate``: the command-line face of ``Translator``.

``translate`` translates real text: each input line is cut into sentences, each sentence is
translated, and the translations are put back in the line (``translate_lines``): N lines in,
N lines out, blank lines, indentation, the gaps between sentences and CRLF line ends kept.
``--segment lines`` translates each line whole (pre-segmented test sets; what ``evaluate`` does).

Input (arguments, ``--input FILE`` or standard input) is read as a stream of lines: plain or
gzip (told by its magic bytes), UTF-8 with a byte-order mark dropped; invalid UTF-8 is replaced
and NUL bytes removed, each with a warning naming the line, the other lines translated as usual.
Lines are translated in chunks (``--chunk-lines``, all the chunk's sentences batched together)
and written in order as each chunk is done, so a file of any length takes bounded memory.

``--output FILE`` gets whole chunks only: each is appended, synced to disk, and recorded in
``FILE.resume`` (the input's size, mtime and a hash of its head; the settings; the lines, bytes
and a hash of the output so far). An interrupted run (Ctrl-C, SIGTERM) leaves only complete lines;
one killed outright may leave part of a chunk after them, which ``--resume`` cuts off before it
continues from the next line: the output is then byte for byte what an uninterrupted run writes.
The state file is removed when the run completes.
"""

from __future__ import annotations

import argparse
import contextlib
import gzip
import hashlib
import io
import json
import os
import re
import signal
import sys
import threading
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Callable, Iterable, Iterator, TextIO

from transformer.decoding import DecodeConfig
from transformer.translate.evaluation import score
from transformer.translate.translator import TranslationWarning, Translator, load_translator


INT8_HELP = ("decode with int8 copies of the linear layers' weights (one scale per output feature) in the "
             "CPU engine's kernels, activations and sums in float32: a quarter of the weights' memory traffic "
             "(Transformer models on CPU)")
GZIP_MAGIC = b"\x1f\x8b"
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
DEFAULT_CHUNK_LINES = 2000
CHUNK_CHARS = 1_000_000  # a chunk also ends once its lines hold this many characters
DEFAULT_MAX_LINE_CHARS = 1_000_000
PROGRESS_EVERY = 30.0  # seconds between progress lines when standard error is not a terminal
WARNINGS_PER_KIND = 10  # then only counted, and the count given at the end
STATE_SUFFIX = ".resume"
STATE_VERSION = 1
HEAD_BYTES = 1 << 20  # the input's first bytes, hashed to recognise it on --resume


def add_decoding_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("decoding (defaults: the paper's beam 4, length penalty 0.6, max length source + 50)")
    g.add_argument("--beam", type=int, default=4, help="beam size (default: 4; 1 = greedy)")
    g.add_argument("--greedy", action="store_true", help="greedy search")
    g.add_argument("--n-best", type=int, default=1, help="hypotheses per sentence (default: 1)")
    g.add_argument("--alpha", type=float, default=0.6, help="length penalty exponent (default: 0.6)")
    g.add_argument("--length-penalty", choices=("gnmt", "exponent", "none"), default="gnmt",
                   help="gnmt: ((5+|Y|)/6)^alpha (default); exponent: |Y|^alpha; none")
    g.add_argument("--max-len-b", type=int, default=50, help="output limit = source length + this (default: 50)")
    g.add_argument("--stopping", default="exact", choices=["exact", "k_finished"],
                   help="beam search: stop a sentence when no open beam can win (exact, default) or once "
                   "beam-size hypotheses have finished (k_finished: faster, as fairseq and CTranslate2 do)")
    g.add_argument("--sample", action="store_true", help="sample instead of searching")
    g.add_argument("--temperature", type=float, default=1.0, help="sampling temperature (default: 1.0)")
    g.add_argument("--top-k", type=int, default=0, help="sample from the k most likely tokens (0 = all)")
    g.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling threshold (default: 1.0 = off)")
    g.add_argument("--seed", type=int, default=None, help="sampling seed (same seed, same samples)")
    g.add_argument("--bf16", action="store_true", help="decode with a bfloat16 copy of the weights (fast on CPUs with AVX-512 bf16 or AMX)")
    g.add_argument("--int8", action="store_true", help=INT8_HELP)
    g.add_argument("--batch-tokens", type=int, default=12000, help="source tokens x beams per batch (default: 12000)")


DECODING_ARGUMENTS = ("beam", "greedy", "n_best", "alpha", "length_penalty", "max_len_b", "stopping", "sample",
                      "temperature", "top_k", "top_p", "seed", "bf16", "int8", "batch_tokens")


def decode_config(args: argparse.Namespace) -> DecodeConfig:
    if args.sample:
        strategy = "sample"
    elif args.greedy or args.beam == 1:
        strategy = "greedy"
    else:
        strategy = "beam"
    return DecodeConfig(
        strategy=strategy, beam_size=args.beam if args.beam != 1 else 4, n_best=args.n_best,
        length_penalty=args.length_penalty, alpha=args.alpha, max_len_b=args.max_len_b, temperature=args.temperature,
        top_k=args.top_k, top_p=args.top_p, seed=args.seed, stopping=args.stopping,
    )


def translator_from_args(args: argparse.Namespace) -> Translator:
    if args.batch_tokens < 1:
        raise ValueError(f"--batch-tokens must be >= 1, got {args.batch_tokens}")
    return load_translator(args.run_dir, decoding=decode_config(args), max_tokens=args.batch_tokens, bf16=args.bf16,
                           int8=args.int8)


# ------------------------------------------------------------------------------------------------ input
class Reporter:
    """Warnings on standard error, each naming its line. After ``WARNINGS_PER_KIND`` warnings of
    one kind the others are only counted; ``summary()`` gives the counts."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream
        self.counts: dict[str, int] = {}
        self.lines: dict[str, list[int]] = {}

    def warn(self, kind: str, message: str, line: int | None = None) -> None:
        n = self.counts[kind] = self.counts.get(kind, 0) + 1
        if line is not None and len(self.lines.setdefault(kind, [])) < 20:
            self.lines[kind].append(line)
        stream = self.stream or sys.stderr
        if n <= WARNINGS_PER_KIND:
            print(f"warning: {message}", file=stream)
        elif n == WARNINGS_PER_KIND + 1:
            print(f"warning: further warnings like this ({KINDS.get(kind, kind)}) are counted, not shown", file=stream)

    def summary(self) -> None:
        for kind, n in self.counts.items():
            if n > WARNINGS_PER_KIND:
                lines = ", ".join(map(str, self.lines.get(kind, [])))
                print(f"warning: {n} warnings in all: {KINDS.get(kind, kind)}"
                      + (f" (first lines: {lines}{', ...' if n > len(self.lines[kind]) else ''})" if lines else ""),
                      file=self.stream or sys.stderr)


KINDS = {"utf8": "invalid UTF-8 replaced", "nul": "NUL bytes removed", "long-line": "lines copied untranslated",
         "long-sentence": "sentences over the model's input limit"}


@dataclass(frozen=True)
class Line:
    """One input line: its number (from 1), its text, how it ended ("\\n", "\\r\\n", or "" for a
    last line without a line break) and its size in the (decompressed) input, in bytes."""

    number: int
    text: str
    ending: str
    size: int = 0

    @property
    def newline(self) -> str:
        """The line end its output line gets: CRLF in, CRLF out; "\\n" otherwise."""
        return "\r\n" if self.ending == "\r\n" else "\n"


class _Prefixed(io.RawIOBase):
    """A stream's first bytes, read to tell gzip from text, put back in front of the rest."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head, self.rest = head, rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self.head:
            n = min(len(buffer), len(self.head))
            buffer[:n], self.head = self.head[:n], self.head[n:]
            return n
        data = self.rest.read1(len(buffer)) if hasattr(self.rest, "read1") else self.rest.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


class InputText:
    """The lines of a file or of standard input ("-"), read as a stream (see the module doc)."""

    def __init__(self, path: str, reporter: Reporter, *, stream: TextIO | None = None) -> None:
        self.path, self.reporter = path, reporter
        self.name = "standard input" if path == "-" else path
        if path == "-":
            raw = (stream or sys.stdin).buffer
            head = raw.read(2)
            self._closing = None
            binary: BinaryIO = io.BufferedReader(_Prefixed(head, raw))
        else:
            p = Path(path)
            if not p.is_file():
                raise FileNotFoundError(f"input file not found: {path}")
            binary = self._closing = p.open("rb")
            head = binary.read(2)
            binary.seek(0)
        self.gzipped = head == GZIP_MAGIC
        self._file: BinaryIO = gzip.GzipFile(fileobj=binary, mode="rb") if self.gzipped else binary
        self._number = 0
        try:
            first = self._file.peek(2)[:2]
        except (OSError, EOFError) as err:
            raise ValueError(f"{self.name}: cannot be read as gzip ({err})") from None
        if first in UTF16_BOMS:
            self._refuse_utf16()

    def _refuse_utf16(self) -> None:
        self.close()
        raise ValueError(f"{self.name} starts with a UTF-16 byte-order mark; translate reads UTF-8: "
                         f"convert it first, e.g. iconv -f UTF-16 -t UTF-8 {self.path} > converted.txt")

    def close(self) -> None:
        if self._closing is not None:
            self._closing.close()

    def skip(self, lines: int, offset: int) -> None:
        """Go on after the first ``lines`` lines, which end at byte ``offset`` (--resume)."""
        if self.gzipped:
            for _ in range(lines):
                if not self._file.readline():
                    break
        else:
            self._file.seek(offset)
        self._number = lines

    def __iter__(self) -> Iterator[Line]:
        try:
            for raw in self._file:
                self._number += 1
                yield self._decode(self._number, raw)
        except (OSError, EOFError) as err:  # a truncated or corrupt gzip stream
            raise ValueError(f"{self.name}: line {self._number + 1}: cannot be read ({err})") from None

    def _decode(self, number: int, raw: bytes) -> Line:
        size = len(raw)
        if raw.endswith(b"\r\n"):
            body, ending = raw[:-2], "\r\n"
        elif raw.endswith(b"\n"):
            body, ending = raw[:-1], "\n"
        else:
            body, ending = raw, ""
        if number == 1:
            if body.startswith(UTF8_BOM):
                body = body[len(UTF8_BOM):]
            elif body.startswith(UTF16_BOMS):
                self._refuse_utf16()
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as err:
            self.reporter.warn("utf8", f"{self.name}: line {number}: invalid UTF-8 ({err.reason} at byte {err.start}); "
                               "undecodable bytes replaced by U+FFFD", number)
            text = body.decode("utf-8", errors="replace")
        if "\x00" in text:
            self.reporter.warn("nul", f"{self.name}: line {number}: {text.count(chr(0))} NUL bytes removed "
                               "(binary data?); the rest of the line is translated", number)
            text = text.replace("\x00", "")
        return Line(number, text, ending, size)


def count_lines(path: str) -> int:
    """Lines in a (plain or gzip) file, as ``InputText`` reads them."""
    with open(path, "rb") as f:
        stream: BinaryIO = gzip.GzipFile(fileobj=f) if f.read(2) == GZIP_MAGIC else f
        f.seek(0)
        n, last = 0, b"\n"
        while block := stream.read(1 << 20):
            n += block.count(b"\n")
            last = block[-1:]
        return n + (last != b"\n")


def read_lines(path: str, stream: TextIO | None = None) -> list[str]:
    """Lines of a file (plain or gzip) or stdin ("-"): a byte-order mark dropped, invalid UTF-8
    replaced and NUL bytes removed, each with a warning naming the line."""
    source = InputText(path, Reporter(), stream=stream)
    try:
        return [line.text for line in source]
    finally:
        source.close()


def _chunks(lines: Iterable[Line], max_lines: int, max_chars: int = CHUNK_CHARS) -> Iterator[list[Line]]:
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


def _encode(text: str) -> bytes:
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
        data = _encode(text)
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
        tmp = self.state_path.with_name(self.state_path.name + ".tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(state, f, indent=1)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.state_path)


def _state_path(output: Path) -> Path:
    return output.with_name(output.name + STATE_SUFFIX)


def _input_identity(path: str) -> dict:
    st = os.stat(path)
    with open(path, "rb") as f:
        head = hashlib.sha256(f.read(HEAD_BYTES)).hexdigest()
    return {"path": str(Path(path).resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns, "head_sha256": head}


def _settings(args: argparse.Namespace) -> dict:
    """What the output depends on, besides the input: --resume refuses to mix two runs' outputs."""
    run = Path(args.run_dir).resolve()
    model = run / "model.safetensors"
    stat = model.stat() if model.is_file() else None
    return {"run_dir": str(run), "model": [stat.st_size, stat.st_mtime_ns] if stat else None,
            "segment": args.segment, "format": args.format, "src_lang": args.src_lang, "json": args.json,
            "chunk_lines": args.chunk_lines, "max_line_chars": args.max_line_chars,
            **{name: getattr(args, name) for name in DECODING_ARGUMENTS}}


def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return Path(a).resolve() == Path(b).resolve()


def _open_output(args: argparse.Namespace) -> tuple[Callable[[], FileSink | StdoutSink], int, int]:
    """What opens the sink (called once the model is loaded: a run that fails before leaves no
    file behind), and the lines (and input bytes) already translated when resuming. Raises
    ValueError for an output that is the input, exists without --resume/--overwrite, or does not
    match the state recorded for --resume."""
    if not args.output:
        if args.resume:
            raise ValueError("--resume needs --output FILE (the file an interrupted run was writing)")
        return StdoutSink, 0, 0
    output = Path(args.output)
    resumable = bool(args.input) and args.input != "-"
    if resumable and _same_file(args.input, args.output):
        raise ValueError(f"--output {args.output} is the --input file: write the translation to another file")
    if output.is_dir():
        raise ValueError(f"--output {args.output} is a directory")
    if args.resume and not resumable:
        raise ValueError("--resume needs --input FILE: it reads the input again from where the output stopped")
    run = {"version": STATE_VERSION, "input": _input_identity(args.input), "settings": _settings(args)} \
        if resumable else None
    state_path = _state_path(output)
    if not output.exists() or args.overwrite:
        return (lambda: FileSink(output, run)), 0, 0
    if not args.resume:
        raise ValueError(f"{args.output} exists: give --overwrite to replace it, or --resume to continue "
                         "an interrupted run")
    if not state_path.is_file():
        raise ValueError(f"{args.output} exists but {state_path.name} does not: nothing to resume (the run "
                         "finished, or the file was not written by an interrupted run); --overwrite translates again")
    try:
        state = json.loads(state_path.read_text(encoding="utf-8"))
        lines, size, offset, digest = (state[k] for k in ("lines", "output_bytes", "input_offset", "output_sha256"))
        recorded_input, recorded_settings = state["input"], state["settings"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ValueError(f"{state_path} is not a readable resume state ({err}); --overwrite translates again") from None
    if state.get("version") != STATE_VERSION:
        raise ValueError(f"{state_path} was written by another version of transformer translate; --overwrite")
    changed = [k for k in ("size", "mtime_ns", "head_sha256") if recorded_input.get(k) != run["input"][k]]
    if changed:
        raise ValueError(f"--resume: {args.input} is not the input {args.output} was translated from "
                         f"({recorded_input.get('path')}: its {', '.join(changed)} changed); --overwrite "
                         "translates it anew")
    differ = [k for k in run["settings"] if recorded_settings.get(k) != run["settings"][k]]
    if differ:
        k = differ[0]
        raise ValueError(f"--resume with other settings than the interrupted run ({k}: "
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
        raise ValueError(f"--resume: {args.output} no longer starts with the {lines} lines {state_path.name} "
                         "recorded (changed since the run stopped?); --overwrite translates again")
    if newlines < lines:
        raise ValueError(f"--resume: {args.output} holds {newlines} complete lines, not {lines}; --overwrite")
    return (lambda: FileSink(output, run, (lines, size, offset, hasher))), lines, offset


# ------------------------------------------------------------------------------------------------ progress
class Progress:
    """A tqdm bar on a terminal (lines, sentences/s, ETA); otherwise a plain line every
    ``PROGRESS_EVERY`` seconds. ``total``: the input's lines, when known."""

    def __init__(self, total: int | None, initial: int, *, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
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
        elif now - self.last >= PROGRESS_EVERY:
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
def _terminate_as_interrupt():
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


# ------------------------------------------------------------------------------------------------ translate
SEGMENT_HELP = (
    "sentences (default): cut each line into sentences, translate each, put the translations back in the "
    "line (N lines in, N lines out; blank lines, indentation and the spaces between sentences kept; a "
    "sentence longer than the model's input limit is translated in pieces, with a warning naming the line). "
    "lines: translate each line whole, as one segment, as it is: for test sets that are already one sentence a "
    "line (what `transformer evaluate` does); a line over the input limit is cut, with a warning")


def register_translate_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "translate",
        help="translate text (sentences, paragraphs, files, HTML) with a trained run directory",
        description="Translate text given as arguments, from --input FILE (plain or gzip), or from standard input. "
        "Each line is cut into sentences, each sentence translated, and the translations put back where the "
        "sentences were: one output line per input line, in order; blank lines, indentation, the spaces between "
        "sentences and CRLF line ends are kept (--segment lines translates each line whole instead). Files of "
        "any length stream: lines are translated in chunks (--chunk-lines) and written as each chunk is done, "
        "with a progress bar on a terminal. With --output, an interrupted run leaves only complete lines and "
        "--resume continues it. Input is UTF-8: invalid bytes are replaced and NUL bytes removed, with a warning "
        "naming the line. With --n-best N, lines 'INDEX ||| TRANSLATION ||| SCORE'. --json prints one JSON "
        "object per input line.",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("sentences", nargs="*", metavar="TEXT", help="texts to translate (each may hold several sentences)")
    p.add_argument("--input", "-i", help="file to translate, plain or gzip ('-' = standard input)")
    p.add_argument("--output", "-o", help="write the translation here instead of standard output (whole chunks, "
                   "synced to disk, with the progress in OUTPUT.resume until the run completes)")
    p.add_argument("--segment", choices=("sentences", "lines"), default="sentences", help=SEGMENT_HELP)
    p.add_argument("--format", choices=("text", "html"), default="text",
                   help="text (default), or html: translate the text of an HTML page or fragment and keep its "
                   "markup (the whole input is one document)")
    p.add_argument("--src-lang", default=None, metavar="CODE",
                   help="the source language, for sentence splitting (default: the run's data.src_lang; "
                   "English rules when it does not say)")
    p.add_argument("--resume", action="store_true",
                   help="continue an interrupted --input FILE --output FILE run where it stopped (refused when "
                   "the input or the settings changed); starts afresh when OUTPUT does not exist yet")
    p.add_argument("--overwrite", action="store_true", help="replace an existing --output file")
    p.add_argument("--chunk-lines", type=int, default=DEFAULT_CHUNK_LINES, metavar="N",
                   help=f"lines read, translated together and written at a time (default: {DEFAULT_CHUNK_LINES}; a "
                   f"chunk also ends at {CHUNK_CHARS:,} characters): memory stays bounded whatever the file's length")
    p.add_argument("--max-line-chars", type=int, default=DEFAULT_MAX_LINE_CHARS, metavar="N",
                   help=f"a line longer than this (default: {DEFAULT_MAX_LINE_CHARS:,} characters) is copied to the "
                   "output untranslated, with a warning naming it (--segment sentences)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar or progress lines")
    p.add_argument("--json", action="store_true", help="JSON lines, one per input line: index, source, translations "
                   "with scores; with --segment sentences also the translated line and each sentence's source and "
                   "target spans and score")
    add_decoding_arguments(p)
    p.set_defaults(handler=translate_command)


def translate_command(args: argparse.Namespace) -> int:
    if args.sentences and args.input:
        raise ValueError("give texts as arguments or --input FILE, not both")
    if args.resume and args.overwrite:
        raise ValueError("give --resume or --overwrite, not both")
    if args.chunk_lines < 1 or args.max_line_chars < 1:
        raise ValueError("--chunk-lines and --max-line-chars must be >= 1")
    if not (args.sentences or args.input) and sys.stdin.isatty():
        raise ValueError("nothing to translate: give texts, --input FILE, or pipe text into standard input")
    if args.format == "html":
        return _translate_html(args)
    open_sink, done, offset = _open_output(args)  # refusals come before the model is loaded
    reporter = Reporter()
    source: InputText | None = None
    try:
        translator = translator_from_args(args)
        if args.sentences:
            lines: Iterable[Line] = [Line(i + 1, text, "\n") for i, text in enumerate(args.sentences)]
            total = len(args.sentences)
        else:
            source = InputText(args.input or "-", reporter)
            if done:
                source.skip(done, offset)
            lines = source
            total = count_lines(args.input) if args.input and args.input != "-" else None
        show = not args.no_progress and not args.sentences
        progress = Progress(total, done, enabled=show and (args.output is not None or not sys.stdout.isatty()
                                                           or not sys.stderr.isatty()))
        sink = open_sink()
        start = time.perf_counter()
        try:
            with _terminate_as_interrupt():
                for chunk in _chunks(lines, args.chunk_lines):
                    text, sentences = _translate_chunk(translator, chunk, args, reporter)
                    sink.write(text, len(chunk), sum(line.size for line in chunk))
                    progress.update(len(chunk), sentences)
        except KeyboardInterrupt:
            progress.close()
            if message := sink.interrupted():
                print(f"transformer translate: {message}", file=sys.stderr)
            raise
        progress.close()
        sink.finish()
    finally:
        if source is not None:
            source.close()
    reporter.summary()
    elapsed = time.perf_counter() - start
    what = "segments" if args.segment == "lines" else "sentences"
    print(f"translated {progress.lines} lines ({progress.sentences} {what}) in {elapsed:.2f} s "
          f"({progress.sentences / max(elapsed, 1e-9):.1f} {what}/s)", file=sys.stderr)
    return 0


def _translate_chunk(translator: Translator, chunk: list[Line], args: argparse.Namespace,
                     reporter: Reporter) -> tuple[str, int]:
    """The output of a chunk of lines (what gets written), and its number of sentences (segments)."""
    out: list[str] = []
    if args.segment == "lines":
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", TranslationWarning)
            n_best = translator.translate_n_best([line.text for line in chunk])
        for w in caught:
            message = re.sub(r"^sentence (\d+)", lambda m: f"line {chunk[int(m.group(1))].number}", str(w.message))
            reporter.warn("long-sentence", f"{_name(args)}: {message}")
        for line, hyps in zip(chunk, n_best):
            alternatives = [(_one_line(translator.detokenize(h)), h.score) for h in hyps]
            out.append(_format(args, line, alternatives[0][0] if alternatives else "", alternatives))
        return "".join(out), sum(1 for hyps in n_best if hyps)

    from transformer.translate.document import translate_lines

    fits = [len(line.text) <= args.max_line_chars for line in chunk]
    for line, ok in zip(chunk, fits):
        if not ok:
            reporter.warn("long-line", f"{_name(args)}: line {line.number}: {len(line.text):,} characters, over "
                          f"--max-line-chars {args.max_line_chars:,}: copied to the output untranslated "
                          "(raise --max-line-chars to translate it)", line.number)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TranslationWarning)
        translated = translate_lines(translator, [line.text if ok else "" for line, ok in zip(chunk, fits)],
                                     lang=args.src_lang, first_line=chunk[0].number)
    for w in caught:
        reporter.warn("long-sentence", f"{_name(args)}: {w.message}")
    sentences = 0
    for line, ok, result in zip(chunk, fits, translated):
        if not ok:
            out.append(_format(args, line, line.text, [], untranslated=True))
            continue
        sentences += len(result.sentences)
        out.append(_format(args, line, result.text, result.n_best, result))
    return "".join(out), sentences


def _name(args: argparse.Namespace) -> str:
    if args.sentences:
        return "text"
    return "standard input" if not args.input or args.input == "-" else args.input


def _one_line(text: str) -> str:
    """A translation never adds a line to the output."""
    return re.sub(r"\s*[\r\n]+\s*", " ", text)


def _format(args: argparse.Namespace, line: Line, text: str, alternatives: list[tuple[str, float]],
            result=None, *, untranslated: bool = False) -> str:
    """One input line's output: its translation, its n-best lines, or its JSON record
    (``result``: the line's ``TranslatedLine`` with --segment sentences)."""
    newline = line.newline
    if args.json:
        record = {"index": line.number - 1, "source": line.text,
                  "translations": [{"text": t, "score": round(s, 4)} for t, s in alternatives]}
        if args.segment == "sentences":
            record["translation"] = text
            record["sentences"] = [] if result is None else [
                {"source": list(a.source), "target": list(a.target), "score": round(s, 4)}
                for a, s in zip(result.sentences, result.scores)]
            if untranslated:
                record["untranslated"] = True
        return json.dumps(record, ensure_ascii=False) + newline
    if args.n_best > 1:
        return "".join(f"{line.number - 1} ||| {t} ||| {s:.4f}{newline}" for t, s in alternatives)
    return text + newline


def _translate_html(args: argparse.Namespace) -> int:
    """--format html: the whole input is one document (each argument one, when given as arguments)."""
    if args.resume:
        raise ValueError("--resume is for --format text (an HTML document is translated whole)")
    if args.n_best > 1 or args.json or args.segment == "lines":
        raise ValueError("--n-best, --json and --segment lines are for --format text")
    try:
        from transformer.translate.html import translate_html
    except ImportError as err:
        raise ValueError(f"--format html needs transformer.translate.html, which this installation lacks ({err})") \
            from None
    if args.output:
        if args.input and args.input != "-" and _same_file(args.input, args.output):
            raise ValueError(f"--output {args.output} is the --input file: write the translation to another file")
        if Path(args.output).exists() and not args.overwrite:
            raise ValueError(f"{args.output} exists: give --overwrite to replace it")
    reporter = Reporter()
    if args.sentences:
        documents = list(args.sentences)
    else:
        source = InputText(args.input or "-", reporter)
        try:
            documents = ["".join(line.text + line.ending for line in source)]
        finally:
            source.close()
    from transformer.translate.document import translate_sentences

    translator = translator_from_args(args)
    lang = args.src_lang or translator.src_lang
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TranslationWarning)
        texts = [translate_html(document, lambda sentences: translate_sentences(translator, sentences), lang=lang)
                 for document in documents]
    for w in caught:
        reporter.warn("long-sentence", f"{_name(args)}: {w.message}")
    output = "".join(t + ("\n" if args.sentences else "") for t in texts)
    if args.output:
        tmp = Path(args.output).with_name(Path(args.output).name + ".tmp")
        tmp.write_bytes(_encode(output))
        os.replace(tmp, args.output)
    else:
        sys.stdout.write(output)
    reporter.summary()
    print(f"translated {len(documents)} HTML document{'s' if len(documents) != 1 else ''} in "
          f"{time.perf_counter() - start:.2f} s", file=sys.stderr)
    return 0


# ------------------------------------------------------------------------------------------------ evaluate
def register_evaluate_command(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "evaluate",
        help="translate a test set and print sacreBLEU and chrF with their signatures",
        description="Translate a test set and score it with sacreBLEU and chrF on detokenized, cased text (the "
        "way papers report it). Test set: --src FILE --ref FILE (plain or gzip), or --corpus multi30k|tatoeba with "
        "--split (languages default to the run's). Scoring is line by line: each source line is translated whole, "
        "as one segment, and scored against the same line of the references (as `translate --segment lines`).",
    )
    p.add_argument("run_dir", metavar="RUN_DIR")
    p.add_argument("--src", help="source sentences, one per line (plain or gzip)")
    p.add_argument("--ref", help="reference translations, one per line (plain or gzip)")
    p.add_argument("--corpus", choices=("multi30k", "tatoeba"), help="a registry corpus instead of files")
    p.add_argument("--split", default=None, help="corpus split (multi30k default: test_2016_flickr; tatoeba: test)")
    p.add_argument("--src-lang", help="source language (default: the run's data.src_lang)")
    p.add_argument("--tgt-lang", help="target language (default: the run's data.tgt_lang)")
    p.add_argument("--from", dest="data_dir", metavar="DIR", help="local copy of registry corpora (e.g. ../shared/data)")
    p.add_argument("--output", "-o", help="also write the translations to this file")
    p.add_argument("--json", action="store_true", help="print the scores as one JSON object on the last line")
    add_decoding_arguments(p)
    p.set_defaults(handler=evaluate_command)


def evaluate_command(args: argparse.Namespace) -> int:
    sources, references = _test_set(args)
    translator = translator_from_args(args)
    start = time.perf_counter()
    hypotheses = translator.translate(sources)
    elapsed = time.perf_counter() - start
    if args.output:
        Path(args.output).write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
    s = score(hypotheses, references)
    print(f"BLEU = {s.bleu:.2f}  {s.bleu_signature}")
    print(f"chrF = {s.chrf:.2f}  {s.chrf_signature}")
    print(f"exact match = {s.exact_match:.1%}; {s.n} sentences translated in {elapsed:.1f} s "
          f"({translator.decoding.strategy}, beam {translator.decoding.beam_size})")
    if args.json:
        print(json.dumps({**s.as_dict(), "seconds": round(elapsed, 2)}))
    return 0


def _test_set(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    if args.corpus:
        if args.src or args.ref:
            raise ValueError("give --corpus or --src/--ref files, not both")
        return _corpus_test_set(args)
    if not (args.src and args.ref):
        raise ValueError("give --src FILE and --ref FILE, or --corpus NAME")
    sources, references = read_lines(args.src), read_lines(args.ref)
    if len(sources) != len(references):
        raise ValueError(f"{args.src} has {len(sources)} lines but {args.ref} has {len(references)}")
    if not sources:
        raise ValueError(f"{args.src} is empty")
    return sources, references


def _corpus_test_set(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    from transformer.corpus.registry import corpus_pairs, fetch, tatoeba_splits
    from transformer.training.config import RunConfig

    run_config = Path(args.run_dir) / "run_config.json"
    data = RunConfig.from_dict(json.loads(run_config.read_text())).data if run_config.exists() else None
    src = args.src_lang or (data.src_lang if data else None)
    tgt = args.tgt_lang or (data.tgt_lang if data else None)
    if not (src and tgt):
        raise ValueError("give --src-lang and --tgt-lang (the run directory does not say)")
    directory = fetch(args.corpus, local_dir=args.data_dir)
    if args.corpus == "multi30k":
        pairs = corpus_pairs("multi30k", src=src, tgt=tgt, split=args.split or "test_2016_flickr", directory=directory)
    else:
        pairs = corpus_pairs("tatoeba", src=src, tgt=tgt, split="all", directory=directory)
        split = args.split or "test"
        splits = tatoeba_splits(pairs, seed=data.seed if data else 0)
        if split not in splits:
            raise ValueError(f"tatoeba has splits {sorted(splits)}, not {split!r}")
        pairs = splits[split]
    return [s for s, _ in pairs], [t for _, t in pairs]

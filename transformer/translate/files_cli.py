"""``transformer translate --input FILE`` for the file formats: a document read whole, translated
through the registry of ``translate/files``, and written whole.

``cli.py`` sends here an input whose extension is a file format other than plain text
(``.md``, ``.srt``, ``.po``, ``.html``, ``.docx``...), or any input with ``--format`` naming one
(``markdown``, ``srt``, ...); ``.txt`` and ``--format text`` keep the streaming text path, and an
explicit ``--format html`` its own. Everything that is refused is refused before the model is
loaded; the output is written through a work file renamed onto it (never half written).

Apart from ``cli.py`` so that the command's module keeps its options and the text path, and this
one the whole-file path (it imports nothing from ``cli.py``, which calls it).
"""

from __future__ import annotations

import argparse
import sys
import time
import warnings
from pathlib import Path
from typing import TextIO

from transformer.errors import UserError
from transformer.run_files import write_atomic
from transformer.translate.files import (
    ARCHIVE_EXTENSIONS, FORMATS, KINDS, MAX_FILE_BYTES, TranslatableFile, read_file, translate_parsed,
)
from transformer.translate.inputs import Reporter
from transformer.translate.stream import PROGRESS_EVERY, same_file
from transformer.translate.warning import TermWarning, TranslationWarning

# The formats --format names besides text and html (which have their own paths).
FILE_FORMATS = tuple(sorted(kind for kind in KINDS if kind not in ("text", "html")))
SAMPLE_CHARS = 20_000  # the text --src-lang auto detects a file's language on


def file_kind(args: argparse.Namespace) -> str | None:
    """The file format ``args`` ask for (a key of ``KINDS``), None for the text and HTML paths:
    ``--format`` when it names a file format; without ``--format``, the format of the
    ``--input`` file's extension, except ``.txt``."""
    if args.format is not None:
        return args.format if args.format in FILE_FORMATS else None
    if not args.input or args.input == "-" or args.sentences:
        return None
    cls = FORMATS.get(Path(args.input).suffix.lower())
    return None if cls is None or cls.kind == "text" else cls.kind


def _binary(kind: str) -> bool:
    return KINDS[kind].extensions[0] in ARCHIVE_EXTENSIONS


def read_document(args: argparse.Namespace, kind: str, reporter: Reporter,
                  stdin: TextIO | None = None) -> tuple[TranslatableFile, str]:
    """Check the arguments for a file translation and read the input: the file and its name in
    messages (what was changed to read it, invalid UTF-8, goes to ``reporter``). UserError (a
    FileFormatError is one) for what is refused."""
    what = f"--format {kind}" if args.format else f"a {KINDS[kind].extensions[0]} file"
    if args.sentences:
        raise UserError(f"--format {kind} translates a file: give --input FILE, or pipe it into standard input")
    if args.resume:
        raise UserError(f"--resume is for plain text; {what} is translated whole (translate it again with "
                        "--overwrite)")
    if args.n_best > 1 or args.json or args.scores or args.segment == "lines":
        raise UserError(f"--n-best, --json, --scores and --segment lines are for plain text, not {what}")
    to_stdout = not args.output or args.output == "-"
    if to_stdout and _binary(kind) and sys.stdout.isatty():
        raise UserError(f"{what} is a binary file: give --output FILE (or --output - with standard output "
                        "redirected)")
    if not to_stdout:
        if args.input and args.input != "-" and same_file(args.input, args.output):
            raise UserError(f"--output {args.output} is the --input file: write the translation to another file")
        if Path(args.output).is_dir():
            raise UserError(f"--output {args.output} is a directory")
        if Path(args.output).exists() and not args.overwrite:
            raise UserError(f"{args.output} exists: give --overwrite to replace it")
    if args.input and args.input != "-":
        path = Path(args.input)
        if not path.is_file():
            raise FileNotFoundError(f"input file not found: {args.input}")
        if path.stat().st_size > MAX_FILE_BYTES:
            raise UserError(f"{args.input}: {path.stat().st_size:,} bytes, over the limit of {MAX_FILE_BYTES:,} "
                            "bytes for a file to translate")
        data, name = path.read_bytes(), args.input
    else:
        data = (stdin or sys.stdin).buffer.read(MAX_FILE_BYTES + 1)
        name = "standard input"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TranslationWarning)
        document = read_file(data, name, kind=kind if args.format else None)
    for w in caught:
        reporter.warn("file", str(w.message))
    return document, name


def sample_text(document: TranslatableFile) -> str:
    """The start of a file's text (markup left out), for detecting its language."""
    from transformer.translate.html import html_sentences

    parts: list[str] = []
    size = 0
    for unit in document.units():
        text = " ".join(html_sentences(unit.text)) if unit.html else unit.text
        parts.append(text)
        size += len(text)
        if size >= SAMPLE_CHARS:
            break
    return " ".join(parts)[:SAMPLE_CHARS]


class _Progress:
    """Sentences translated so far: a tqdm bar on a terminal, else a line every ``PROGRESS_EVERY`` seconds."""

    def __init__(self, enabled: bool, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.enabled, self.bar = enabled, None
        self.start = self.last = time.perf_counter()
        self.done = 0

    def __call__(self, done: int, total: int) -> None:
        self.done = done
        if not self.enabled:
            return
        if self.stream.isatty():
            if self.bar is None:
                from tqdm import tqdm

                self.bar = tqdm(total=total, unit="sentence", file=self.stream, dynamic_ncols=True)
            self.bar.update(done - self.bar.n)
            return
        now = time.perf_counter()
        if now - self.last >= PROGRESS_EVERY:
            self.last = now
            rate = done / max(now - self.start, 1e-9)
            print(f"progress: {done:,}/{total:,} sentences ({100 * done / max(total, 1):.1f}%), "
                  f"{rate:,.1f} sentences/s", file=self.stream, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def translate_document_file(args: argparse.Namespace, document: TranslatableFile, name: str, translator, *,
                            glossary=None, lang: str | None = None, reporter: Reporter | None = None) -> int:
    """Translate ``document`` (read by :func:`read_document`) and write it to ``--output`` (or
    standard output); warnings through ``reporter``, a summary line on standard error."""
    reporter = reporter or Reporter()
    progress = _Progress(enabled=not args.no_progress)
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", TranslationWarning)
        try:
            data = translate_parsed(document, translator, src_lang=lang, glossary=glossary, progress=progress)
        finally:
            progress.close()
    for w in caught:
        kind = "term" if isinstance(w.message, TermWarning) else "long-sentence" \
            if "input limit" in str(w.message) else "file"
        reporter.warn(kind, f"{name}: {w.message}")
    if args.output and args.output != "-":
        write_atomic(args.output, data)
    else:
        sys.stdout.buffer.write(data)
        sys.stdout.flush()
    reporter.summary()
    units = len(document.units())
    print(f"translated {name} ({units} part{'s' if units != 1 else ''}, {progress.done} sentences) in "
          f"{time.perf_counter() - start:.2f} s", file=sys.stderr)
    return 0


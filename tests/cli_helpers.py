"""``transformer`` commands run in the test's own process: ``transformer.cli.main`` with standard
input, output and error swapped for in-memory streams. Starting a process costs seconds of imports
(torch) on a small machine; tests that need a real process (signals, a console script, torchrun)
start one themselves."""

from __future__ import annotations

import contextlib
import io
import subprocess
import sys


def _stream(data: bytes = b"") -> io.TextIOWrapper:
    """A text stream over bytes, with a ``buffer`` as the standard streams have, that is no terminal."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", newline=None)


def run_cli(*args, input: str | None = None) -> subprocess.CompletedProcess:
    """``transformer ARGS`` (each argument made a string) through ``transformer.cli.main``: its exit
    status and what it wrote, as ``subprocess.run(..., capture_output=True, text=True)`` gives them.
    ``input`` is its standard input. torch's thread count (which commands set) is restored after.

    Args:
        args: the command line after ``transformer``.
        input: the text on standard input (none: an empty stream).

    Returns:
        A ``CompletedProcess`` with ``returncode``, ``stdout`` and ``stderr``.
    """
    import torch

    from transformer.cli import main

    argv = [str(arg) for arg in args]
    stdin, stdout, stderr = _stream((input or "").encode("utf-8")), _stream(), _stream()
    threads, saved_stdin = torch.get_num_threads(), sys.stdin
    sys.stdin = stdin
    try:
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            try:
                status = main(argv)
            except SystemExit as exit_:  # argparse's refusals exit
                status = exit_.code if isinstance(exit_.code, int) else 1
    finally:
        sys.stdin = saved_stdin
        torch.set_num_threads(threads)
    texts = []
    for stream in (stdout, stderr):
        stream.flush()
        texts.append(stream.buffer.getvalue().decode("utf-8"))
    return subprocess.CompletedProcess(["transformer", *argv], status, texts[0], texts[1])

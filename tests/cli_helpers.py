"""``transformer`` commands run in the test's own process: ``transformer.cli.main`` with standard
input, output and error swapped for in-memory streams. Starting a process costs seconds of imports
(torch) on a small machine; tests that need a real process (signals, a console script, torchrun)
start one themselves. Tests get it as the ``cli`` fixture (conftest.py)."""

from __future__ import annotations

import contextlib
import io
import sys
from typing import NamedTuple


class _Stream(io.TextIOWrapper):
    """A text stream over bytes, with a ``buffer`` as the standard streams have; a terminal or not."""

    def __init__(self, data: bytes = b"", terminal: bool = False):
        super().__init__(io.BytesIO(data), encoding="utf-8", newline=None)
        self.terminal = terminal

    def isatty(self) -> bool:
        return self.terminal


class Ran(NamedTuple):
    """What a command did, named as ``subprocess.run(..., capture_output=True, text=True)`` names it;
    it unpacks as ``status, out, err``."""

    returncode: int
    stdout: str
    stderr: str


def run_cli(*args, input: str | None = None, terminal: bool = False) -> Ran:
    """``transformer ARGS`` (each argument made a string) through ``transformer.cli.main``: its exit
    status and what it wrote. ``input`` is its standard input. torch's thread count (which commands
    set) is restored after.

    Args:
        args: the command line after ``transformer``.
        input: the text on standard input (none: an empty stream).
        terminal: whether standard output says it is a terminal.

    Returns:
        A ``Ran``: ``returncode``, ``stdout`` and ``stderr``.
    """
    import torch

    from transformer.cli import main

    argv = [str(arg) for arg in args]
    stdin, stdout, stderr = _Stream((input or "").encode("utf-8")), _Stream(terminal=terminal), _Stream()
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
    return Ran(status, texts[0], texts[1])

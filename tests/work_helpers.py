"""Counting the Python work a call does, for tests that guard speed without a clock: a loaded
machine changes how long each step takes, never how many steps run."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any


def python_lines(fn: Callable[[], Any]) -> tuple[int, Any]:
    """How many lines of Python ``fn()`` executes (``sys.settrace``'s line events, in every Python
    function it calls; C code, numpy's or the interpreter's own, counts nothing), and its result."""
    count = 0

    def trace(frame: Any, event: str, arg: Any) -> Callable[..., Any]:
        nonlocal count
        if event == "line":
            count += 1
        return trace

    before = sys.gettrace()
    sys.settrace(trace)
    try:
        result = fn()
    finally:
        sys.settrace(before)
    return count, result

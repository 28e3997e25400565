"""Keep freed memory in the process instead of handing it back to the OS (glibc on Linux).

Training and decoding allocate the same large temporaries again and again (activations,
gradients, logits, caches). glibc serves allocations over its mmap threshold with fresh ``mmap``
calls and trims the top of its heap when it frees, so each step faults the same memory in again
page by page; on a virtual machine that is a large, noisy share of a CPU step (see the
performance documentation for the measurements).

``retain_freed_memory()`` asks glibc (``mallopt``) never to use ``mmap`` for allocations and never
to trim the heap: memory is reused from the heap after the first steps. The price: the process
keeps its peak memory until it exits. ``transformer train`` and ``transformer demo`` call it
unless the environment sets ``TRANSFORMER_RETAIN_MEMORY=0``; the benchmarks call it once for all
contenders of a run (they share the process). Elsewhere (not glibc) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

_M_TRIM_THRESHOLD = -1  # mallopt parameters, from glibc's malloc.h
_M_MMAP_MAX = -4
_NEVER = 2**31 - 1  # largest int mallopt takes: a trim threshold no heap top reaches in practice

_done: bool | None = None


def retain_freed_memory() -> bool:
    """Make glibc keep freed memory for reuse; True if the settings took effect (once per process)."""
    global _done
    if _done is not None:
        return _done
    _done = False
    if not sys.platform.startswith("linux") or os.environ.get("TRANSFORMER_RETAIN_MEMORY", "1") == "0":
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (e.g. musl has no mallopt)
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    _done = bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, _NEVER))
    return _done

"""Compile and load the engine's C kernels (``fused.c`` and ``packed_linear.c``) as one library.

The sources are compiled once with the system's C compiler (``cc``, or ``$CC``) into
``~/.cache/transformer/`` (or ``$TRANSFORMER_CACHE``), keyed by the sources, the flags and the
CPU's features, and loaded with ctypes into the process's OpenMP runtime (PyTorch's libgomp).
``TRANSFORMER_FUSED_CPU=0`` turns the kernels off; where they cannot be built (no compiler,
not Linux) ``available()`` is False and every caller keeps PyTorch's operators. The switch is
read when the engine is applied (``accelerate_training``, ``prepare_for_decoding``, the loss's
``cpu_kernel``): a model swapped before the switch was turned off needs ``Swaps.undo()``.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import platform
import subprocess
import sys
import threading
import warnings
from pathlib import Path
from typing import TYPE_CHECKING

from transformer.run_files import replacing

if TYPE_CHECKING:
    import torch

ENV_SWITCH = "TRANSFORMER_FUSED_CPU"
_SOURCES = (Path(__file__).with_name("fused.c"), Path(__file__).with_name("packed_linear.c"))
# -O3 vectorises the loops for this CPU; the sums may be reassociated (vectorised reductions).
_FLAGS = ["-O3", "-march=native", "-fno-math-errno", "-fassociative-math", "-fno-signed-zeros",
          "-fno-trapping-math", "-fopenmp", "-shared", "-fPIC"]

_lock = threading.Lock()
_library: ctypes.CDLL | None = None
_tried = False


def switched_on() -> bool:
    """Whether the environment allows the kernels (``TRANSFORMER_FUSED_CPU`` is not 0/false/no/off)."""
    return os.environ.get(ENV_SWITCH, "1").lower() not in ("0", "false", "no", "off")


def available() -> bool:
    """Whether the kernels are switched on and compiled (compiling them on the first call)."""
    return switched_on() and _load() is not None


def library() -> ctypes.CDLL:
    """The compiled kernels; raises RuntimeError where ``available()`` is False."""
    lib = _load() if switched_on() else None
    if lib is None:
        raise RuntimeError(f"the CPU kernels are unavailable (switched off by {ENV_SWITCH}=0, or no C compiler)")
    return lib


def pointer(tensor: torch.Tensor | None) -> int | None:
    """A tensor's data address for the library's functions (None for a missing tensor)."""
    return tensor.data_ptr() if tensor is not None else None


def threads() -> int:
    """The threads the library's parallel kernels use: PyTorch's intra-op thread count."""
    import torch

    return torch.get_num_threads()


def _load() -> ctypes.CDLL | None:
    global _library, _tried
    if _tried:
        return _library
    with _lock:
        if not _tried:
            try:
                _library = _declare(ctypes.CDLL(str(_build())))
            except (OSError, subprocess.SubprocessError) as e:
                warnings.warn(f"CPU kernels unavailable, using PyTorch's operators ({e})", RuntimeWarning,
                              stacklevel=3)
            _tried = True
    return _library


def _cpu_key() -> str:
    try:
        flags = next((line for line in Path("/proc/cpuinfo").read_text().splitlines() if line.startswith("flags")), "")
    except OSError:
        flags = ""
    return platform.machine() + flags


def _build() -> Path:
    if not sys.platform.startswith("linux"):
        raise OSError(f"built and tested on Linux only, not {sys.platform}")
    compiler = os.environ.get("CC", "cc")
    sources = b"".join(path.read_bytes() for path in _SOURCES)
    key = hashlib.sha256(sources + " ".join([compiler, *_FLAGS, _cpu_key()]).encode()).hexdigest()[:16]
    # the user's cache, as for downloads, never the package's folder (site-packages may be read-only)
    cache = Path(os.environ.get("TRANSFORMER_CACHE", Path.home() / ".cache" / "transformer")).expanduser()
    target = cache / f"cpu_kernels-{key}.so"
    if target.exists():
        return target
    cache.mkdir(parents=True, exist_ok=True)
    with replacing(target, suffix=".so") as built:  # built beside it, then renamed: atomic
        result = subprocess.run([compiler, *_FLAGS, *map(str, _SOURCES), "-o", str(built)], capture_output=True,
                                text=True, timeout=120)
        if result.returncode != 0:
            raise OSError(f"{compiler} failed: {result.stderr.strip()[:500]}")
    return target


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    P, L, U64, U32, F, I = ctypes.c_void_p, ctypes.c_long, ctypes.c_uint64, ctypes.c_uint32, ctypes.c_float, ctypes.c_int
    signatures: dict[str, list] = {}
    for kind in ("f32", "bf16"):
        signatures |= {
            f"dropout_{kind}": [P, P, L, U64, U32, F],
            f"dropout_add_layer_norm_{kind}": [P, P, P, P, P, P, P, P, L, L, U64, U32, F, F],
            f"dropout_add_layer_norm_backward_{kind}": [P, P, P, P, P, P, P, P, P, L, L, U64, U32, F],
            f"smoothed_nll_{kind}": [P, P, P, P, P, P, L, L, F],
            f"attention_forward_{kind}": [P, L, L, P, L, L, P, L, L, P, L, L, L, L, I, P, P, L, L, L, L, L, F, U64,
                                          U32, F],
            f"attention_backward_{kind}": [P, P, L, L, P, L, L, P, L, L, P, P, L, L, P, L, L, P, L, L, L, L, L, L, L,
                                           F, U64, U32, F],
        }
    signatures |= {
        "pack_f32": [P, L, L, L, P, I],
        "pack_s8": [P, L, L, L, P, P, I],
        "linear_f32": [P, L, L, L, P, P, P, L, P, L, I, I],
        "attend_f32": [P, L, L, L, P, L, L, L, P, L, L, L, P, L, L, I, P, L, L, L, L, L, L, F],
        "decoder_layer_step_f32": [P, L, L, L, L, P, P, P, L, L, L, L, P, P, L, L, L, L, L, L, L, L, P, L, L, I, F, I],
        "best_tokens_f32": [P, L, L, L, L, P, P],
    }
    for name, argtypes in signatures.items():
        function = getattr(lib, name)
        function.argtypes, function.restype = argtypes, None
    lib.panel_width.argtypes, lib.panel_width.restype = [], I
    return lib

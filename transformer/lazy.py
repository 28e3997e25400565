"""A package's public names imported from their modules on first use (PEP 562), so that importing
the package, or a light module of it such as a command's parser, does not load torch."""

from __future__ import annotations

import importlib
import sys
from typing import Any, Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` for ``exports``: each name -> the module that
    defines it (``".data"``: relative to the package). A name is imported once, then kept in the package."""
    namespace = sys.modules[package].__dict__

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = namespace[name] = getattr(importlib.import_module(exports[name], package), name)
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__

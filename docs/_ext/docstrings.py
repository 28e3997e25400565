"""Sphinx extension: docstrings written as plain text render as reStructuredText without warnings.

The package's docstrings are read as text first (``help()``, editors). Three plain-text habits
that reStructuredText reads otherwise are adjusted before the docstring is parsed
(``autodoc-process-docstring``, which sphinx-autoapi emits too; before napoleon's Google-style
sections):

* ``|Y|`` (a length or an absolute value, as the paper writes it) would be a substitution
  reference: the bars are escaped;
* a hanging indent (``name: text`` with its continuation indented under it) would be an
  unexpected indentation: the continuation is joined to its line;
* a bullet list right under its ``Heading:`` line would be part of that paragraph: a blank line
  is put between them.

Literal blocks (after ``::``), doctests and Google-style sections (a line ending with ``:``
followed by an indented block) are left as they are. Everything else is reported by the strict
build like any other warning.
"""

from __future__ import annotations

import re
from typing import Any

_BARS = re.compile(r"(?<![\w|\\`])\|([\w.^-]+)\|(?![\w|`])")
_BULLET = re.compile(r"\s*([*+-]|\d+\.)\s")


def escape_bars(line: str) -> str:
    """``|Y|^alpha`` -> ``\\|Y\\|^alpha`` outside inline literals (````...````)."""
    parts = line.split("``")
    for i in range(0, len(parts), 2):  # even parts are outside ``literals``
        parts[i] = _BARS.sub(r"\\|\1\\|", parts[i])
    return "``".join(parts)


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def normalise(lines: list[str]) -> list[str]:
    """The docstring ``lines`` with the plain-text habits above made valid reStructuredText."""
    out: list[str] = []
    literal_indent: int | None = None  # inside a literal block opened by a line at this indent
    for line in lines:
        stripped = line.strip()
        if literal_indent is not None:
            if not stripped or _indent(line) > literal_indent:
                out.append(line)
                continue
            literal_indent = None
        previous = out[-1] if out else ""
        if stripped.endswith("::") or stripped.startswith(">>>"):
            literal_indent = _indent(line)
            out.append(escape_bars(line) if not stripped.startswith(">>>") else line)
            continue
        line = escape_bars(line)
        if previous.strip() and stripped:
            opens_block = previous.rstrip().endswith(":") or previous.lstrip().startswith("..")
            if _BULLET.match(line) and previous.rstrip().endswith(":") and not _BULLET.match(previous) \
                    and _indent(line) == _indent(previous) and not previous.lstrip().startswith(".."):
                out.append("")  # a blank line before a list that follows its heading line
            elif _indent(line) > _indent(previous) and not opens_block and not _BULLET.match(previous):
                out[-1] = previous.rstrip() + " " + line.strip()  # a hanging indent: one line
                continue
        out.append(line)
    return out


def _process(app: Any, what: str, name: str, obj: Any, options: Any, lines: list[str]) -> None:
    lines[:] = normalise(lines)


def setup(app: Any) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.autodoc")  # registers the event
    app.connect("autodoc-process-docstring", _process, priority=400)  # before napoleon (500)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}

"""Sphinx extension: a package's lazy exports are documented as its imports are.

Some packages (``transformer``, ``transformer.model``, ``transformer.cuda``,
``transformer.interop``) import their public names when first used (PEP 562 ``__getattr__``),
so that the command line's parser loads without torch; they name them for readers and type
checkers under ``if TYPE_CHECKING:``. sphinx-autoapi documents the names a package imports from
the package itself (on the package's page, beside their own modules), but reads only imports at
the module's top level. This extension has it read the imports under a module-level
``if TYPE_CHECKING:`` the same way, so those pages list the public names as they did when the
imports were eager. Any other ``if`` is parsed as sphinx-autoapi parses it.
"""

from __future__ import annotations

from typing import Any

import astroid
from autoapi import _astroid_utils
from autoapi._parser import Parser


def _is_type_checking(node: astroid.nodes.If) -> bool:
    test = node.test
    return (isinstance(test, astroid.nodes.Name) and test.name == "TYPE_CHECKING") or (
        isinstance(test, astroid.nodes.Attribute) and test.attrname == "TYPE_CHECKING")


def parse_if(self: Parser, node: astroid.nodes.If) -> list[dict[str, Any]]:
    """The imports from the package under a module-level ``if TYPE_CHECKING:``, as placeholders
    that sphinx-autoapi resolves to the objects (what it makes of a top-level import)."""
    if isinstance(node.parent, astroid.nodes.Module) and _is_type_checking(node):
        package = node.root().name.split(".", 1)[0]
        return [data for child in node.body if _astroid_utils.is_local_import_from(child, package)
                for data in self._parse_local_import_from(child)]
    for child in node.get_children():  # sphinx-autoapi's own handling of a node it has no parser for
        data = self.parse(child)
        if data:
            return data
    return []


def setup(app) -> dict[str, Any]:
    Parser.parse_if = parse_if
    return {"parallel_read_safe": True}

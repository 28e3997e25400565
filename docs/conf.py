"""Sphinx configuration of the documentation site (build: ``sphinx-build -W --keep-going -b html docs docs/_build``).

Pages are MyST Markdown; the theme is furo. The API reference is made by sphinx-autoapi, which
reads the package's source with astroid instead of importing it: no torch, no compiled CPU
kernels, no optional extras (FastAPI, transformers) are needed to render it, and it is fast.
Three small local extensions (``docs/_ext/``) generate pages from the code at build time: the
configuration reference (``configref``: every key of the config dataclasses with its default,
range and meaning), the command-line reference (``cliref``: ``transformer.cli.build_parser()``)
and the HTTP API reference (``openapiref``: the OpenAPI schema of
``transformer.serve.app.create_app``). They write into ``docs/_generated/`` (ignored by git);
pages include them. ``docstrings`` lets plain-text docstrings render without warnings.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
# The repository; tests/test_docs.py builds a copy of docs/ elsewhere (so that concurrent builds
# never share autoapi's and the extensions' generated files) and says where the code is.
ROOT = Path(os.environ.get("TRANSFORMER_DOCS_SOURCE") or DOCS.parent).resolve()
sys.path.insert(0, str(DOCS / "_ext"))
sys.path.insert(0, str(ROOT))

project = "transformer"
author = "the transformer developers"
copyright = "2026, the transformer developers"
release = version = "0.1.0"

extensions = [
    "myst_parser",
    "docstrings",  # plain-text docstring habits made valid reStructuredText (before napoleon)
    "sphinx.ext.napoleon",  # the docstrings' Google-style Args: / Returns: / Raises: sections
    "autoapi.extension",
    "configref",
    "cliref",
    "openapiref",
]

# ".rst" first: sphinx-autoapi writes its pages (reStructuredText) with the first suffix.
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build", "_generated", "Thumbs.db", ".DS_Store"]
suppress_warnings = [
    # autoapi cannot follow a constant defined by tuple unpacking (``PAD, BOS, EOS, UNK = ...``)
    # when another module re-exports it; the reference pages are complete without it.
    "autoapi.python_import_resolution",
]

# MyST: ```{directive} fences, $...$ maths, heading anchors for [text](page.md#anchor) links.
myst_enable_extensions = ["colon_fence", "dollarmath", "deflist"]
myst_heading_anchors = 3

# sphinx-autoapi: the API reference from the source (docstrings, signatures), without importing it.
autoapi_type = "python"
autoapi_dirs = [str(ROOT / "transformer")]
autoapi_root = "api"
autoapi_add_toctree_entry = False  # index.md places it
autoapi_keep_files = False
autoapi_member_order = "bysource"
autoapi_options = ["members", "undoc-members", "show-inheritance", "show-module-summary"]
autoapi_python_class_content = "class"
autodoc_typehints = "signature"
napoleon_use_ivar = True  # "Attributes:" sections as fields: autoapi documents the attributes themselves

html_theme = "furo"
html_title = "transformer"
html_static_path: list[str] = []
html_show_sourcelink = False


# Pages other features are writing (docs/translate.md, docs/serving.md, ...) are listed in the
# toctrees of index.md and decoding.md already; until a page exists its toctree line is dropped,
# so the strict build passes before and after it lands. Any other missing page is an error.
OPTIONAL_PAGES = ("translate", "html", "segmentation", "serving")


def _drop_missing_optional_pages(app, docname, source):
    missing = [name for name in OPTIONAL_PAGES if not (DOCS / f"{name}.md").is_file()]
    if docname in ("index", "decoding") and missing:
        lines = source[0].split("\n")
        source[0] = "\n".join(line for line in lines if line.strip() not in missing)


def _unresolved_api_reference(app, env, node, contnode):
    """A guide page's {py:...} reference to an object the API reference lacks is an error (the API
    pages' own type hints, such as ``torch.Tensor``, are left alone)."""
    if node.get("refdomain") == "py" and not node.get("refdoc", "").startswith("api/"):
        from sphinx.util import logging

        logging.getLogger(__name__).warning("no API object %r (a renamed or moved function?)", node.get("reftarget"),
                                            location=node)


def setup(app):
    app.connect("source-read", _drop_missing_optional_pages)
    app.connect("missing-reference", _unresolved_api_reference)


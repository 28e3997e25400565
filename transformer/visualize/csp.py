"""Content-Security-Policy sources for pages whose code is all inline: the SHA-256 hash of each
inline ``<script>`` and ``<style>`` (and of ``style="..."`` attributes), so that a policy can allow
exactly the page's own code and nothing that data might smuggle in.

Used by the server's page (:func:`transformer.serve.page.page_csp`) and the training report
(:mod:`transformer.visualize.report`). Hash only markup the program wrote itself: a hash taken of a
page after data was inserted would allow whatever that data contained.
"""

from __future__ import annotations

import base64
import hashlib
import html.parser
import re

_INLINE = re.compile(r"<(script|style)(\s[^>]*)?>(.*?)</\1>", re.DOTALL | re.IGNORECASE)
_TYPE = re.compile(r"""\stype\s*=\s*["']?([^"'\s>]+)""", re.IGNORECASE)
_SCRIPT_TYPES = {"", "text/javascript", "application/javascript", "module"}


def sha256_source(text: str) -> str:
    """The CSP source ``'sha256-...'`` that allows inline code ``text`` exactly."""
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode("utf-8")).digest()).decode("ascii") + "'"


def inline_hashes(document: str) -> tuple[list[str], list[str]]:
    """CSP sources (``'sha256-...'``) of the inline scripts and styles of ``document``: each
    ``<script>`` that runs (not a ``type="application/json"`` data block) and each ``<style>``."""
    scripts: list[str] = []
    styles: list[str] = []
    for tag, attrs, content in _INLINE.findall(document):
        kind = _TYPE.search(attrs or "")
        if tag.lower() == "script" and (kind.group(1).lower() if kind else "") not in _SCRIPT_TYPES:
            continue
        source = sha256_source(content)
        bucket = scripts if tag.lower() == "script" else styles
        if source not in bucket:
            bucket.append(source)
    return scripts, styles


class _StyleAttributes(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.values: dict[str, None] = {}

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        for name, value in attrs:
            if name == "style" and value is not None:
                self.values[value] = None

    handle_startendtag = handle_starttag


def style_attribute_hashes(markup: str) -> list[str]:
    """CSP sources of the distinct ``style="..."`` attribute values of ``markup`` (as the browser
    reads them, character references decoded); a policy allows them with ``'unsafe-hashes'``."""
    parser = _StyleAttributes()
    parser.feed(markup)
    parser.close()
    return [sha256_source(value) for value in parser.values]

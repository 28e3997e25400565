"""The web page served at ``/``: paste a paragraph, read the translation, explore a sentence's attention.

The page posts the text to ``/v1/translate`` and shows the translation in the text's structure
(line breaks and blank lines kept), each sentence of it, and of the source beside it, a
clickable span (from the sentence alignment: code point offsets, converted to JavaScript's UTF-16
strings with ``Array.from``). Picking a sentence (a click on either side, or the
``#sentence-select`` list) posts the text and that sentence's index to ``/v1/attention``,
highlights the sentence pair and draws its attention with the interactive page of
:mod:`transformer.visualize` (its ``page.html``, ``page.js`` and ``grid.js``, unchanged) inside an
``<iframe id="attention-frame">``: the visualization template is embedded in this page once, and
each answer fills in its data (``srcdoc``). After a translation the first sentence is shown.
Everything is inline (``page.html``, ``page.css`` and ``page.js`` in this package, put together
when the page is built); the page needs nothing but the server itself.

The page is served with a Content-Security-Policy (:func:`page_csp`) that lets it run only its
own inline code: the SHA-256 hash of each inline ``<script>`` and ``<style>`` of this page and of
the attention view (an ``srcdoc`` frame inherits the page's policy), ``fetch`` to its own origin,
nothing loaded from elsewhere, no ``<base>``, never framed by another page.

A glossary box (``#glossary``, folded under "Glossary") takes terms the translation must use, one
per line, ``source = target`` or ``source<TAB>target`` (blank lines and lines starting with ``#``
skipped; a line without a separator or with an empty side is refused naming it, before anything is
sent); they go with the request as ``glossary``, and with the attention requests, so the attention
shown is that of the translation shown. Terms the translation could not hold are listed in
``#missing-terms``. An empty box sends no glossary.

Where the served model is calibrated (``confidence_threshold`` given), the page asks for each
sentence's confidence (``confidence: true``) and shows it on hover over the sentence (both sides)
and in the sentence list; a sentence whose confidence is below the threshold (``transformer serve
--confidence-threshold``) is underlined with dots (``.sentence.doubtful``) and named in
``#confidence-note`` as one to check. Without a calibration the page asks for none and shows none.

With several models (``pairs`` given), the page offers the languages: ``#source-lang`` lists the
languages served as sources and "Detect language" (``auto``), ``#target-lang`` the targets the
chosen source reaches, a pair translated through the pivot language marked so ("German (through
English)"); both are sent with every request as ``source`` and ``target`` (the attention request
names the detected language). A detected language is shown in ``#detected`` ("Detected: French
(97%)"; a text already in the target language is given back as it is). A text translated through
the pivot says so in ``#pivot-note`` (a ``<details>`` holding the pivot text) and has no attention
view: the view draws one model's attention and such a text went through two, which
``#attention-note`` says. The choices come from data embedded when the page is built (the
``#languages`` JSON block; null with one model, whose page names its pair and sends no languages).

Hooks for tests and tools: ``#source`` (the text box), ``#translate`` (the button),
``#translation`` (the output; ``.sentence[data-index]`` spans, with ``data-confidence`` where
confidences are shown), ``#source-view`` (the source, the same spans), ``#sentence-select``, ``#result[data-state]`` (``idle``, ``busy``, ``done`` or
``error``) and ``#result[data-sentence]`` (the sentence whose attention is shown), ``#error`` (the
server's message).
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from importlib import resources
from typing import Any

from transformer.serve.model_set import language_name
from transformer.visualize.csp import inline_hashes
from transformer.visualize.page import MIN_LINE_WEIGHT, PAGE_FORMAT, PAGE_VERSION, _script_json, view_template


def _resource(name: str) -> str:
    return resources.files("transformer.serve").joinpath(name).read_text(encoding="utf-8")


def attention_view_template() -> str:
    """The visualization page with its styles and scripts inlined; ``__TITLE__`` and ``__DATA__`` left to fill."""
    return view_template(min_line_weight=MIN_LINE_WEIGHT)


def index_html(*, src_lang: str | None = None, tgt_lang: str | None = None, max_chars: int = 5000,
               max_sentences: int = 256, confidence_threshold: float | None = None,
               pairs: Sequence[tuple[str, str, str | None]] | None = None) -> str:
    """The HTML of ``/``.

    Args:
        src_lang, tgt_lang: the pair shown (and, with ``pairs``, chosen when the page opens).
        max_chars, max_sentences: the server's limits, said in the hint.
        confidence_threshold: where a model is calibrated, the confidence below which a sentence
            is marked to be checked (None: the page shows no confidence).
        pairs: with several models, every language pair served, as (source, target, pivot
            language or None for a model of its own); the page then offers the languages to
            choose from. None: one model, the page names its pair and sends no languages.
    """
    choice = _language_choice(pairs, src_lang, tgt_lang) if pairs else None
    if choice is not None:
        src_lang, tgt_lang = choice["source"], choice["target"]
    direction = f"{src_lang} \u2192 {tgt_lang}" if src_lang and tgt_lang else "source \u2192 target"
    settings = {"format": PAGE_FORMAT, "version": PAGE_VERSION, "min_line_weight": MIN_LINE_WEIGHT}
    values = {
        "DIRECTION": html.escape(direction),
        "MAX_CHARS": str(int(max_chars)),
        "MAX_SENTENCES": str(int(max_sentences)),
        "CONFIDENCE": _script_json(None if confidence_threshold is None
                                   else {"threshold": float(confidence_threshold)}),
        "LANGUAGES": _script_json(choice),
        "SETTINGS": _script_json(settings),
        "TEMPLATE": _script_json(attention_view_template()),
        "STYLE": _resource("page.css"),
        "SCRIPT": _resource("page.js"),
    }
    # One pass, so that nothing inserted (a language code from a run's config) is read as a placeholder.
    return re.sub("__(" + "|".join(values) + ")__", lambda m: values[m.group(1)], _resource("page.html"))


def _language_choice(pairs: Sequence[tuple[str, str, str | None]], src_lang: str | None,
                     tgt_lang: str | None) -> dict[str, Any]:
    """The page's language data: the sources in the order served, every pair (with its pivot),
    each language's English name, the pivot, and the pair chosen when the page opens."""
    rows = [{"source": s, "target": t, "via": via} for s, t, via in pairs]
    codes = dict.fromkeys(code for row in rows for code in (row["source"], row["target"], row["via"]) if code)
    default = (src_lang, tgt_lang) if (src_lang, tgt_lang) in {(r["source"], r["target"]) for r in rows} \
        else (rows[0]["source"], rows[0]["target"])
    return {"sources": list(dict.fromkeys(row["source"] for row in rows)), "pairs": rows,
            "names": {code: language_name(code) for code in codes}, "source": default[0], "target": default[1]}


def page_csp(page: str) -> str:
    """The Content-Security-Policy of the page ``page`` (from :func:`index_html`): its inline code
    and the attention view's, by hash, and nothing else (``fetch`` to the server itself)."""
    scripts, styles = inline_hashes(page)
    view_scripts, view_styles = inline_hashes(attention_view_template())
    script_src = " ".join(dict.fromkeys(scripts + view_scripts))
    style_src = " ".join(dict.fromkeys(styles + view_styles))
    return ("default-src 'none'; "
            f"script-src {script_src}; style-src {style_src}; "
            "img-src data:; connect-src 'self'; frame-src 'self'; "
            "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")


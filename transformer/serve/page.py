"""The web page served at ``/``: type a sentence, read the translation, explore its attention.

The page posts the text to ``/v1/attention``, shows the translation from the answer and draws the
attention with the interactive page of :mod:`transformer.visualize` (its ``page.html`` and
``page.js``, unchanged) inside an ``<iframe id="attention-frame">``: the visualization template is
embedded in this page once, and each answer fills in its data (``srcdoc``). Everything is inline;
the page needs nothing but the server itself.

Hooks for tests and tools: ``#source`` (the text box), ``#translate`` (the button),
``#translation`` (the output), ``#result[data-state]`` (``idle``, ``busy``, ``done`` or ``error``),
``#error`` (the server's message).
"""

from __future__ import annotations

import html
import json
from importlib import resources

from transformer.visualize.page import MIN_LINE_WEIGHT, PAGE_FORMAT, PAGE_VERSION


def _script_json(obj: object) -> str:
    """JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def attention_view_template() -> str:
    """The visualization page with its script inlined; ``__TITLE__`` and ``__DATA__`` left to fill."""
    package = resources.files("transformer.visualize")
    page = package.joinpath("page.html").read_text(encoding="utf-8")
    script = package.joinpath("page.js").read_text(encoding="utf-8")
    return page.replace("__MIN_WEIGHT__", f"{MIN_LINE_WEIGHT:g}").replace("__SCRIPT__", script)


def index_html(*, src_lang: str | None = None, tgt_lang: str | None = None, max_chars: int = 1000) -> str:
    """The HTML of ``/``."""
    direction = f"{src_lang} \u2192 {tgt_lang}" if src_lang and tgt_lang else "source \u2192 target"
    settings = {"format": PAGE_FORMAT, "version": PAGE_VERSION, "min_line_weight": MIN_LINE_WEIGHT}
    return (_INDEX.replace("__DIRECTION__", html.escape(direction))
            .replace("__MAX_CHARS__", str(int(max_chars)))
            .replace("__SETTINGS__", _script_json(settings))
            .replace("__TEMPLATE__", _script_json(attention_view_template())))


_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Transformer translation</title>
<link rel="icon" href="data:,">
<style>
  :root { --fg: #1d1d1f; --muted: #6b6b70; --line: #d8d8dc; --accent: #2458b3; --bad: #b3261e; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: var(--fg); }
  header, main { max-width: 1200px; margin: 0 auto; padding: 14px 18px; }
  h1 { font-size: 19px; margin: 0; }
  .direction { color: var(--muted); }
  form { display: grid; grid-template-columns: 1fr auto; gap: 10px; align-items: start; }
  textarea { font: inherit; width: 100%; min-height: 4.5em; padding: 8px; border: 1px solid var(--line); border-radius: 6px; resize: vertical; }
  button { font: inherit; padding: 8px 18px; border: 0; border-radius: 6px; background: var(--accent); color: #fff; cursor: pointer; }
  button:disabled { opacity: .55; cursor: progress; }
  #result { margin-top: 12px; }
  #translation { font-size: 18px; font-weight: 600; min-height: 1.5em; overflow-wrap: anywhere; }
  #meta { color: var(--muted); font-size: 13px; }
  #error { color: var(--bad); }
  #attention-frame { width: 100%; height: 760px; border: 1px solid var(--line); border-radius: 6px; margin-top: 10px; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<header>
  <h1>Transformer translation <span class="direction">__DIRECTION__</span></h1>
</header>
<main>
  <form id="form">
    <textarea id="source" maxlength="__MAX_CHARS__" placeholder="Type a sentence, e.g. je suis \u00e9tudiant" autofocus></textarea>
    <button id="translate" type="submit">Translate</button>
  </form>
  <section id="result" data-state="idle" aria-live="polite">
    <div id="translation"></div>
    <div id="meta"></div>
    <div id="error" hidden></div>
    <iframe id="attention-frame" title="attention of this translation" sandbox="allow-scripts" hidden></iframe>
  </section>
</main>
<script type="application/json" id="view-settings">__SETTINGS__</script>
<script type="application/json" id="view-template">__TEMPLATE__</script>
<script>
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const SETTINGS = JSON.parse($("view-settings").textContent);
  const TEMPLATE = JSON.parse($("view-template").textContent);
  const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
  const scriptJson = (o) => JSON.stringify(o).replace(/</g, "\\\\u003c").replace(/>/g, "\\\\u003e").replace(/&/g, "\\\\u0026");

  function viewHtml(doc) {  /* the visualization page for one attention document */
    const payload = Object.assign({}, SETTINGS, { sentences: [doc] });
    const values = { TITLE: escapeHtml("Attention: " + doc.source), DATA: scriptJson(payload) };
    return TEMPLATE.replace(/__(TITLE|DATA)__/g, (_, key) => values[key]);
  }

  function show(state, { translation = "", meta = "", error = "" } = {}) {
    $("result").dataset.state = state;
    $("translation").textContent = translation;
    $("meta").textContent = meta;
    $("error").textContent = error;
    $("error").hidden = !error;
    $("translate").disabled = state === "busy";
  }

  async function translate(event) {
    event.preventDefault();
    const text = $("source").value;
    show("busy", { meta: "translating\u2026" });
    const started = performance.now();
    try {
      const response = await fetch("/v1/attention", { method: "POST", headers: { "Content-Type": "application/json" },
                                                      body: JSON.stringify({ text }) });
      const body = await response.json();
      if (!response.ok) { show("error", { error: body.message || response.statusText }); return; }
      const ms = Math.round(performance.now() - started);
      show("done", { translation: body.translation || "(empty translation)",
                     meta: `${body.tokens.source.pieces.length} source tokens \u2192 ` +
                           `${body.tokens.target_output.pieces.length - 1} target tokens \u00b7 ${ms} ms` });
      const frame = $("attention-frame");
      frame.srcdoc = viewHtml(body);
      frame.hidden = false;
    } catch (err) {
      show("error", { error: "the server did not answer: " + err });
    }
  }

  $("form").addEventListener("submit", translate);
  $("source").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("form").requestSubmit();
  });
  document.body.dataset.ready = "true";
})();
</script>
</body>
</html>
"""

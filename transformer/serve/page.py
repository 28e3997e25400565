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
Everything is inline; the page needs nothing but the server itself.

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
import json
import re
from collections.abc import Sequence
from typing import Any

from transformer.serve.models import language_name
from transformer.visualize.csp import inline_hashes
from transformer.visualize.page import MIN_LINE_WEIGHT, PAGE_FORMAT, PAGE_VERSION, view_template


def _script_json(obj: object) -> str:
    """JSON that is safe inside a ``<script>`` element."""
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


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
    }
    # One pass, so that nothing inserted (a language code from a run's config) is read as a placeholder.
    return re.sub("__(" + "|".join(values) + ")__", lambda m: values[m.group(1)], _INDEX)


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


_INDEX = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>Transformer translation</title>
<link rel="icon" href="data:,">
<style>
  :root { --fg: #1d1d1f; --muted: #6b6b70; --line: #d8d8dc; --accent: #2458b3; --bad: #b3261e; --pick: #fff0b3; --hover: #eef3fc; }
  * { box-sizing: border-box; }
  body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", "DejaVu Sans", sans-serif; color: var(--fg); }
  header, main { max-width: 1200px; margin: 0 auto; padding: 14px 18px; }
  h1 { font-size: 19px; margin: 0; }
  .direction { color: var(--muted); }
  .hint { color: var(--muted); font-size: 13px; margin: 4px 0 0; }
  form { display: grid; grid-template-columns: 1fr auto; gap: 10px; align-items: start; }
  textarea { font: inherit; width: 100%; min-height: 7em; padding: 8px; border: 1px solid var(--line); border-radius: 6px; resize: vertical; }
  button { font: inherit; padding: 8px 18px; border: 0; border-radius: 6px; background: var(--accent); color: #fff; cursor: pointer; }
  button:disabled { opacity: .55; cursor: progress; }
  #result { margin-top: 12px; }
  #texts { display: grid; grid-template-columns: 1fr 1fr; gap: 14px; }
  #texts h2 { font-size: 13px; font-weight: 600; color: var(--muted); margin: 0 0 4px; text-transform: uppercase; letter-spacing: .04em; }
  #source-view, #translation { white-space: pre-wrap; overflow-wrap: anywhere; min-height: 1.5em; }
  #translation { font-size: 18px; font-weight: 600; }
  .sentence { cursor: pointer; border-radius: 3px; }
  .sentence:hover, .sentence:focus { background: var(--hover); outline: none; }
  .sentence.picked { background: var(--pick); }
  #meta, #attention-meta { color: var(--muted); font-size: 13px; }
  #sentence-picker { margin-top: 10px; display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
  #sentence-select { font: inherit; max-width: 100%; }
  #error { color: var(--bad); }
  #attention-frame { width: 100%; height: 760px; border: 1px solid var(--line); border-radius: 6px; margin-top: 10px; }
  #glossary-box { grid-column: 1 / -1; color: var(--muted); font-size: 13px; }
  #glossary-box textarea { min-height: 4em; font-size: 14px; color: var(--fg); margin-top: 4px; }
  #missing-terms, #confidence-note { color: var(--bad); font-size: 13px; }
  #language-pickers { grid-column: 1 / -1; display: flex; gap: 8px; align-items: center; flex-wrap: wrap; }
  #language-pickers select { font: inherit; }
  #detected, #pivot-note, #attention-note { color: var(--muted); font-size: 13px; margin-top: 6px; }
  #pivot-text { white-space: pre-wrap; overflow-wrap: anywhere; color: var(--fg); font-size: 15px; margin-top: 4px; }
  .sentence.doubtful { text-decoration: underline dotted var(--bad) 2px; text-underline-offset: 3px; }
  [hidden] { display: none !important; }
</style>
</head>
<body>
<header>
  <h1>Transformer translation <span class="direction" id="h1-direction">__DIRECTION__</span></h1>
  <p class="hint">Paste a sentence or paragraphs (at most __MAX_CHARS__ characters, __MAX_SENTENCES__ sentences); click a sentence of the translation to see its attention.</p>
</header>
<main>
  <form id="form">
    <div id="language-pickers" hidden>
      <label for="source-lang">From</label>
      <select id="source-lang"></select>
      <label for="target-lang">into</label>
      <select id="target-lang"></select>
    </div>
    <textarea id="source" maxlength="__MAX_CHARS__" placeholder="Type or paste text, e.g. je suis \u00e9tudiant. le chat noir dort sur la table." autofocus></textarea>
    <button id="translate" type="submit">Translate</button>
    <details id="glossary-box">
      <summary>Glossary</summary>
      <label for="glossary">Terms the translation must use, one per line: <code>source = target</code> (or source, a tab, target); lines starting with # are skipped.</label>
      <textarea id="glossary" spellcheck="false" placeholder="chat = cat&#10;&#233;tudiant = student"></textarea>
    </details>
  </form>
  <section id="result" data-state="idle" aria-live="polite">
    <div id="texts" hidden>
      <div><h2>Source</h2><div id="source-view"></div></div>
      <div><h2>Translation</h2><div id="translation"></div></div>
    </div>
    <div id="detected" hidden></div>
    <details id="pivot-note" hidden><summary id="pivot-summary"></summary><div id="pivot-text"></div></details>
    <div id="attention-note" hidden></div>
    <div id="meta"></div>
    <div id="missing-terms" hidden></div>
    <div id="confidence-note" hidden></div>
    <div id="error" hidden></div>
    <div id="sentence-picker" hidden>
      <label for="sentence-select">Attention of sentence</label>
      <select id="sentence-select"></select>
      <span id="attention-meta"></span>
    </div>
    <iframe id="attention-frame" title="attention of the chosen sentence" sandbox="allow-scripts" hidden></iframe>
  </section>
</main>
<script type="application/json" id="view-settings">__SETTINGS__</script>
<script type="application/json" id="view-template">__TEMPLATE__</script>
<script type="application/json" id="confidence-settings">__CONFIDENCE__</script>
<script type="application/json" id="languages">__LANGUAGES__</script>
<script>
(function () {
  "use strict";
  const $ = (id) => document.getElementById(id);
  const SETTINGS = JSON.parse($("view-settings").textContent);
  const TEMPLATE = JSON.parse($("view-template").textContent);
  const CONFIDENCE = JSON.parse($("confidence-settings").textContent);  /* {threshold} on a calibrated model, else null */
  /* Several models: {sources, pairs: [{source, target, via}], names, source, target}; one model: null (no languages sent). */
  const LANGUAGES = JSON.parse($("languages").textContent);
  const AUTO = "auto";
  const escapeHtml = (s) => s.replace(/[&<>"']/g, (c) => "&#" + c.charCodeAt(0) + ";");
  const scriptJson = (o) => JSON.stringify(o).replace(/</g, "\\\\u003c").replace(/>/g, "\\\\u003e").replace(/&/g, "\\\\u0026");
  let current = null;  /* {text, sentences, glossary, source, target}: the translated text and its alignment */
  let generation = 0;  /* answers to older requests are ignored */

  const nameOf = (code) => (LANGUAGES && Object.prototype.hasOwnProperty.call(LANGUAGES.names, code) ?
    LANGUAGES.names[code] : code);

  /* The targets a source is translated into ([{target, via}]); detected sources: every target served. */
  function targetsOf(source) {
    if (source !== AUTO) return LANGUAGES.pairs.filter((p) => p.source === source);
    const seen = new Map();
    LANGUAGES.pairs.forEach((p) => { if (!seen.has(p.target)) seen.set(p.target, { target: p.target, via: null }); });
    return Array.from(seen.values());
  }

  function fillTargets() {
    const select = $("target-lang");
    const keep = select.value;
    select.textContent = "";
    targetsOf($("source-lang").value).forEach((p) => {
      const option = new Option(nameOf(p.target) + (p.via ? ` (through ${nameOf(p.via)})` : ""), p.target);
      if (p.via) option.dataset.via = p.via;
      select.append(option);
    });
    if (Array.from(select.options).some((o) => o.value === keep)) select.value = keep;
    showDirection();
  }

  function showDirection() {
    const source = $("source-lang").value;
    const option = $("target-lang").selectedOptions[0];
    if (!option) return;
    $("h1-direction").textContent = (source === AUTO ? "detected language" : nameOf(source)) + " \u2192 " +
      option.textContent;
  }

  function setUpLanguages() {
    const select = $("source-lang");
    select.append(new Option("Detect language", AUTO));
    LANGUAGES.sources.forEach((code) => select.append(new Option(nameOf(code), code)));
    select.value = LANGUAGES.source;
    fillTargets();
    $("target-lang").value = LANGUAGES.target;
    showDirection();
    select.addEventListener("change", fillTargets);
    $("target-lang").addEventListener("change", showDirection);
    $("language-pickers").hidden = false;
  }

  function viewHtml(doc) {  /* the visualization page for one attention document */
    const payload = Object.assign({}, SETTINGS, { sentences: [doc] });
    const values = { TITLE: escapeHtml("Attention: " + doc.source), DATA: scriptJson(payload) };
    return TEMPLATE.replace(/__(TITLE|DATA)__/g, (_, key) => values[key]);
  }

  /* The API's offsets count code points; Array.from splits a string into code points. */
  function renderSpans(container, text, spans) {
    const chars = Array.from(text);
    container.textContent = "";
    let at = 0;
    spans.forEach(([a, b], i) => {
      if (a > at) container.append(chars.slice(at, a).join(""));
      const span = document.createElement("span");
      span.className = "sentence";
      span.dataset.index = String(i);
      span.tabIndex = 0;
      span.setAttribute("role", "button");
      span.title = "sentence " + (i + 1) + ": show its attention";
      span.textContent = chars.slice(a, b).join("");
      container.append(span);
      at = Math.max(at, b);
    });
    if (at < chars.length) container.append(chars.slice(at).join(""));
  }

  function setState(state) {
    $("result").dataset.state = state;
    $("translate").disabled = state === "busy";
  }

  function showError(message) {
    $("error").textContent = message;
    $("error").hidden = !message;
  }

  function clearResult() {
    current = null;
    $("texts").hidden = true;
    $("translation").textContent = "";
    $("source-view").textContent = "";
    $("sentence-picker").hidden = true;
    $("missing-terms").hidden = true;
    $("confidence-note").hidden = true;
    $("detected").hidden = true;
    $("pivot-note").hidden = true;
    $("pivot-note").open = false;
    $("attention-note").hidden = true;
    $("attention-frame").hidden = true;
    delete $("result").dataset.sentence;
  }

  async function post(path, body) {
    const response = await fetch(path, { method: "POST", headers: { "Content-Type": "application/json" },
                                         body: JSON.stringify(body) });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.message || response.statusText);
    return answer;
  }

  /* The glossary box: "source = target" or "source<TAB>target" per line; blank lines and # lines skipped. */
  function glossaryTerms() {
    const terms = [];
    $("glossary").value.split(/\\r\\n|\\r|\\n/).forEach((line, i) => {
      if (!line.trim() || line.trim().startsWith("#")) return;
      const cut = line.includes("\\t") ? line.indexOf("\\t") : line.indexOf("=");
      const source = cut < 0 ? "" : line.slice(0, cut).trim();
      const target = cut < 0 ? "" : line.slice(cut + 1).trim();
      if (!source || !target) throw new Error(`glossary line ${i + 1}: write source = target (or source, a tab, target)`);
      terms.push({ source, target });
    });
    return terms;
  }

  function showMissingTerms(sentences) {
    const missing = [];
    sentences.forEach((s, i) => (s.missing_terms || []).forEach((t) =>
      missing.push(`${t.source} \u2192 ${t.target} (sentence ${i + 1})`)));
    $("missing-terms").textContent = missing.length ? "Glossary terms not placed: " + missing.join("; ") : "";
    $("missing-terms").hidden = !missing.length;
  }

  const doubtful = (s) => typeof s.confidence === "number" && s.confidence < CONFIDENCE.threshold;

  /* Each sentence's confidence on hover, on both sides; those below the threshold underlined with dots and named. */
  function showConfidence(sentences) {
    const low = [];
    sentences.forEach((s, i) => {
      if (typeof s.confidence !== "number") return;
      if (doubtful(s)) low.push(i + 1);
      document.querySelectorAll(`.sentence[data-index="${i}"]`).forEach((el) => {
        el.dataset.confidence = String(s.confidence);
        el.classList.toggle("doubtful", doubtful(s));
        el.title = `sentence ${i + 1}: confidence ${s.confidence}` + (doubtful(s) ? ", check this sentence" : "") +
          "; show its attention";
      });
    });
    const many = low.length > 1;
    $("confidence-note").textContent = low.length ? `Confidence below ${CONFIDENCE.threshold} for sentence${many ? "s" : ""} ` +
      `${low.join(", ")} (dotted underline): check ${many ? "these sentences" : "this sentence"}.` : "";
    $("confidence-note").hidden = !low.length;
  }

  /* "Detected: French (97%)"; a text already in the target language is given back as it is. */
  function showDetected(found, target) {
    $("detected").textContent = `Detected: ${nameOf(found.language)} (${Math.round(found.confidence * 100)}%)` +
      (found.language === target ? `: already in ${nameOf(target)}, given back as it is` : "");
    $("detected").hidden = false;
  }

  /* A translation with no attention to show: one that went through the pivot language (two models,
     and the attention view draws one model's), or a text given back as it is. */
  function showWithoutAttention(text, t, source, target, started) {
    $("source-view").textContent = text;
    $("translation").textContent = t.translation;
    $("texts").hidden = false;
    if (t.via) {
      $("pivot-summary").textContent = `Translated through ${nameOf(t.via.language)}: no model translates ` +
        `${nameOf(source)} into ${nameOf(target)}. Show the ${nameOf(t.via.language)} text`;
      $("pivot-text").textContent = t.via.translation;
      $("pivot-note").hidden = false;
      $("attention-note").textContent = `No attention view: the attention of one model is drawn, and ` +
        `${nameOf(source)} \u2192 ${nameOf(target)} takes two (${nameOf(source)} \u2192 ${nameOf(t.via.language)}, ` +
        `${nameOf(t.via.language)} \u2192 ${nameOf(target)}). Choose a pair with a model of its own to see it.`;
      $("attention-note").hidden = false;
    }
    const n = t.sentences.length;
    $("meta").textContent = `${n} sentence${n === 1 ? "" : "s"} \u00b7 ${Math.round(performance.now() - started)} ms`;
    setState("done");
  }

  async function translate(event) {
    event.preventDefault();
    const text = $("source").value;
    const mine = ++generation;
    clearResult();
    showError("");
    setState("busy");
    $("meta").textContent = "translating\u2026";
    const started = performance.now();
    try {
      const glossary = glossaryTerms();
      const request = glossary.length ? { text, glossary } : { text };  /* no glossary: the request as before */
      if (CONFIDENCE) request.confidence = true;
      if (LANGUAGES) Object.assign(request, { source: $("source-lang").value, target: $("target-lang").value });
      const body = await post("/v1/translate", request);
      if (mine !== generation) return;
      const t = body.translations[0];
      const source = t.detected_language ? t.detected_language.language : request.source;
      if (t.detected_language) showDetected(t.detected_language, request.target);
      if (t.via || !t.sentences.length) {  /* through the pivot, or already in the target language */
        showWithoutAttention(text, t, source, request.target, started);
        return;
      }
      current = { text, sentences: t.sentences, glossary, source, target: request.target };
      showMissingTerms(t.sentences);
      renderSpans($("source-view"), text, t.sentences.map((s) => s.source_span));
      renderSpans($("translation"), t.translation, t.sentences.map((s) => s.target_span));
      if (CONFIDENCE) showConfidence(t.sentences);
      $("texts").hidden = false;
      const select = $("sentence-select");
      select.textContent = "";
      t.sentences.forEach((s, i) => {
        const words = Array.from(text).slice(s.source_span[0], s.source_span[1]).join("");
        let label = (i + 1) + ". " + (words.length > 70 ? words.slice(0, 69) + "\u2026" : words);
        if (CONFIDENCE && typeof s.confidence === "number") {
          label += ` \u00b7 confidence ${s.confidence}` + (doubtful(s) ? ": check this sentence" : "");
        }
        select.append(new Option(label, String(i)));
      });
      $("sentence-picker").hidden = false;
      const n = t.sentences.length;
      $("meta").textContent = `${n} sentence${n === 1 ? "" : "s"} \u00b7 ${Math.round(performance.now() - started)} ms`;
      await pick(0, mine);
    } catch (err) {
      if (mine !== generation) return;
      $("meta").textContent = "";
      showError(err instanceof TypeError ? "the server did not answer: " + err : err.message);
      setState("error");
    }
  }

  async function pick(index, mine = ++generation) {
    if (!current) return;
    document.querySelectorAll(".sentence").forEach((el) => el.classList.toggle("picked", el.dataset.index === String(index)));
    $("sentence-select").value = String(index);
    showError("");
    setState("busy");
    $("attention-meta").textContent = "computing the attention\u2026";
    const started = performance.now();
    try {
      const request = { text: current.text, sentence: index };
      if (current.glossary.length) request.glossary = current.glossary;  /* the attention of the same translation */
      if (LANGUAGES) Object.assign(request, { source: current.source, target: current.target });
      const doc = await post("/v1/attention", request);
      if (mine !== generation) return;
      $("attention-meta").textContent = `${doc.tokens.source.pieces.length} source tokens \u2192 ` +
        `${doc.tokens.target_output.pieces.length - 1} target tokens \u00b7 ${Math.round(performance.now() - started)} ms`;
      const frame = $("attention-frame");
      frame.srcdoc = viewHtml(doc);
      frame.hidden = false;
      $("result").dataset.sentence = String(index);
      setState("done");
    } catch (err) {
      if (mine !== generation) return;
      $("attention-meta").textContent = "";
      showError(err instanceof TypeError ? "the server did not answer: " + err : err.message);
      setState("error");
    }
  }

  function pickFrom(event) {
    const el = event.target.closest(".sentence");
    if (el && (event.type === "click" || event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      pick(Number(el.dataset.index));
    }
  }

  $("form").addEventListener("submit", translate);
  $("source").addEventListener("keydown", (e) => {
    if (e.key === "Enter" && (e.ctrlKey || e.metaKey)) $("form").requestSubmit();
  });
  for (const id of ["translation", "source-view"]) {
    $(id).addEventListener("click", pickFrom);
    $(id).addEventListener("keydown", pickFrom);
  }
  $("sentence-select").addEventListener("change", (e) => pick(Number(e.target.value)));
  if (LANGUAGES) setUpLanguages();
  document.body.dataset.ready = "true";
})();
</script>
</body>
</html>
"""

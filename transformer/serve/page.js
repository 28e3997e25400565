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
  const scriptJson = (o) => JSON.stringify(o).replace(/</g, "\\u003c").replace(/>/g, "\\u003e").replace(/&/g, "\\u0026");
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
    $("h1-direction").textContent = (source === AUTO ? "detected language" : nameOf(source)) + " → " +
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
    $("memory-note").hidden = true;
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
    $("glossary").value.split(/\r\n|\r|\n/).forEach((line, i) => {
      if (!line.trim() || line.trim().startsWith("#")) return;
      const cut = line.includes("\t") ? line.indexOf("\t") : line.indexOf("=");
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
      missing.push(`${t.source} → ${t.target} (sentence ${i + 1})`)));
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

  /* The sentences whose translation is an accepted entry of the server's translation memory (--tm),
     underlined in the translation and named. */
  function showMemory(sentences) {
    const found = [];
    sentences.forEach((s, i) => {
      if (!s.memory) return;
      found.push(i + 1);
      document.querySelectorAll(`#translation .sentence[data-index="${i}"]`).forEach((el) => {
        el.classList.add("from-memory");
        el.title = `sentence ${i + 1}: from the translation memory (entry ${s.memory.id}); show its attention`;
      });
    });
    const many = found.length > 1;
    $("memory-note").textContent = found.length ? `Sentence${many ? "s" : ""} ${found.join(", ")} from the ` +
      `translation memory (solid underline): ${many ? "translations" : "a translation"} a person accepted.` : "";
    $("memory-note").hidden = !found.length;
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
        `${nameOf(source)} → ${nameOf(target)} takes two (${nameOf(source)} → ${nameOf(t.via.language)}, ` +
        `${nameOf(t.via.language)} → ${nameOf(target)}). Choose a pair with a model of its own to see it.`;
      $("attention-note").hidden = false;
    }
    const n = t.sentences.length;
    $("meta").textContent = `${n} sentence${n === 1 ? "" : "s"} · ${Math.round(performance.now() - started)} ms`;
    setState("done");
  }

  async function translate(event) {
    event.preventDefault();
    const text = $("source").value;
    const mine = ++generation;
    clearResult();
    showError("");
    setState("busy");
    $("meta").textContent = "translating…";
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
      showMemory(t.sentences);
      $("texts").hidden = false;
      const select = $("sentence-select");
      select.textContent = "";
      t.sentences.forEach((s, i) => {
        const words = Array.from(text).slice(s.source_span[0], s.source_span[1]).join("");
        let label = (i + 1) + ". " + (words.length > 70 ? words.slice(0, 69) + "…" : words);
        if (CONFIDENCE && typeof s.confidence === "number") {
          label += ` · confidence ${s.confidence}` + (doubtful(s) ? ": check this sentence" : "");
        }
        if (s.memory) label += " · from the translation memory";
        select.append(new Option(label, String(i)));
      });
      $("sentence-picker").hidden = false;
      const n = t.sentences.length;
      $("meta").textContent = `${n} sentence${n === 1 ? "" : "s"} · ${Math.round(performance.now() - started)} ms`;
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
    $("attention-meta").textContent = "computing the attention…";
    const started = performance.now();
    try {
      const request = { text: current.text, sentence: index };
      if (current.glossary.length) request.glossary = current.glossary;  /* the attention of the same translation */
      if (LANGUAGES) Object.assign(request, { source: current.source, target: current.target });
      const doc = await post("/v1/attention", request);
      if (mine !== generation) return;
      $("attention-meta").textContent = `${doc.tokens.source.pieces.length} source tokens → ` +
        `${doc.tokens.target_output.pieces.length - 1} target tokens · ${Math.round(performance.now() - started)} ms`;
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

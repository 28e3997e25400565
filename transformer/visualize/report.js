/* Training report: the alignment timeline. Reads <script id="report-data"> (report.py) and draws the
   cross-attention of one followed validation sentence at the step the slider picks, with the head
   grid of grid.js (AttentionGrid, inlined before this script): one heatmap per head of the chosen
   decoder layer and their average, the colour of a cell its weight (white 0 to full colour 1), so
   every step is drawn on the same scale and attention spread evenly over the source looks pale. */
(function () {
  "use strict";
  const DATA = JSON.parse(document.getElementById("report-data").textContent);
  const T = DATA.alignments;
  const $ = (id) => document.getElementById(id);
  if (!T) {  /* a run made before the alignment snapshots: the page holds the note and the curves */
    document.body.dataset.ready = "true";
    return;
  }
  const Grid = window.AttentionGrid;
  const validation = new Map(DATA.validation.map((r) => [r.step, r]));
  const state = { sentence: 0, layer: T.sentences[0].layers - 1, step: T.steps.length - 1, timer: null };
  const sentence = () => T.sentences[state.sentence];

  function fillSelect(select, values, text, chosen) {
    select.replaceChildren(...values.map((v) => new Option(text(v), String(v), false, v === chosen)));
  }

  function setupLayers() {
    const n = sentence().layers;
    if (state.layer >= n) state.layer = n - 1;
    fillSelect($("tl-layer"), [...Array(n).keys()], (l) => `${l} of 0\u2013${n - 1}`, state.layer);
  }

  /* How peaked the rows are: the mean over target tokens of the largest weight in the row, for the
     heads' average; 1 / (source length) when attention is uniform, near 1 for a hard alignment. */
  function peak(average) {
    return average.reduce((s, row) => s + Math.max(...row), 0) / average.length / T.scale;
  }

  function draw() {
    const s = sentence(), k = state.step, at = T.steps[k];
    $("tl-step").value = String(k);
    const score = validation.get(at.step) || {};
    /* the records are the run's files: a value that is not a number is left out, not drawn as one */
    const scores = [typeof score.loss === "number" ? `validation loss ${score.loss.toFixed(3)}` : "",
                    typeof score.bleu === "number" ? `BLEU ${score.bleu.toFixed(1)}` : ""].filter(Boolean);
    $("tl-step-label").textContent = `step ${at.step}` + (at.epoch !== null && at.epoch !== undefined ? `, epoch ${at.epoch}` : "") +
      ` (${k + 1} of ${T.steps.length})` + (scores.length ? ` \u00b7 ${scores.join(", ")}` : "");
    const weights = s.weights[k];
    if (!weights) {
      $("tl-grid").replaceChildren();
      $("tl-status").textContent = `no snapshot of this sentence at step ${at.step}`;
      return;
    }
    const W = weights[state.layer];
    const rows = s.tgt_tokens.length, cols = s.src_tokens.length;
    const average = s.tgt_tokens.map((_, i) => s.src_tokens.map((_, j) => W.reduce((sum, m) => sum + m[i][j], 0) / W.length));
    const panels = W.map((m, h) => ({ head: h, matrix: m, color: Grid.headColor(h), caption: `head ${h}` }));
    panels.push({ head: "average", matrix: average, color: "#222222", caption: "average of the heads" });
    Grid.draw($("tl-grid"), {
      rows: s.tgt_tokens, cols: s.src_tokens, rowTitle: "predicting", colTitle: "source", panels,
      scale: T.scale, vmax: T.scale, tags: { layer: state.layer, step: at.step, sentence: s.index },
    });
    $("tl-status").textContent = `decoder layer ${state.layer}: ${rows} target \u00d7 ${cols} source tokens \u00b7 ` +
      `mean largest weight of a row ${peak(average).toFixed(2)} (uniform attention: ${(1 / cols).toFixed(2)}) \u00b7 ` +
      "hover a cell for its weight";
    $("tl-grid").dataset.step = String(at.step);
  }

  function stop() {
    if (state.timer !== null) clearInterval(state.timer);
    state.timer = null;
    $("tl-play").textContent = "\u25b6 play";
  }

  function play() {
    if (state.timer !== null) { stop(); return; }
    if (state.step === T.steps.length - 1) state.step = 0;
    draw();
    $("tl-play").textContent = "\u275a\u275a pause";
    state.timer = setInterval(() => {
      if (state.step >= T.steps.length - 1) { stop(); return; }
      state.step += 1;
      draw();
    }, 700);
  }

  /* The sentence from its token labels (specials left out): a piece marked "·" continues the word before it. */
  const words = (tokens) => tokens.filter((t) => !Grid.SPECIAL.test(t))
    .map((t) => (t.startsWith("\u00b7") ? t.slice(1) : " " + t)).join("").trim();

  fillSelect($("tl-sentence"), [...T.sentences.keys()], (i) => {
    const text = words(T.sentences[i].src_tokens) + " \u2192 " + words(T.sentences[i].tgt_tokens);
    return `${i + 1}. ${text.length > 100 ? text.slice(0, 99) + "\u2026" : text}`;
  }, 0);
  Object.assign($("tl-step"), { min: "0", max: String(T.steps.length - 1), step: "1" });
  $("tl-sentence").addEventListener("change", (e) => { state.sentence = Number(e.target.value); setupLayers(); draw(); });
  $("tl-layer").addEventListener("change", (e) => { state.layer = Number(e.target.value); draw(); });
  $("tl-step").addEventListener("input", (e) => { stop(); state.step = Number(e.target.value); draw(); });
  $("tl-play").addEventListener("click", play);
  setupLayers();
  draw();
  document.body.dataset.ready = "true";
})();

/* Attention page: lines between tokens (tensor2tensor style) and a grid of per-head heatmaps.
   Reads the JSON in <script id="attention-data"> (format: transformer/visualize/schema.json per sentence).
   Every drawn line is an SVG <line class="attn-line"> with data-head/-layer/-kind/-row/-col/-weight
   and stroke-opacity equal to its weight. The head grid, its colours and its token labels come from
   grid.js (AttentionGrid), inlined before this script. The page opens on encoder-decoder attention:
   the alignment of the target words with the source words. */
(function () {
  "use strict";
  const PAGE = JSON.parse(document.getElementById("attention-data").textContent);
  const MIN = PAGE.min_line_weight;
  const SVG_NS = "http://www.w3.org/2000/svg";
  const { SPECIAL, headColor, labels } = window.AttentionGrid;
  const AXIS_TITLES = { source: "source", target_input: "decoder input", target_output: "predicting" };
  const ROW_H = 18, TOP = 30;
  const $ = (id) => document.getElementById(id);
  const state = { sentence: 0, kind: "cross", layer: null, active: [], hover: null, view: "lines" };
  let geometry = null;

  const doc = () => PAGE.sentences[state.sentence];
  const nLayers = (kind) => doc().kinds[kind].weights.length;
  const nHeads = () => doc().model.heads;

  function el(name, attrs, parent) {
    const node = document.createElementNS(SVG_NS, name);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (parent) parent.appendChild(node);
    return node;
  }

  /* ---- controls --------------------------------------------------------------------------- */
  function fillSelect(select, values, text, chosen) {
    select.replaceChildren(...values.map((v) => new Option(text(v), String(v), false, v === chosen)));
  }

  function setupSentence() {
    const d = doc();
    $("sentence-text").innerHTML = "";
    const b1 = document.createElement("b"); b1.textContent = d.source;
    const b2 = document.createElement("b"); b2.textContent = d.translation || "(empty translation)";
    $("sentence-text").append(b1, " \u2192 ", b2);
    const kinds = Object.keys(d.kinds);  /* a recurrent model has only "cross" */
    if (!kinds.includes(state.kind)) state.kind = kinds.includes("cross") ? "cross" : kinds[0];
    for (const option of $("kind-select").options) option.disabled = !kinds.includes(option.value);
    $("kind-select").value = state.kind;
    state.active = Array.from({ length: nHeads() }, (_, h) => h);
    const heads = $("heads");
    heads.replaceChildren();
    for (let h = 0; h < nHeads(); h++) {
      const b = document.createElement("button");
      Object.assign(b, { type: "button", className: "head-toggle", textContent: String(h), title: `head ${h}` });
      b.dataset.head = h;
      b.style.background = headColor(h);
      b.addEventListener("click", () => toggleHead(h));
      b.addEventListener("dblclick", () => { state.active = [h]; update(); });
      heads.appendChild(b);
    }
    setupLayers();
  }

  function setupLayers() {
    const n = nLayers(state.kind);
    if (state.layer === null || state.layer >= n) state.layer = n - 1;
    /* numbered from 0 like --layer and the heatmaps' files; the ends named, not a range beside a number */
    const layerName = (l) => n === 1 ? `${l} (only)` : l === 0 ? `${l} (first)` : l === n - 1 ? `${l} (last)` : `${l}`;
    fillSelect($("layer-select"), [...Array(n).keys()], layerName, state.layer);
  }

  function toggleHead(h) {
    const i = state.active.indexOf(h);
    if (i >= 0) state.active.splice(i, 1); else state.active.push(h);
    state.active.sort((a, b) => a - b);
    update();
  }

  /* ---- lines view ------------------------------------------------------------------------- */
  function drawTokens() {
    const d = doc(), kind = d.kinds[state.kind];
    const rows = labels(d.tokens[kind.rows]), cols = labels(d.tokens[kind.cols]);
    const longest = Math.max(...rows.concat(cols).map((s) => s.length));
    const colW = Math.min(Math.max(longest * 8 + 12, 150), 260);  /* room for the longest label and the titles */
    const x1 = colW, x2 = colW + Math.max(260, Math.min(480, 12 * Math.max(rows.length, cols.length)));
    const svg = $("attention-svg");
    svg.replaceChildren();
    svg.setAttribute("width", x2 + Math.max(colW, 210));  /* the right title is the longest text */
    svg.setAttribute("height", TOP + ROW_H * Math.max(rows.length, cols.length) + 8);
    el("text", { x: x1 - 4, y: 16, "text-anchor": "end", class: "axis-title" }, svg).textContent =
      AXIS_TITLES[kind.rows] + " (attends)";
    el("text", { x: x2 + 4, y: 16, class: "axis-title" }, svg).textContent = AXIS_TITLES[kind.cols] + " (attended to)";
    const lines = el("g", { id: "attn-lines" }, svg);
    const side = (texts, x, anchor, cls) => texts.forEach((t, i) => {
      const y = TOP + ROW_H * i + ROW_H / 2;
      const raw = d.tokens[cls === "row" ? kind.rows : kind.cols].pieces[i];
      const g = el("g", { class: `token-group token-${cls}`, "data-index": i }, svg);
      el("rect", { class: "token-hit", x: anchor === "end" ? 0 : x, y: y - ROW_H / 2, width: colW, height: ROW_H }, g);
      const text = el("text", { x: anchor === "end" ? x - 6 : x + 6, y: y + 4, "text-anchor": anchor,
                                class: `token token-${cls}${SPECIAL.test(raw) ? " special" : ""}`, "data-index": i }, g);
      text.textContent = t;
      g.addEventListener("mouseenter", () => { state.hover = { side: cls, index: i }; drawLines(); });
      g.addEventListener("mouseleave", () => { state.hover = null; drawLines(); });
    });
    side(rows, x1, "end", "row");
    side(cols, x2, "start", "col");
    geometry = { x1, x2, lines };
  }

  function drawLines() {
    const d = doc(), W = d.kinds[state.kind].weights[state.layer], scale = d.weight_scale;
    const { x1, x2, lines } = geometry, frag = document.createDocumentFragment();
    const hover = state.hover;
    let count = 0;
    for (const h of state.active) {
      const color = headColor(h);
      W[h].forEach((row, i) => {
        if (hover && hover.side === "row" && hover.index !== i) return;
        row.forEach((value, j) => {
          if (hover && hover.side === "col" && hover.index !== j) return;
          const w = value / scale;
          if (w < MIN) return;
          const line = el("line", { class: "attn-line", x1, y1: TOP + ROW_H * i + ROW_H / 2, x2,
                                    y2: TOP + ROW_H * j + ROW_H / 2, stroke: color, "stroke-width": 2,
                                    "stroke-opacity": w, "data-head": h, "data-layer": state.layer,
                                    "data-kind": state.kind, "data-row": i, "data-col": j, "data-weight": w });
          frag.appendChild(line);
          count++;
        });
      });
    }
    lines.replaceChildren(frag);
    document.querySelectorAll("#attention-svg .token").forEach((t) => {
      const side = t.classList.contains("token-row") ? "row" : "col";
      t.classList.toggle("hovered", !!hover && hover.side === side && hover.index === Number(t.dataset.index));
    });
    $("status").textContent = `${count} lines (weights \u2265 ${MIN}) \u00b7 layer ${state.layer} \u00b7 ` +
      `heads ${state.active.join(", ") || "none"}` + (hover ? ` \u00b7 only the lines of \u201c${hoverLabel(d, hover)}\u201d` : "");
    $("status").dataset.lines = count;
  }

  function hoverLabel(d, hover) {
    const kind = d.kinds[state.kind];
    return labels(d.tokens[hover.side === "row" ? kind.rows : kind.cols])[hover.index];
  }

  /* ---- head grid view ----------------------------------------------------------------------- */
  function drawGrid() {
    const d = doc(), kind = d.kinds[state.kind], W = kind.weights[state.layer];
    const rows = labels(d.tokens[kind.rows]), cols = labels(d.tokens[kind.cols]);
    let vmax = 1;  /* the layer's largest weight is drawn at full colour */
    for (const m of W) for (const r of m) for (const v of r) vmax = Math.max(vmax, v);
    const average = rows.map((_, i) => cols.map((_, j) =>
      state.active.length ? state.active.reduce((s, h) => s + W[h][i][j], 0) / state.active.length : 0));
    const panels = W.map((m, h) => ({ head: h, matrix: m, color: headColor(h), caption: `head ${h}`,
                                      off: !state.active.includes(h) }));
    panels.push({ head: "average", matrix: average, color: "#222222",
                  caption: state.active.length === 1 ? `average of head ${state.active[0]}`
                    : `average of heads ${state.active.join(", ") || "(none)"}` });
    window.AttentionGrid.draw($("grid-view"), {
      rows, cols, rawRows: d.tokens[kind.rows].pieces, rawCols: d.tokens[kind.cols].pieces,
      rowTitle: AXIS_TITLES[kind.rows], colTitle: AXIS_TITLES[kind.cols], panels, scale: d.weight_scale, vmax,
      tags: { layer: state.layer, kind: state.kind }, onPick: (h) => { state.active = [h]; setView("lines"); },
    });
    $("status").textContent = `${W.length} heads \u00b7 layer ${state.layer} \u00b7 rows: ${AXIS_TITLES[kind.rows]}, ` +
      `columns: ${AXIS_TITLES[kind.cols]} \u00b7 hover a cell for its weight, click a head to see its lines`;
  }

  /* ---- wiring ------------------------------------------------------------------------------- */
  function setView(view) {
    state.view = view;
    update();
  }

  function update() {
    document.querySelectorAll(".head-toggle").forEach((b) =>
      b.setAttribute("aria-pressed", String(state.active.includes(Number(b.dataset.head)))));
    document.querySelectorAll(".segmented button").forEach((b) =>
      b.setAttribute("aria-pressed", String(b.dataset.view === state.view)));
    $("lines-view").hidden = state.view !== "lines";
    $("grid-view").hidden = state.view !== "grid";
    if (state.view === "lines") drawLines(); else drawGrid();
  }

  function redraw() {
    state.hover = null;
    drawTokens();
    update();
  }

  $("sentence-control").hidden = PAGE.sentences.length < 2;
  fillSelect($("sentence-select"), [...PAGE.sentences.keys()],
    (i) => `${i + 1}. ${PAGE.sentences[i].source.slice(0, 80)}`, 0);
  $("sentence-select").addEventListener("change", (e) => {
    state.sentence = Number(e.target.value); setupSentence(); redraw();
  });
  $("kind-select").addEventListener("change", (e) => { state.kind = e.target.value; setupLayers(); redraw(); });
  $("layer-select").addEventListener("change", (e) => { state.layer = Number(e.target.value); update(); });
  $("heads-all").addEventListener("click", () => { state.active = [...Array(nHeads()).keys()]; update(); });
  document.querySelectorAll(".segmented button").forEach((b) => b.addEventListener("click", () => setView(b.dataset.view)));
  setupSentence();
  redraw();
  document.body.dataset.ready = "true";
})();

/* The head grid: one heatmap per attention head (and one for their average), its rows and columns
   labelled with the tokens, the weight of a cell on hover. Shared by the attention page (page.js)
   and the alignment timeline of the training report (report.js): both inline this file first.

   AttentionGrid.draw(container, options) draws, for each panel of options.panels, a
   <figure class="head-cell" data-head> holding .col-labels > .col-label[data-index] (the columns'
   tokens), .row-labels > .row-label[data-index] (the rows') and <canvas class="head-map"> with one
   cell per weight: white blended with the panel's colour by min(1, weight / vmax). Hovering a cell
   fills #tooltip (data-head, -row, -col, -weight) and highlights the cell's two labels. */
window.AttentionGrid = (function () {
  "use strict";
  const PALETTE = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
                   "#bcbd22", "#17becf"];
  const SPECIAL = /^<(s|\/s|pad|unk|0x[0-9A-Fa-f]{2})>$/;
  /* Cells are at least MIN_CELL pixels (a label's line fits; 40 tokens make a 560-pixel map that the
     page scrolls) and at most MAX_CELL; a short sentence's map is about FIT pixels wide. */
  const MIN_CELL = 14, MAX_CELL = 28, FIT = 320;

  const headColor = (h) => (h < PALETTE.length ? PALETTE[h] : `hsl(${(h * 137.508) % 360},62%,45%)`);
  const cellSize = (rows, cols) => Math.max(MIN_CELL, Math.min(MAX_CELL, Math.floor(FIT / Math.max(rows, cols))));

  function labels(axis) {  /* same rule as TokenAxis.labels in data.py: "·" before a piece that continues a word */
    let previous = "";
    return axis.pieces.map((piece, i) => {
      const plain = axis.word_start[i] || previous === "\u2581" || SPECIAL.test(piece);
      previous = piece;
      return plain ? piece : "\u00b7" + piece;
    });
  }

  function tooltip() {
    let tip = document.getElementById("tooltip");
    if (!tip) {
      tip = document.createElement("div");
      tip.id = "tooltip";
      document.body.appendChild(tip);
    }
    return tip;
  }

  function hideTip() {
    tooltip().style.display = "none";
    document.querySelectorAll(".head-cell .hovered").forEach((e) => e.classList.remove("hovered"));
  }

  function axisLabels(className, texts, raw, cell, vertical) {
    const box = document.createElement("div");
    box.className = className + "s";
    texts.forEach((text, i) => {
      const span = document.createElement("span");
      span.className = className + (SPECIAL.test(raw[i]) ? " special" : "");
      span.dataset.index = i;
      span.textContent = text;
      span.title = text;
      if (vertical) { span.style.width = `${cell}px`; span.style.lineHeight = `${cell}px`; }
      else { span.style.height = `${cell}px`; span.style.lineHeight = `${cell}px`; }
      box.appendChild(span);
    });
    return box;
  }

  /* options: rows, cols (labels), rawRows, rawCols (pieces, to grey the specials), rowTitle,
     colTitle (what the axes are, for the tooltip), panels [{head, caption, color, matrix, off}],
     scale (matrix value / scale = probability), vmax (the value drawn at full colour), tags
     (copied to each canvas's dataset), onPick(head) (a click on a head's panel; optional). */
  function draw(container, options) {
    const { rows, cols, panels, scale, vmax } = options;
    const rawRows = options.rawRows || rows, rawCols = options.rawCols || cols;
    const cell = cellSize(rows.length, cols.length);
    const decimals = Math.max(0, Math.round(Math.log10(scale)));
    container.classList.add("attention-grid");
    container.replaceChildren();
    hideTip();
    for (const p of panels) {
      const fig = document.createElement("figure");
      fig.className = "head-cell" + (p.off ? " off" : "") + (options.onPick && p.head !== "average" ? " pickable" : "");
      fig.dataset.head = p.head;
      const canvas = document.createElement("canvas");
      Object.assign(canvas, { width: cols.length * cell, height: rows.length * cell, className: "head-map" });
      Object.assign(canvas.dataset, options.tags || {}, { head: p.head });
      canvas.setAttribute("aria-label", `${p.caption}: ${rows.length} \u00d7 ${cols.length} weights; hover a cell to read one`);
      const ctx = canvas.getContext("2d");
      ctx.fillStyle = "#fff";
      ctx.fillRect(0, 0, canvas.width, canvas.height);
      ctx.fillStyle = p.color;
      p.matrix.forEach((r, i) => r.forEach((v, j) => {
        ctx.globalAlpha = Math.min(1, v / vmax);
        ctx.fillRect(j * cell, i * cell, cell, cell);
      }));
      ctx.globalAlpha = 1;
      const colBox = axisLabels("col-label", cols, rawCols, cell, true);
      const rowBox = axisLabels("row-label", rows, rawRows, cell, false);
      canvas.addEventListener("mousemove", (e) => {
        const j = Math.floor(e.offsetX / cell), i = Math.floor(e.offsetY / cell);
        if (i < 0 || j < 0 || i >= rows.length || j >= cols.length) return;
        const weight = p.matrix[i][j] / scale;
        const tip = tooltip();
        tip.textContent = `${p.caption}: ${options.rowTitle} \u201c${rows[i]}\u201d \u2192 ` +
          `${options.colTitle} \u201c${cols[j]}\u201d  ${weight.toFixed(decimals)}`;
        Object.assign(tip.dataset, { head: p.head, row: i, col: j, weight });
        Object.assign(tip.style, { display: "block", left: `${e.clientX + 12}px`, top: `${e.clientY + 12}px` });
        fig.querySelectorAll(".hovered").forEach((el) => el.classList.remove("hovered"));
        rowBox.children[i].classList.add("hovered");
        colBox.children[j].classList.add("hovered");
      });
      canvas.addEventListener("mouseleave", hideTip);
      if (options.onPick && p.head !== "average") fig.addEventListener("click", () => options.onPick(p.head));
      const map = document.createElement("div");
      map.className = "map";
      map.append(document.createElement("span"), colBox, rowBox, canvas);
      const caption = document.createElement("figcaption");
      caption.textContent = p.caption;
      fig.append(map, caption);
      container.appendChild(fig);
    }
  }

  return { PALETTE, SPECIAL, MIN_CELL, headColor, cellSize, labels, draw, hideTip };
})();

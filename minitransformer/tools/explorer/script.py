"""The explorer page's script: plain JavaScript, no framework, nothing fetched.

It reads the JSON of ``<script id="data">`` and draws, for the chosen kind of attention
(encoder self, decoder self, cross), layer and head:

- a thumbnail of every head of that kind (each layer's heads on one row; a click selects),
- the selected head large, as lines from the query tokens (left) to the key tokens (right),
  each line's opacity its weight, or as a matrix (queries as rows, keys as columns);
  hovering a query token shows what it attends to (the weights beside the keys), hovering
  a key token who attends to it,
- the statistics of every head of that kind (the selected one highlighted; a click selects),
- the tokens of the source and of the decoder's input with the pieces of one word joined
  (``beg·in·ning``, shaded; the data's ``source_words``, ``target_words``), each piece still
  its own token to hover; in the view the pieces of a word are shaded together and joined
  by dots, in both views,
- a colour key: the scale of the thumbnails and of the matrix, ``VIRIDIS`` (matplotlib's
  viridis, as the PNG grid), from 0 to 1, the selected head's largest weight marked.

The page reflows: below 1,100 px wide the panel of thumbnails stacks above the view, and
the view's SVG scales down to the width it has (its ``viewBox``).

Once drawn, ``<body>`` gets ``data-heads-drawn`` (the thumbnails drawn) and ``data-ready="1"``,
which the browser test reads. SVG elements are made in the namespace of the page's own
``<svg>`` (``namespaceURI``), so the page names no URL at all.
"""

import json

VIRIDIS = ((68, 1, 84), (72, 24, 106), (71, 45, 123), (66, 64, 134), (59, 82, 139),
           (51, 99, 141), (44, 114, 142), (38, 130, 142), (33, 145, 140), (31, 160, 136),
           (40, 174, 128), (63, 188, 115), (94, 201, 98), (132, 212, 75), (173, 220, 48),
           (216, 226, 25), (253, 231, 37))  # fmt: skip
"""matplotlib's viridis at 0, 1/16, ..., 1 (RGB, 0-255; the page interpolates between
them): the PNG grid's colour scale, on the page too (tests/test_attention_page.py checks
it against matplotlib)."""

SCRIPT = r"""
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("data").textContent);
  const $ = (id) => document.getElementById(id);
  const svg = $("view");
  const NS = svg.namespaceURI;
  const S = { kind: 0, layer: 0, head: 0, view: "lines" };
  let marks = [], labels = { q: [], k: [] }, values = { q: [], k: [] };

  function node(tag, attrs, text) {
    const e = document.createElementNS(NS, tag);
    for (const key in attrs) e.setAttribute(key, attrs[key]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  function html(tag, text, cls) {
    const e = document.createElement(tag);
    if (text !== undefined) e.textContent = text;
    if (cls) e.className = cls;
    return e;
  }
  const VIRIDIS = __VIRIDIS__;
  function rgb(v) {  // viridis: dark purple (0) to yellow (1)
    const x = Math.min(Math.max(v, 0), 1) * (VIRIDIS.length - 1);
    const i = Math.min(Math.floor(x), VIRIDIS.length - 2), f = x - i;
    return VIRIDIS[i].map((c, j) => Math.round(c + f * (VIRIDIS[i + 1][j] - c)));
  }
  function colourKey(box, max) {  // the scale 0..1; max (a number): the head's largest weight
    box.textContent = "";
    const bar = html("span", undefined, "bar");
    const stops = VIRIDIS.map((c, i) => "rgb(" + c.join(",") + ") " +
                                        (100 * i / (VIRIDIS.length - 1)) + "%");
    bar.style.background = "linear-gradient(to right, " + stops.join(", ") + ")";
    box.append(html("span", "weight 0"), bar, html("span", "1"));
    if (max !== undefined) {
      const mark = html("i", undefined, "max");
      mark.style.left = (100 * max) + "%";
      bar.append(mark);
      box.append(html("span", "this head's largest: " + max.toFixed(2), "muted"));
    }
  }
  // the words of a token row ("source", "target"): per token its word and its place in it
  function wordsOf(row) {
    const out = [];
    D[row + "_words"].forEach((size, w) => {
      for (let k = 0; k < size; k++) out.push({ word: w, first: k === 0, last: k === size - 1 });
    });
    return out;
  }
  const WORDS = { source: wordsOf("source"), target: wordsOf("target") };
  const JOINT = "\u00b7";
  function mark(row, i) {  // a token's label: joined by dots to the pieces of its word
    const t = WORDS[row][i];
    return (t.first ? "" : JOINT) + D[row][i] + (t.last ? "" : JOINT);
  }
  let pieceSpans = { source: [], target: [] };
  const SHORT = { layer: "L", head: "H", distance: "dist", confidence: "conf" };
  const kind = () => D.kinds[S.kind];
  const weights = () => kind().layers[S.layer][S.head];
  const headsOf = (k, layer) => k.layers[Math.min(layer, k.layers.length - 1)].length;

  function select(k, layer, head) {
    S.kind = k;
    S.layer = Math.min(layer, D.kinds[k].layers.length - 1);
    S.head = Math.min(head, D.kinds[k].layers[S.layer].length - 1);
    render();
  }
  function options(sel, n, value, pick) {
    sel.textContent = "";
    for (let i = 0; i < n; i++) {
      const o = html("option", String(i));
      o.value = String(i);
      sel.append(o);
    }
    sel.value = String(value);
    sel.onchange = () => pick(Number(sel.value));
  }
  function controls() {
    const box = $("kinds");
    box.textContent = "";
    D.kinds.forEach((k, i) => {
      const b = html("button", k.name, i === S.kind ? "on" : "");
      b.onclick = () => select(i, S.layer, S.head);
      box.append(b, " ");
    });
    options($("layer"), kind().layers.length, S.layer, (v) => select(S.kind, v, S.head));
    options($("head"), headsOf(kind(), S.layer), S.head, (v) => select(S.kind, S.layer, v));
    for (const view of ["lines", "matrix"]) {
      const b = $("view-" + view);
      b.className = S.view === view ? "on" : "";
      b.onclick = () => { S.view = view; render(); };
    }
  }
  function paint(canvas, w) {
    canvas.height = w.length;
    canvas.width = w[0].length;
    const ctx = canvas.getContext("2d");
    const img = ctx.createImageData(canvas.width, canvas.height);
    w.forEach((row, t) => row.forEach((v, s) => {
      const i = 4 * (t * canvas.width + s);
      img.data.set([...rgb(v), 255], i);
    }));
    ctx.putImageData(img, 0, 0);
  }
  function thumbs() {
    const box = $("thumbs");
    box.textContent = "";
    const k = kind();
    const cols = Math.max(...k.layers.map((l) => l.length));
    box.style.gridTemplateColumns = "repeat(" + cols + ", 1fr)";
    let drawn = 0;
    k.layers.forEach((heads, layer) => heads.forEach((w, head) => {
      const on = layer === S.layer && head === S.head;
      const cell = html("div", undefined, on ? "thumb on" : "thumb");
      const canvas = document.createElement("canvas");
      paint(canvas, w);
      cell.append(canvas, html("div", "L" + layer + " H" + head));
      cell.title = k.name + " attention, layer " + layer + ", head " + head;
      cell.onclick = () => select(S.kind, layer, head);
      box.append(cell);
      drawn += 1;
    }));
    $("thumbs-title").textContent = "every head of " + k.name + " attention (" + drawn + ")";
    document.body.dataset.headsDrawn = String(drawn);
  }
  function hover(side, i) {  // side "q" or "k" (null: none), i its token
    const any = side !== null;
    for (const m of marks) {
      const on = any && m[side] === i;
      m.el.classList.toggle("on", on);
      if (S.view === "lines") m.el.classList.toggle("dim", any && !on);
    }
    for (const s of ["q", "k"]) {
      labels[s].forEach((e, j) => e.classList.toggle("on", s === side && j === i));
    }
    const row = any ? kind()[side === "q" ? "queries" : "keys"] : null;
    for (const r of ["source", "target"]) {
      pieceSpans[r].forEach((e, j) => e.classList.toggle("on", r === row && j === i));
    }
    const w = weights();
    for (const s of ["q", "k"]) values[s].forEach((e, j) => {
      const v = !any || s === side ? null : (side === "q" ? w[i][j] : w[j][i]);
      e.textContent = v === null ? "" : v.toFixed(2);
    });
  }
  function label(side, i, attrs, text) {
    const e = node("text", attrs, text);
    e.addEventListener("mouseenter", () => hover(side, i));
    e.addEventListener("mouseleave", () => hover(null, 0));
    labels[side].push(e);
    svg.append(e);
  }
  function size(width, height) {  // drawn at this size, scaled down to a narrower window
    svg.setAttribute("width", width);
    svg.setAttribute("height", height);
    svg.setAttribute("viewBox", "0 0 " + width + " " + height);
  }
  function spans(row) {  // [first, last] token of each word of several pieces
    const out = [];
    let start = 0;
    WORDS[row].forEach((t, i) => {
      if (t.first) start = i;
      if (t.last && i > start) out.push([start, i]);
    });
    return out;
  }
  function shade(row, x, width, y0, step) {  // a band behind the labels of such a word
    for (const [a, b] of spans(row)) {
      svg.append(node("rect", { x: x, y: y0 + a * step + 1, width: width,
                                height: (b - a + 1) * step - 2, rx: 4, class: "word" }));
    }
  }
  function lines(w, q, k, rows) {
    const row = 22, top = 34, width = 700, left = 160, right = width - 160;
    const y = (i) => top + i * row + row / 2;
    size(width, top + Math.max(q.length, k.length) * row + 16);
    shade(rows[0], 44, left - 38, top, row);
    shade(rows[1], right - 6, left - 38, top, row);
    svg.append(node("text", { x: left, y: 18, "text-anchor": "end", class: "muted" }, "queries"),
               node("text", { x: right, y: 18, class: "muted" }, "keys"));
    w.forEach((r, t) => r.forEach((v, s) => {
      if (v < 0.005) return;
      const e = node("line", { x1: left + 6, y1: y(t), x2: right - 6, y2: y(s),
                               "stroke-opacity": v, "stroke-width": 1 + 3 * v });
      e.append(node("title", {}, q[t] + " \u2192 " + k[s] + ": " + v.toFixed(3)));
      marks.push({ el: e, q: t, k: s });
      svg.append(e);
    }));
    q.forEach((tok, t) => label("q", t, { x: left, y: y(t) + 4, "text-anchor": "end" },
                                mark(rows[0], t)));
    k.forEach((tok, s) => label("k", s, { x: right, y: y(s) + 4 }, mark(rows[1], s)));
    const columns = [["q", q.length, 8, "start"], ["k", k.length, width - 8, "end"]];
    for (const [side, n, x, anchor] of columns) {
      for (let i = 0; i < n; i++) {
        const e = node("text", { x: x, y: y(i) + 4, "text-anchor": anchor, class: "muted" });
        values[side].push(e);
        svg.append(e);
      }
    }
  }
  function matrix(w, q, k, rows) {
    const cell = Math.max(8, Math.min(30, Math.floor(560 / Math.max(q.length, k.length))));
    const left = 120, top = 100;
    size(left + k.length * cell + 60, top + q.length * cell + 10);
    shade(rows[0], 4, left - 6, top, cell);
    w.forEach((r, t) => r.forEach((v, s) => {
      const e = node("rect", { x: left + s * cell, y: top + t * cell, width: cell, height: cell,
                               fill: "rgb(" + rgb(v).join(",") + ")", class: "cell" });
      e.append(node("title", {}, q[t] + " \u2192 " + k[s] + ": " + v.toFixed(3)));
      e.addEventListener("mouseenter", () => hover("q", t));
      e.addEventListener("mouseleave", () => hover(null, 0));
      marks.push({ el: e, q: t, k: s });
      svg.append(e);
    }));
    q.forEach((tok, t) => label("q", t, { x: left - 6, y: top + t * cell + cell / 2 + 4,
                                          "text-anchor": "end" }, mark(rows[0], t)));
    k.forEach((tok, s) => {
      const x = left + s * cell + cell / 2 + 4;
      const turn = "rotate(-60 " + x + " " + (top - 6) + ")";
      label("k", s, { x: x, y: top - 6, transform: turn }, mark(rows[1], s));
    });
    for (const [a, b] of spans(rows[1])) {  // a bar over the columns of such a word
      svg.append(node("line", { x1: left + a * cell + 2, x2: left + (b + 1) * cell - 2,
                                y1: top - 3, y2: top - 3, class: "word" }));
    }
  }
  function view() {
    svg.textContent = "";
    marks = [];
    labels = { q: [], k: [] };
    values = { q: [], k: [] };
    const k = kind();
    $("view-title").textContent = k.name + " attention, layer " + S.layer + ", head " + S.head +
      ": queries are the " + k.queries + " tokens, keys the " + k.keys + " tokens";
    (S.view === "lines" ? lines : matrix)(weights(), D[k.queries], D[k.keys],
                                          [k.queries, k.keys]);
    const key = $("view-key");
    key.hidden = S.view !== "matrix";  // the lines' opacity is the weight: no colours
    colourKey(key, Math.max(...weights().map((r) => Math.max(...r))));
  }
  function stats() {
    const table = $("stats"), rows = D.stats.filter((r) => r.kind === kind().name);
    const head = html("tr");
    for (const name of ["layer", "head", ...D.stat_names]) {
      const th = html("th", SHORT[name] || name);
      th.title = name;
      head.append(th);
    }
    table.tHead.textContent = "";
    table.tHead.append(head);
    const body = table.tBodies[0];
    body.textContent = "";
    for (const r of rows) {
      const tr = html("tr", undefined, r.layer === S.layer && r.head === S.head ? "on" : "");
      tr.append(html("td", String(r.layer)), html("td", String(r.head)));
      for (const name of D.stat_names) tr.append(html("td", r[name].toFixed(2)));
      tr.onclick = () => select(S.kind, r.layer, r.head);
      body.append(tr);
    }
  }
  function tokens(row, box, title) {  // a row's tokens, the pieces of a word joined
    box.textContent = title + ": ";
    let word = null;
    WORDS[row].forEach((t, i) => {
      if (t.first) {
        word = html("span", undefined, t.last ? "word" : "word split");
        box.append(word, " ");
      } else {
        word.append(html("span", JOINT, "joint"));
      }
      const piece = html("span", D[row][i], "piece");
      piece.addEventListener("mouseenter", () => {
        const k = kind();
        if (k.queries === row) hover("q", i); else if (k.keys === row) hover("k", i);
      });
      piece.addEventListener("mouseleave", () => hover(null, 0));
      pieceSpans[row].push(piece);
      word.append(piece);
    });
  }
  function render() {
    controls();
    thumbs();
    view();
    stats();
  }

  const cut = D.sentence_tokens > D.source.length ?
    " (" + D.sentence_tokens + " tokens; the model read the first " + D.source.length + ")" : "";
  $("sentence").textContent = "source: " + D.sentence + cut;
  $("translation").textContent = "translation: " + D.translation;
  tokens("source", $("source-tokens"), "read as " + D.source.length + " tokens");
  tokens("target", $("target-tokens"), "the decoder's input, " + D.target.length + " tokens");
  colourKey($("thumbs-key"));
  $("meta").textContent = (D.checkpoint ? "checkpoint " + D.checkpoint + "; " : "") +
    D.kinds.map((k) => k.name + ": " + k.layers.length + " layers \u00d7 " + headsOf(k, 0) +
                       " heads").join(", ");
  render();
  document.body.dataset.ready = "1";
})();
""".replace("__VIRIDIS__", json.dumps([list(c) for c in VIRIDIS]))

"""The explorer page's script: plain JavaScript, no framework, nothing fetched.

It reads the JSON of ``<script id="data">`` and draws, for the chosen kind of attention
(encoder self, decoder self, cross), layer and head:

- a thumbnail of every head of that kind (each layer's heads on one row; a click selects),
- the selected head large, as lines from the query tokens (left) to the key tokens (right),
  each line's opacity its weight, or as a matrix (queries as rows, keys as columns);
  hovering a query token shows what it attends to (the weights beside the keys), hovering
  a key token who attends to it,
- the statistics of every head of that kind (the selected one highlighted; a click selects).

Once drawn, ``<body>`` gets ``data-heads-drawn`` (the thumbnails drawn) and ``data-ready="1"``,
which the browser test reads. SVG elements are made in the namespace of the page's own
``<svg>`` (``namespaceURI``), so the page names no URL at all.
"""

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
  function rgb(v) {  // white (0) to blue (1)
    return [255 - v * 218, 255 - v * 156, 255 - v * 20].map(Math.round);
  }
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
  function lines(w, q, k) {
    const row = 22, top = 34, width = 700, left = 160, right = width - 160;
    const y = (i) => top + i * row + row / 2;
    svg.setAttribute("width", width);
    svg.setAttribute("height", top + Math.max(q.length, k.length) * row + 16);
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
    q.forEach((tok, t) => label("q", t, { x: left, y: y(t) + 4, "text-anchor": "end" }, tok));
    k.forEach((tok, s) => label("k", s, { x: right, y: y(s) + 4 }, tok));
    const columns = [["q", q.length, 8, "start"], ["k", k.length, width - 8, "end"]];
    for (const [side, n, x, anchor] of columns) {
      for (let i = 0; i < n; i++) {
        const e = node("text", { x: x, y: y(i) + 4, "text-anchor": anchor, class: "muted" });
        values[side].push(e);
        svg.append(e);
      }
    }
  }
  function matrix(w, q, k) {
    const cell = Math.max(8, Math.min(30, Math.floor(560 / Math.max(q.length, k.length))));
    const left = 120, top = 100;
    svg.setAttribute("width", left + k.length * cell + 60);
    svg.setAttribute("height", top + q.length * cell + 10);
    w.forEach((r, t) => r.forEach((v, s) => {
      const e = node("rect", { x: left + s * cell, y: top + t * cell, width: cell, height: cell,
                               fill: "rgb(" + rgb(v).join(",") + ")" });
      e.append(node("title", {}, q[t] + " \u2192 " + k[s] + ": " + v.toFixed(3)));
      e.addEventListener("mouseenter", () => hover("q", t));
      e.addEventListener("mouseleave", () => hover(null, 0));
      marks.push({ el: e, q: t, k: s });
      svg.append(e);
    }));
    q.forEach((tok, t) => label("q", t, { x: left - 6, y: top + t * cell + cell / 2 + 4,
                                          "text-anchor": "end" }, tok));
    k.forEach((tok, s) => {
      const x = left + s * cell + cell / 2 + 4;
      const turn = "rotate(-60 " + x + " " + (top - 6) + ")";
      label("k", s, { x: x, y: top - 6, transform: turn }, tok);
    });
  }
  function view() {
    svg.textContent = "";
    marks = [];
    labels = { q: [], k: [] };
    values = { q: [], k: [] };
    const k = kind();
    $("view-title").textContent = k.name + " attention, layer " + S.layer + ", head " + S.head +
      ": queries are the " + k.queries + " tokens, keys the " + k.keys + " tokens";
    (S.view === "lines" ? lines : matrix)(weights(), D[k.queries], D[k.keys]);
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
  $("meta").textContent = (D.checkpoint ? "checkpoint " + D.checkpoint + "; " : "") +
    D.kinds.map((k) => k.name + ": " + k.layers.length + " layers \u00d7 " + headsOf(k, 0) +
                       " heads").join(", ");
  render();
  document.body.dataset.ready = "1";
})();
"""

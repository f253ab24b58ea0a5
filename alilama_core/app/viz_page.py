"""The interactive tape: one self-contained HTML file (scripts, styles and data inline).

The page shows the prompt's tokens as a tape. Choosing a token, a layer and a
head (or all heads) shades the earlier tokens by how much the token reads
them; a head overview gives each head's mean attention distance beside its
ALiBi slope; the logit lens lists each layer's top next-token guesses. The
page loads nothing: no script, style, font or image from any address.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from alilama_core.app.viz_draw import Tape
from alilama_core.base.files import atomic_write_text


def page_data(tape: Tape) -> dict:
    """The JSON the page's script reads: probabilities in thousandths, lower triangle only."""
    L, H, T = tape.shape
    permille = np.rint(tape.attentions * 1000).astype(np.int32)  # (L, H, T, T)
    att = [[[permille[l, h, i, : i + 1].tolist() for i in range(T)] for h in range(H)] for l in range(L)]
    lens = [
        [
            [
                [
                    tape.lens_labels[l][t][k],
                    round(float(tape.lens_probs[l, t, k]) * 1000),
                ]
                for k in range(tape.lens_ids.shape[2])
            ]
            for t in range(T)
        ]
        for l in range(L)
    ]
    return {
        "tokens": tape.labels,
        "ids": tape.ids,
        "layers": L,
        "heads": H,
        "att": att,
        "lens": lens,
        "distance": np.round(tape.distance, 2).tolist(),
        "slopes": tape.slopes,
        "positional": tape.positional,
        "kind": tape.kind,
        "attention": tape.attention,
        "notes": tape.notes,
    }


def _inline_json(data: dict) -> str:
    """JSON safe inside a <script> element: no '<', '>', '&' or '/' characters."""
    text = json.dumps(data, ensure_ascii=False, separators=(",", ":"))
    for ch, esc in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("/", "\\/")):
        text = text.replace(ch, esc)
    return text


def render_page(tape: Tape, title: str = "Alilama tape") -> str:
    """The whole page as a string."""
    import html

    return (
        _TEMPLATE.replace("@@TITLE@@", html.escape(title))
        .replace("@@BODY@@", TAPE_BODY)
        .replace("@@STYLE@@", TAPE_STYLE)
        .replace("@@SCRIPT@@", TAPE_SCRIPT)
        .replace("@@DATA@@", _inline_json(page_data(tape)))
    )


def write_page(tape: Tape, path: str | Path, title: str = "Alilama tape") -> Path:
    """Write the page atomically; returns its path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, render_page(tape, title))
    return path


TAPE_BODY = """<p id="summary"></p>
<div id="controls">
  <label>layer <select id="layer"></select></label>
  <label>head <select id="head"></select></label>
  <span id="chosen"></span>
</div>
<h2>The tape</h2>
<p class="hint">Click a token: earlier tokens are shaded by how much it reads them in the chosen layer and head.</p>
<div id="tape"></div>
<div id="reads"></div>
<div class="row">
  <div><h2>Map</h2><canvas id="map" width="320" height="320"></canvas></div>
  <div><h2>Heads</h2>
    <p class="hint">Mean distance (tokens) from a query to what it reads; click a cell to choose that head.</p>
    <table id="overview"></table></div>
</div>
<h2>Logit lens</h2>
<p class="hint">Each layer's top next-token guesses at the chosen position (the last layer is the model's output).</p>
<table id="lens"></table>
<p class="hint">Every position: each layer's top guess; green where it is the token that follows. Click a column to choose it.</p>
<div id="lens-scroll"><table id="lens-grid"></table></div>
"""
"""The tape's markup; ``alilama serve``'s playground embeds it with ``TAPE_STYLE`` and ``TAPE_SCRIPT``."""

_TEMPLATE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<style>@@STYLE@@</style>
</head>
<body>
<h1>@@TITLE@@</h1>
@@BODY@@<script type="application/json" id="tape-data">@@DATA@@</script>
<script>@@SCRIPT@@</script>
</body>
</html>
"""

TAPE_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; background: #fff; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin: 1em 0 0.3em; }
.hint { color: #666; font-size: 0.85em; margin: 0.2em 0; }
#controls { margin: 0.5em 0; display: flex; gap: 1em; align-items: center; }
#tape { line-height: 2.1; font-family: ui-monospace, monospace; font-size: 14px; }
.tok { display: inline-block; line-height: 1.3; padding: 2px 1px; margin: 0 1px; border-radius: 3px; cursor: pointer; white-space: pre;
       border: 1px solid #ddd; }
.tok.query { outline: 2px solid #d62728; }
.tok.later { color: #bbb; border-color: #f2f2f2; }
#reads { font-size: 0.9em; margin-top: 0.5em; min-height: 1.5em; }
.row { display: flex; gap: 2em; flex-wrap: wrap; }
canvas { border: 1px solid #ccc; image-rendering: pixelated; }
table { border-collapse: collapse; font-size: 12px; }
td, th { border: 1px solid #ddd; padding: 3px 6px; text-align: right; }
.head-cell { cursor: pointer; }
.head-cell.chosen { outline: 2px solid #d62728; }
#lens td, #lens-grid td { text-align: left; font-family: ui-monospace, monospace; white-space: pre; }
#lens-scroll { overflow-x: auto; max-width: 100%; }
#lens-grid td { cursor: pointer; }
#lens-grid td.right { background: #d7f0d0; }
#lens-grid .chosen { outline: 2px solid #d62728; }
"""

TAPE_SCRIPT = r"""
// renderTape(D) builds the tape from page_data's JSON; it clears what an earlier call built.
function renderTape(D) {
  "use strict";
  ["tape", "overview", "lens", "lens-grid", "layer", "head"].forEach(function (id) {
    document.getElementById(id).textContent = "";
  });
  var T = D.tokens.length, L = D.layers, H = D.heads;
  var state = { layer: L - 1, head: "all", query: T - 1 };

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    for (var k in attrs || {}) e.setAttribute(k, attrs[k]);
    if (text !== undefined) e.textContent = text;
    return e;
  }
  // Weights (0..1) with which token i reads tokens 0..i in the chosen layer and head (or all heads).
  function row(layer, head, i) {
    if (head !== "all") return D.att[layer][head][i].map(function (x) { return x / 1000; });
    var out = new Array(i + 1).fill(0);
    for (var h = 0; h < H; h++) {
      var r = D.att[layer][h][i];
      for (var j = 0; j <= i; j++) out[j] += r[j] / 1000 / H;
    }
    return out;
  }
  function headName() { return state.head === "all" ? "all heads (mean)" : "head " + state.head; }

  var summary = D.positional + " positions (" + D.kind + "), " + L + " layers x " + H + " heads, " +
    T + " tokens, captured with the " + D.attention + " backend.";
  document.getElementById("summary").textContent = summary + (D.notes.length ? " " + D.notes.join("; ") : "");

  var layerSel = document.getElementById("layer"), headSel = document.getElementById("head");
  for (var l = 0; l < L; l++) layerSel.appendChild(el("option", { value: l }, String(l)));
  headSel.appendChild(el("option", { value: "all" }, "all (mean)"));
  for (var h = 0; h < H; h++) headSel.appendChild(el("option", { value: h }, String(h)));
  layerSel.onchange = function () { state.layer = +layerSel.value; update(); };
  headSel.onchange = function () { state.head = headSel.value === "all" ? "all" : +headSel.value; update(); };

  var tape = document.getElementById("tape");
  var cells = D.tokens.map(function (label, i) {
    var s = el("span", { "class": "tok", "data-i": i }, label);
    s.onclick = function () { state.query = i; update(); };
    tape.appendChild(s);
    return s;
  });

  var overview = document.getElementById("overview");
  var head = el("tr"); head.appendChild(el("th", {}, "layer \\ head"));
  for (var h2 = 0; h2 < H; h2++) {
    var label = "h" + h2 + (D.slopes ? " (slope " + D.slopes[h2].toPrecision(3) + ")" : "");
    head.appendChild(el("th", {}, label));
  }
  overview.appendChild(head);
  var maxDist = Math.max.apply(null, D.distance.map(function (r) { return Math.max.apply(null, r); })) || 1;
  var headCells = [];
  for (var l2 = 0; l2 < L; l2++) {
    var tr = el("tr"); tr.appendChild(el("th", {}, String(l2)));
    for (var h3 = 0; h3 < H; h3++) {
      var d = D.distance[l2][h3];
      var td = el("td", { "class": "head-cell", "data-layer": l2, "data-head": h3 }, d.toFixed(1));
      td.style.background = "rgba(31,119,180," + (0.08 + 0.8 * d / maxDist).toFixed(3) + ")";
      td.title = "layer " + l2 + ", head " + h3 + ": mean distance " + d.toFixed(2) + " tokens";
      (function (a, b) { td.onclick = function () { state.layer = a; state.head = b; update(); }; })(l2, h3);
      tr.appendChild(td); headCells.push(td);
    }
    overview.appendChild(tr);
  }

  function drawMap() {
    var canvas = document.getElementById("map"), ctx = canvas.getContext("2d");
    var img = ctx.createImageData(T, T);
    for (var i = 0; i < T; i++) {
      var r = row(state.layer, state.head, i);
      for (var j = 0; j < T; j++) {
        var w = j <= i ? Math.sqrt(r[j]) : 0, p = 4 * (i * T + j);
        img.data[p] = 255 - 224 * w; img.data[p + 1] = 255 - 136 * w; img.data[p + 2] = 255 - 75 * w;
        img.data[p + 3] = 255;
      }
    }
    var off = document.createElement("canvas"); off.width = T; off.height = T;
    off.getContext("2d").putImageData(img, 0, 0);
    ctx.imageSmoothingEnabled = false;
    ctx.clearRect(0, 0, canvas.width, canvas.height);
    ctx.drawImage(off, 0, 0, canvas.width, canvas.height);
    var y = (state.query + 0.5) * canvas.height / T;
    ctx.strokeStyle = "#d62728"; ctx.beginPath(); ctx.moveTo(0, y); ctx.lineTo(canvas.width, y); ctx.stroke();
  }

  function drawLens() {
    var lens = document.getElementById("lens");
    lens.textContent = "";
    var top = el("tr"); top.appendChild(el("th", {}, "layer"));
    top.appendChild(el("th", {}, "guesses after " + JSON.stringify(D.tokens[state.query]) + " (probability)"));
    lens.appendChild(top);
    for (var l = 0; l < L; l++) {
      var tr = el("tr", { "class": "lens-row" });
      tr.appendChild(el("th", {}, String(l)));
      var guesses = D.lens[l][state.query].map(function (g) { return g[0] + " " + (g[1] / 10).toFixed(1) + "%"; });
      tr.appendChild(el("td", {}, guesses.join("   ")));
      lens.appendChild(tr);
    }
  }

  var grid = document.getElementById("lens-grid"), gridCells = [];
  (function () {
    var top = el("tr"); top.appendChild(el("th", {}, "layer"));
    D.tokens.forEach(function (t) { top.appendChild(el("th", {}, t)); });
    grid.appendChild(top);
    for (var l = 0; l < L; l++) {
      var tr = el("tr", { "class": "lens-grid-row" }); tr.appendChild(el("th", {}, String(l)));
      for (var t = 0; t < T; t++) {
        var g = D.lens[l][t][0];
        var td = el("td", { "data-i": t }, g[0]);
        td.title = "after " + JSON.stringify(D.tokens[t]) + ": " + JSON.stringify(g[0]) + " " + (g[1] / 10).toFixed(1) + "%";
        if (t + 1 < T && g[0] === D.tokens[t + 1]) td.className = "right";
        (function (i) { td.onclick = function () { state.query = i; update(); }; })(t);
        tr.appendChild(td); gridCells.push(td);
      }
      grid.appendChild(tr);
    }
  })();

  function update() {
    layerSel.value = String(state.layer); headSel.value = String(state.head);
    var q = state.query, r = row(state.layer, state.head, q);
    cells.forEach(function (c, j) {
      c.classList.toggle("query", j === q);
      c.classList.toggle("later", j > q);
      var w = j <= q ? r[j] : 0;
      c.style.background = j <= q ? "rgba(214,39,40," + Math.min(1, Math.sqrt(w)).toFixed(3) + ")" : "transparent";
      c.title = j <= q ? "read with weight " + w.toFixed(3) : "later token (not visible)";
    });
    headCells.forEach(function (c) {
      c.classList.toggle("chosen", +c.dataset.layer === state.layer && String(c.dataset.head) === String(state.head));
    });
    var order = r.map(function (w, j) { return [w, j]; }).sort(function (a, b) { return b[0] - a[0]; }).slice(0, 5);
    document.getElementById("chosen").textContent =
      "token " + q + " " + JSON.stringify(D.tokens[q]) + ", layer " + state.layer + ", " + headName();
    document.getElementById("reads").textContent = "reads most: " + order.map(function (p) {
      return JSON.stringify(D.tokens[p[1]]) + " (" + (q - p[1]) + " back) " + (100 * p[0]).toFixed(1) + "%";
    }).join(",  ");
    gridCells.forEach(function (c) { c.classList.toggle("chosen", +c.dataset.i === q); });
    drawMap(); drawLens();
  }
  update();
  document.body.setAttribute("data-ready", "1");
  return cells;
}
(function () {
  var data = document.getElementById("tape-data");
  if (data && data.textContent.trim()) renderTape(JSON.parse(data.textContent));
})();
"""

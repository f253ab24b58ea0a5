"""The playground ``alilama serve`` shows at ``/``: a prompt, sampling settings, the text as it streams, its tape.

One self-contained page: its script and styles are inline, and it asks only its
own server for anything (``/v1/completions``, streamed, and
``/v1/alilama/tape``, relative addresses), so it works offline and loads
nothing from anywhere else. Once a completion has ended, the page asks for the
tape of the whole text (prompt and continuation) and draws it with the tape
page's own markup and script (``alilama_core.app.viz_page``): which earlier
tokens each token reads, per layer and head, and the logit lens.

Query parameters fill the form: ``?prompt=...&max_tokens=40&temperature=0.8&top_k=40&seed=1``;
``autorun=1`` submits it on load, ``click=N`` then chooses token N of the tape
(links that show one generation; the browser tests use them).
"""

from __future__ import annotations

import html

from alilama_core.app.viz_page import TAPE_BODY, TAPE_SCRIPT, TAPE_STYLE


def playground_page(model_id: str) -> str:
    return (
        _PAGE.replace("@@TITLE@@", html.escape(f"Alilama playground: {model_id}"))
        .replace("@@MODEL@@", html.escape(model_id))
        .replace("@@STYLE@@", TAPE_STYLE + _STYLE)
        .replace("@@TAPE@@", TAPE_BODY)
        .replace("@@TAPE_SCRIPT@@", TAPE_SCRIPT)
        .replace("@@SCRIPT@@", _SCRIPT)
    )


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@@TITLE@@</title>
<style>@@STYLE@@</style>
</head>
<body data-model="@@MODEL@@">
<h1>@@TITLE@@</h1>
<form id="form">
  <textarea id="prompt" rows="3" cols="80">Once upon a time</textarea>
  <div id="settings">
    <label>max tokens <input id="max_tokens" type="number" value="60" min="1"></label>
    <label>temperature <input id="temperature" type="number" value="0.8" min="0" max="2" step="0.1"></label>
    <label>top-k <input id="top_k" type="number" value="40" min="1"></label>
    <label>seed <input id="seed" type="number" placeholder="none"></label>
    <label>API key <input id="key" type="password" placeholder="if the server asks"></label>
    <button id="go" type="submit">Generate</button>
  </div>
</form>
<h2>Text</h2>
<div id="output"><span id="given"></span><span id="generated"></span></div>
<p id="status" class="hint"></p>
<div id="tape-section" hidden>
@@TAPE@@</div>
<script>@@TAPE_SCRIPT@@</script>
<script>@@SCRIPT@@</script>
</body>
</html>
"""

_STYLE = """
#prompt { width: 100%; max-width: 60em; font-family: ui-monospace, monospace; }
#settings { display: flex; flex-wrap: wrap; gap: 0.8em; margin: 0.4em 0; align-items: center; }
#settings input { width: 6em; }
#output { font-family: ui-monospace, monospace; white-space: pre-wrap; border: 1px solid #ddd; padding: 0.6em;
          min-height: 3em; max-width: 60em; }
#given { color: #555; }
.piece { background: #eef6ff; }
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var $ = function (id) { return document.getElementById(id); };
  var params = new URLSearchParams(window.location.search);
  ["prompt", "max_tokens", "temperature", "top_k", "seed"].forEach(function (k) {
    if (params.has(k)) $(k).value = params.get(k);
  });
  function headers() {
    var h = { "Content-Type": "application/json" };
    if ($("key").value) h["Authorization"] = "Bearer " + $("key").value;
    return h;
  }
  function number(id) { var v = $(id).value; return v === "" ? null : Number(v); }

  async function showTape(text) {
    $("status").textContent = "reading the tape...";
    var r = await fetch("/v1/alilama/tape", { method: "POST", headers: headers(), body: JSON.stringify({ text: text }) });
    var data = await r.json();
    if (!r.ok) { $("status").textContent = data.error.message; return; }
    $("tape-section").hidden = false;
    var cells = renderTape(data);
    var click = params.get("click");
    if (click !== null && cells[+click]) cells[+click].click();
    $("status").textContent = "done: click a token of the tape to see what it reads";
    document.body.setAttribute("data-tape", "1");
  }

  async function generate(event) {
    if (event) event.preventDefault();
    var prompt = $("prompt").value;
    $("given").textContent = prompt; $("generated").textContent = "";
    $("go").disabled = true; $("status").textContent = "generating...";
    var body = { model: document.body.dataset.model, prompt: prompt, stream: true, max_tokens: number("max_tokens"),
                 temperature: number("temperature"), top_k: number("top_k"), seed: number("seed") };
    try {
      var r = await fetch("/v1/completions", { method: "POST", headers: headers(), body: JSON.stringify(body) });
      if (!r.ok) { $("status").textContent = (await r.json()).error.message; return; }
      var reader = r.body.getReader(), decoder = new TextDecoder(), buffer = "", text = "";
      for (;;) {
        var part = await reader.read();
        if (part.done) break;
        buffer += decoder.decode(part.value, { stream: true });
        var events = buffer.split("\n\n"); buffer = events.pop();
        events.forEach(function (e) {
          if (e.indexOf("data: ") !== 0 || e === "data: [DONE]") return;
          var chunk = JSON.parse(e.slice(6));
          if (chunk.error) { $("status").textContent = chunk.error.message; return; }
          var piece = chunk.choices[0].text;
          if (piece) {
            var span = document.createElement("span"); span.className = "piece"; span.textContent = piece;
            $("generated").appendChild(span); text += piece;
          }
        });
      }
      await showTape(prompt + text);
    } finally {
      $("go").disabled = false;
    }
  }
  $("form").addEventListener("submit", generate);
  if (params.get("autorun") === "1") generate();
})();
"""

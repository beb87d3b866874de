"""The explorer's HTML page: one self-contained file (no network, no server, nothing
fetched), the data embedded as JSON and drawn by a small plain script (script.py).

The JSON sits in ``<script type="application/json" id="data">``; every ``<``, ``>`` and ``&``
in it is written as a ``\\u00XX`` escape (the same characters to ``JSON.parse``), so no token
of a sentence (``</script>``, ``<!--``) can end the tag or start markup. Every text the page
shows is set with ``textContent``, never parsed as HTML.
"""

from __future__ import annotations

import json
from typing import Any

from .script import SCRIPT

_ESCAPES = {"<": "\\u003c", ">": "\\u003e", "&": "\\u0026"}

STYLE = """
body { font: 14px/1.4 system-ui, sans-serif; margin: 0; color: #1f2933; background: #f7f8fa; }
header { padding: 12px 20px 6px; background: #fff; border-bottom: 1px solid #dde1e6; }
h1 { font-size: 18px; margin: 0 0 4px; } h2 { font-size: 14px; margin: 0 0 8px; }
header p { margin: 2px 0; overflow-wrap: anywhere; }
.muted, .hint { color: #67707a; font-size: 12px; }
.tokens { font-size: 13px; } .tokens .word { white-space: nowrap; padding: 0 1px; }
.tokens .word.split { background: #eef2ff; border-bottom: 2px solid #a5b4fc; border-radius: 3px; }
.tokens .joint { color: #67707a; } .tokens .piece.on, .tokens .piece:hover { color: #ea580c; }
nav { display: flex; flex-wrap: wrap; gap: 14px; align-items: center; padding: 8px 20px;
  background: #fff; border-bottom: 1px solid #dde1e6; }
nav button { font: inherit; padding: 3px 10px; border: 1px solid #b8c0c8; background: #fff;
  border-radius: 4px; cursor: pointer; }
nav button.on { background: #2563eb; border-color: #2563eb; color: #fff; }
nav select { font: inherit; padding: 2px 4px; }
main { display: grid; grid-template-columns: 380px minmax(0, 1fr); gap: 16px; padding: 14px 20px;
  align-items: start; }
section { background: #fff; border: 1px solid #dde1e6; border-radius: 6px; padding: 10px;
  min-width: 0; overflow-x: auto; }
.panes { display: flex; flex-wrap: wrap; gap: 0 16px; }
#thumbs-pane { flex: 1 1 300px; max-width: 400px; } #stats-pane { flex: 1 1 300px; }
#thumbs { display: grid; gap: 6px; }
.thumb { text-align: center; font-size: 11px; cursor: pointer; padding: 2px;
  border: 2px solid transparent; border-radius: 4px; }
.thumb.on { border-color: #ea580c; } .thumb canvas { display: block; margin: 0 auto;
  width: 100%; image-rendering: pixelated; border: 1px solid #dde1e6; }
.key { display: flex; align-items: center; gap: 6px; font-size: 11px; margin: 6px 0; }
.key[hidden] { display: none; }
.key .bar { position: relative; width: 160px; height: 10px; border: 1px solid #b8c0c8; }
.key .max { position: absolute; top: -4px; bottom: -4px; width: 2px; margin-left: -1px;
  background: #ea580c; }
table { border-collapse: collapse; width: 100%; font-size: 12px; margin-top: 8px; }
th, td { padding: 2px 5px; text-align: right; } th { border-bottom: 1px solid #b8c0c8; }
tbody tr { cursor: pointer; } tbody tr:hover { background: #eef2ff; }
tbody tr.on { background: #ffedd5; font-weight: 600; }
#view { display: block; max-width: 100%; height: auto; }
#view text { font-size: 13px; cursor: default; }
#view text.on { fill: #ea580c; font-weight: 700; } #view text.muted { fill: #67707a; }
#view line { stroke: #2563eb; } #view line.on { stroke: #ea580c; }
#view rect.word { fill: #eef2ff; stroke: #a5b4fc; }
#view line.word { stroke: #818cf8; stroke-width: 3; stroke-linecap: round; }
#view .dim { opacity: 0.06; } #view rect.on { stroke: #ea580c; stroke-width: 2; }
@media (max-width: 1100px) {
  main { grid-template-columns: minmax(0, 1fr); padding: 10px; gap: 10px; }
  header, nav { padding-left: 10px; padding-right: 10px; }
}
"""

BODY = """
<header><h1>Attention, head by head</h1>
<p id="sentence"></p><p class="tokens" id="source-tokens"></p>
<p id="translation"></p><p class="tokens" id="target-tokens"></p>
<p class="muted" id="meta"></p></header>
<nav><span>kind</span><span id="kinds"></span>
<label>layer <select id="layer"></select></label>
<label>head <select id="head"></select></label>
<span>view</span><span><button id="view-lines">lines</button>
<button id="view-matrix">matrix</button></span></nav>
<main><section id="heads"><h2 id="thumbs-title">every head</h2><div class="panes">
<div class="pane" id="thumbs-pane"><div id="thumbs"></div><div class="key" id="thumbs-key"></div>
</div><div class="pane" id="stats-pane"><table id="stats"><thead></thead><tbody></tbody></table>
<p class="hint">L, H: layer, head; entropy of a row (nats); the weight on the previous,
same and next position; dist: the mean distance attended (positions); conf: the mean largest
weight. Averages over the query rows. Click a head or a row to select it.</p></div></div>
</section>
<section><h2 id="view-title"></h2><div class="key" id="view-key"></div><svg id="view"></svg>
<p class="hint">Hover a query token (left, or a row) to see what it attends to; hover a key
token (right, or a column) to see who attends to it. Line opacity and cell colour are the
weight. A word the tokenizer cut into pieces is shaded, its pieces joined by dots
(beg\u00b7in\u00b7ning); each piece is a token of its own. In the decoder a query is the state
that writes the next token: the row of &lt;bos&gt; chose the first word.</p></section></main>
"""
"""The page's markup; the script fills it."""


def embed_json(data: Any) -> str:
    """``data`` as JSON safe inside a ``<script>`` element (module doc)."""
    text = json.dumps(data, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    for char, escape in _ESCAPES.items():
        text = text.replace(char, escape)
    return text


def render_page(data: dict[str, Any]) -> str:
    """The whole page for ``collect.attention_data``'s ``data``, as text (UTF-8)."""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">\n'
        '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
        "<title>minitransformer attention</title>\n"
        f"<style>{STYLE}</style></head>\n<body>{BODY}"
        f'<script type="application/json" id="data">{embed_json(data)}</script>\n'
        f"<script>{SCRIPT}</script>\n</body></html>\n"
    )

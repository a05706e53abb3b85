"""One self-contained HTML page (inline styles and script, no network) of a prompt's run.

    inspect_page(model, ids, tokens, title) -> str
    vit_page(vit, image, title, label) -> str    (a ViT: the heat maps over cls, p0, p1, ...)

Sections: every layer's and head's attention pattern as a heat map over the prompt's tokens
(each cell a <td> with data-w, its weight as the cache holds it, and data-q/data-k its query
and key positions; hovering names the token pair), the logit lens as a table (each block's
stream read through ln_f and the unembedding: top token, its probability, the true next
token's rank), and the heads with the largest direct logit attribution to the model's top
prediction at the last position (pre-norm models). The script sets body's data-ready="1"
when it has run and records any error in data-errors, which the browser test reads.
"""
from __future__ import annotations

import html
import json

import numpy as np

from gpt.inspect.analysis import attribution_refusal, direct_logit_attribution, logit_lens
from gpt.inspect.hooks import hook_names, run_with_cache

STYLE = """
body{font:14px system-ui,sans-serif;margin:1.5em;color:#222}
h1{font-size:1.3em}h2{font-size:1.1em;margin-top:1.6em}
table.map{border-collapse:collapse;margin:0 1.2em 1.2em 0;display:inline-table}
table.map td{width:14px;height:14px;padding:0}
table.map caption{font-size:12px;text-align:left}
table.lens{border-collapse:collapse}table.lens td,table.lens th{border:1px solid #ccc;padding:2px 5px;font-size:12px}
#hover{position:sticky;top:0;background:#ffe;padding:4px;border:1px solid #cc9;min-height:1.2em}
code{background:#f3f3f3}
"""

SCRIPT = """
window.addEventListener('error', function (e) {
  document.body.dataset.errors = (document.body.dataset.errors || '') + e.message + ';';
});
(function () {
  var tokens = JSON.parse(document.getElementById('tokens').textContent);
  var box = document.getElementById('hover');
  document.querySelectorAll('table.map').forEach(function (map) {
    map.addEventListener('mouseover', function (e) {
      var c = e.target.closest('td');
      if (!c) return;
      var q = +c.dataset.q, k = +c.dataset.k;
      box.textContent = map.dataset.head + ': query ' + q + ' ' + JSON.stringify(tokens[q]) +
        ' -> key ' + k + ' ' + JSON.stringify(tokens[k]) + ', weight ' + (+c.dataset.w).toFixed(4);
    });
  });
  document.body.dataset.ready = '1';
})();
"""


def _colour(w: float) -> str:
    """White (0) to dark blue (1)."""
    w = min(max(float(w), 0.0), 1.0)
    r, g = int(255 - 225 * w), int(255 - 190 * w)
    return f"rgb({r},{g},255)"


def heat_map(pattern: np.ndarray, label: str) -> str:
    """A (T, T) pattern as a <table class="map">; cell (q, k) holds data-w = pattern[q, k]."""
    rows = []
    for q, row in enumerate(pattern):
        cells = "".join(f'<td data-q="{q}" data-k="{k}" data-w="{float(w)!r}" style="background:{_colour(w)}"></td>'
                        for k, w in enumerate(row))
        rows.append(f"<tr>{cells}</tr>")
    return f'<table class="map" data-head="{label}"><caption>{label}</caption>{"".join(rows)}</table>'


def _lens_table(lens: dict, tokens: list[str], token_of) -> str:
    head = "".join(f"<th>{t}<br>{html.escape(repr(s))}</th>" for t, s in enumerate(tokens))
    body = []
    for i, label in enumerate(lens["labels"]):
        cells = []
        for t in range(len(tokens)):
            top, p = int(lens["top_ids"][i, 0, t, 0]), float(lens["top_probs"][i, 0, t, 0])
            rank = f"; next token's rank {int(lens['rank'][i, 0, t])}" if t < len(tokens) - 1 else ""
            cells.append(f'<td title="p={p:.4f}{rank}">{html.escape(repr(token_of(top)))} {p:.2f}</td>')
        body.append(f"<tr><th>{label}</th>{''.join(cells)}</tr>")
    return f'<table class="lens"><tr><th></th>{head}</tr>{"".join(body)}</table>'


def _attribution(model, cache: dict, logits: np.ndarray, token_of, top: int = 10) -> str:
    why = attribution_refusal(model.config)
    if why:
        return f"<p>{html.escape(why)}.</p>"
    best = int(logits[0, -1].argmax())
    parts = direct_logit_attribution(model, cache, best, batch=0, pos=-1)
    heads = sorted(((v, k) for k, v in parts.items() if k.startswith("L") and " " not in k), key=lambda x: -abs(x[0]))
    rows = "".join(f"<tr><td>{k}</td><td>{v:+.4f}</td></tr>" for v, k in heads[:top])
    return (f"<p>Logit of the top prediction {html.escape(repr(token_of(best)))} at the last position: "
            f"{float(logits[0, -1, best]):.4f} (sum of all parts {sum(parts.values()):.4f}; embedding "
            f"{parts['embed']:+.4f}).</p>"
            f'<table class="lens"><tr><th>head</th><th>direct logit</th></tr>{rows}</table>')


def inspect_page(model, ids, tokens: list[str], title: str, token_of=str) -> str:
    """The page's HTML for ids (1, T) whose token strings are `tokens`; token_of(id) -> str."""
    logits, cache = run_with_cache(model, ids)
    cfg = model.config
    maps = []
    for i in range(cfg.n_layer):
        pat = cache[f"blocks.{i}.attn.hook_pattern"][0]                     # (H, T, T)
        maps.append(f"<h3>layer {i}</h3>" + "".join(heat_map(pat[h], f"L{i}H{h}") for h in range(cfg.n_head)))
    lens = logit_lens(model, cache, ids, k=1)
    shape = (f"n_layer={cfg.n_layer} n_head={cfg.n_head} n_kv_head={cfg.kv_heads} n_embd={cfg.n_embd} "
             f"pos={cfg.pos} norm={cfg.norm} mlp={cfg.mlp} prenorm={cfg.prenorm}")
    prompt = " ".join(f"<code>{html.escape(repr(t))}</code>" for t in tokens)
    # no <, > or & inside the script element, whatever the tokens hold
    return _document(title, f"<p>GPT {shape}. Prompt ({len(tokens)} tokens): {prompt}</p>", maps, f"""
<h2>Logit lens (each block's input stream, then the last block's output, through ln_f and the unembedding)</h2>
{_lens_table(lens, tokens, token_of)}
<h2>Direct logit attribution</h2>
{_attribution(model, cache, logits, token_of)}""", tokens)


def _document(title: str, intro: str, maps: list[str], rest: str, tokens: list[str]) -> str:
    """The page around its sections: the heat maps `maps`, then `rest` (HTML)."""
    # no <, > or & inside the script element, whatever the tokens hold
    tokens_json = json.dumps(tokens).replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title><style>{STYLE}</style></head>
<body>
<h1>{html.escape(title)}</h1>
{intro}
<div id="hover">hover over a cell</div>
<h2>Attention patterns (row: query, column: key; rows sum to 1)</h2>
{''.join(maps)}{rest}
<script type="application/json" id="tokens">{tokens_json}</script>
<script>{SCRIPT}</script>
</body></html>
"""


def vit_tokens(cfg) -> list[str]:
    """A ViT's token labels: the class token, then the patches in row-major order."""
    return ["cls"] + [f"p{i}" for i in range(cfg.num_patches)]


def vit_page(model, image, title: str, label: int | None = None) -> str:
    """The page's HTML for one image (C, H, W) through a ViT (gpt/vision/model.py); label: its true class."""
    from gpt.vision.show import ascii_image

    cfg = model.config
    logits, cache = run_with_cache(model, np.asarray(image)[None])
    maps = []
    for i in range(cfg.num_layers):
        pat = cache[f"blocks.{i}.attn.hook_pattern"][0]                     # (H, 1 + N, 1 + N)
        maps.append(f"<h3>layer {i}</h3>" + "".join(heat_map(pat[h], f"L{i}H{h}") for h in range(cfg.nhead)))
    probs = np.exp(logits[0] - logits[0].max())
    probs /= probs.sum()
    pred = int(probs.argmax())
    truth = "" if label is None else f"; true class {int(label)}"
    side = cfg.image_size // cfg.patch_size
    intro = (f"<p>ViT {cfg.image_size}x{cfg.image_size}x{cfg.in_channels} images, patch {cfg.patch_size} "
             f"({side}x{side} patches p0..p{cfg.num_patches - 1}, row by row, after the class token cls), "
             f"d_model={cfg.d_model} nhead={cfg.nhead} num_layers={cfg.num_layers} "
             f"norm_first={cfg.norm_first}. Predicted class {pred} (p={float(probs[pred]):.4f}){truth}.</p>"
             f"<pre>{html.escape(chr(10).join(ascii_image(image)))}</pre>")
    rest = ("\n<h2>Logit lens and direct logit attribution</h2>\n<p>Not shown for a ViT: its head reads only "
            "the class token's final stream, into class scores rather than a vocabulary, so there is no "
            "next token to read at each position.</p>")
    return _document(title, intro, maps, rest, vit_tokens(cfg))


def attention_png(model, ids, path, tokens: list[str]):
    """Every head's pattern as a grid of images in a PNG (matplotlib); the plotting module's message."""
    from gpt.plotting import MISSING_MATPLOTLIB, pyplot, save_figure

    plt = pyplot()
    if plt is None:
        return MISSING_MATPLOTLIB
    names = [n for n in hook_names(model) if n.endswith(".attn.hook_pattern")]
    _, cache = run_with_cache(model, ids, names)
    L, H = len(names), cache[names[0]].shape[1]
    fig, axes = plt.subplots(L, H, figsize=(2.2 * H, 2.2 * L), squeeze=False)
    for i in range(L):
        for h in range(H):
            ax = axes[i][h]
            ax.imshow(cache[f"blocks.{i}.attn.hook_pattern"][0, h], cmap="Blues", vmin=0, vmax=1)
            ax.set_title(f"L{i}H{h}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
    fig.tight_layout()
    return f"wrote {save_figure(fig, path, plt)}"

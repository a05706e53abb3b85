"""Analyses over a cache of hook points (gpt/inspect/hooks.py), each a few lines of NumPy.

    logit_lens(model, cache, ids)                every block's stream through ln_f and the unembedding
    direct_logit_attribution(model, cache, ...)  a logit split into the embedding's, heads' and MLPs' parts
    circuits(model, layer, head)                 W_Q W_K^T and W_V W_O of a head, with singular values
    patch / patch_residual / patch_heads         activation patching of a clean run into a corrupted one
    induction_scores(model, ...)                 previous-token, induction (prefix-matching) and copying scores

B batch, T tokens, C n_embd, H heads, hs head size, L layers, V vocabulary. Float64 throughout.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from autograd import backend
from gpt.inspect.hooks import run_with_cache, run_with_hooks


def _array(p) -> np.ndarray:
    return np.asarray(backend.to_device(p.data, "cpu"), dtype=np.float64)


def unembedding(model) -> np.ndarray:
    """W_U (C, V) float64: the matrix that maps the final stream to logits."""
    return _array(model.output_weight())


def final_norm(model, x: np.ndarray) -> np.ndarray:
    """ln_f applied to streams x (..., C) afresh (its own scale per row); identity for post-norm."""
    if not model.config.has_ln_f:
        return x
    ln = model.transformer.ln_f
    w = _array(ln.weight)
    if model.config.norm == "layernorm":
        x = x - x.mean(-1, keepdims=True)
    y = x / np.sqrt((x * x).mean(-1, keepdims=True) + ln.eps) * w
    return y if getattr(ln, "bias", None) is None else y + _array(ln.bias)


def _streams(model, cache) -> tuple[list[str], np.ndarray]:
    """(labels, stack (L + 1, B, T, C)): the stream entering each block and leaving the last."""
    L = model.config.n_layer
    names = [f"blocks.{i}.hook_resid_pre" for i in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]
    labels = [f"L{i} in" for i in range(L)] + [f"L{L - 1} out"]
    return labels, np.stack([np.asarray(cache[n], np.float64) for n in names])


def logit_lens(model, cache: dict, ids: Any, k: int = 5) -> dict:
    """Each block's input stream (and the last one's output) read as next-token predictions.

    ids (B, T) int. Returns labels (L + 1), top_ids and top_probs (L + 1, B, T, k), and for the
    true next tokens ids[:, 1:]: rank (L + 1, B, T - 1) int (0 = the top prediction) and prob."""
    ids = np.asarray(ids)
    labels, x = _streams(model, cache)
    logits = final_norm(model, x) @ unembedding(model)               # (L + 1, B, T, V)
    logits -= logits.max(-1, keepdims=True)
    probs = np.exp(logits)
    probs /= probs.sum(-1, keepdims=True)
    top = np.argsort(-probs, axis=-1)[..., :k]
    nxt = np.broadcast_to(ids[None, :, 1:, None], probs[:, :, :-1, :1].shape)
    p_true = np.take_along_axis(probs[:, :, :-1], nxt, axis=-1)       # (L + 1, B, T - 1, 1)
    rank = (probs[:, :, :-1] > p_true).sum(-1)
    return {"labels": labels, "top_ids": top, "top_probs": np.take_along_axis(probs, top, -1),
            "rank": rank, "prob": p_true[..., 0]}


def attribution_refusal(cfg) -> str | None:
    """Why direct logit attribution cannot split this model's logits linearly, or None."""
    if not cfg.prenorm:
        return ("direct logit attribution needs a pre-norm model: post-norm blocks normalise the stream "
                "after every sublayer (x = ln(x + f(x))), so the final stream is not a sum of the "
                "sublayers' outputs")
    if not cfg.residual:
        return "direct logit attribution needs residual connections: without them the stream is not a sum"
    return None


def direct_logit_attribution(model, cache: dict, token: int | tuple[int, int], batch: int = 0,
                             pos: int = -1) -> dict[str, float]:
    """{part: its share of the logit of `token` (or of logit(a) - logit(b) for token=(a, b))} at
    (batch, pos): "embed" (tokens and positions), "L{i}H{h}" per head, "L{i} attn bias", "L{i} MLP",
    "ln_final bias"; the final norm's scale is frozen at its cached value, so the parts add up
    to the model's logit. Needs a cache of every point (or resid_pre, hook_z, hook_mlp_out and
    ln_final.hook_scale)."""
    cfg = model.config
    why = attribution_refusal(cfg)
    if why:
        raise ValueError(why)
    W_U = unembedding(model)
    a, b = (token, None) if np.ndim(token) == 0 else token
    direction = W_U[:, a] - (0.0 if b is None else W_U[:, b])                     # (C,)
    ln = model.transformer.ln_f
    gain = _array(ln.weight) * float(np.asarray(cache["ln_final.hook_scale"])[batch, pos, 0])
    centre = cfg.norm == "layernorm"

    def through_norm(v: np.ndarray) -> float:  # one part of the stream, frozen scale
        v = np.asarray(v, np.float64)
        return float(((v - v.mean()) if centre else v) * gain @ direction)

    parts = {"embed": through_norm(cache["blocks.0.hook_resid_pre"][batch, pos])}
    hs = cfg.head_dim
    for i, block in enumerate(model.transformer.h):
        z = np.asarray(cache[f"blocks.{i}.attn.hook_z"][batch, :, pos], np.float64)  # (H, hs)
        W_O = _array(block.attn.c_proj.weight)                                        # (C, C)
        for h in range(cfg.n_head):
            parts[f"L{i}H{h}"] = through_norm(z[h] @ W_O[h * hs:(h + 1) * hs])
        if block.attn.c_proj.bias is not None:
            parts[f"L{i} attn bias"] = through_norm(_array(block.attn.c_proj.bias))
        if block.mlp is not None:
            parts[f"L{i} MLP"] = through_norm(cache[f"blocks.{i}.hook_mlp_out"][batch, pos])
    if getattr(ln, "bias", None) is not None:
        parts["ln_final bias"] = float(_array(ln.bias) @ direction)
    return parts


def circuits(model, layer: int, head: int) -> dict[str, np.ndarray]:
    """The head's QK circuit W_Q W_K^T and OV circuit W_V W_O, both (C, C) of rank <= hs, and
    their singular values (C,). With RoPE the scores also depend on the positions' distance,
    which these matrices leave out; grouped-query heads read their group's key/value head."""
    cfg = model.config
    if not (0 <= layer < cfg.n_layer and 0 <= head < cfg.n_head):  # negative ones would slice nonsense
        raise ValueError(f"layer {layer}, head {head}: the model has layers 0..{cfg.n_layer - 1} and heads "
                         f"0..{cfg.n_head - 1}")
    attn = model.transformer.h[layer].attn
    C, hs = cfg.n_embd, cfg.head_dim
    W = _array(attn.c_attn.weight)                                     # (C, C + 2 Hkv hs)
    g = head // (cfg.n_head // cfg.kv_heads)                           # its key/value head
    W_Q = W[:, head * hs:(head + 1) * hs]                              # (C, hs)
    W_K = W[:, C + g * hs:C + (g + 1) * hs]
    W_V = W[:, C + cfg.kv_heads * hs + g * hs:C + cfg.kv_heads * hs + (g + 1) * hs]
    W_O = _array(attn.c_proj.weight)[head * hs:(head + 1) * hs]        # (hs, C)
    qk, ov = W_Q @ W_K.T, W_V @ W_O
    return {"qk": qk, "ov": ov, "qk_singular": np.linalg.svd(qk, compute_uv=False),
            "ov_singular": np.linalg.svd(ov, compute_uv=False)}


def logit_diff(logits: np.ndarray, answer: int, wrong: int) -> float:
    """Mean over the batch of logit(answer) - logit(wrong) at the last position."""
    return float(np.mean(logits[:, -1, answer] - logits[:, -1, wrong]))


def patch(model, corrupt_ids: Any, clean_cache: dict, name: str, index: Any = ...) -> np.ndarray:
    """Logits (B, T, V) of the corrupted prompt with activation `name` at `index` (an index into
    the array, e.g. (slice(None), 3) for position 3 of a stream) taken from the clean cache."""
    clean = clean_cache[name]

    def fn(act, _name):
        act[index] = backend.to_device_of(clean[index], act)
    return run_with_hooks(model, corrupt_ids, hooks=[(name, fn)])


def _recovered(model, clean_ids, corrupt_ids, answer, wrong, jobs) -> tuple[np.ndarray, float, float]:
    """The fraction (patched - corrupt) / (clean - corrupt) of the logit difference per job."""
    clean_logits, cache = run_with_cache(model, clean_ids)
    if np.shape(clean_ids) != np.shape(corrupt_ids):
        raise ValueError(f"patching needs prompts of one shape, got {np.shape(clean_ids)} and {np.shape(corrupt_ids)}")
    clean = logit_diff(clean_logits, answer, wrong)
    corrupt = logit_diff(run_with_hooks(model, corrupt_ids), answer, wrong)
    span = clean - corrupt if clean != corrupt else 1.0
    out = [(logit_diff(patch(model, corrupt_ids, cache, n, i), answer, wrong) - corrupt) / span for n, i in jobs]
    return np.array(out), clean, corrupt


def patch_residual(model, clean_ids, corrupt_ids, answer: int, wrong: int) -> dict:
    """Patching the stream entering each block (and leaving the last) at each position:
    recovered (L + 1, T), 1 = the clean logit difference, 0 = the corrupted one."""
    L, T = model.config.n_layer, np.shape(clean_ids)[1]
    names = [f"blocks.{i}.hook_resid_pre" for i in range(L)] + [f"blocks.{L - 1}.hook_resid_post"]
    jobs = [(n, (slice(None), t)) for n in names for t in range(T)]
    rec, clean, corrupt = _recovered(model, clean_ids, corrupt_ids, answer, wrong, jobs)
    return {"names": names, "recovered": rec.reshape(L + 1, T), "clean": clean, "corrupt": corrupt}


def patch_heads(model, clean_ids, corrupt_ids, answer: int, wrong: int) -> dict:
    """Patching each head's output z at every position: recovered (L, H)."""
    L, H = model.config.n_layer, model.config.n_head
    jobs = [(f"blocks.{i}.attn.hook_z", (slice(None), h)) for i in range(L) for h in range(H)]
    rec, clean, corrupt = _recovered(model, clean_ids, corrupt_ids, answer, wrong, jobs)
    return {"recovered": rec.reshape(L, H), "clean": clean, "corrupt": corrupt}


def repeated_tokens(vocab_size: int, length: int, batch: int, seed: int = 0) -> np.ndarray:
    """(batch, 2 * length) int64: random tokens, then the same tokens again."""
    r = np.random.default_rng(seed).integers(0, vocab_size, size=(batch, length))
    return np.concatenate([r, r], axis=1)


def induction_scores(model, length: int = 20, batch: int = 8, seed: int = 0) -> dict:
    """ARENA's scores of every head on repeated random tokens (2 x `length` per row):
    previous_token (L, H), the mean weight from query i to key i - 1; induction (L, H), the
    prefix-matching weight from a repeated token to the one after its first occurrence (key
    i - length + 1, queries of the second half); copying (L, H), the share of positive
    eigenvalues sum(lambda) / sum(|lambda|) of the full OV circuit W_E W_V W_O W_U; and the
    mean next-token loss on each half (loss_first, loss_second)."""
    cfg = model.config
    if length < 2 or batch < 1:  # a half of one token has no next token to score
        raise ValueError(f"induction_scores needs length >= 2 and batch >= 1, got {length} and {batch}")
    ids = repeated_tokens(cfg.vocab_size, length, batch, seed)
    logits, cache = run_with_cache(model, ids)
    L, H, S = cfg.n_layer, cfg.n_head, length
    prev, ind, copy = np.zeros((L, H)), np.zeros((L, H)), np.zeros((L, H))
    q = np.arange(S, 2 * S)
    for i in range(L):
        pat = cache[f"blocks.{i}.attn.hook_pattern"]                             # (B, H, 2S, 2S)
        prev[i] = np.diagonal(pat, offset=-1, axis1=2, axis2=3).mean((0, 2))
        ind[i] = pat[:, :, q, q - S + 1].mean((0, 2))
        for h in range(H):
            copy[i, h] = copying_score(model, i, h)
    z = logits - logits.max(-1, keepdims=True)
    logp = z - np.log(np.exp(z).sum(-1, keepdims=True))
    nll = -np.take_along_axis(logp[:, :-1], ids[:, 1:, None], -1)[..., 0]       # (B, 2S - 1)
    return {"previous_token": prev, "induction": ind, "copying": copy,
            "loss_first": float(nll[:, :S - 1].mean()), "loss_second": float(nll[:, S:].mean())}


def copying_score(model, layer: int, head: int) -> float:
    """sum(lambda) / sum(|lambda|) of the eigenvalues of W_E W_OV W_U (V, V), through the
    nonzero spectrum of the (C, C) product W_OV W_U W_E (the same eigenvalues besides zeros)."""
    W_E = _array(model.transformer.wte.weight)                                   # (V, C)
    m = circuits(model, layer, head)["ov"] @ unembedding(model) @ W_E            # (C, C)
    lam = np.linalg.eigvals(m)
    total = np.abs(lam).sum()
    return float(lam.real.sum() / total) if total else 0.0

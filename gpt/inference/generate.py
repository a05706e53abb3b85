"""The generation loop: prefill the prompt once, then one token per step against a KV cache.

Shapes: B = rows (prompts x num_samples, or beams), T = tokens, V = vocab, C = n_embd.

Cached decoding. The prompt goes through the model in one forward pass that fills one
preallocated `nn.KVCache` per layer (sized for the largest window, min(block_size,
prompt + new tokens), never grown by concatenation); each later step feeds only the new token,
whose q, k, v are the only ones a layer computes, at position `pos_offset` = the cache length
(learned and sinusoidal tables are read at that row, rotary embeddings rotate by it). Only the
last position's logits are formed. A step runs through `GPT.step`, each layer's no-graph step
beside its forward (nn/arrays.py), or through `forward(..., kv_caches=...)` for a model whose
layers have no step (MoE).
The uncached path (use_cache=False) runs the whole context through the model at every step;
it exists to check the cached one and to measure what the cache buys.

Context-full policy (a sliding window with re-prefill). The context the model sees is the
window tokens[s:n] of the n tokens so far. It starts at s = 0 and grows by one per step; when
it would exceed block_size, the oldest tokens are dropped so that the last `window_keep` tokens
remain (s = n - window_keep) and the cache is rebuilt by one prefill of that window. Default
window_keep = 3/4 of block_size: one re-prefill per block_size/4 tokens, and the model keeps
at least 3/4 of its context. window_keep = block_size is nanoGPT's crop-every-step (exact but
a full forward per token once the context is full). The window depends only on n, so the
cached and uncached paths, and a prompt alone or inside a batch, see identical contexts.

Batched prompts of different lengths: prompts are left-aligned (right-padded) and the batch
advances in lockstep, all rows at the same position, so no attention mask and no per-row
position is needed. The prefill covers the shortest prompt; while a row still has prompt
tokens, its next token is forced to its prompt token instead of sampled (the scheme of Meta's
LLaMA reference sampler). Every row therefore sees exactly the positions and windows it would
see alone.
"""
from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import numpy as np

import autograd
import nn
from autograd import Tensor
from autograd.backend import to_device
from autograd.memory import check_fits
from gpt.inference import sample as S
from gpt.inference.beam import beam_search

PAD = -1  # fills finished rows in returned arrays and "no new token" slots in streams
LAYOUT_MIN_STEPS = 32  # cached steps a window must have left for its weight copies to pay


# ---- the context window ----------------------------------------------------------------------
def default_window_keep(block_size: int) -> int:
    return max(1, (3 * block_size) // 4)


def window_start(n: int, block_size: int, keep: int) -> int:
    """Start s of the window tokens[s:n] after n tokens have arrived one by one (see module doc)."""
    if n <= block_size:
        return 0
    # the first drop happens at n = block_size + 1 (s = n - keep); after that every
    # block_size - keep + 1 tokens the window is full again and drops back to `keep`
    period = block_size - keep + 1
    return n - keep - (n - block_size - 1) % period


# ---- one decoder: the model, its caches and the token history of B rows -------------------------
class Decoder:
    """Feeds B rows of tokens to `model` and returns the next-token logits of each row.

    prefill(tokens (B, n)) -> (B, V) float32 host logits after the n tokens;
    step(tokens (B,)) -> (B, V) after appending one token per row.
    With use_cache the window lives in `caches` (one nn.KVCache per layer); without it the
    whole window is run at every step. `reorder(rows)` selects/duplicates rows (beam search).
    """

    def __init__(self, model, batch: int, capacity: int, use_cache: bool = True,
                 window_keep: int | None = None):
        cfg = model.config
        self.model, self.batch, self.use_cache = model, batch, use_cache
        self.block_size = cfg.block_size
        keep = default_window_keep(cfg.block_size) if window_keep is None else int(window_keep)
        if not 1 <= keep <= cfg.block_size:
            raise ValueError(f"window_keep must be in 1..block_size={cfg.block_size}, got {window_keep}")
        self.keep = keep
        check_fits(8 * batch * capacity, f"{batch} row(s) of {capacity:,} tokens (prompt and new tokens)",
                   "ask for fewer new tokens (--max-new-tokens) or samples")
        self.tokens = np.zeros((batch, capacity), dtype=np.int64)  # every token so far, host
        self.n = 0   # tokens so far per row (all rows advance together)
        self.s = 0   # window start: the model's context is tokens[:, s:n]
        # the window never holds more than block_size tokens, nor more than will ever arrive
        self.caches = model.new_kv_caches(batch, min(cfg.block_size, capacity)) if use_cache else None
        # cached steps run through each layer's array step (GPT.step) where every layer has one
        self.stepper = model.step if use_cache and model.can_step() else None
        self.layouts = None  # the steps' weight copies (nn.step_layouts), made anew after each prefill
        self.prefills = 0  # how many full-window forwards ran (1 + re-prefills when cached)

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by the KV caches: rows x min(block_size, capacity) positions x
        kv_cache_numbers_per_token numbers."""
        return 0 if self.caches is None else sum(c.nbytes for c in self.caches)

    def _forward(self, idx: np.ndarray, pos_offset: int, caches) -> np.ndarray:
        with inference(self.model):
            logits, _ = self.model(idx, kv_caches=caches, pos_offset=pos_offset, last_only=True)
        return to_device(logits.data[:, -1, :], "cpu")  # (B, V) on the host

    def _run_window(self) -> np.ndarray:
        window = self.tokens[:, self.s:self.n]  # (B, n - s)
        if self.caches is not None:
            for c in self.caches:
                c.reset()
        self.layouts = None
        self.prefills += 1
        return self._forward(np.ascontiguousarray(window), 0, self.caches)

    def prefill(self, tokens: np.ndarray) -> np.ndarray:
        tokens = np.asarray(tokens, dtype=np.int64)
        if tokens.ndim != 2 or tokens.shape[0] != self.batch or tokens.shape[1] == 0:
            raise ValueError(f"prefill expects tokens (B={self.batch}, n>0), got {tokens.shape}")
        n = tokens.shape[1]
        if n > self.tokens.shape[1]:
            raise ValueError(f"prefill: {n} tokens exceed the decoder's capacity {self.tokens.shape[1]}")
        self.tokens[:, :n] = tokens
        self.n, self.s = n, window_start(n, self.block_size, self.keep)
        return self._run_window()

    def step(self, tokens: np.ndarray) -> np.ndarray:
        if self.n >= self.tokens.shape[1]:
            raise ValueError(f"decoder capacity {self.tokens.shape[1]} reached")
        self.tokens[:, self.n] = np.asarray(tokens, dtype=np.int64).reshape(self.batch)
        self.n += 1
        s = window_start(self.n, self.block_size, self.keep)
        if s != self.s or self.caches is None:
            self.s = s
            return self._run_window()
        # the cached step: only the new token, at position n - 1 - s of the window
        if self.stepper is not None:
            with inference(self.model), nn.laid_out(self._layouts()):
                return to_device(self.stepper(self.tokens[:, self.n - 1], self.caches, self.n - 1 - self.s), "cpu")
        return self._forward(self.tokens[:, self.n - 1:self.n], self.n - 1 - self.s, self.caches)

    def _layouts(self) -> list:
        """The weight copies of nn.step_layouts for this window's steps, made at its first step
        where at least LAYOUT_MIN_STEPS steps remain before the next prefill or the end, so that
        the steps they speed up repay the copying."""
        if self.layouts is None:
            left = min(self.block_size - (self.n - self.s), self.tokens.shape[1] - self.n)
            self.layouts = nn.step_layouts(self.model) if left >= LAYOUT_MIN_STEPS else []
        return self.layouts

    def reorder(self, rows: np.ndarray) -> None:
        """Row i becomes former row rows[i] (tokens and cached keys/values)."""
        rows = np.asarray(rows, dtype=np.int64)
        self.tokens[:, :self.n] = self.tokens[rows, :self.n]
        for c in self.caches or ():
            c.reorder(rows)


# ---- inputs ----------------------------------------------------------------------------------------
def as_prompts(idx: Any, vocab_size: int, what: str = "prompt") -> tuple[list[np.ndarray], bool]:
    """(list of 1-D int64 prompts, ragged?) from a Tensor/array (T,) or (B, T), a list of ids,
    or a list of id lists of different lengths; errors name each row `what` ('prompt 2 ...')."""
    if isinstance(idx, Tensor):
        idx = idx.numpy()
    ragged = False
    if isinstance(idx, (list, tuple)) and idx and isinstance(idx[0], (list, tuple, np.ndarray, Tensor)):
        rows = [np.asarray(r.numpy() if isinstance(r, Tensor) else r) for r in idx]
        ragged = len({r.shape for r in rows}) > 1
    else:
        arr = np.asarray(idx.get() if hasattr(idx, "get") else idx)
        if arr.ndim == 1:
            arr = arr[None, :]
        if arr.ndim != 2:
            raise ValueError(f"expected idx of shape (T,) or (B, T) (or a list of id lists), got {arr.shape}")
        rows = list(arr)
    if not rows:
        raise ValueError(f"generate needs at least one {what}")
    out = []
    for i, r in enumerate(rows):
        if r.ndim != 1 or r.size == 0:
            raise ValueError(f"{what} {i} must be a non-empty 1-D sequence of token ids, got shape {r.shape}")
        if r.dtype.kind not in "iu":
            if r.dtype.kind == "f" and np.all(r == np.round(r)):
                r = r.astype(np.int64)
            else:
                raise TypeError(f"{what} {i} must hold integer token ids, got dtype {r.dtype}")
        if r.min() < 0 or r.max() >= vocab_size:
            bad = int(r.min()) if r.min() < 0 else int(r.max())
            raise ValueError(f"{what} {i}: token id {bad} is outside the vocabulary [0, {vocab_size})")
        out.append(r.astype(np.int64))
    return out, ragged


@contextlib.contextmanager
def inference(model):
    """eval() and no_grad() around one forward; the training flag and grad mode are restored.

    Entered per model call, not around a whole generation, so that a caller holding a
    suspended `stream` generator keeps its own grad mode and training flag between tokens.
    """
    was_training = model.training
    if was_training:
        model.eval()
    try:
        with autograd.no_grad():
            yield
    finally:
        if was_training:
            model.train(True)


# ---- sampling loop ---------------------------------------------------------------------------------
def _decodable(tokenizer, vocab_size: int) -> int | None:
    """How many of the model's ids ``tokenizer`` decodes, where fewer than all: checkpoints pad
    their vocabulary past the tokenizer's (Qwen2, Phi-3), and a padded id has no text. Else None."""
    n = getattr(tokenizer, "vocab_size", None)
    return n if isinstance(n, int) and 0 < n < vocab_size else None


def _only_below(logits, limit: int | None):
    """``logits`` (..., V) with the ids from ``limit`` on made impossible (-inf), on a copy."""
    if limit is None:
        return logits
    logits = np.array(logits)  # a copy: the decoder's buffer stays as it is
    logits[..., limit:] = -np.inf
    return logits


def stream(model, idx: Any, max_new_tokens: int, *, sampling: S.SamplingConfig | None = None, stop=None,
           use_cache: bool = True, seed: int | None = None, num_samples: int = 1, tokenizer=None,
           window_keep: int | None = None, generator: np.random.Generator | None = None,
           _state: dict | None = None, **options) -> Iterator[np.ndarray]:
    """Yield, step by step, one new token per row: an int64 array (N,), N = prompts x num_samples
    (each prompt's samples consecutive), holding PAD (-1) for a row that produced nothing this step
    (still forcing its prompt, or already stopped). Stops after max_new_tokens per row or when
    every row has met a stop id / stop string (stop strings need `tokenizer`).

    How tokens are picked: `sampling` (a SamplingConfig), or its fields as keywords
    (temperature=, top_k=, top_p=, repetition_penalty=)."""
    cfg = model.config
    sampling = S.SamplingConfig.of(sampling, **options)
    max_new_tokens = S.whole_number(max_new_tokens, "max_new_tokens", 0)
    num_samples = S.whole_number(num_samples, "num_samples", 1)
    prompts, _ = as_prompts(idx, cfg.vocab_size)
    prompts = [p for p in prompts for _ in range(num_samples)]
    lengths = np.array([len(p) for p in prompts])
    B, n0 = len(prompts), int(lengths.min())
    total = int(lengths.max()) + int(max_new_tokens)
    gen = generator if generator is not None else S.make_generator(seed)
    stops = [S.make_stop_state(stop, tokenizer) for _ in range(B)]
    new_counts = np.zeros(B, dtype=np.int64)
    if _state is not None:
        _state.update(stops=stops, lengths=lengths)
    if max_new_tokens == 0:
        return
    dec = Decoder(model, B, total, use_cache=use_cache, window_keep=window_keep)
    if _state is not None:
        _state["decoder"] = dec
    for b, p in enumerate(prompts):
        dec.tokens[b, :len(p)] = p
    logits = dec.prefill(dec.tokens[:, :n0])
    limit = _decodable(tokenizer, cfg.vocab_size)
    for t in range(n0, total):
        context = [dec.tokens[b, :t] for b in range(B)] if sampling.needs_context else None
        chosen = sampling.next_token(_only_below(logits, limit), gen, context)
        forced = t < lengths
        chosen = np.where(forced, dec.tokens[:, t], chosen)
        out = np.full(B, PAD, dtype=np.int64)
        for b in np.flatnonzero(~forced):
            if not stops[b].done and new_counts[b] < max_new_tokens:
                out[b] = chosen[b]
                new_counts[b] += 1
                stops[b].push(int(chosen[b]))
        yield out
        if all(st.done or c >= max_new_tokens for st, c in zip(stops, new_counts)):
            return
        logits = dec.step(chosen)


def generate(model, idx: Any, max_new_tokens: int, *, sampling: S.SamplingConfig | None = None, stop=None,
             use_cache: bool = True, seed: int | None = None, num_samples: int = 1, num_beams: int = 1,
             tokenizer=None, length_penalty: float = 1.0, window_keep: int | None = None,
             pad_id: int = PAD, **options) -> np.ndarray | list[np.ndarray]:
    """Prompt plus generated tokens for every row.

    idx: (T,) or (B, T) ids (array or Tensor), or a list of id lists of different lengths.
    Returns int64 numpy: a (N, T + k) array (N = B x num_samples, k = most tokens any row
    generated; rows that stopped earlier are right-padded with pad_id), or, for prompts of
    different lengths, a list of N 1-D arrays. Generation that meets a stop id keeps it; a stop
    string keeps the token that completed it (decode and cut at the string, as `stream_text` does).
    Sampling as in `stream` (a SamplingConfig, or its fields as keywords); temperature=0 is greedy.
    num_beams > 1 runs beam search (deterministic; only the repetition penalty of the sampling
    options is used) and returns the best num_samples beams of each prompt.
    """
    cfg = model.config
    sampling = S.SamplingConfig.of(sampling, **options)
    max_new_tokens, num_samples, num_beams = (S.whole_number(v, name, least) for v, name, least in (
        (max_new_tokens, "max_new_tokens", 0), (num_samples, "num_samples", 1), (num_beams, "num_beams", 1)))
    prompts, ragged = as_prompts(idx, cfg.vocab_size)
    if num_beams > 1:
        rows = []
        for i, p in enumerate(prompts):
            best = beam_generate(model, p, max_new_tokens, num_beams, stop=stop, tokenizer=tokenizer,
                                 use_cache=use_cache, repetition_penalty=sampling.repetition_penalty,
                                 length_penalty=length_penalty, num_return=num_samples, window_keep=window_keep)
            if len(best) < num_samples:  # every row must be one of prompt i's num_samples
                raise ValueError(f"beam search found {len(best)} distinct continuation(s) of prompt {i}, fewer than "
                                 f"num_samples={num_samples}: ask for fewer samples or more new tokens")
            rows.extend(best)
    else:
        steps = list(stream(model, prompts, max_new_tokens, sampling=sampling, stop=stop, use_cache=use_cache,
                            seed=seed, num_samples=num_samples, tokenizer=tokenizer, window_keep=window_keep))
        new = np.stack(steps, axis=1) if steps else np.zeros((len(prompts) * num_samples, 0), np.int64)
        rows = [np.concatenate([p, r[r != PAD]]) for p, r in
                zip([p for p in prompts for _ in range(num_samples)], new)]
    if ragged:
        return rows
    width = max(len(r) for r in rows)
    out = np.full((len(rows), width), pad_id, dtype=np.int64)
    for i, r in enumerate(rows):
        out[i, :len(r)] = r
    return out


def beam_generate(model, prompt: np.ndarray, max_new_tokens: int, num_beams: int, *, stop=None,
                  tokenizer=None, use_cache: bool = True, repetition_penalty: float = 1.0,
                  length_penalty: float = 1.0, num_return: int = 1,
                  window_keep: int | None = None) -> list[np.ndarray]:
    """Beam search from one prompt (1-D ids); the best num_return sequences (prompt + new), best first."""
    prompt = np.asarray(prompt, dtype=np.int64)
    stop_ids, stop_strings = S.split_stop(stop)
    if stop_strings and tokenizer is None:
        raise ValueError(f"stop strings {list(stop_strings)} need a tokenizer= to decode generated text")

    def is_final(toks: list) -> bool:
        if toks[-1] in stop_ids:
            return True
        if stop_strings:
            text = tokenizer.decode(toks)
            return any(s in text for s in stop_strings)
        return False

    if max_new_tokens == 0:
        return [prompt.copy() for _ in range(num_return)]
    dec = Decoder(model, num_beams, len(prompt) + max_new_tokens, use_cache=use_cache, window_keep=window_keep)
    limit = _decodable(tokenizer, model.config.vocab_size)
    first = _only_below(dec.prefill(np.tile(prompt, (num_beams, 1)))[:1], limit)

    def logprob_fn(seqs: np.ndarray, parents: np.ndarray | None) -> np.ndarray:
        if parents is None:
            logits = first
        else:
            k = len(parents)
            # the decoder keeps num_beams rows; surplus rows repeat a live one and are ignored
            rows = np.concatenate([parents, np.full(num_beams - k, parents[-1])]) if k < num_beams else parents
            dec.reorder(rows)
            last = np.concatenate([seqs[:, -1], np.full(num_beams - k, seqs[-1, -1])])
            logits = _only_below(dec.step(last)[:k], limit)
        if repetition_penalty != 1.0:
            ctx = dec.tokens[:len(logits), :dec.n]
            logits = S.apply_repetition_penalty(logits, list(ctx), repetition_penalty)
        return S.log_softmax(logits)

    hyps = beam_search(logprob_fn, num_beams, max_new_tokens, is_final if (stop_ids or stop_strings) else None,
                         length_penalty, num_return)
    return [np.concatenate([prompt, np.asarray(h.tokens, dtype=np.int64)]) for h in hyps]


def stream_text(model, tokenizer, prompt: str | Sequence[int], max_new_tokens: int, *, stop=None,
                stats: dict | None = None, **kwargs) -> Iterator[str]:
    """Yield the generated text of one prompt piece by piece as tokens arrive.

    Text that could still turn into a stop string, or that ends in an incomplete UTF-8
    character, is held back until the next token decides it; the text ends right before a
    stop string (a stop id is not shown). kwargs: those of `stream` (sampling or temperature=,
    top_k=, ..., seed, generator, use_cache, ...).
    `stats`, when given, receives "tokens" (generated so far) and "cache_nbytes".
    """
    ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
    if not ids:
        raise ValueError("the prompt encodes to no tokens: give at least one character or token id")
    state: dict = {}
    _, strings = S.split_stop(stop)
    shown = 0
    tokens: list[int] = []
    for out in stream(model, [ids], max_new_tokens, stop=stop, tokenizer=tokenizer, _state=state, **kwargs):
        if out[0] == PAD:
            continue
        tokens.append(int(out[0]))
        if stats is not None:
            stats["tokens"] = len(tokens)
            stats["cache_nbytes"] = state["decoder"].cache_nbytes
        st = state["stops"][0]
        if st.done:
            break
        text = tokenizer.decode(tokens)
        ready = len(text) - S.holdback(text, strings)
        if ready > shown:
            yield text[shown:ready]
            shown = ready
    st = state["stops"][0] if state.get("stops") else None
    text = st.visible_text if st is not None and st.done else tokenizer.decode(tokens)
    if len(text) > shown:
        yield text[shown:]

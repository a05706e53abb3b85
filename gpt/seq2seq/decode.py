"""Decoding the translator: greedy, sampled or beam search, with cached or uncached steps.

B = rows (sources, or beams of one source), S = source length, V = vocab.

The source is encoded once. With use_cache, each decoder layer's cross-attention keys and values
are computed once from the memory (TransformerDecoder.memory_kv) and every step feeds only the
new target token, whose self-attention keys and values are appended to one nn.KVCache per
layer; without it, every step runs the decoder over the whole target so far (to check the cache).
The next token is chosen by gpt.inference.sample: SamplingConfig.next_token (temperature 0 =
greedy) or gpt.inference.beam.beam_search, the sampler the GPT uses.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from autograd.backend import to_device
from gpt.inference import sample as S
from gpt.inference.beam import beam_search
from gpt.inference.generate import as_prompts, inference
from gpt.seq2seq.data import BOS, EOS, pad_rows


class Seq2SeqDecoder:
    """Target-side state of B rows decoding against their encoded sources.

    logits() -> (B, V) float host logits of the next token after the tokens so far (<bos> first);
    push(tokens (B,)) appends one token per row; reorder(rows) selects / duplicates rows (beams).
    """

    def __init__(self, model, src: np.ndarray, max_new_tokens: int, use_cache: bool = True):
        self.model, self.use_cache = model, use_cache
        self.batch = src.shape[0]
        self.capacity = int(max_new_tokens) + 1
        if self.capacity > model.config.max_len:
            raise ValueError(f"max_new_tokens={max_new_tokens} + <bos> exceed the model's max_len={model.config.max_len}")
        with inference(model):
            self.memory, self.src_pad = model.encode(src)
            self.memory_kv = model.transformer.decoder.memory_kv(self.memory) if use_cache else None
        self.caches = model.new_kv_caches(self.batch, self.capacity) if use_cache else None
        self.tokens = np.full((self.batch, self.capacity), BOS, dtype=np.int64)
        self.n = 1   # tokens so far (the first is <bos>)
        self.fed = 0  # tokens already in the KV caches

    def push(self, tokens: Any) -> None:
        if self.n >= self.capacity:
            raise ValueError(f"Seq2SeqDecoder: capacity of {self.capacity - 1} new tokens reached")
        self.tokens[:, self.n] = np.asarray(tokens, dtype=np.int64).reshape(self.batch)
        self.n += 1

    def logits(self) -> np.ndarray:
        m = self.model
        with inference(m):
            if self.caches is None:
                out = m.decode(self.tokens[:, :self.n], self.memory, self.src_pad)          # (B, n, V)
            else:
                new = np.ascontiguousarray(self.tokens[:, self.fed:self.n])               # (B, n - fed)
                out = m.decode(new, None, self.src_pad, kv_caches=self.caches, memory_kv=self.memory_kv,
                               pos_offset=self.fed)
                self.fed = self.n
        return to_device(out.data[:, -1, :], "cpu")

    def reorder(self, rows: Any) -> None:
        """Row i becomes former row rows[i]: tokens, KV caches, memory (and its k, v), padding."""
        rows = np.asarray(rows, dtype=np.int64)
        self.tokens[:, :self.n] = self.tokens[rows, :self.n]
        self.src_pad = self.src_pad[rows]
        if self.caches is None:
            self.memory = self.memory[rows]
            return
        for c in self.caches:
            c.reorder(rows)
        # every row of a beam group encodes the same source: a reorder of its memory rows keeps it valid
        self.memory_kv = [(k[rows], v[rows]) for k, v in self.memory_kv]


def translate_ids(model, sources: Any, max_new_tokens: int = 16, *,
                  sampling: S.SamplingConfig | None = None, use_cache: bool = True, seed: int | None = None,
                  num_beams: int = 1, length_penalty: float = 1.0) -> list[list[int]]:
    """Target ids of each source (without <bos> and the final <eos>).

    sources: non-empty rows of integer ids, as id lists (ragged: padded, with the padding masked)
    or a (B, S) array; greedy by default, sampling with a SamplingConfig of temperature > 0, beam
    search with num_beams > 1 (one source at a time; deterministic, so no sampling with it)."""
    if len(sources) == 0:
        return []
    rows, _ = as_prompts(sources, model.config.vocab_size, what="source")
    max_new_tokens = S.whole_number(max_new_tokens, "max_new_tokens", 0)
    if num_beams != 1:  # beam_search checks num_beams >= 1
        if sampling is not None and sampling.temperature > 0:
            raise ValueError(f"beam search is deterministic: sampling with temperature {sampling.temperature:g} "
                             f"cannot go with num_beams={num_beams}")
        return [beam_translate(model, r, max_new_tokens, num_beams, use_cache=use_cache,
                               length_penalty=length_penalty) for r in rows]
    sampling = sampling or S.SamplingConfig(temperature=0.0)
    gen = S.make_generator(seed)
    dec = Seq2SeqDecoder(model, pad_rows(rows, model.config.pad_id), max_new_tokens, use_cache)
    done = np.zeros(dec.batch, dtype=bool)
    out: list[list[int]] = [[] for _ in range(dec.batch)]
    for _ in range(max_new_tokens):
        chosen = sampling.next_token(dec.logits(), gen)
        for b in np.flatnonzero(~done):
            if chosen[b] == EOS:
                done[b] = True
            else:
                out[b].append(int(chosen[b]))
        if done.all():
            break
        dec.push(chosen)
    return out


def beam_translate(model, source: Sequence[int], max_new_tokens: int, num_beams: int, *,
                   use_cache: bool = True, length_penalty: float = 1.0) -> list[int]:
    """The best beam's target ids for one source (without <eos>), by gpt.inference.beam.beam_search;
    [] for max_new_tokens=0, as greedy decoding gives."""
    src = np.asarray(source, dtype=np.int64)
    dec = None

    def logprob_fn(seqs: np.ndarray, parents: np.ndarray | None) -> np.ndarray:
        nonlocal dec
        if parents is None:  # built on the first call, after beam_search has checked num_beams
            dec = Seq2SeqDecoder(model, np.tile(src, (num_beams, 1)), max_new_tokens, use_cache)
            return S.log_softmax(dec.logits()[:1])
        k = len(parents)
        # the decoder keeps num_beams rows; surplus rows repeat a live one and are ignored
        rows = np.concatenate([parents, np.full(num_beams - k, parents[-1])])
        dec.reorder(rows)
        dec.push(np.concatenate([seqs[:, -1], np.full(num_beams - k, seqs[-1, -1])]))
        return S.log_softmax(dec.logits()[:k])

    hyps = beam_search(logprob_fn, num_beams, max_new_tokens, lambda toks: toks[-1] == EOS, length_penalty)
    tokens = hyps[0].tokens if hyps else []  # no step taken (max_new_tokens=0): no hypothesis
    return tokens[:-1] if tokens and tokens[-1] == EOS else tokens

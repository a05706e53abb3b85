"""The GPT: token (and position) embeddings, a stack of blocks, a final norm, the output head.

Shapes: B = batch, T = time (tokens), C = n_embd, V = vocab_size, L = n_layer.

    idx (B, T) int -> wte -> (B, T, C)  [+ wpe: learned or sinusoidal rows (T, C)]
      -> Block x L (gpt/model/block.py) -> ln_f (pre-norm only) -> @ W_out (C, V) -> logits (B, T, V)

Parameter names are GPT-2's (transformer.wte, transformer.wpe, transformer.h.{i}.ln_1,
.attn.c_attn, .attn.c_proj, .ln_2, .mlp.c_fc, .mlp.c_proj, transformer.ln_f, lm_head), so
real GPT-2 weights map onto the model by name. With tie_weights the output matrix *is*
transformer.wte.weight, read through a transposed view: there is no separate lm_head
parameter, it is counted once, and its gradient is the sum of the embedding's and the
head's use (the engine accumulates a tensor used twice). Untied, lm_head.weight is (C, V)
like every Linear here (y = x @ W).
"""
from __future__ import annotations

import contextlib
import math
from typing import Any

import numpy as np

import autograd
import nn
from autograd import Tensor, backend, row_chain
from autograd.ops.loss import IGNORE_INDEX
from gpt.model.block import Block, make_norm
from gpt.model.config import GPTConfig


def _id_range(ids) -> tuple[int, int]:
    """(min, max) of an integer array; a decode step's few host ids through a list, which costs
    less than two NumPy reductions."""
    if type(ids) is np.ndarray and ids.size <= 64:
        flat = ids.ravel().tolist()
        return min(flat), max(flat)
    return int(ids.min()), int(ids.max())


class GPT(nn.Module):
    HOOKS = ("hook_embed", "hook_pos_embed")  # see gpt/inspect/hooks.py
    hook = None

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        if not isinstance(cfg, GPTConfig):
            raise TypeError(f"GPT expects a GPTConfig, got {type(cfg).__name__}")
        self.config = cfg
        rope = None
        if cfg.pos == "rope":  # one parameter-free table shared by every layer
            rope = nn.RotaryEmbedding(cfg.head_dim, cfg.block_size, base=cfg.rope_base)
        t = nn.ModuleDict()
        t.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        if cfg.pos == "learned":
            t.wpe = nn.LearnedPositions(cfg.block_size, cfg.n_embd)
        elif cfg.pos == "sinusoidal":  # no parameters: nothing in the state dict
            t.wpe = nn.SinusoidalPositions(cfg.block_size, cfg.n_embd)
        t.drop = nn.Dropout(cfg.dropout)
        t.h = nn.ModuleList([Block(cfg, rope=rope) for _ in range(cfg.n_layer)])
        if cfg.has_ln_f:
            t.ln_f = make_norm(cfg)
        self.transformer = t
        if not cfg.tie_weights:
            self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)  # weight (C, V)
        self._can_step = None
        self.ce_loss = None   # the cross-entropy of the last forward with targets (detached)
        self.aux_loss = None  # the MoE load-balancing loss of the last forward (detached), or None
        self._init_weights()

    # ---- initialisation ------------------------------------------------------------------
    def _init_weights(self) -> None:
        """GPT-2: weights ~ N(0, 0.02), biases 0, norms gain 1 / bias 0, and the projections
        that write into the residual stream (every c_proj) ~ N(0, 0.02 / sqrt(2 L))."""
        std = self.config.init_std
        proj_std = std / math.sqrt(2 * self.config.n_layer)
        # every norm's gain and bias, wherever it sits (ln_1, ln_2, ln_f, attn.q_norm, ...)
        norms = {id(p) for m in self.modules() if isinstance(m, (nn.LayerNorm, nn.RMSNorm))
                 for p in m.parameters()}
        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 2)
            if id(p) in norms:
                (nn.init.ones_ if leaf[-1] == "weight" else nn.init.zeros_)(p)
            elif leaf[-1] == "bias":
                nn.init.zeros_(p)
            elif name.endswith("c_proj.weight"):
                nn.init.normal_(p, std=proj_std)
            else:
                nn.init.normal_(p, std=std)

    # ---- helpers the sampler and the studies use -----------------------------------------
    @property
    def device(self) -> str:
        return self.transformer.wte.weight.device

    @property
    def dtype(self):
        return self.transformer.wte.weight.dtype

    def output_weight(self) -> Tensor:
        """The (C, V) matrix that maps the final stream to logits (a view of wte when tied)."""
        if self.config.tie_weights:
            return self.transformer.wte.weight.T
        return self.lm_head.weight

    def new_kv_caches(self, batch: int, max_len: int | None = None, dtype: Any = None) -> list:
        """One preallocated `nn.KVCache` per layer, for `forward(..., kv_caches=...)`."""
        cfg = self.config
        return [
            nn.KVCache(batch, cfg.kv_heads, max_len or cfg.block_size, cfg.head_dim,
                       dtype or self.dtype, self.device)
            for _ in range(cfg.n_layer)
        ]

    def trace(self, on: bool = True) -> list:
        """Turn the per-block activation records on (fresh dicts) or off; returns them."""
        for block in self.transformer.h:
            block.record = {} if on else None
        return self.records

    @property
    def records(self) -> list:
        """Per block, the dict of activations of the last forward (see gpt/model/block.py)."""
        return [block.record for block in self.transformer.h]

    def run_with_cache(self, ids: Any, names: Any = None) -> tuple:
        """(logits (B, T, V), {hook name: array}) of one forward of ids (B, T) without a graph,
        every hook point or those of `names`; gpt/inspect/hooks.py lists the names and shapes."""
        from gpt.inspect.hooks import run_with_cache

        return run_with_cache(self, ids, names)

    def run_with_hooks(self, ids: Any, hooks: Any = ()):
        """logits (B, T, V) of one forward of ids with hooks=[(name, fn)], fn(act, name) -> array
        or None reading or replacing an activation; removed afterwards (gpt/inspect/hooks.py)."""
        from gpt.inspect.hooks import run_with_hooks

        return run_with_hooks(self, ids, hooks)

    def report(self, dtype: Any = None) -> str:
        """Parameter breakdown, weights and KV-cache bytes per token (gpt/model/report.py)."""
        from gpt.model.report import report

        return report(self.config, dtype or self.dtype, built_params=self.num_params())

    def generate(self, idx: Any, max_new_tokens: int, **kwargs):
        """Prompt + generated ids (int64 numpy); a thin wrapper of gpt.inference.generate.generate, whose
        docstring lists the options (temperature, top_k, top_p, repetition_penalty, stop,
        use_cache, seed, num_samples, num_beams, tokenizer)."""
        from gpt.inference.generate import generate

        return generate(self, idx, max_new_tokens, **kwargs)

    def stream(self, idx: Any, max_new_tokens: int, **kwargs):
        """Yield the new token of each row (int64 (N,)) step by step; see gpt.inference.generate.stream."""
        from gpt.inference.generate import stream

        return stream(self, idx, max_new_tokens, **kwargs)

    # ---- input checks --------------------------------------------------------------------
    def _as_ids(self, ids: Any, what: str, checked: bool = False):
        """An integer backend array on the model's device (no copy when already there), its ids
        checked against the vocabulary: here, once per forward, and before the move, so ids from
        the host (the usual case) cost no device sync; the ops below are told not to check again."""
        if isinstance(ids, Tensor):
            ids = ids.data
        elif not hasattr(ids, "dtype"):
            ids = np.asarray(ids)
        if ids.dtype.kind not in "iu":
            raise TypeError(f"expected {what} to hold integer token ids, got dtype {ids.dtype}")
        if ids.size and not checked:
            V, lo, hi = self.config.vocab_size, *_id_range(ids)
            bad = hi if hi >= V else None
            if lo < 0 and what == "idx":
                bad = lo
            elif lo < 0:  # only cross_entropy's ignore_index skips a position
                stray = ids[(ids < 0) & (ids != IGNORE_INDEX)]
                if stray.size:
                    raise ValueError(f"a target id below 0 is not {IGNORE_INDEX}, the ignore_index that skips a "
                                     f"position (got {int(stray.flat[0])})")
            if bad is not None:
                where = "token id {} in idx" if what == "idx" else "target id {}"
                raise ValueError(f"{where.format(bad)} is outside the vocabulary [0, {V})")
        return backend.to_device_of(ids, self.transformer.wte.weight.data)

    def _check_idx(self, idx: Any, pos_offset: int, ids_checked: bool = False):
        idx = self._as_ids(idx, "idx", ids_checked)
        cfg = self.config
        if idx.ndim != 2 or idx.shape[1] > cfg.block_size or 0 in idx.shape:
            raise ValueError(
                f"expected idx of shape (B, T) with B > 0 and 0 < T <= block_size={cfg.block_size}, "
                f"got {tuple(idx.shape)}"
            )
        if pos_offset < 0 or pos_offset + idx.shape[1] > cfg.block_size:
            raise ValueError(
                f"positions pos_offset={pos_offset} .. {pos_offset + idx.shape[1] - 1} exceed "
                f"block_size={cfg.block_size}: crop the context (or re-prefill a window)"
            )
        return idx

    def _check_targets(self, targets: Any, shape: tuple, ids_checked: bool = False):
        targets = self._as_ids(targets, "targets", ids_checked)
        if tuple(targets.shape) != tuple(shape):
            raise ValueError(f"expected targets of shape {tuple(shape)} (like idx), got {tuple(targets.shape)}")
        return targets

    def _add_positions(self, x, rows):
        """Token embeddings plus position vectors, for Tensors (forward) and arrays (step) alike."""
        if self.config.pos == "sinusoidal":
            # As in the 2017 paper, token embeddings are scaled by sqrt(C) so that the fixed
            # table (entries in [-1, 1]) does not drown them at init.
            return x * math.sqrt(self.config.n_embd) + rows
        return x + rows

    # ---- forward -------------------------------------------------------------------------
    def forward(self, idx: Any, targets: Any = None, kv_caches: list | None = None,
                pos_offset: int = 0, last_only: bool = False, ids_checked: bool = False):
        """idx (B, T) int -> (logits (B, T, V) Tensor, loss scalar Tensor or None).

        targets (B, T) int (ignore_index -100 skips a position): the mean cross-entropy over
        all positions, plus moe_aux_coef x the MoE load-balancing loss summed over layers.
        kv_caches: one nn.KVCache per layer (see `new_kv_caches`); idx then holds only the new
        tokens, whose positions start at `pos_offset` (the cache length).
        last_only (no targets): logits for the last position only, (B, 1, V), as a sampler needs.
        ids_checked: every id of idx and targets is known to be in the vocabulary (batches of a
        data folder that gpt.data.read_meta checked): skip the check, a device sync on the GPU.
        """
        cfg = self.config
        idx = self._check_idx(idx, pos_offset, ids_checked)
        B, T = idx.shape
        if kv_caches is not None and len(kv_caches) != cfg.n_layer:
            raise ValueError(f"expected one KV cache per layer ({cfg.n_layer}), got {len(kv_caches)}")
        t = self.transformer
        x = autograd.embedding(t.wte.weight, idx, check_range=False)  # (B, T, C); ids checked in _as_ids
        hook = self.hook
        if hook is not None:
            x = hook("hook_embed", x)
        if cfg.pos != "rope":  # learned or sinusoidal rows; RoPE rotates q and k inside attention
            rows = t.wpe(T, offset=pos_offset)  # (T, C) broadcast over B
            x = self._add_positions(x, rows if hook is None else hook("hook_pos_embed", rows))
        x = t.drop(x)
        with self._chain(x, kv_caches):
            for i, block in enumerate(t.h):
                x = block(x, kv_cache=None if kv_caches is None else kv_caches[i], pos_offset=pos_offset)
        if cfg.has_ln_f:
            x = t.ln_f(x)  # (B, T, C)
        if last_only and targets is None:
            x = x[:, T - 1:, :]  # (B, 1, C)
        Bx, Tx, C = x.shape
        # One 2-D GEMM (B*T, C) @ (C, V); tied: W_out is a transposed view of wte, no copy.
        logits = (x.reshape(Bx * Tx, C) @ self.output_weight()).reshape(Bx, Tx, cfg.vocab_size)
        if targets is None:
            return logits, None
        targets = self._check_targets(targets, (B, T), ids_checked)
        loss = autograd.cross_entropy(logits, targets, check_range=False)
        self.ce_loss = loss.detach()
        if cfg.mlp == "moe":
            aux = None
            for block in t.h:
                aux = block.mlp.aux_loss if aux is None else aux + block.mlp.aux_loss
            self.aux_loss = aux.detach()
            if cfg.moe_aux_coef:
                loss = loss + cfg.moe_aux_coef * aux
        return logits, loss

    def _chain(self, x, kv_caches):
        """autograd.row_chain over the blocks where every block runs as its two fused ops on the
        host and calls no forward hook (so that nothing inside reads an output before the chain
        fills it, or after the next sublayer writes over it), and a graph is recorded (whose ops
        keep their arrays anyway: without one, each op's arrays go when it returns); else a
        no-op."""
        if (kv_caches is None and autograd.is_grad_enabled() and type(x.data) is np.ndarray
                and all(isinstance(b, Block) and not b._forward_hooks and b._fuses(x)
                        for b in self.transformer.h)):
            return row_chain.chain(x.shape[0] * x.shape[1])
        return contextlib.nullcontext()

    # ---- one decode step on raw arrays ---------------------------------------------------
    def can_step(self) -> bool:
        """Whether every layer in the blocks has an array `step` (nn/arrays.py). MoE has none:
        its cached decoding runs through `forward(..., kv_caches=...)`."""
        if self._can_step is None:  # the layers are fixed at construction: walk them once
            plain = (nn.Dropout, nn.ModuleList, nn.ModuleDict)
            self._can_step = all(hasattr(m, "step") for b in self.transformer.h for m in b.modules()
                                 if not isinstance(m, plain))
        return self._can_step

    def step(self, tokens: Any, kv_caches: list, pos: int):
        """Next-token logits after one new token per row, on raw arrays in eval mode (no graph):
        tokens (B,) int at position `pos` of the window (= every cache's length) -> logits (B, V),
        an array on the model's device. The caches grow by one. The same numbers as
        `forward(tokens[:, None], kv_caches=kv_caches, pos_offset=pos, last_only=True)` (tested
        for every variant), without the graph's bookkeeping. The generation loop runs it in the
        weight layouts of `nn.step_layouts(model)` (the tall weights column-major), which BLAS
        streams faster at batch 1."""
        cfg, t = self.config, self.transformer
        if not self.can_step():
            raise NotImplementedError(f"GPT.step has no array step for mlp={cfg.mlp!r}; "
                                      "decode with forward(..., kv_caches=...)")
        if self.training and cfg.dropout > 0:
            raise RuntimeError("GPT.step runs without dropout: call model.eval() first")
        if len(kv_caches) != cfg.n_layer:
            raise ValueError(f"expected one KV cache per layer ({cfg.n_layer}), got {len(kv_caches)}")
        tokens = tokens if hasattr(tokens, "dtype") else np.asarray(tokens)
        idx = self._check_idx(tokens.reshape(-1, 1), pos)[:, 0]            # (B,)
        x = t.wte.weight.data[idx]                                         # (B, C), a copy
        if cfg.pos == "learned":  # the table's row itself, without a graph op
            x = self._add_positions(x, t.wpe.weight.data[pos])
        elif cfg.pos != "rope":
            x = self._add_positions(x, t.wpe(1, offset=pos).data[0])
        for block, cache in zip(t.h, kv_caches):
            x = block.step(x, cache, pos)
        if cfg.has_ln_f:
            x = t.ln_f.step(x)
        if cfg.tie_weights:
            # (wte @ x^T)^T reads wte in its own row-major layout, which BLAS runs faster for a
            # few rows than x @ wte.T through the transposed view
            return (t.wte.weight.data @ x.T).T                             # (B, V)
        return x @ self.lm_head.weight.data                                # (B, V)

    # ---- real models in and out (gpt/pretrained) -----------------------------------------
    @classmethod
    def from_pretrained(cls, path: Any, block_size: int | None = None, device: str = "cpu",
                        dropout: float = 0.0) -> "GPT":
        """A GPT (eval mode) from a local Hugging Face folder (config.json + model.safetensors or
        shards): GPT2LMHeadModel, LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM. What
        cannot be reproduced exactly is refused, naming the field. See gpt.pretrained."""
        from gpt.pretrained import from_pretrained

        return from_pretrained(path, block_size=block_size, device=device, dropout=dropout)

    def save_pretrained(self, path: Any, tokenizer: Any = None, bf16: bool = False, family: str | None = None):
        """Write a folder transformers' AutoModelForCausalLM (and, with `tokenizer`, AutoTokenizer)
        loads, and from_pretrained reads back; returns its path. family: a family's name ("phi3",
        ...) instead of the first that computes the same. See gpt.pretrained."""
        from gpt.pretrained import save_pretrained

        return save_pretrained(self, path, tokenizer=tokenizer, bf16=bf16, family=family)

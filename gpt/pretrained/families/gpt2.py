"""GPT2LMHeadModel: learned positions, LayerNorm, GELU (tanh), biases everywhere.

    config.json          GPTConfig
    n_embd, n_layer,     n_embd, n_layer, n_head
    n_head
    n_positions          block_size
    n_inner              mlp_hidden (None: 4 x n_embd)
    layer_norm_epsilon   norm_eps
    tie_word_embeddings  tie_weights (default true)

Conv1D weights are (in, out) like our Linear, so every tensor is copied as it is:
[transformer.]wte / wpe / h.{i}.ln_1 / .attn.c_attn / .attn.c_proj / .ln_2 / .mlp.c_fc /
.mlp.c_proj / ln_f -> transformer.<the same name>; the position table is cropped to block_size;
an untied lm_head.weight is an nn.Linear (V, C), transposed.
"""
from __future__ import annotations

from gpt.model.config import GPTConfig
from gpt.pretrained.families.family import DECODER, Family, GGUFLayout, Recipe, need, only
from gpt.pretrained.families.fields import FLAG, POSITIVE, POSITIVE_INT, POSITIVE_INT_OR_NULL, TEXT

ACTIVATIONS = ("gelu_new", "gelu_pytorch_tanh", "gelu_fast")  # all the tanh approximation
SUBLAYERS = ("ln_1", "attn.c_attn", "attn.c_proj", "ln_2", "mlp.c_fc", "mlp.c_proj")
KEYS = dict(vocab_size="vocab_size", block_size="n_positions", n_layer="n_layer", n_head="n_head",
            n_embd="n_embd", mlp_hidden="n_inner")
SCHEMA = dict(n_embd=POSITIVE_INT, n_layer=POSITIVE_INT, n_head=POSITIVE_INT, n_positions=POSITIVE_INT,
              n_inner=POSITIVE_INT_OR_NULL, layer_norm_epsilon=POSITIVE, activation_function=TEXT,
              scale_attn_weights=FLAG, scale_attn_by_inverse_layer_idx=FLAG, add_cross_attention=FLAG)


def read(hf: dict, where: str) -> dict:
    only(hf, "activation_function", ACTIVATIONS, where, "our GELU is the tanh approximation")
    only(hf, "scale_attn_weights", (True,), where, "scores are always scaled by 1/sqrt(head_dim)")
    only(hf, "scale_attn_by_inverse_layer_idx", (False,), where, "no per-layer score scaling")
    only(hf, "add_cross_attention", (False,), where, "a decoder-only model")
    sizes = {ours: need(hf, key, where) for ours, key in KEYS.items() if ours != "mlp_hidden"}
    C = sizes["n_embd"]
    return dict(
        sizes, mlp_hidden=None if hf.get("n_inner") in (None, 4 * C) else hf["n_inner"], bias=True,
        tie_weights=bool(hf.get("tie_word_embeddings", True)), pos="learned", norm="layernorm", mlp="gelu",
        norm_eps=float(hf.get("layer_norm_epsilon", 1e-5)),
    )


def write(cfg: GPTConfig) -> dict:
    return dict(n_embd=cfg.n_embd, n_layer=cfg.n_layer, n_head=cfg.n_head, n_positions=cfg.block_size,
                n_ctx=cfg.block_size, n_inner=cfg.hidden, activation_function="gelu_new",
                layer_norm_epsilon=cfg.norm_eps, resid_pdrop=cfg.dropout, embd_pdrop=cfg.dropout,
                attn_pdrop=cfg.dropout, scale_attn_weights=True, initializer_range=cfg.init_std)


def fits(cfg: GPTConfig) -> str | None:
    if cfg.bias and cfg.n_kv_head in (None, cfg.n_head) and cfg.has_qkv_bias:
        return None
    return "a GPT-2-shaped model needs bias=True and no grouped-query attention"


def weights(cfg: GPTConfig) -> dict[str, Recipe]:
    names = ["wte.weight", "ln_f.weight", "ln_f.bias"]
    names += [f"h.{i}.{m}.{p}" for i in range(cfg.n_layer) for m in SUBLAYERS for p in ("weight", "bias")]
    out = {f"transformer.{n}": Recipe((f"transformer.{n}",), "same") for n in names}
    out["transformer.wpe.weight"] = Recipe(("transformer.wpe.weight",), "rows")
    if not cfg.tie_weights:
        out["lm_head.weight"] = Recipe(("lm_head.weight",), "T")  # an nn.Linear (V, C)
    return out


def canonical(tensors: dict) -> dict:
    """GPT2Model files name tensors without the `transformer.` prefix; GPT2LMHeadModel with it."""
    return {(n if n.startswith("transformer.") or n == "lm_head.weight" else "transformer." + n): v
            for n, v in tensors.items()}


GPT2 = Family(
    name="gpt2", hf_class="GPT2LMHeadModel", model_type="gpt2",
    shape=dict(DECODER, pos="learned", norm="layernorm", mlp="gelu"),
    fits=fits, read=read, write=write, weights=weights, canonical=canonical,
    eot_names=("<|endoftext|>",), schema=SCHEMA, keys=KEYS,
    gguf=GGUFLayout(
        arch="gpt2", layer_prefix="transformer.h.", conv1d_blocks=True,
        blocks={"ln_1": "attn_norm", "attn.c_attn": "attn_qkv", "attn.c_proj": "attn_output", "ln_2": "ffn_norm",
                "mlp.c_fc": "ffn_up", "mlp.c_proj": "ffn_down"},
        globals={"transformer.wte": "token_embd", "transformer.wpe": "position_embd", "transformer.ln_f": "output_norm",
                 "lm_head": "output"}),
)

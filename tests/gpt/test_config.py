"""GPTConfig: validation, presets with their published parameter counts, serialisation."""
import json

import pytest

from gpt.model.config import GPTConfig
from gpt.model.report import flops_per_token, report

SMALL = dict(vocab_size=50, block_size=16, n_layer=2, n_head=2, n_embd=8)


@pytest.mark.parametrize(
    "name, expected",
    [
        ("gpt2", 124_439_808),
        ("gpt2-medium", 354_823_168),
        ("gpt2-large", 774_030_080),
        ("gpt2-xl", 1_557_611_200),
        ("llama-7b", 6_738_415_616),
    ],
)
def test_presets_count_the_published_parameter_numbers(name, expected):
    assert GPTConfig.preset(name).count_params() == expected


def test_gpt2_breakdown_by_group_is_exact():
    parts = GPTConfig.preset("gpt2").breakdown()
    C, V, L = 768, 50257, 12
    assert parts["embeddings"] == V * C + 1024 * C
    assert parts["attention"] == L * (4 * C * C + 4 * C)
    assert parts["mlp"] == L * (8 * C * C + 5 * C)
    assert parts["norms"] == (2 * L + 1) * 2 * C
    assert parts["output"] == 0  # tied to wte, counted once


def test_llama_shape_has_no_position_table_and_an_untied_head():
    cfg = GPTConfig.preset("llama-7b")
    parts = cfg.breakdown()
    assert parts["embeddings"] == parts["output"] == 32000 * 4096
    assert parts["norms"] == (2 * 32 + 1) * 4096  # RMSNorm: gain only
    assert cfg.hidden == 11008


def test_kv_cache_bytes_per_token_is_two_times_layers_times_width():
    cfg = GPTConfig.preset("gpt2")
    assert cfg.kv_cache_bytes_per_token() == 2 * 12 * 768 * 4
    assert cfg.kv_cache_bytes_per_token("float16") == 2 * 12 * 768 * 2


def test_report_names_every_group_and_the_total():
    text = report(GPTConfig.preset("gpt2"))
    for word in ("embeddings", "attention", "mlp", "norms", "output", "124,439,808", "KV cache"):
        assert word in text


def test_flops_per_token_matches_the_6n_plus_attention_rule():
    cfg = GPTConfig.preset("gpt2")
    n_matmul = cfg.count_params() - cfg.breakdown()["embeddings"] - cfg.breakdown()["norms"] + 50257 * 768
    assert flops_per_token(cfg, 1024) == 6 * n_matmul + 12 * 12 * 768 * 1024


def test_post_norm_has_no_final_norm_and_counts_accordingly():
    pre = GPTConfig(**SMALL)
    post = GPTConfig(**SMALL, prenorm=False)
    assert pre.count_params() - post.count_params() == pre.norm_params()


def test_swiglu_default_hidden_matches_the_gelu_parameter_budget():
    cfg = GPTConfig(**{**SMALL, "n_embd": 96}, mlp="swiglu")
    assert cfg.hidden == 256 and cfg.hidden % 64 == 0 and cfg.hidden >= 8 * 96 / 3


def test_round_trip_through_json():
    cfg = GPTConfig(**SMALL, pos="rope", norm="rmsnorm", mlp="moe", prenorm=False, residual=False)
    again = GPTConfig.from_dict(json.loads(json.dumps(cfg.to_dict())))
    assert again == cfg


def test_from_dict_names_unknown_keys_and_suggests_the_right_one():
    with pytest.raises(ValueError, match=r"unknown GPTConfig key\(s\): 'n_layers' \(did you mean 'n_layer'\?\)"):
        GPTConfig.from_dict({**SMALL, "n_layers": 4})


def test_from_dict_names_missing_keys():
    d = dict(SMALL)
    del d["n_embd"]
    with pytest.raises(ValueError, match="missing required key.*n_embd"):
        GPTConfig.from_dict(d)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(pos="alibi"), r"pos must be one of 'learned', 'sinusoidal', 'rope', got 'alibi'"),
        (dict(norm="batchnorm"), r"norm must be one of"),
        (dict(mlp="relu"), r"mlp must be one of"),
        (dict(n_embd=10, n_head=4), r"n_embd=10 must be divisible by n_head=4"),
        (dict(n_embd=6, n_head=2, pos="rope"), r"even head size"),
        (dict(n_layer=0), r"n_layer must be a positive int"),
        (dict(dropout=1.5), r"dropout must be in \[0, 1\)"),
        (dict(mlp="moe", n_experts=2, moe_top_k=3), r"moe_top_k must be in \[1, n_experts=2\]"),
        (dict(bias="yes"), r"bias must be True or False"),
    ],
)
def test_invalid_configs_raise_clear_errors(changes, message):
    with pytest.raises(ValueError, match=message):
        GPTConfig(**{**SMALL, **changes})


def test_unknown_preset_lists_the_available_ones():
    with pytest.raises(ValueError, match="unknown GPT preset 'gpt5'.*gpt2-medium"):
        GPTConfig.preset("gpt5")


def test_preset_overrides_are_validated():
    cfg = GPTConfig.preset("small", vocab_size=65)
    assert (cfg.n_layer, cfg.n_head, cfg.n_embd, cfg.vocab_size) == (4, 4, 128, 65)
    with pytest.raises(ValueError, match="unknown GPTConfig key"):
        GPTConfig.preset("small", n_embed=3)

"""Every pretrained family record, checked the same way: a config it fits survives config.json
both ways, its weight recipe covers exactly our parameters and inverts, its GGUF names are
llama.cpp's, and the export refuses exactly the settings no family has."""
import itertools

import numpy as np
import pytest

from autograd import manual_seed
from gpt import GPT, GPTConfig
from gpt.model.config import MLP_CHOICES, NORM_CHOICES, POS_CHOICES
from gpt.pretrained import UnsupportedModel, hf_weights
from gpt.pretrained.families import FAMILIES, export_family, named
from gpt.pretrained.hf_config import architecture, config_from_hf, config_to_hf


def fitting_config(family):
    """A small config of the family's shape that it can write (the first of a few variants)."""
    rope = family.shape["pos"] == "rope"
    for bias, qkv_bias, n_kv, tie in itertools.product((False, True), (None, True), (2, None), (False, True)):
        cfg = GPTConfig(vocab_size=50, block_size=16, n_layer=2, n_head=4, n_embd=32, bias=bias, qkv_bias=qkv_bias,
                        n_kv_head=n_kv if rope else None, tie_weights=tie, mlp_hidden=48 if rope else None,
                        **family.shape)
        if family.fits(cfg) is None:
            return cfg
    raise AssertionError(f"no small config fits {family.name}")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_config_json_of_each_family_reads_back_as_the_same_config(family):
    cfg = fitting_config(family)
    hf = config_to_hf(cfg, family=family.name)
    assert hf["architectures"] == [family.hf_class] and hf["model_type"] == family.model_type
    assert architecture(hf, "c") is family and architecture({"model_type": family.model_type}, "c") is family
    assert config_from_hf(hf) == cfg.replace(init_std=cfg.init_std)


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_weight_recipe_covers_our_parameters_and_inverts(family):
    cfg = fitting_config(family)
    manual_seed(0)
    state = GPT(cfg).state_dict()
    assert set(family.weights(cfg)) == set(state)
    hf = hf_weights.to_hf(state, cfg, family)
    back = hf_weights.from_hf(hf, cfg, family, "here")
    assert all(np.array_equal(back[k], state[k]) for k in state)
    used = [n for r in family.weights(cfg).values() for n in r.names]
    assert sorted(used) == sorted(hf) and len(set(used)) == len(used)  # each HF tensor made once


@pytest.mark.parametrize("family", [f for f in FAMILIES if f.gguf], ids=lambda f: f.name)
def test_each_gguf_layout_uses_llama_cpps_names_for_its_architecture(family):
    gguf = pytest.importorskip("gguf")
    from gpt.pretrained.gguf import gguf_tensors

    cfg = fitting_config(family)
    if not family.gguf.biases:
        cfg = cfg.replace(bias=False, qkv_bias=None)
    arch = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == family.gguf.arch)
    known = {gguf.TENSOR_NAMES[t].format(bid=i) for t in gguf.MODEL_TENSORS[arch] for i in range(cfg.n_layer)}
    names = gguf_tensors(cfg, GPT(cfg).state_dict(), family)
    assert {n.rsplit(".", 1)[0] for n in names} <= known


@pytest.mark.parametrize("field,choices", [("pos", POS_CHOICES), ("norm", NORM_CHOICES), ("mlp", MLP_CHOICES)])
def test_export_refuses_exactly_the_choices_no_family_has(field, choices):
    for value in choices:
        written = [f for f in FAMILIES if f.shape[field] == value]
        cfg = fitting_config(written[0]) if written else GPTConfig(
            vocab_size=50, block_size=16, n_layer=2, n_head=4, n_embd=32, **{field: value})
        if written:
            assert export_family(cfg) in written
        else:
            with pytest.raises(UnsupportedModel, match=f"{field}={value!r}"):
                export_family(cfg)


def test_a_named_family_that_cannot_write_the_config_says_why():
    with pytest.raises(UnsupportedModel, match="no Phi3ForCausalLM.*no biases"):
        export_family(fitting_config(named("llama")).replace(bias=True), "phi3")
    with pytest.raises(ValueError, match="unknown pretrained family 'bert'.*phi3"):
        named("bert")


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_each_typed_field_of_a_written_config_json_is_refused_by_name_when_retyped(family):
    from gpt.pretrained.families.fields import COMMON, TEXT, TEXTS_OR_NULL, Nested

    hf = config_to_hf(fitting_config(family), family=family.name)
    schema = {**COMMON, **family.schema}
    assert all(key in schema for key in family.keys.values())  # every size field has its type
    for key, kind in schema.items():
        if key not in hf or key == "architectures" or isinstance(kind, Nested):
            continue
        wrong = 5 if kind in (TEXT, TEXTS_OR_NULL) else "x"
        with pytest.raises(UnsupportedModel, match=rf"c: field '{key}' is {wrong!r}, expected"):
            config_from_hf({**hf, key: wrong}, "c")

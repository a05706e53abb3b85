"""gpt.training.config: the training settings take the model's from GPTConfig, and check all of
them before anything runs."""
import argparse
import dataclasses

import pytest

from gpt.model.config import GPTConfig, settings
from gpt.training.config import MODEL_KEYS, TrainConfig, add_arguments, resolve


def _parse(argv):
    p = argparse.ArgumentParser()
    add_arguments(p)
    return resolve(p.parse_args(argv))[0]


def test_every_gptconfig_field_is_a_training_setting_with_its_choices():
    train_fields = {f.name: f for f in dataclasses.fields(TrainConfig)}
    assert MODEL_KEYS == tuple(f.name for f in dataclasses.fields(GPTConfig))
    for s in settings():
        assert s.name in train_fields
        assert train_fields[s.name].metadata["choices"] == s.choices
        assert train_fields[s.name].metadata["type"] is s.type


def test_training_can_set_the_fields_it_could_not_before():
    cfg = _parse(["--norm-eps", "1e-6", "--rope-base", "500000", "--init-std", "0.01", "--pos", "rope",
                  "--mlp", "moe", "--n-experts", "3", "--moe-top-k", "1", "--moe-aux-coef", "0.1"])
    model = GPTConfig(**cfg.model_dict(cfg.vocab_size))
    assert (model.norm_eps, model.rope_base, model.init_std) == (1e-6, 500000.0, 0.01)
    assert (model.n_experts, model.moe_top_k, model.moe_aux_coef) == (3, 1, 0.1)


@pytest.mark.parametrize("argv, message", [
    (["--checkpoint-interval", "-3"], "--checkpoint-interval must be >= 1"),
    (["--time-budget", "-1"], "--time-budget must be > 0"),
    (["--warmup-steps", "-5"], "--warmup-steps must be >= 0"),
    (["--lr-decay-steps", "0"], "--lr-decay-steps must be >= 1"),
    (["--val-fraction", "1.5"], "--val-fraction must be in (0, 1)"),
    (["--beta2", "1.0"], "--beta2 must be in [0, 1)"),
    (["--moe-top-k", "9", "--mlp", "moe"], "moe_top_k must be in [1, n_experts=4]"),
    (["--n-embd", "30", "--n-head", "4"], "n_embd=30 must be divisible by n_head=4"),
    (["--norm-eps", "0"], "norm_eps must be a positive finite number"),
    (["--norm-eps", "inf"], "norm_eps must be a positive finite number"),
    (["--init-std", "nan"], "init_std must be a positive finite number"),
    (["--weight-decay", "nan"], "--weight-decay must be >= 0 and finite, got nan"),
    (["--grad-clip", "nan"], "--grad-clip must be >= 0 and finite, got nan"),
    (["--eps", "inf"], "--eps must be > 0 and finite, got inf"),
    (["--lr", "inf"], "--lr must be > 0 and finite, got inf"),
    (["--lr", "4e-3", "--min-lr", "1"], "--min-lr 1.0 exceeds --lr 0.004"),
    (["--input", "f", "--char", "--tokenizer", "t.json"], "give either --char (character ids) or --tokenizer"),
    (["--data", "d", "--char"], "--char is how --input text is prepared; a --data folder has its tokenizer"),
    (["--data", "d", "--tokenizer", "t.json"], "--tokenizer is how --input text is prepared"),
])
def test_bad_settings_are_refused_before_training(argv, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("(", r"\(").replace(")", r"\)")):
        _parse(argv)


def test_sampling_flags_are_sampling_configs_fields_with_one_set_of_defaults():
    from gpt.cli import build_parser
    from gpt.inference.sample import TEXT_SAMPLING, SamplingConfig

    sample = build_parser().parse_args(["sample", "--run", "r"])
    names = [f.name for f in dataclasses.fields(SamplingConfig)]
    assert {n: getattr(sample, n) for n in names} == dataclasses.asdict(TEXT_SAMPLING)
    cfg, _ = resolve({})
    assert cfg.sampling() == TEXT_SAMPLING
    cfg, _ = resolve({"top_k": 0, "temperature": 0.0})  # 0 turns top-k off; temperature 0 is greedy
    assert cfg.sampling() == SamplingConfig(temperature=0.0, top_k=None)
    with pytest.raises(ValueError, match="top_p must be None or in"):
        resolve({"top_p": 1.5})


def test_the_cosine_ends_at_a_quarter_of_the_peak_unless_min_lr_is_given():
    from gpt.training.trainer import lr_at

    low = _parse(["--lr", "1e-4", "--max-steps", "10", "--warmup-steps", "0"])  # a fine-tune's rate
    assert low.final_lr() == pytest.approx(2.5e-5) and lr_at(10, low) == pytest.approx(2.5e-5)
    assert _parse(["--lr", "1e-4", "--min-lr", "1e-5"]).final_lr() == 1e-5

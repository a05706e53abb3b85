"""`gpt eval`: a run's loss over every token of a data split, and its clear errors."""
import json
import math

import numpy as np
import pytest

from gpt.training.checkpoint import load_model
from gpt.cli import main
from gpt.data import open_tokens
from gpt.training.evaluate import evaluate_split
from tests.gpt.test_cli import TINY


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    (root / "a.txt").write_text("the quick brown fox jumps over the lazy dog.\n" * 60)
    (root / "b.txt").write_text("0123456789 ABCDEFGHIJ\n" * 40)
    for name, text in (("d", "a.txt"), ("other", "b.txt")):
        assert main(["prepare", "--input", str(root / text), "--char", "--out", str(root / name),
                     "--workers", "1"]) == 0
    assert main(["train", "--data", str(root / "d"), "--out", str(root / "run"), "--max-steps", "3", *TINY]) == 0
    return root


def _eval_json(capsys, *argv):
    capsys.readouterr()
    assert main(["eval", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_loss_is_evaluate_split_over_the_runs_own_val_split(trained, capsys):
    res = _eval_json(capsys, "--run", str(trained / "run"))
    model, _, _ = load_model(trained / "run")
    val = open_tokens(trained / "d", "val")
    assert res["loss"] == evaluate_split(model, val, model.config.block_size)
    assert res["tokens"] == len(val) - 1 and res["perplexity"] == pytest.approx(np.exp(res["loss"]))
    assert 0.5 < res["loss"] < 5.0


def test_split_max_tokens_and_the_sentence(trained, capsys):
    res = _eval_json(capsys, "--run", str(trained / "run"), "--split", "train", "--max-tokens", "100")
    assert res["split"] == "train" and res["tokens"] == 99
    assert main(["eval", "--run", str(trained / "run")]) == 0
    assert capsys.readouterr().out.startswith("val loss ")


def test_bits_per_byte_over_the_splits_bytes(trained, capsys):
    res = _eval_json(capsys, "--run", str(trained / "run"))
    meta = json.loads((trained / "d" / "meta.json").read_text())
    val = open_tokens(trained / "d", "val")
    assert res["bits_per_byte"] == pytest.approx(res["loss"] * len(val) / meta["val_bytes"] / math.log(2))
    # a prefix: its bytes are counted by decoding (ASCII characters: a byte per id, end-of-text none)
    res = _eval_json(capsys, "--run", str(trained / "run"), "--max-tokens", "100")
    n_bytes = 100 - int((np.asarray(val[:100]) == meta["eot_id"]).sum())
    assert res["bits_per_byte"] == pytest.approx(res["loss"] * 100 / n_bytes / math.log(2))


def test_data_of_another_tokenizer_is_refused_naming_both(trained, capsys):
    assert main(["eval", "--run", str(trained / "run"), "--data", str(trained / "other")]) == 2
    err = capsys.readouterr().err
    assert err.count("a character table of") == 2 and str(trained / "other") in err


@pytest.mark.parametrize("extra,message", [
    (["--data", "other"], "another tokenizer"),
    (["--max-tokens", "1"], "--max-tokens must be >= 2"),
    (["--data", "missing"], "does not exist"),
])
def test_mistakes_are_one_clear_line(trained, capsys, extra, message):
    extra = [str(trained / e) if e in ("other", "missing") else e for e in extra]
    assert main(["eval", "--run", str(trained / "run"), *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_a_larger_vocabulary_than_the_model_is_refused(trained, tmp_path, capsys):
    big = tmp_path / "big"
    big.mkdir()
    ids = np.arange(200, dtype=np.uint16)
    ids.tofile(big / "train.bin")
    ids.tofile(big / "val.bin")
    (big / "meta.json").write_text(json.dumps({"vocab_size": 300, "dtype": "uint16"}))
    assert main(["eval", "--run", str(trained / "run"), "--data", str(big)]) == 2
    assert "more than the model's" in capsys.readouterr().err


def test_perplexity_of_a_loss_past_the_float_range_is_inf_not_an_overflow_error():
    from gpt.commands.eval import perplexity

    assert perplexity(1.0) == math.e and perplexity(700.0) == math.exp(700.0)
    assert perplexity(1e9) == math.inf and perplexity(math.inf) == math.inf
    assert math.isnan(perplexity(math.nan))

"""benchmarks/bench_train.py stays runnable: a few Shakespeare-recipe steps on a small text."""
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("bench_train", ROOT / "benchmarks" / "bench_train.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_shakespeare_table_has_a_row_per_recipe_and_seed(tmp_path, capsys):
    text = tmp_path / "play.txt"
    text.write_text("First Citizen:\nBefore we proceed any further, hear me speak.\n" * 40)
    bench = _bench()
    assert bench.main(["--configs", "", "--shakespeare", "--shakespeare-steps", "3", "--text", str(text),
                       "--work", str(tmp_path / "work"), "--seeds", "1,2", "--recipes", "nanogpt,ours",
                       "--eval-batches", "2"]) == 0
    out = capsys.readouterr().out
    rows = [line.split() for line in out.splitlines() if line.startswith(("nanogpt ", "ours "))]
    assert [(r[0], r[2], r[3]) for r in rows] == [("nanogpt", "1", "3"), ("nanogpt", "2", "3"),
                                                  ("ours", "1", "3"), ("ours", "2", "3")]
    for r in rows:  # val (fixed batches), val (all tokens): near ln(vocab) after 3 steps, never NaN
        assert 1.0 < float(r[4]) < 5.0 and 1.0 < float(r[5]) < 5.0
    assert "nanogpt: mean val loss over all val tokens" in out


def test_unknown_recipe_is_refused_before_any_work(tmp_path, capsys):
    with pytest.raises(SystemExit):
        _bench().main(["--configs", "", "--shakespeare", "--recipes", "ours,fast", "--work", str(tmp_path)])
    assert "unknown recipe(s) fast" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())

"""benchmarks/bench_train.py stays runnable without PyTorch: a few Shakespeare-recipe steps on a small
text, the name mapping to the peer's weights, a step timed in its own process, the refused ratio."""
import importlib.util
import re
from pathlib import Path

import numpy as np
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


def test_peer_state_keeps_our_names_and_transposes_only_the_linear_weights():
    bench = _bench()
    _, model, _ = bench.build("a", "cpu")
    state = bench.peer_state(model)
    params = dict(model.named_parameters())
    assert list(state) == list(params)
    linear = [n for n in params if n.endswith(bench.LINEAR_WEIGHTS)]
    assert len(linear) == 4 * bench.CONFIGS["a"]["n_layer"]
    for name, p in params.items():
        want = p.numpy().T if name in linear else p.numpy()
        assert state[name].dtype == np.float32 and state[name].flags.c_contiguous
        np.testing.assert_array_equal(state[name], want)


def test_a_step_timed_alone_in_its_own_process_computes_the_checked_losses():
    """The timing child builds the same model from the same weights as the loss check: its
    timed steps (after one warm-up step on batch 0) give the check's second and third losses."""
    bench = _bench()
    agree, losses, worst = bench.loss_check("a", (), threads=1, torch_threads=None)
    assert agree and worst == 0.0 and len(losses["ours"]) == bench.CHECK_STEPS
    got = bench.time_alone(dict(framework="ours", config="a", threads=1, steps=2, warmup=1, device="cpu",
                                exclude=[]))
    assert got["losses"] == losses["ours"][1:3]
    assert len(got["times"]) == 2 and all(t > 0 for t in got["times"]) and got["threads"] == 1
    assert set(got["phases"]) == set(bench.PHASES) and all(len(v) == 2 for v in got["phases"].values())


def test_no_ratio_is_printed_when_the_losses_disagree(capsys):
    bench = _bench()
    losses = {"ours": [4.2, 4.1, 4.0], "sdpa": [4.2, 4.1, 4.01]}
    bench._print_check("a", losses, 0.01, False)
    res = {fw: {"times": [0.01, 0.02], "others": [0.0], "losses": losses[fw], "phases": {}} for fw in losses}
    bench._row("a", res, ("sdpa",), False)
    out = capsys.readouterr().out
    assert "DISAGREE: no ratio is printed for (a)" in out and "refused (losses disagree)" in out
    assert not re.search(r"\d\.\d\dx", out)


def test_step_gflop_counts_the_products_of_the_models_own_weights():
    """The ceiling's FLOP count, against the shapes of the model it stands for: 2 N in out for each
    Linear weight, 2 N C V for the tied output layer, attention's two products over the causal half,
    and the backward's twice the forward's."""
    bench = _bench()
    c = bench.CONFIGS["a"]
    _, model, _ = bench.build("a", "cpu")
    rows = c["batch"] * c["block_size"]
    params = dict(model.named_parameters())
    linear = sum(2 * rows * params[n].shape[0] * params[n].shape[1] for n in params if n.endswith(bench.LINEAR_WEIGHTS))
    head = 2 * rows * params["transformer.wte.weight"].size
    attention = c["n_layer"] * 2 * c["batch"] * c["block_size"] ** 2 * c["n_embd"]
    assert bench.step_gflop(c) == pytest.approx(3 * (linear + head + attention) / 1e9, rel=1e-12)


def test_the_ceiling_is_timed_in_its_own_process_and_printed_as_multiples(capsys):
    bench = _bench()
    got = bench.time_alone(dict(framework="ceiling", config="a", threads=1, steps=0, warmup=0, device="cpu",
                                exclude=[]))
    assert len(got["times"]) == bench.CEILING_CALLS and all(t > 0 for t in got["times"]) and got["threads"] == 1
    # a rate of exactly 1 GFLOP/s: the products of a step of (a) then take step_gflop seconds
    second = 2 * bench.CEILING_N ** 3 / 1e9
    floor = bench.step_gflop(bench.CONFIGS["a"])
    res = {"ours": {"times": [2 * floor]}, "sdpa": {"times": [floor / 2]}}
    bench._print_ceiling({"a": {"times": [second], "threads": 2}}, {"a": res}, ("sdpa",))
    row = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| (a)")][0]
    assert row.split(" | ")[1:] == ["2", "1", f"{floor:.1f}", f"{floor * 1e3:.1f}", "2.00x", "0.50x |"]

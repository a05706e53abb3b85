"""gpt.gradflow: Jacobians of residual blocks, gradient norms across depth, hooks, the report and CLI.

Everything runs at small widths so the file stays well under a minute on two CPU cores.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, strategies as st

import autograd
from autograd.functional import vjp
from gpt.gradflow import jacobian as jac
from gpt.gradflow import report
from gpt.gradflow.measure import measure, sublayer_gradients, summarize_run, traced_backward
from gpt.gradflow.sweep import SweepSpec, run_sweep, summarize
from gpt.gradflow.variants import Variant, parse_int_list, parse_variants

ALL_VARIANTS = [Variant(p, r, n) for p in (True, False) for r in (True, False) for n in ("layernorm", "rmsnorm")]


# ---- variants --------------------------------------------------------------------------------------
def test_variant_words_parse_to_config_fields_and_canonical_names():
    assert Variant.parse("post-nores") == Variant(prenorm=False, residual=False, norm="layernorm")
    assert Variant.parse("pre").name == "pre-layernorm"
    assert Variant.parse("RMS_post").name == "post-rmsnorm"
    assert [v.name for v in parse_variants("pre, post,pre")] == ["pre-layernorm", "post-layernorm"]
    assert Variant.parse("nores").config_overrides() == {"prenorm": True, "residual": False, "norm": "layernorm"}


@pytest.mark.parametrize("text, message", [("prenrom", "unknown word 'prenrom'"), ("pre-post", "twice"),
                                           (" , ", "names no variant")])
def test_bad_variant_names_are_rejected_with_the_word(text, message):
    with pytest.raises(ValueError, match=message):
        parse_variants(text)


def test_int_lists_reject_junk():
    assert parse_int_list("2, 4,8", "--depths") == [2, 4, 8]
    with pytest.raises(ValueError, match="--depths"):
        parse_int_list("2,x", "--depths")
    with pytest.raises(ValueError, match="positive"):
        parse_int_list("0,2", "--depths")


def test_int_lists_drop_repeats_as_variant_lists_do():
    assert parse_int_list("3,3,2,3", "--depths") == [3, 2]
    assert parse_variants("post,post-ln,pre") == [Variant(prenorm=False), Variant()]


# ---- Jacobians of toy blocks -----------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["linear", "mlp"])
@pytest.mark.parametrize("variant", ALL_VARIANTS, ids=lambda v: v.name)
def test_computed_block_jacobian_equals_the_analytic_one(kind, variant):
    block = jac.init_stack(kind, 1, 6, gain=1.3, seed=3)[0]
    rng = np.random.default_rng(4)
    for name in ("b1", "b2", "g", "b"):  # non-trivial biases and norm gains
        if name in block.arrays:
            block.arrays[name] = rng.standard_normal(block.arrays[name].shape)
    x = rng.standard_normal(6)
    analytic = jac.block_jacobian(block, x, variant)
    computed = jac.computed_jacobian(jac.block_fn(block, variant), x)
    assert computed.shape == (6, 6)
    np.testing.assert_allclose(computed, analytic, rtol=1e-10, atol=1e-12)


@given(width=st.integers(2, 12), seed=st.integers(0, 2**16), gain=st.floats(0.1, 3.0))
def test_linear_residual_stack_jacobian_is_the_product_of_identity_plus_weights(width, seed, gain):
    blocks = jac.init_stack("linear", 3, width, gain=gain, seed=seed)
    x = np.random.default_rng(seed + 1).standard_normal(width)

    def stack(t):
        for b in blocks:
            t = jac.block_fn(b, Variant())(t)
        return t

    expected = np.eye(width)
    for b in blocks:  # y = x + x W  =>  J = I + W^T, composed bottom block first
        expected = (np.eye(width) + b.arrays["W"].T) @ expected
    np.testing.assert_allclose(jac.computed_jacobian(stack, x), expected, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("kind, variant", [("linear", Variant()), ("mlp", Variant()), ("mlp", Variant(norm="rmsnorm"))])
def test_residual_block_jacobian_is_identity_plus_the_branch_jacobian(kind, variant):
    block = jac.init_stack(kind, 1, 8, seed=5)[0]
    x = np.random.default_rng(6).standard_normal(8)
    with_res = jac.computed_jacobian(jac.block_fn(block, variant, residual=True), x)
    branch = jac.computed_jacobian(jac.block_fn(block, variant, residual=False), x)
    np.testing.assert_allclose(with_res, np.eye(8) + branch, atol=1e-12)


def _input_grad_norms_by_autograd(blocks, variant, x, v):
    """||d<v, stack_l(x)>/dx|| for stacks cut after l = 1..L blocks, by reverse mode."""
    out = []
    for depth in range(1, len(blocks) + 1):
        def stack(t, depth=depth):
            for b in blocks[:depth]:
                t = jac.block_fn(b, variant)(t)
            return t
        _, g = vjp(stack, autograd.Tensor(x), v)
        out.append(float(np.linalg.norm(g)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_without_residuals_the_input_gradient_changes_geometrically_with_depth(seed):
    depth, width = 24, 16
    blocks = jac.init_stack("linear", depth, width, gain=1 / math.sqrt(depth), seed=seed)
    rng = np.random.default_rng(100 + seed)
    x, v = rng.standard_normal(width), rng.standard_normal(width)
    bare = _input_grad_norms_by_autograd(blocks, Variant(residual=False), x, v)
    slope = jac.log_slope(bare)
    # Each bare block multiplies norms by about gain = 1/sqrt(24) ~ 0.2: ln 0.2 = -1.59 per block.
    assert slope < -1.0, slope
    assert bare[-1] / bare[0] < 1e-10
    # and the decay is geometric: ln norm is close to a straight line in depth
    logs = np.log(bare)
    resid = logs - np.polyval(np.polyfit(np.arange(1, depth + 1), logs, 1), np.arange(1, depth + 1))
    assert np.abs(resid).max() < 0.1 * abs(logs[-1] - logs[0])
    np.testing.assert_allclose(bare, jac.input_grad_norms(blocks, Variant(residual=False), x, v), rtol=1e-9)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_with_residuals_the_same_weights_keep_the_input_gradient_in_a_band(seed):
    depth, width = 24, 16
    blocks = jac.init_stack("linear", depth, width, gain=1 / math.sqrt(depth), seed=seed)
    rng = np.random.default_rng(100 + seed)
    x, v = rng.standard_normal(width), rng.standard_normal(width)
    kept = _input_grad_norms_by_autograd(blocks, Variant(), x, v)
    ratios = np.array(kept) / np.linalg.norm(v)
    assert ratios.min() > 1 / 3 and ratios.max() < 3, ratios
    assert abs(jac.log_slope(kept)) < 0.05


def test_spectra_of_the_product_stay_near_one_only_with_residuals():
    rows = {(r["kind"], r["variant"]): r for r in jac.jacobian_study(depth=16, width=8, seeds=(0,))}
    res, bare = rows[("linear", "residual")], rows[("linear", "nores")]
    assert res["product_max"][-1] < 5 and res["product_min"][-1] > 0.1
    assert bare["product_max"][-1] < 1e-6
    mlp = rows[("mlp", "pre-layernorm")]
    assert 0.5 < mlp["product_min"][-1] <= mlp["product_max"][-1] < 2
    # a single block's spectrum of I + J_F: all singular values near 1 for a small branch
    assert all(0.5 < s < 1.5 for s in res["per_block"][0])


def test_stack_spectra_by_autograd_match_the_analytic_ones():
    blocks = jac.init_stack("mlp", 3, 6, seed=2)
    x = np.random.default_rng(0).standard_normal(6)
    for v in (Variant(), Variant(prenorm=False, norm="rmsnorm")):
        a = jac.stack_spectra(blocks, v, x, method="analytic")
        b = jac.stack_spectra(blocks, v, x, method="autograd")
        np.testing.assert_allclose(a["product"], b["product"], rtol=1e-9, atol=1e-12)


def test_log_slope_recovers_a_geometric_rate():
    assert jac.log_slope([3 * 0.5 ** k for k in range(10)]) == pytest.approx(math.log(0.5))
    assert math.isnan(jac.log_slope([1.0])) and math.isnan(jac.log_slope([]))  # no rate from one point


# ---- measurements on a GPT -------------------------------------------------------------------------
def _tiny_gpt(seed=0, **kw):
    from gpt.model.config import GPTConfig
    from gpt.model.gpt import GPT

    fields = dict(vocab_size=64, block_size=8, n_layer=3, n_head=2, n_embd=16)
    fields.update(kw)
    autograd.manual_seed(seed)
    return GPT(GPTConfig(**fields))


def _batch(seed=0, B=2, T=8, V=64):
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, V, size=(B, T + 1))
    return ids[:, :-1], ids[:, 1:]


def _tail_loss(model, k, x, targets):
    """The loss of the network cut at block k's input, fed `x` there."""
    for block in list(model.transformer.h)[k:]:
        x = block(x)
    if model.config.has_ln_f:
        x = model.transformer.ln_f(x)
    B, T, C = x.shape
    logits = (x.reshape(B * T, C) @ model.output_weight()).reshape(B, T, model.config.vocab_size)
    return autograd.cross_entropy(logits, targets)


@pytest.mark.parametrize("variant", [Variant(), Variant(prenorm=False), Variant(residual=False),
                                     Variant(prenorm=False, residual=False, norm="rmsnorm")], ids=lambda v: v.name)
def test_hooks_see_exactly_the_gradients_backward_computes(variant):
    model = _tiny_gpt(**variant.config_overrides())
    idx, targets = _batch()
    loss, records, catcher = traced_backward(model, idx, targets, retain_grad=True)
    for k, r in enumerate(records):
        for key in ("input", "mid", "output"):
            hooked = catcher.grad(r[key])
            np.testing.assert_array_equal(hooked, r[key].grad)  # the same array retain_grad keeps
        # and the gradient of the network cut at block k, fed the recorded input as a leaf
        x = autograd.Tensor(r["input"].data.copy(), requires_grad=True)
        tail = _tail_loss(model, k, x, targets)
        assert tail.item() == pytest.approx(loss.item(), rel=1e-6)
        tail.backward()
        np.testing.assert_allclose(catcher.grad(r["input"]), x.grad, rtol=1e-5, atol=1e-9)


@pytest.mark.parametrize("variant", [Variant(), Variant(prenorm=False), Variant(prenorm=False, norm="rmsnorm")],
                         ids=lambda v: v.name)
def test_the_identity_and_branch_terms_add_up_to_the_input_gradient(variant):
    model = _tiny_gpt(**variant.config_overrides())
    idx, targets = _batch(1)
    _, records, catcher = traced_backward(model, idx, targets)
    for block, r in zip(model.transformer.h, records):
        for sub in sublayer_gradients(block, r, catcher):
            attn = sub["name"] == "attn"
            module, norm = (block.attn, block.ln_1) if attn else (block.mlp, block.ln_2)
            branch = (lambda s: module(norm(s))) if variant.prenorm else module
            # dL/ds = dL/du + J_branch^T dL/du, with the branch's VJP taken independently
            _, through_branch = vjp(branch, sub["input"], sub["grad_sum"])
            np.testing.assert_allclose(sub["grad_in"], sub["grad_sum"] + through_branch, rtol=2e-4, atol=1e-7)


def test_measure_reports_consistent_numbers():
    model = _tiny_gpt(n_layer=2)
    idx, targets = _batch()
    run = measure(model, idx, targets)
    assert len(run["layers"]) == 2 and run["loss"] == pytest.approx(math.log(64), rel=0.05)
    total = math.sqrt(sum(v * v for k, v in run["params"].items() if k.startswith("transformer.h.1.")))
    assert run["layers"][1]["param_grad_norm"] == pytest.approx(total)
    p = dict(model.named_parameters())["transformer.h.0.mlp.c_fc.weight"]
    assert run["params"]["transformer.h.0.mlp.c_fc.weight"] == pytest.approx(float(np.linalg.norm(p.grad)), rel=1e-6)
    for layer in run["layers"]:
        for s in layer["sublayers"]:
            assert s["id_share"] is not None and s["id_cos"] <= 1 + 1e-9
    s = summarize_run(run)
    assert s["grad_in"] == run["layers"][0]["grad_norm"] and s["ratio"] == pytest.approx(s["grad_in"] / s["grad_out"])


@pytest.mark.parametrize("fields", [dict(pos="rope"), dict(pos="sinusoidal", mlp="swiglu"),
                                    dict(mlp="moe", prenorm=False), dict(norm="rmsnorm", bias=False, tie_weights=False),
                                    dict(mlp="none")],
                         ids=str)
def test_measure_and_block_spectra_run_on_every_kind_of_gpt(fields):
    model = _tiny_gpt(n_layer=2, **fields)
    idx, targets = _batch()
    run = measure(model, idx, targets)
    assert all(math.isfinite(layer["grad_norm"]) and layer["grad_norm"] > 0 for layer in run["layers"])
    spec = jac.gpt_block_spectra(model, idx[:1, :3])
    assert len(spec["per_block"]) == 2 and len(spec["product"][-1]) == 3 * 16


def test_post_norm_measurement_leaves_parameter_gradients_untouched():
    model = _tiny_gpt(prenorm=False)
    idx, targets = _batch()
    loss, _, _ = traced_backward(model, idx, targets)
    expected = {k: p.grad.copy() for k, p in model.named_parameters()}
    run = measure(model, idx, targets)  # its norm VJPs must not add into ln_1/ln_2 .grad
    for k, p in model.named_parameters():
        np.testing.assert_array_equal(p.grad, expected[k])
        assert run["params"][k] == pytest.approx(float(np.linalg.norm(p.grad.astype(np.float64))))


@pytest.mark.parametrize("seed", [0, 1])
def test_pre_norm_and_post_norm_differ_as_documented_on_the_same_seed(seed):
    """docs/gradflow.md: post-norm renormalises the stream after every addition (RMS 1 at each
    block boundary past the first) and at GPT-2 initialisation passes the gradient between blocks
    almost unchanged; pre-norm leaves the stream at the embeddings' small scale, growing with
    depth, and each branch adds to the gradient on the way down (per-block gain > 1)."""
    idx, targets = _batch(seed, B=2, T=8)
    pre = measure(_tiny_gpt(seed, n_layer=6, n_embd=32), idx, targets)
    post = measure(_tiny_gpt(seed, n_layer=6, n_embd=32, prenorm=False), idx, targets)
    post_rms = [layer["x_rms"] for layer in post["layers"][1:]] + [post["stream_out"]]
    pre_rms = [layer["x_rms"] for layer in pre["layers"]] + [pre["stream_out"]]
    assert all(abs(r - 1) < 1e-3 for r in post_rms), post_rms
    assert max(pre_rms) < 0.1 and pre_rms[-1] > pre_rms[0]
    post_g = [layer["grad_norm"] for layer in post["layers"][1:]] + [post["grad_out"]]
    pre_g = [layer["grad_norm"] for layer in pre["layers"][1:]] + [pre["grad_out"]]
    assert max(post_g) / min(post_g) < 1.05
    assert summarize_run(pre)["factor"] > 1.005
    assert pre_g[0] > pre_g[-1]


# ---- sweep, report, CLI ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    corpus = tmp_path_factory.mktemp("corpus") / "text.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog. " * 40)
    spec = SweepSpec(depths=[1, 3], variants=parse_variants("pre,post-nores"), seeds=[0, 1],
                     n_embd=16, n_head=2, block_size=8, batch_size=2, corpus=[str(corpus)])
    return run_sweep(spec), corpus


def test_sweep_summary_is_the_mean_and_spread_over_seeds(tiny_sweep):
    result, _ = tiny_sweep
    assert len(result["runs"]) == 2 * 2 * 2 and len(result["summary"]) == 4
    row = next(s for s in result["summary"] if s["variant"] == "pre-layernorm" and s["depth"] == 3)
    vals = [r["summary"]["grad_in"] for r in result["runs"] if r["variant"] == "pre-layernorm" and r["depth"] == 3]
    assert row["n_seeds"] == 2
    assert row["grad_in_mean"] == pytest.approx(np.mean(vals)) and row["grad_in_std"] == pytest.approx(np.std(vals, ddof=1))
    assert row["ratio_mean"] > 0 and row["id_share_mean"] is not None
    nores = next(s for s in result["summary"] if s["variant"] == "post-layernorm-nores")
    assert nores["id_share_mean"] is None


def test_one_block_has_no_per_block_gain(tiny_sweep, tmp_path):
    result, _ = tiny_sweep
    one = [s for s in result["summary"] if s["depth"] == 1]
    assert one and all(s["factor_mean"] is None and s["factor_std"] is None for s in one)
    assert all(r["summary"]["factor"] is None for r in result["runs"] if r["depth"] == 1)
    assert all(s["factor_mean"] > 0 for s in result["summary"] if s["depth"] == 3)
    header, _, *lines = report.sweep_table(result["summary"]).splitlines()
    end = header.index("per-block") + len("per-block")  # the column is right-aligned
    cells = {(line.split()[0], line.split()[1]): line[:end].split()[-1] for line in lines}
    assert cells[("pre-layernorm", "1")] == cells[("post-layernorm-nores", "1")] == "-"
    assert cells[("pre-layernorm", "3")].startswith("x/")  # the spread after a fitted mean
    report.write_json(tmp_path / "r.json", result)
    back = json.loads((tmp_path / "r.json").read_text())
    assert [s["factor_mean"] for s in back["summary"] if s["depth"] == 1] == [None, None]


def test_same_seed_same_numbers(tiny_sweep):
    result, corpus = tiny_sweep
    spec = SweepSpec(depths=[1], variants=parse_variants("pre"), seeds=[1], n_embd=16, n_head=2,
                     block_size=8, batch_size=2, corpus=[str(corpus)])
    again = run_sweep(spec)["runs"][0]
    first = next(r for r in result["runs"] if r["variant"] == "pre-layernorm" and r["depth"] == 1 and r["seed"] == 1)
    assert again["loss"] == first["loss"] and again["layers"] == first["layers"]


def test_summarize_averages_ratios_geometrically():
    runs = [{"variant": "v", "depth": 2, "summary": {"loss": 1.0, "grad_in": 1.0, "grad_out": 1.0, "ratio": r,
                                                     "factor": r, "id_share": None, "stream_out": 1.0}}
            for r in (0.1, 10.0)]
    row = summarize(runs)[0]
    assert row["ratio_mean"] == pytest.approx(1.0) and row["id_share_mean"] is None
    assert row["ratio_std"] == pytest.approx(math.exp(np.std([math.log(0.1), math.log(10.0)], ddof=1)))


def test_gpt_jacobian_study_measures_the_trained_model_when_asked(tiny_sweep):
    from gpt.gradflow.sweep import gpt_jacobian_study

    _, corpus = tiny_sweep
    spec = SweepSpec(depths=[2], variants=parse_variants("pre"), seeds=[0], block_size=8, batch_size=2,
                     corpus=[str(corpus)])
    at_init = gpt_jacobian_study(spec, depth=2, width=4, tokens=2)[0]
    spec.steps = 3
    trained = gpt_jacobian_study(spec, depth=2, width=4, tokens=2)[0]
    assert at_init["steps"] == 0 and trained["steps"] == 3
    assert len(trained["per_block"]) == 2 and len(trained["product"][-1]) == 2 * 4
    assert not np.allclose(at_init["product"][-1], trained["product"][-1])


def test_table_and_json_hold_the_numbers(tiny_sweep, tmp_path):
    result, _ = tiny_sweep
    table = report.sweep_table(result["summary"])
    assert "pre-layernorm" in table and "post-layernorm-nores" in table and "±" in table
    assert "block" in report.layer_table(result["runs"][0])
    out = tmp_path / "out.json"
    report.write_json(out, result)
    back = json.loads(out.read_text())
    assert back["summary"][0]["grad_in_mean"] == pytest.approx(result["summary"][0]["grad_in_mean"])
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]  # no temp file left behind
    with pytest.raises(FileNotFoundError, match="does not exist"):
        report.write_json(tmp_path / "missing" / "out.json", result)


def test_plots_without_matplotlib_say_so_and_write_nothing(tiny_sweep, tmp_path, monkeypatch):
    result, _ = tiny_sweep
    monkeypatch.setattr(report, "pyplot", lambda: None)
    msg = report.plot_gradients(result, tmp_path / "g.png")
    assert "matplotlib is not installed" in msg and "pip install" in msg
    assert not list(tmp_path.iterdir())


def test_plots_with_matplotlib_write_pngs(tiny_sweep, tmp_path):
    pytest.importorskip("matplotlib")
    result, _ = tiny_sweep
    rows = jac.jacobian_study(depth=4, width=4)
    assert report.plot_gradients(result, tmp_path / "g.png").startswith("wrote")
    assert report.plot_spectra(rows, report.spectra_path(tmp_path / "g.png")).startswith("wrote")
    for name in ("g.png", "g-spectra.png"):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_prints_the_table_and_writes_json(tiny_sweep, tmp_path, capsys):
    from gpt.commands.gradflow import main

    _, corpus = tiny_sweep
    out = tmp_path / "r.json"
    rc = main(["--depths", "1,2", "--variants", "pre,nores", "--seeds", "1", "--n-embd", "8", "--n-head", "2",
               "--block-size", "4", "--batch-size", "1", "--corpus", str(corpus), "--jacobian-depth", "2",
               "--jacobian-width", "4", "--jacobian-tokens", "2", "--json", str(out), "--quiet", "--layers"])
    printed = capsys.readouterr().out
    assert rc == 0
    assert "pre-layernorm-nores" in printed and "Jacobian spectra" in printed and "id attn" in printed
    data = json.loads(out.read_text())
    assert {r["kind"] for r in data["jacobian"]} == {"linear", "mlp", "gpt"}
    gpt_row = next(r for r in data["jacobian"] if r["kind"] == "gpt")
    assert len(gpt_row["per_block"]) == 2 and len(gpt_row["per_block"][0]) == 2 * 4


@pytest.mark.parametrize("argv, message", [(["--variants", "sideways"], "unknown word 'sideways'"),
                                           (["--depths", "a"], "--depths"),
                                           (["--n-embd", "10", "--n-head", "4"], "divisible"),
                                           (["--json", "/nonexistent/dir/x.json"], "does not exist"),
                                           (["--corpus", "/nonexistent/corpus.txt"], "/nonexistent/corpus.txt"),
                                           (["--device", "tpu"], "unknown device 'tpu'"),
                                           (["--jacobian-tokens", "9", "--block-size", "8"], "exceeds"),
                                           (["--block-size", "0", "--no-jacobian"], "--block-size must be positive"),
                                           (["--lr", "nan", "--steps", "2"], "--lr a finite number > 0, got 2 and nan")])
def test_cli_rejects_bad_arguments_clearly(argv, message, capsys):
    from gpt.commands.gradflow import main

    assert main(argv) == 2
    assert message in capsys.readouterr().err


TINY_CLI = ["--depths", "1", "--seeds", "1", "--n-embd", "8", "--n-head", "2", "--batch-size", "1",
            "--block-size", "4", "--jacobian-depth", "1", "--quiet"]


@pytest.mark.parametrize("argv, message", [
    (["--jacobian-width", "7"], "--jacobian-width must be even (the study's models have 2 heads), got 7"),
    (["--family", "seq2seq", "--jacobian-width", "7"], "--jacobian-width must be even"),
    (["--family", "seq2seq", "--jacobian-tokens", "20"], "no seq2seq example has 20 tokens"),
    (["--family", "encoder", "--jacobian-tokens", "30"], "no encoder example has 30 tokens"),
    (["--family", "vit", "--jacobian-tokens", "20"], "a vit example has 17 tokens"),
    (["--family", "vit", "--jacobian-tokens", "40"], "a vit example has 17 tokens"),
    (["--family", "encoder", "--json", "."], "--json . is a folder"),
    (["--family", "encoder", "--plot", "."], "--plot . is a folder"),
    (["--family", "encoder", "--plot", "g.jpg"], "--plot 'g.jpg': a figure is written as .png, .svg, .pdf")])
def test_cli_refuses_what_the_jacobian_study_or_the_outputs_cannot_take_before_the_sweep(
        argv, message, tiny_sweep, tmp_path, capsys):
    from gpt.commands.gradflow import main

    _, corpus = tiny_sweep
    out = tmp_path / "out.json"
    assert main([*TINY_CLI, "--corpus", str(corpus), "--json", str(out), *argv]) == 2
    printed = capsys.readouterr()
    assert message in printed.err and "--block-size" not in printed.err
    assert "gradient flow" not in printed.out and not out.exists()  # no sweep ran to be thrown away


def test_cli_writes_the_sweep_json_before_the_jacobian_study(tiny_sweep, tmp_path, monkeypatch, capsys):
    from gpt.commands import gradflow

    def interrupted(*_):
        raise KeyboardInterrupt
    monkeypatch.setattr(gradflow, "_jacobians", interrupted)
    _, corpus = tiny_sweep
    out = tmp_path / "out.json"
    with pytest.raises(KeyboardInterrupt):
        gradflow.main([*TINY_CLI, "--variants", "pre,post", "--corpus", str(corpus), "--json", str(out)])
    assert len(json.loads(out.read_text())["runs"]) == 2  # pre and post at depth 1, kept


def test_cli_help_lists_the_options(capsys):
    from gpt.commands.gradflow import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args(["--help"])
    text = capsys.readouterr().out
    for flag in ("--depths", "--variants", "--seeds", "--steps", "--json", "--plot"):
        assert flag in text


def test_the_default_variants_suit_the_family_and_no_jacobian_frees_the_block_size():
    from gpt.commands.gradflow import _spec, build_parser

    spec = _spec(build_parser().parse_args(["--family", "vit"]))
    assert [v.name for v in spec.variants] == ["pre-layernorm", "post-layernorm"]
    assert len(_spec(build_parser().parse_args([])).variants) == 4
    assert _spec(build_parser().parse_args(["--block-size", "1", "--no-jacobian"])).block_size == 1

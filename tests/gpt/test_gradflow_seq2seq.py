"""gpt.gradflow on the other families (the 2017 encoder-decoder, the encoder-only model), on GQA
variants, and on a trained GPT from a run folder; `gpt translate report`.

Every number is checked against a backward of the same model: gradients at layer inputs against
the network cut there, the identity split against a vector-Jacobian product of the branch, the
stack's Jacobian product against the Jacobian of the composed layers.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import autograd
from autograd.functional import jacobian, vjp
from gpt.cli import main
from gpt.gradflow import families, report
from gpt.gradflow.measure import GradientCatcher, measure
from gpt.gradflow.stacks import measure_stacks, stack_block_spectra, stack_trace, stacks_of, sublayer_tensors
from gpt.gradflow.sweep import SweepSpec, build_model, run_sweep, stack_jacobian_study
from gpt.gradflow.variants import Variant, parse_variants

PRE, POST = Variant(prenorm=True), Variant(prenorm=False)


def small(family="seq2seq", **kw) -> SweepSpec:
    return SweepSpec(family=family, n_embd=16, n_head=2, batch_size=4, **kw)


def seq2seq(variant, depth=3, seed=0, family="seq2seq"):
    return families.build(family, small(family), variant, depth, seed)


def forward(family="seq2seq"):
    return families.measure_forward(family, 4, 7)


# ---- the hooks see backward's gradients ------------------------------------------------------------
def _cut_gradients(model, family="seq2seq"):
    """|dL/dx| at each layer input, by restarting the forward from a leaf there (network cut)."""
    loss_of = forward(family)
    with stack_trace(model) as rec, autograd.no_grad():
        loss_of(model)
    b = _batch(family)
    out = {}
    for name, layers, _ in stacks_of(model):
        norms = []
        for i, layer in enumerate(layers):
            x = autograd.Tensor(rec[name][i]["input"].data.copy(), requires_grad=True)
            h = x
            for later, r in zip(layers[i:], rec[name][i:]):
                h = later.block(h, *r["args"], **r["kwargs"])
            _finish(model, family, name, h, b).backward()
            norms.append(float(np.linalg.norm(x.grad)))
        out[name] = norms
    return out


def _batch(family):
    from gpt.seq2seq import data as D
    rng = np.random.default_rng(7)
    return D.translation_batch(rng, 4) if family == "seq2seq" else D.mlm_batch(rng, 4)


def _finish(model, family, stack, h, b):
    """The loss from a stack's last-layer output h (the rest of the model's forward)."""
    if family == "encoder":
        ids, targets = b
        h = model.encoder.norm(h) if model.encoder.norm is not None else h
        B, L, C = h.shape
        logits = (h.reshape(B * L, C) @ model.embed.weight.T).reshape(B, L, -1)
        return autograd.cross_entropy(logits, targets)
    t = model.transformer
    if stack == "encoder":
        memory = t.encoder.norm(h)
        logits = model.decode(b.tgt_in, memory, b.src == model.config.pad_id)
    else:
        h = t.decoder.norm(h)
        B, T, C = h.shape
        logits = (h.reshape(B * T, C) @ model.output_weight()).reshape(B, T, -1)
    return autograd.cross_entropy(logits, b.targets)


@pytest.mark.parametrize("family, variant", [("seq2seq", PRE), ("seq2seq", POST), ("encoder", POST)])
def test_layer_input_gradients_equal_those_of_the_network_cut_there(family, variant):
    model = seq2seq(variant, family=family)
    m = measure_stacks(model, forward(family))
    want = _cut_gradients(model, family)
    assert set(m["stacks"]) == set(want)
    for name, norms in want.items():
        got = [layer["grad_norm"] for layer in m["stacks"][name]["layers"]]
        np.testing.assert_allclose(got, norms, rtol=2e-4)
        assert all(g > 0 for g in got)


@pytest.mark.parametrize("variant", [PRE, POST])
def test_parameter_gradients_are_those_of_a_plain_backward(variant):
    model = seq2seq(variant)
    m = measure_stacks(model, forward())
    model.zero_grad()
    forward()(model).backward()
    for name, p in model.named_parameters():
        assert m["params"][name] == pytest.approx(float(np.linalg.norm(p.grad)), rel=1e-5, abs=1e-12), name
    assert model.transformer.encoder.layers[0].block.__func__  # the wrapper is gone: a bound method again


@pytest.mark.parametrize("variant", [PRE, POST])
@pytest.mark.parametrize("stack, k", [("encoder", 0), ("decoder", 1)])
def test_identity_and_branch_terms_add_up_at_each_sublayer(variant, stack, k):
    """dL/ds = dL/du + J_F^T dL/du for the encoder's self-attention and the decoder's
    cross-attention sublayer of layer 1, with F built from the layer's own modules."""
    model = seq2seq(variant)
    catcher = GradientCatcher()
    with stack_trace(model) as rec:
        loss = forward()(model)
    layer, r = dict((n, (ls[1])) for n, ls, _ in stacks_of(model))[stack], rec[stack][1]
    subs = sublayer_tensors(layer, r)
    name, s, u = subs[k]
    catcher.watch(s), catcher.watch(u)
    loss.backward()
    g_s, g_u = catcher.grad(s), catcher.grad(u)
    if stack == "encoder":
        attn = layer.self_attn
        mask = r["args"][0]
        branch = lambda t: attn(layer.norm1(t) if variant.prenorm else t, attn_mask=mask)  # noqa: E731
    else:
        memory, cross_mask = r["args"][0], r["args"][2]
        branch = lambda t: layer.multihead_attn(layer.norm2(t) if variant.prenorm else t,  # noqa: E731
                                                memory.detach(), cross_mask)
    np.testing.assert_allclose(u.data - s.data, branch(autograd.Tensor(s.data)).data, atol=1e-5)
    _, jt = vjp(branch, s.data, g_u)
    np.testing.assert_allclose(g_s, g_u + jt, rtol=1e-4, atol=1e-7)
    m = measure_stacks(model, forward())
    share = float((g_u * g_s).sum() / (g_s * g_s).sum())
    assert m["stacks"][stack]["layers"][1]["sublayers"][k]["id_share"] == pytest.approx(share, rel=1e-4)
    assert m["stacks"][stack]["layers"][1]["sublayers"][k]["name"] == name


# ---- what the numbers say: post-norm against pre-norm -----------------------------------------------
@pytest.fixture(scope="module")
def deep_sweep():
    return run_sweep(SweepSpec(family="seq2seq", depths=[6], variants=[PRE, POST], seeds=[0, 1, 2]))


def _row(result, variant, stack):
    return next(r for r in result["summary"] if r["variant"] == variant.name and r["stack"] == stack)


def test_post_norm_decoder_gradient_shrinks_on_the_way_down_and_pre_norm_grows(deep_sweep):
    """At init, 6 + 6 layers: each post-norm LayerNorm divides the gradient by the RMS of the sum
    x + F(x) (> 1 for a unit-RMS stream), so the decoder's gradient falls going down; in
    pre-norm every branch adds to the identity path and it grows."""
    post, pre = _row(deep_sweep, POST, "decoder"), _row(deep_sweep, PRE, "decoder")
    assert post["factor_mean"] < 0.9 and post["ratio_mean"] < 0.5
    assert pre["factor_mean"] > 1.0 and pre["ratio_mean"] > 1.0
    assert post["stream_out_mean"] == pytest.approx(1.0, abs=1e-3)  # the stream is renormalised
    assert _row(deep_sweep, POST, "encoder")["ratio_mean"] < _row(deep_sweep, PRE, "encoder")["ratio_mean"]
    for stack in ("encoder", "decoder"):
        assert 0.5 < _row(deep_sweep, PRE, stack)["id_share_mean"] < 1.0


def test_sweep_rows_and_table_carry_the_stack(deep_sweep):
    assert [(r["variant"], r["stack"]) for r in deep_sweep["summary"]] == [
        (v.name, s) for v in (PRE, POST) for s in ("encoder", "decoder")]
    table = report.sweep_table(deep_sweep["summary"])
    assert table.splitlines()[0].split()[:3] == ["variant", "stack", "depth"]
    assert "post-layernorm  decoder" in table


# ---- Jacobians ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("variant", [PRE, POST])
def test_stack_jacobian_product_is_the_jacobian_of_the_composed_layers(variant):
    model = seq2seq(variant, depth=3)
    fwd = families.jacobian_forward("seq2seq", 3, 5)
    spectra = stack_block_spectra(model, fwd)
    with stack_trace(model) as rec, autograd.no_grad():
        fwd(model)
    for name, layers, _ in stacks_of(model):
        def composed(t, layers=layers, recs=rec[name]):
            for layer, r in zip(layers, recs):
                t = layer.block(t, *r["args"], **r["kwargs"])
            return t
        x = rec[name][0]["input"].data
        j = np.asarray(jacobian(composed, autograd.Tensor(x))).reshape(x.size, x.size).astype(np.float64)
        sv = np.linalg.svd(j, compute_uv=False)
        np.testing.assert_allclose(spectra[name]["product"][-1], sv, rtol=1e-3, atol=1e-5)
        assert len(spectra[name]["per_block"]) == 3


def test_post_norm_jacobian_product_loses_its_bulk_and_pre_norm_keeps_it():
    rows = stack_jacobian_study(SweepSpec(family="seq2seq", variants=[PRE, POST], seeds=[0]), depth=8)
    med = {(r["variant"], r["kind"]): float(np.median(r["product"][-1])) for r in rows}
    for stack in ("encoder", "decoder"):
        assert 0.5 < med[(PRE.name, stack)] < 2.0
        assert med[(POST.name, stack)] < 0.1


# ---- variants, the CLI -------------------------------------------------------------------------------
@pytest.mark.parametrize("text, word", [("pre-nores", "nores"), ("post-rms", "rms"), ("pre-kv2", "kv2")])
def test_variants_nn_transformer_cannot_express_are_refused(text, word):
    with pytest.raises(ValueError, match=f"so {word} is not available"):
        SweepSpec(family="seq2seq", variants=parse_variants(text)).check()


def test_cli_seq2seq_prints_a_row_per_stack_and_layer_spectra(tmp_path, capsys):
    out = tmp_path / "s.json"
    assert main(["gradflow", "--family", "seq2seq", "--variants", "pre,post", "--depths", "2", "--seeds", "1",
                 "--n-embd", "16", "--n-head", "2", "--jacobian-depth", "2", "--layers", "--quiet",
                 "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "seq2seq d_model=16" in text and "post-layernorm decoder, depth 2" in text
    assert "id cross_attn" in text
    data = json.loads(out.read_text())
    assert {(r["variant"], r["stack"]) for r in data["runs"]} == {
        (v, s) for v in ("pre-layernorm", "post-layernorm") for s in ("encoder", "decoder")}
    assert {r["kind"] for r in data["jacobian"]} == {"encoder", "decoder"}
    assert main(["gradflow", "--family", "encoder", "--variants", "post-nores", "--depths", "2"]) == 2
    assert "nores is not available" in capsys.readouterr().err


# ---- grouped-query attention ---------------------------------------------------------------------------
def test_kv_words_parse_to_n_kv_head():
    assert Variant.parse("pre-kv2") == Variant(n_kv_head=2)
    assert Variant.parse("post-mqa").name == "post-layernorm-kv1"
    assert Variant.parse("gqa4-pre").config_overrides()["n_kv_head"] == 4
    assert "n_kv_head" not in Variant.parse("pre-mha").config_overrides()
    with pytest.raises(ValueError, match="kvN"):
        Variant.parse("pre-kv0")


def test_kv_heads_equal_to_the_query_heads_measure_exactly_as_mha():
    spec = SweepSpec(family="gpt", n_embd=16, n_head=4, block_size=8, batch_size=2)
    idx = np.random.default_rng(0).integers(0, 256, (2, 9))
    mha = measure(build_model(spec, Variant(), 3, 0), idx[:, :-1], idx[:, 1:])
    same = measure(build_model(spec, Variant(n_kv_head=4), 3, 0), idx[:, :-1], idx[:, 1:])
    assert [la["grad_norm"] for la in same["layers"]] == [la["grad_norm"] for la in mha["layers"]]
    mqa_model = build_model(spec, Variant(n_kv_head=1), 3, 0)
    assert mqa_model.transformer.h[0].attn.c_attn.weight.shape == (16, 16 + 2 * 4)
    mqa = measure(mqa_model, idx[:, :-1], idx[:, 1:])
    assert mqa["loss"] == pytest.approx(mha["loss"], rel=0.05) and mqa["loss"] != mha["loss"]


def test_a_kv_head_count_that_does_not_divide_the_heads_is_refused(capsys):
    assert main(["gradflow", "--variants", "pre-kv3", "--depths", "2"]) == 2
    assert "n_head=4 must be divisible by its 3 key/value heads" in capsys.readouterr().err


# ---- a trained model from a run folder ------------------------------------------------------------------
@pytest.fixture(scope="module")
def run_folder(tmp_path_factory):
    from bpe import Tokenizer
    from gpt.model.config import GPTConfig
    from gpt.model.gpt import GPT
    from gpt.training.checkpoint import save_checkpoint

    root = tmp_path_factory.mktemp("gradflow_run")
    text = "the quick brown fox jumps over the lazy dog. " * 20
    tok = Tokenizer.train_from_iterator([text], vocab_size=270)
    tok.save(str(root / "tok.json"))
    cfg = GPTConfig(vocab_size=270, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=16)
    autograd.manual_seed(3)
    model = GPT(cfg)
    save_checkpoint(root / "run" / "best.safetensors", model.state_dict(), None,
                    {"config": cfg.to_dict(), "tokenizer": (root / "tok.json").read_text()})
    (root / "text.txt").write_text(text)
    return root


def test_run_and_text_measure_the_saved_model_on_the_encoded_text(run_folder, capsys):
    from gpt.gradflow.trained import text_batch
    from gpt.training.checkpoint import load_model

    out = run_folder / "m.json"
    assert main(["gradflow", "--run", str(run_folder / "run"), "--text", str(run_folder / "text.txt"),
                 "--batch-size", "3", "--block-size", "12", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "B=3 T=12" in printed and "per block" in printed
    got = json.loads(out.read_text())["runs"][0]
    model, tok, _ = load_model(run_folder / "run")
    idx, targets = text_batch(tok.encode((run_folder / "text.txt").read_text()), 3, 12)
    want = measure(model, idx, targets)
    assert got["loss"] == pytest.approx(want["loss"], rel=1e-6)
    np.testing.assert_allclose([la["grad_norm"] for la in got["layers"]],
                               [la["grad_norm"] for la in want["layers"]], rtol=1e-6)


def test_text_batch_cuts_consecutive_windows_and_shrinks_for_short_texts():
    idx, targets = text_batch_of(list(range(20)), 3, 5)
    np.testing.assert_array_equal(idx, [[0, 1, 2, 3, 4], [5, 6, 7, 8, 9], [10, 11, 12, 13, 14]])
    np.testing.assert_array_equal(targets, idx + 1)
    idx, _ = text_batch_of([4, 5, 6], 8, 32)
    assert idx.tolist() == [[4, 5]]
    with pytest.raises(ValueError, match="at least 2"):
        text_batch_of([1], 2, 4)


def text_batch_of(ids, b, t):
    from gpt.gradflow.trained import text_batch
    return text_batch(ids, b, t)


@pytest.mark.parametrize("argv, message", [
    (["--run", "RUN"], "give --text FILE"),
    (["--text", "TEXT"], "give --run DIR"),
    (["--run", "RUN", "--text", "missing.txt"], "no such file"),
    (["--run", "RUN", "--text", "TEXT", "--family", "seq2seq"], "GPT run folder"),
])
def test_run_mistakes_are_one_clear_line(run_folder, argv, message, capsys):
    names = {"RUN": str(run_folder / "run"), "TEXT": str(run_folder / "text.txt"),
             "missing.txt": str(run_folder / "missing.txt")}
    assert main(["gradflow", *[names.get(a, a) for a in argv]]) == 2
    assert message in capsys.readouterr().err


# ---- the seq2seq model report ----------------------------------------------------------------------------
def test_translate_report_counts_parameters_and_the_cross_attention_cache(capsys):
    assert main(["translate", "report", "--layers", "3", "--d-model", "32", "--nhead", "2"]) == 0
    text = capsys.readouterr().out
    from gpt.seq2seq import data as D
    from gpt.seq2seq.model import Seq2Seq, Seq2SeqConfig
    model = Seq2Seq(Seq2SeqConfig(vocab_size=len(D.VOCAB), d_model=32, nhead=2, num_encoder_layers=3,
                                  num_decoder_layers=3, dim_feedforward=256, pad_id=D.PAD))
    assert f"total{model.num_params():>23,}" in text
    cross = sum(p.size for n, p in model.named_parameters() if ".multihead_attn." in n)
    assert f"cross-attention{cross:>13,}" in text
    assert f"2 x 3 layers x 32 = {2 * 3 * 32:,} numbers per source token" in text
    assert f"cross-attention {2 * 3 * 32 * 64:,} + self-attention" in text

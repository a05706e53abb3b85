"""Linear, Embedding, norms, activations, dropout, MLP and SwiGLU: values and float64 gradients."""
import numpy as np
import pytest

import autograd
import nn
from autograd import Tensor
from tests.nn.gradcheck_util import check_gradients, f64


@pytest.fixture(autouse=True)
def _seed():
    autograd.manual_seed(0)


def gradcheck_module(module, x, **kw):
    module.double()
    params = list(module.parameters())
    return check_gradients(lambda: module(x), params + [x], **kw)


@pytest.mark.parametrize("bias", [True, False])
def test_linear_computes_x_at_w_plus_b_and_its_gradients(bias):
    lin = nn.Linear(4, 3, bias=bias)
    assert lin.weight.shape == (4, 3) and (lin.bias.shape == (3,) if bias else lin.bias is None)
    x = f64(2, 5, 4)
    lin.double()
    expected = x.data @ lin.weight.data + (lin.bias.data if bias else 0)
    np.testing.assert_allclose(lin(x).data, expected, rtol=1e-12)
    gradcheck_module(lin, x)


def test_linear_default_init_is_bounded_by_one_over_sqrt_fan_in():
    lin = nn.Linear(64, 32)
    assert np.abs(lin.weight.data).max() <= 1 / 8 and np.abs(lin.bias.data).max() <= 1 / 8
    assert lin.weight.dtype == np.float32 and lin.weight.data.std() > 0.05


def test_linear_rejects_a_wrong_input_width_by_name():
    with pytest.raises(ValueError, match=r"Linear\(4 -> 3\): expected input \(\.\.\., 4\), got shape \(2, 5\)"):
        nn.Linear(4, 3)(Tensor(np.ones((2, 5), np.float32)))


def test_step_layouts_copy_only_tall_host_weights_column_major_and_read_only():
    model = nn.Sequential(nn.Linear(6, 4), nn.Linear(4, 4), nn.Linear(4, 9), nn.Linear(9, 2, bias=False))
    layouts = nn.step_layouts(model)
    assert [p for p, _ in layouts] == [model[0].weight, model[3].weight]   # in > out only
    for p, copy in layouts:
        assert copy.flags.f_contiguous and not copy.flags.writeable and copy is not p.data
        np.testing.assert_array_equal(copy, p.data)
    x = np.random.default_rng(0).standard_normal((1, 6)).astype(np.float32)
    plain = [m.step(x if i == 0 else np.ones((1, m.in_features), np.float32)) for i, m in enumerate(model)]
    originals = [p.data for p, _ in layouts]
    with nn.laid_out(layouts):
        assert all(p.data is copy for p, copy in layouts)
        laid = [m.step(x if i == 0 else np.ones((1, m.in_features), np.float32)) for i, m in enumerate(model)]
    assert all(p.data is d for (p, _), d in zip(layouts, originals))
    for a, b in zip(plain, laid):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_step_layouts_copy_a_shared_weight_once_and_laid_out_restores_it():
    a, b = nn.Linear(6, 2), nn.Linear(6, 2)
    b.weight = a.weight
    own = a.weight.data
    layouts = nn.step_layouts(nn.Sequential(a, b))
    assert len(layouts) == 1 and layouts[0][0] is a.weight
    with nn.laid_out(layouts):
        assert b.weight.data is layouts[0][1]
    assert a.weight.data is own


def test_laid_out_restores_the_weights_after_an_error():
    lin = nn.Linear(8, 3)
    own = lin.weight.data
    with pytest.raises(ZeroDivisionError):
        with nn.laid_out(nn.step_layouts(lin)):
            assert lin.weight.data is not own
            1 / 0
    assert lin.weight.data is own


def test_step_layouts_leave_float16_weights_alone():
    lin = nn.Linear(8, 3)
    lin.weight.data = lin.weight.data.astype(np.float16)
    assert nn.step_layouts(lin) == []


def test_embedding_looks_up_rows_and_its_gradient_sums_repeats():
    emb = nn.Embedding(6, 3)
    idx = np.array([[1, 4, 1], [0, 5, 5]])
    np.testing.assert_array_equal(emb(idx).data, emb.weight.data[idx])
    emb.double()
    check_gradients(lambda: emb(idx), [emb.weight], max_elems=18)
    with pytest.raises(IndexError, match=r"embedding: id 6 is outside \[0, 6\)"):
        emb(np.array([6]))
    with pytest.raises(TypeError, match="integer ids"):
        emb(np.array([1.0]))


def test_layer_norm_of_the_issue_row():
    ln = nn.LayerNorm(4)
    out = ln(Tensor(np.array([[-0.37, 0.09, 0.83, 0.62]], np.float32))).data
    assert [f"{v:.2f}" for v in out[0]] == ["-1.42", "-0.43", "1.15", "0.70"]


@pytest.mark.parametrize("bias", [True, False])
def test_layer_norm_gradients_with_learned_gain_and_bias(bias):
    ln = nn.LayerNorm(5, bias=bias).double()
    ln.weight.data[...] = np.linspace(0.5, 1.5, 5)
    if bias:
        ln.bias.data[...] = np.linspace(-0.2, 0.2, 5)
    x = f64(3, 5)
    ref = (x.data - x.data.mean(-1, keepdims=True)) / np.sqrt(x.data.var(-1, keepdims=True) + 1e-5)
    ref = ref * ln.weight.data + (ln.bias.data if bias else 0)
    np.testing.assert_allclose(ln(x).data, ref, rtol=1e-10)
    gradcheck_module(ln, x)


def test_rms_norm_value_and_gradients():
    rms = nn.RMSNorm(4).double()
    rms.weight.data[...] = [1.0, 2.0, 0.5, -1.0]
    x = f64(2, 3, 4)
    ref = x.data / np.sqrt((x.data ** 2).mean(-1, keepdims=True) + 1e-6) * rms.weight.data
    np.testing.assert_allclose(rms(x).data, ref, rtol=1e-10)
    gradcheck_module(rms, x)
    with pytest.raises(ValueError, match=r"RMSNorm\(4\): expected input \(\.\.\., 4\)"):
        rms(f64(2, 3))


@pytest.mark.parametrize("name,ref", [
    ("gelu", lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))),
    ("gelu_exact", None),
    ("relu", lambda x: np.maximum(x, 0)),
    ("silu", lambda x: x / (1 + np.exp(-x))),
    ("tanh", np.tanh),
])
def test_activations_values_and_gradients(name, ref):
    act = nn.activation(name)
    x = f64(4, 5)
    if ref is not None:
        np.testing.assert_allclose(act(x).data, ref(x.data), rtol=1e-10)
    check_gradients(lambda: act(x), [x])


def test_exact_gelu_differs_from_tanh_gelu_slightly():
    x = Tensor(np.linspace(-3, 3, 13))
    diff = nn.GELU("none")(x).data - nn.GELU("tanh")(x).data
    assert 0 < np.abs(diff).max() < 1e-3
    with pytest.raises(ValueError, match="approximate"):
        nn.GELU("fast")
    with pytest.raises(ValueError, match="unknown activation 'swishy'"):
        nn.activation("swishy")


def test_dropout_zeroes_about_p_scales_survivors_and_is_identity_in_eval():
    drop = nn.Dropout(0.25)
    x = Tensor(np.ones((200, 100)))
    y = drop(x).data
    kept = y != 0
    assert abs(kept.mean() - 0.75) < 0.01
    np.testing.assert_allclose(y[kept], 1 / 0.75)
    drop.eval()
    assert drop(x) is x
    with pytest.raises(ValueError, match=r"\[0, 1\)"):
        nn.Dropout(1.0)


def test_dropout_gradient_follows_the_same_mask():
    drop = nn.Dropout(0.5)
    x = f64(3, 4)

    def fn():
        autograd.manual_seed(7)  # the same mask on every evaluation
        return drop(x)

    check_gradients(fn, [x], max_elems=12)


@pytest.mark.parametrize("activation,bias", [("gelu", True), ("relu", False), ("silu", True)])
def test_mlp_shapes_names_and_gradients(activation, bias):
    mlp = nn.MLP(4, activation=activation, bias=bias)
    assert mlp.c_fc.weight.shape == (4, 16) and mlp.c_proj.weight.shape == (16, 4)
    names = [n for n, _ in mlp.named_parameters()]
    assert names == (["c_fc.weight", "c_fc.bias", "c_proj.weight", "c_proj.bias"] if bias
                     else ["c_fc.weight", "c_proj.weight"])
    x = f64(2, 3, 4)
    gradcheck_module(mlp, x, max_elems=6)


def test_mlp_equals_its_definition():
    mlp = nn.MLP(3, hidden=5).double()
    x = f64(4, 3)
    h = x.data @ mlp.c_fc.weight.data + mlp.c_fc.bias.data
    h = 0.5 * h * (1 + np.tanh(np.sqrt(2 / np.pi) * (h + 0.044715 * h ** 3)))
    np.testing.assert_allclose(mlp(x).data, h @ mlp.c_proj.weight.data + mlp.c_proj.bias.data, rtol=1e-10)


def test_swiglu_is_silu_gate_times_up_and_its_gradients():
    sw = nn.SwiGLU(4, hidden=6).double()
    assert sw.c_fc.weight.shape == (4, 12) and sw.c_fc.bias is None
    x = f64(2, 3, 4)
    h = x.data @ sw.c_fc.weight.data
    gate, up = h[..., :6], h[..., 6:]
    ref = (gate / (1 + np.exp(-gate)) * up) @ sw.c_proj.weight.data
    np.testing.assert_allclose(sw(x).data, ref, rtol=1e-10)
    gradcheck_module(sw, x, max_elems=6)


def test_swiglu_default_width_is_llamas():
    assert nn.swiglu_hidden(4096) == 11008
    assert nn.SwiGLU(64).hidden % 256 == 0


def test_init_helpers():
    p = nn.Parameter(np.empty((200, 300), np.float32))
    nn.init.normal_(p, std=0.5)
    assert abs(p.data.std() - 0.5) < 0.01 and abs(p.data.mean()) < 0.01
    nn.init.zeros_(p)
    assert not p.data.any()
    nn.init.ones_(p)
    assert (p.data == 1).all()
    nn.init.uniform_(p, -2, 2)
    assert p.data.min() >= -2 and p.data.max() < 2 and p.data.min() < -1.9
    assert nn.init.gpt2_residual_std(12) == pytest.approx(0.02 / np.sqrt(24))
    autograd.manual_seed(3)
    a = nn.Linear(5, 5).weight.data.copy()
    autograd.manual_seed(3)
    assert np.array_equal(nn.Linear(5, 5).weight.data, a)


@pytest.mark.parametrize("make", [
    lambda: nn.Linear(3, 2), lambda: nn.LayerNorm(4), lambda: nn.RMSNorm(4), lambda: nn.MLP(4, hidden=3),
    lambda: nn.SwiGLU(4, hidden=2), lambda: nn.MultiHeadAttention(4, 2, rope=nn.RotaryEmbedding(2, 4)),
    lambda: nn.MoE(4, 3, n_experts=3, top_k=2),
], ids=["linear", "layernorm", "rmsnorm", "mlp", "swiglu", "attention", "moe"])
def test_autograd_gradcheck_agrees_for_every_parameter_element(make):
    from tests.nn.gradcheck_util import functional

    module = make().double()
    width = 3 if isinstance(module, nn.Linear) else 4
    x = f64(1, 3, width)
    fn, params = functional(module), list(module.parameters())
    # the swap is real: other parameter values change the output (so no check passes vacuously)
    rng = np.random.default_rng(5)
    shifted = [Tensor(p.data + rng.standard_normal(p.shape)) for p in params]
    for i in range(len(params)):
        moved = params[:i] + [shifted[i]] + params[i + 1:]
        assert not np.allclose(fn(x, *moved).data, module(x).data), f"parameter {i} not swapped in"
    report = autograd.gradcheck(fn, [x, *params], atol=1e-7, rtol=1e-5)
    assert report.ok and len(report.checked) == 1 + len(list(module.parameters()))

"""Module registry, names, state_dict / load_state_dict, modes, devices and containers."""
import numpy as np
import pytest

from autograd import Tensor
from nn import Module, ModuleDict, ModuleList, Parameter, Sequential


class Affine(Module):
    def __init__(self, n_in, n_out, seed=0):
        super().__init__()
        rng = np.random.default_rng(seed)
        self.weight = Parameter(rng.standard_normal((n_in, n_out)).astype(np.float32))
        self.bias = Parameter(rng.standard_normal(n_out).astype(np.float32))

    def forward(self, x):
        return x @ self.weight + self.bias


class Net(Module):
    def __init__(self, seed=0):
        super().__init__()
        self.embed = Affine(3, 4, seed=seed + 1)
        self.blocks = ModuleList([Affine(4, 4, seed=seed + 2), Affine(4, 4, seed=seed + 3)])
        self.heads = ModuleDict({"out": Affine(4, 2, seed=seed + 4)})
        self.scale = Parameter(np.ones(1, np.float32))
        self.not_a_param = np.zeros(3)  # plain attributes are not registered

    def forward(self, x):
        h = self.embed(x)
        for b in self.blocks:
            h = b(h)
        return self.heads["out"](h) * self.scale


NAMES = ["scale", "embed.weight", "embed.bias", "blocks.0.weight", "blocks.0.bias",
         "blocks.1.weight", "blocks.1.bias", "heads.out.weight", "heads.out.bias"]


def test_named_parameters_are_dotted_own_first_then_children_in_registration_order():
    net = Net()
    assert [n for n, _ in net.named_parameters()] == NAMES
    assert all(isinstance(p, Parameter) and p.requires_grad for p in net.parameters())
    assert [n for n, _ in net.named_children()] == ["embed", "blocks", "heads"]
    assert [n for n, _ in net.named_modules()] == ["", "embed", "blocks", "blocks.0", "blocks.1", "heads", "heads.out"]
    assert net.num_params() == 1 + 3 * 4 + 4 + 2 * (16 + 4) + 4 * 2 + 2


def test_reassigning_or_deleting_an_attribute_unregisters_it():
    net = Net()
    net.scale = None
    del net.heads
    assert "scale" not in dict(net.named_parameters())
    assert not any(n.startswith("heads") for n, _ in net.named_parameters())


def test_assigning_before_super_init_is_a_clear_error():
    class Bad(Module):
        def __init__(self):
            self.w = Parameter(np.zeros(2))

    with pytest.raises(RuntimeError, match=r"super\(\)\.__init__\(\)"):
        Bad()


def test_tied_parameter_is_listed_counted_and_saved_once():
    class Tied(Module):
        def __init__(self):
            super().__init__()
            self.wte = Affine(4, 4)
            self.lm_head = Affine(4, 4, seed=5)
            self.lm_head.weight = self.wte.weight

    m = Tied()
    names = [n for n, _ in m.named_parameters()]
    assert names == ["wte.weight", "wte.bias", "lm_head.bias"]
    assert len(list(m.named_parameters(remove_duplicate=False))) == 4
    assert m.num_params() == 16 + 4 + 4
    assert list(m.state_dict()) == names
    # a checkpoint naming the tied weight by its other name also loads
    sd = {k: v.copy() + 1 for k, v in m.state_dict().items()}
    sd["lm_head.weight"] = sd.pop("wte.weight")
    m.load_state_dict(sd)
    assert m.lm_head.weight is m.wte.weight
    np.testing.assert_array_equal(m.wte.weight.data, sd["lm_head.weight"])


def test_state_dict_holds_live_arrays_not_copies():
    net = Net()
    sd = net.state_dict()
    assert list(sd) == NAMES
    assert sd["embed.weight"] is net.embed.weight.data


def test_state_dict_round_trip_reproduces_outputs_bit_for_bit():
    a, b = Net(seed=0), Net(seed=10)
    x = Tensor(np.random.default_rng(0).standard_normal((5, 3)).astype(np.float32))
    assert not np.array_equal(a(x).data, b(x).data)
    held = {id(p): p.data for p in b.parameters()}
    b.load_state_dict({k: v.copy() for k, v in a.state_dict().items()})
    assert np.array_equal(a(x).data, b(x).data)
    # copied in place: the parameter arrays are the same objects as before
    assert all(p.data is held[id(p)] for p in b.parameters())


def test_load_state_dict_lists_every_missing_unexpected_and_misshaped_entry():
    net = Net()
    sd = dict(net.state_dict())
    del sd["embed.bias"], sd["blocks.1.weight"]
    sd["blocks.0.weight"] = np.zeros((5, 4), np.float32)
    sd["heads.out.bias"] = np.zeros(3, np.float32)
    sd["extra.weight"] = np.zeros(2)
    sd["embed.wieght"] = np.zeros((3, 4))
    before = net.embed.weight.data.copy()
    with pytest.raises(ValueError) as info:
        net.load_state_dict(sd)
    msg = str(info.value)
    for name in ("embed.bias", "blocks.1.weight", "blocks.0.weight", "heads.out.bias",
                 "extra.weight", "embed.wieght", "(5, 4)", "(4, 4)"):
        assert name in msg, f"{name!r} missing from: {msg}"
    assert "2 mis-shaped, 2 missing, 2 unexpected" in msg
    np.testing.assert_array_equal(net.embed.weight.data, before)  # nothing written on failure


def test_load_state_dict_names_keys_that_are_not_strings():
    net = Net()
    sd = {**net.state_dict(), 5: np.zeros(1), ("a", 1): np.zeros(1)}
    with pytest.raises(ValueError, match=r"0 missing, 2 unexpected\):\n  unexpected keys: 5, \('a', 1\)"):
        net.load_state_dict(sd)


def test_load_state_dict_non_strict_reports_but_still_rejects_shapes():
    net = Net()
    sd = {"embed.weight": np.full((3, 4), 2.0, np.float32), "bogus": np.zeros(1)}
    result = net.load_state_dict(sd, strict=False)
    assert result.unexpected_keys == ["bogus"]
    assert "embed.bias" in result.missing_keys
    np.testing.assert_array_equal(net.embed.weight.data, 2.0)
    with pytest.raises(ValueError, match="embed.weight"):
        net.load_state_dict({"embed.weight": np.zeros((4, 3))}, strict=False)


def test_load_state_dict_accepts_tensors_and_casts_to_the_parameter_dtype():
    net = Net()
    sd = {k: Tensor(np.asarray(v, np.float64)) for k, v in net.state_dict().items()}
    net.load_state_dict(sd)
    assert net.embed.weight.dtype == np.float32


def test_train_eval_propagate_to_every_submodule():
    net = Net()
    assert all(m.training for m in net.modules())
    assert net.eval() is net
    assert not any(m.training for m in net.modules())
    net.train()
    assert all(m.training for m in net.modules())


def test_to_dtype_keeps_parameter_objects_and_casts_arrays():
    net = Net()
    params = list(net.parameters())
    net.double()
    assert list(net.parameters()) == params
    assert all(p.dtype == np.float64 for p in params)
    with pytest.raises(ValueError, match="unknown device"):
        net.to("tpu")


def test_zero_grad_clears_gradients():
    net = Net()
    for p in net.parameters():
        p.grad = np.ones_like(p.data)
    net.zero_grad()
    assert all(p.grad is None for p in net.parameters())


def test_buffers_follow_to_and_only_persistent_ones_are_saved():
    class WithBuffers(Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("running", np.zeros(3, np.float32))
            self.register_buffer("table", np.ones(2, np.float32), persistent=False)

    m = WithBuffers()
    assert list(m.state_dict()) == ["running"]
    m.load_state_dict({"running": np.arange(3, dtype=np.float32)})
    np.testing.assert_array_equal(m.running, [0, 1, 2])
    m.table = np.full(2, 5.0, np.float32)  # reassignment keeps it a (non-persistent) buffer
    m.double()
    assert m.running.dtype == np.float64 and m.table.dtype == np.float64
    assert list(m.state_dict()) == ["running"]


def test_containers_index_iterate_and_chain():
    seq = Sequential(Affine(3, 4), Affine(4, 2))
    x = Tensor(np.ones((2, 3), np.float32))
    np.testing.assert_allclose(seq(x).data, seq[1](seq[0](x)).data)
    assert len(seq) == 2 and [n for n, _ in seq.named_parameters()][0] == "0.weight"
    ml = ModuleList([Affine(2, 2)]).append(Affine(2, 2))
    assert len(ml) == 2 and ml[-1] is list(ml)[1] and len(ml[:1]) == 1
    with pytest.raises(IndexError, match="out of range"):
        ml[5]
    with pytest.raises(TypeError, match="Module"):
        ml.append(np.zeros(2))
    md = ModuleDict({"a": Affine(2, 2)})
    assert "a" in md and list(md.keys()) == ["a"]
    with pytest.raises(KeyError, match="has no module 'b'"):
        md["b"]


def test_forward_hook_sees_and_may_replace_the_output():
    a = Affine(2, 2)
    seen = []
    handle = a.register_forward_hook(lambda m, args, out: seen.append(out.shape))
    a(Tensor(np.ones((3, 2), np.float32)))
    handle.remove()
    a(Tensor(np.ones((3, 2), np.float32)))
    assert seen == [(3, 2)]


def test_repr_shows_the_tree_with_shapes_and_counts():
    text = repr(Net())
    assert text.splitlines()[0].startswith("Net(")
    assert "(embed): Affine()  # 16 params: weight (3, 4), bias (4,)" in text
    assert "(0): Affine()  # 20 params" in text
    assert "67 params" in text.splitlines()[0]


def test_deepcopy_gives_an_independent_module_with_the_same_outputs():
    import copy

    net = Net()
    twin = copy.deepcopy(net)
    x = Tensor(np.ones((2, 3), np.float32))
    assert np.array_equal(net(x).data, twin(x).data)
    twin.embed.weight.data += 1
    assert not np.array_equal(net(x).data, twin(x).data)
    assert [n for n, _ in twin.named_parameters()] == NAMES


def test_any_forward_hooks_counts_live_hooks_once_each():
    from nn.module import any_forward_hooks

    before = any_forward_hooks()
    a, b = Module(), Module()
    ha = a.register_forward_hook(lambda m, args, out: None)
    hb = b.register_forward_hook(lambda m, args, out: None)
    assert any_forward_hooks()
    ha.remove()
    ha.remove()                 # a second remove must not count the other hook away
    assert any_forward_hooks()
    hb.remove()
    assert any_forward_hooks() == before


def test_load_state_dict_refuses_values_that_are_not_numbers_before_writing_any():
    from nn import Linear

    m = Sequential(Linear(3, 4), Linear(4, 2))
    before = {k: v.copy() for k, v in m.state_dict().items()}
    for bad in (np.full((4, 2), "a"), np.ones((4, 2), np.complex64)):
        sd = {k: v + 5 for k, v in before.items()}
        sd["1.weight"] = bad
        with pytest.raises(ValueError, match=rf"(?s)1 mis-typed.*1.weight: {bad.dtype} into float32"):
            m.load_state_dict(sd)
        for k, v in m.state_dict().items():  # 0.weight came first and is untouched too
            np.testing.assert_array_equal(v, before[k])
    with pytest.raises(TypeError, match="expects a mapping of name -> array, got list"):
        m.load_state_dict([1, 2])


@pytest.mark.parametrize("make", [
    lambda p: __import__("nn").optim.AdamW(p, lr=float("nan")),
    lambda p: __import__("nn").optim.AdamW(p, weight_decay=float("inf")),
    lambda p: __import__("nn").optim.AdamW(p, eps=float("nan")),
    lambda p: __import__("nn").optim.SGD(p, lr=float("nan")),
    lambda p: __import__("nn").optim.SGD(p, lr=0.1, momentum=float("nan")),
])
def test_optimizer_options_must_be_finite(make):
    from nn import Linear

    with pytest.raises(ValueError, match="must be a finite number >= 0, got (nan|inf)"):
        make(Linear(2, 2).parameters())

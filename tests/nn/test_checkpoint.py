"""Safetensors checkpoints: round trips, metadata, atomic writes, clear errors, interop."""
import json
import os

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from autograd import Tensor
from nn import checkpoint
from nn.checkpoint import load_safetensors, save_safetensors

DTYPES = ["float16", "float32", "float64", "int8", "int16", "int32", "int64",
          "uint8", "uint16", "uint32", "uint64", "bool"]


def sample_tensors():
    rng = np.random.default_rng(0)
    out = {}
    for i, dt in enumerate(DTYPES):
        shape = [(3, 5), (7,), (2, 1, 3), (), (0, 4)][i % 5]
        out[f"t.{dt}"] = np.asarray(rng.standard_normal(shape) * 50).astype(dt)
    return out


def test_round_trip_every_dtype_and_metadata(tmp_path):
    path = tmp_path / "model.safetensors"
    tensors = sample_tensors()
    tensors["as_tensor"] = Tensor(np.arange(6, dtype=np.float32).reshape(2, 3))
    meta = {"config": json.dumps({"n_layer": 2}), "step": "17", "note": "ünïcode"}
    save_safetensors(path, tensors, meta)
    loaded, meta2 = load_safetensors(path)
    assert meta2 == meta
    assert set(loaded) == set(tensors)
    for name, value in tensors.items():
        value = value.data if isinstance(value, Tensor) else value
        assert loaded[name].dtype == value.dtype and loaded[name].shape == value.shape, name
        assert np.array_equal(loaded[name], value), name
        assert loaded[name].flags.writeable


def test_layout_header_is_padded_to_8_bytes_and_data_is_contiguous(tmp_path):
    path = tmp_path / "x.safetensors"
    save_safetensors(path, {"a": np.ones(3, np.float16), "b": np.ones(2, np.float64), "c": np.ones(1, np.int8)})
    raw = path.read_bytes()
    n = int.from_bytes(raw[:8], "little")
    assert (8 + n) % 8 == 0
    header = json.loads(raw[8:8 + n])
    spans = sorted(tuple(v["data_offsets"]) for v in header.values())
    assert spans[0][0] == 0 and all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
    assert spans[-1][1] == len(raw) - 8 - n
    # larger items first, so every tensor starts aligned to its item size
    assert header["b"]["data_offsets"][0] == 0 and header["b"]["dtype"] == "F64"


def test_big_endian_and_non_contiguous_inputs_are_written_little_endian(tmp_path):
    path = tmp_path / "x.safetensors"
    big = np.arange(6, dtype=">f4").reshape(2, 3)
    save_safetensors(path, {"big": big, "strided": np.arange(12.0).reshape(3, 4)[:, ::2]})
    loaded, _ = load_safetensors(path)
    np.testing.assert_array_equal(loaded["big"], big)
    np.testing.assert_array_equal(loaded["strided"], np.arange(12.0).reshape(3, 4)[:, ::2])


def test_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.safetensors"
    save_safetensors(path, {"w": np.ones(4, np.float32)}, {"v": "1"})
    before = path.read_bytes()

    def broken_fsync(fd):
        raise OSError("disk full")

    monkeypatch.setattr(checkpoint.os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        save_safetensors(path, {"w": np.zeros(1000, np.float32)}, {"v": "2"})
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["ckpt.safetensors"]


def test_bad_inputs_are_rejected_before_touching_the_disk(tmp_path):
    path = tmp_path / "x.safetensors"
    with pytest.raises(TypeError, match="metadata must map str -> str"):
        save_safetensors(path, {"a": np.ones(1)}, {"step": 3})
    with pytest.raises(TypeError, match="complex128"):
        save_safetensors(path, {"a": np.ones(1, np.complex128)})
    with pytest.raises(TypeError, match="'a' is a str"):
        save_safetensors(path, {"a": "text"})
    with pytest.raises(FileNotFoundError, match="does not exist"):
        save_safetensors(tmp_path / "missing" / "x.safetensors", {"a": np.ones(1)})
    assert not path.exists()


def write_raw(path, header, data=b"", pad=True, length=None):
    raw = json.dumps(header).encode()
    if pad:
        raw += b" " * (-(8 + len(raw)) % 8)
    n = len(raw) if length is None else length
    path.write_bytes(n.to_bytes(8, "little") + raw + data)


GOOD = {"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}


@pytest.mark.parametrize("header,data,length,pattern", [
    (None, None, None, "fewer than the 8-byte header length"),
    (GOOD, b"\0" * 8, 10 ** 6, "points past the end of the file"),
    (GOOD, b"\0" * 8, 2 ** 40, "exceeds the"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 5, None, "truncated"),
    ({"w": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8, None, "need 12"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 0]}}, b"\0" * 8, None, "increasing pair"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
      "v": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12, None, "overlap"),
    ({"w": {"dtype": "Q9", "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "unknown value 'Q9'"),
    ({"w": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}}, b"\0" * 2, None, "F8_E4M3, which numpy cannot"),
    ({"w": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}}, b"\0" * 8, None, "field 'shape'"),
    ({"w": {"dtype": "F32", "shape": [2], "data_offsets": "0-8"}}, b"\0" * 8, None, "field 'data_offsets'"),
    ({"w": [1, 2]}, b"", None, "entry is a JSON list"),
    ({"__metadata__": {"step": 3}}, b"", None, "'__metadata__'"),
    ({"__metadata__": [], **GOOD}, b"\0" * 8, None, r"field '__metadata__' must be an object .* got \[\]"),
    ({"__metadata__": 0, **GOOD}, b"\0" * 8, None, "field '__metadata__' must be an object .* got 0"),
    ({"__metadata__": False, **GOOD}, b"\0" * 8, None, "field '__metadata__' must be an object .* got False"),
    ([1, 2, 3], b"", None, "expected an object"),
    # a dtype that is no string (no dict key either)
    ({"w": {"dtype": ["F32"], "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None,
     r"tensor 'w': field 'dtype' must be a string, got \['F32'\]"),
    ({"w": {"dtype": {"F32": 1}, "shape": [2], "data_offsets": [0, 8]}}, b"\0" * 8, None,
     "tensor 'w': field 'dtype' must be a string, got {'F32': 1}"),
    # zero-size tensors whose shapes numpy cannot allocate
    ({"w": {"dtype": "F32", "shape": [0, 2 ** 62], "data_offsets": [0, 0]}}, b"", None,
     r"tensor 'w': field 'shape' \[0, 4611686018427387904\] is too large"),
    ({"w": {"dtype": "U8", "shape": [0, 2 ** 64], "data_offsets": [0, 0]}}, b"", None,
     "tensor 'w': field 'shape' .* is too large"),
    ({"w": {"dtype": "U8", "shape": [0, 2 ** 62, 2], "data_offsets": [0, 0]}}, b"", None,
     "tensor 'w': field 'shape' .* is too large"),
    ({"w": {"dtype": "F32", "shape": [1] * 65, "data_offsets": [0, 4]}}, b"\0" * 4, None,
     "tensor 'w': field 'shape' has 65 dimensions, more than numpy's 64"),
])
def test_corrupt_files_give_a_clear_error_naming_file_and_field(tmp_path, header, data, length, pattern):
    path = tmp_path / "bad.safetensors"
    if header is None:
        path.write_bytes(b"\x01\x02\x03")
    else:
        write_raw(path, header, data, length=length)
    with pytest.raises(ValueError, match=pattern) as info:
        load_safetensors(path)
    assert "bad.safetensors" in str(info.value)


def test_shapes_at_numpys_limits_still_load(tmp_path):
    path = tmp_path / "edge.safetensors"
    write_raw(path, {"w": {"dtype": "F32", "shape": [1] * 64, "data_offsets": [0, 4]},
                     "z": {"dtype": "U8", "shape": [0, 2 ** 63 - 1], "data_offsets": [0, 0]}}, b"\0" * 4)
    loaded, meta = load_safetensors(path)
    assert loaded["w"].shape == (1,) * 64 and loaded["z"].shape == (0, 2 ** 63 - 1) and meta == {}
    write_raw(path, {"__metadata__": None, **GOOD}, b"\0" * 8)  # null: no metadata, as in the safetensors library
    assert load_safetensors(path)[1] == {}


def test_garbage_and_duplicate_keys_are_rejected(tmp_path):
    path = tmp_path / "bad.safetensors"
    path.write_bytes((5).to_bytes(8, "little") + b"\xff{not" + b"\0" * 8)
    with pytest.raises(ValueError, match="not valid UTF-8 JSON"):
        load_safetensors(path)
    raw = b'{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}'
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + b"\0")
    with pytest.raises(ValueError, match="duplicate key 'w'"):
        load_safetensors(path)


def test_truncating_a_real_checkpoint_anywhere_never_crashes(tmp_path):
    path = tmp_path / "full.safetensors"
    save_safetensors(path, sample_tensors(), {"k": "v"})
    raw = path.read_bytes()
    cut = tmp_path / "cut.safetensors"
    for size in sorted({0, 4, 8, 9, 20, len(raw) // 2, len(raw) - 1}):
        cut.write_bytes(raw[:size])
        with pytest.raises(ValueError, match="cut.safetensors"):
            load_safetensors(cut)


def test_missing_file_and_bad_device_are_clear(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.safetensors' does not exist"):
        load_safetensors(tmp_path / "nope.safetensors")
    with pytest.raises(FileNotFoundError, match="is a folder"):
        load_safetensors(tmp_path)
    with pytest.raises(FileNotFoundError, match="'/dev/null' is not a regular file"):
        load_safetensors("/dev/null")
    save_safetensors(tmp_path / "a.safetensors", {"a": np.ones(1)})
    with pytest.raises(ValueError, match="unknown device"):
        load_safetensors(tmp_path / "a.safetensors", device="gpu0")


def test_files_are_readable_by_the_safetensors_package_and_back(tmp_path):
    st = pytest.importorskip("safetensors.numpy")
    path = tmp_path / "ours.safetensors"
    tensors = sample_tensors()
    save_safetensors(path, tensors, {"config": "{}"})
    theirs = st.load_file(str(path))
    assert set(theirs) == set(tensors)
    for name, value in tensors.items():
        assert np.array_equal(theirs[name], value) and theirs[name].dtype == value.dtype
    from safetensors import safe_open

    with safe_open(str(path), framework="numpy") as f:
        assert f.metadata() == {"config": "{}"}
    # and a file written by the package loads here
    other = tmp_path / "theirs.safetensors"
    st.save_file({k: v for k, v in tensors.items() if v.size}, str(other), metadata={"a": "b"})
    ours, meta = load_safetensors(other)
    assert meta == {"a": "b"}
    for name, value in ours.items():
        assert np.array_equal(value, tensors[name])


def test_optimizer_state_flattens_into_a_file_and_back(tmp_path):
    state = {"state": {0: {"step": 3, "exp_avg": np.ones((2, 2), np.float32)}, 2: {"momentum_buffer": np.zeros(3)}},
             "param_groups": [{"lr": 0.1, "betas": [0.9, 0.99], "params": [0, 1, 2]}]}
    tensors, text = checkpoint.flatten_optimizer_state(state)
    save_safetensors(tmp_path / "o.safetensors", tensors, {"optimizer": text})
    loaded, meta = load_safetensors(tmp_path / "o.safetensors")
    back = checkpoint.unflatten_optimizer_state(loaded, meta["optimizer"])
    assert back["param_groups"] == state["param_groups"]
    assert back["state"][0]["step"] == 3
    np.testing.assert_array_equal(back["state"][0]["exp_avg"], state["state"][0]["exp_avg"])
    np.testing.assert_array_equal(back["state"][2]["momentum_buffer"], np.zeros(3))


_names = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=12).filter(lambda s: s != "__metadata__")
_arrays = st.tuples(st.sampled_from(DTYPES), st.lists(st.integers(0, 4), max_size=3), st.integers(0, 2 ** 32 - 1))


@settings(max_examples=20)
@given(spec=st.dictionaries(_names, _arrays, max_size=5),
       meta=st.dictionaries(st.text(max_size=8), st.text(max_size=20), max_size=3))
def test_any_dict_of_arrays_round_trips_and_the_package_agrees(tmp_path_factory, spec, meta):
    rng_tensors = {}
    for name, (dt, shape, seed) in spec.items():
        rng = np.random.default_rng(seed)
        rng_tensors[name] = np.asarray(rng.standard_normal(shape) * 100).astype(dt)
    path = tmp_path_factory.mktemp("h") / "x.safetensors"
    save_safetensors(path, rng_tensors, meta)
    loaded, meta2 = load_safetensors(path)
    assert meta2 == meta and list(loaded) == list(rng_tensors)
    for name, value in rng_tensors.items():
        assert loaded[name].dtype == value.dtype and np.array_equal(loaded[name], value)
    try:
        import safetensors.numpy as stn
    except ImportError:
        return
    theirs = stn.load_file(str(path))
    assert set(theirs) == set(rng_tensors)
    for name, value in rng_tensors.items():
        assert np.array_equal(theirs[name], value)

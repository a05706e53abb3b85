"""bfloat16 checkpoints: exact widening, round-to-nearest-even narrowing, BF16 safetensors files."""
import json
import struct

import numpy as np
from hypothesis import given, strategies as st

from nn import bfloat16
from nn.checkpoint import load_safetensors, save_safetensors


def test_known_bit_patterns():
    assert bfloat16.from_float(np.array([1.0, -2.0, 0.0, np.inf, -np.inf], np.float32)).tolist() == \
        [0x3F80, 0xC000, 0x0000, 0x7F80, 0xFF80]
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (down); 1 + 3*2^-8 ties up.
    assert bfloat16.from_float(np.array([1 + 2 ** -8, 1 + 3 * 2 ** -8], np.float32)).tolist() == [0x3F80, 0x3F82]
    nan = bfloat16.from_float(np.array([np.nan, -np.nan], np.float32))
    assert np.isnan(bfloat16.to_float32(nan)).all()


@given(st.integers(0, 0xFFFF))
def test_widening_then_narrowing_is_the_identity(bits):
    x = bfloat16.to_float32(np.array([bits], np.uint16))
    if not np.isnan(x[0]):
        assert bfloat16.from_float(x).tolist() == [bits]


@given(st.floats(width=32, allow_nan=False, allow_infinity=False))
def test_narrowing_rounds_to_the_nearest_and_ties_to_even(x):
    x = np.float32(x)
    r = bfloat16.to_float32(bfloat16.from_float(np.array([x])))[0]
    if np.isinf(r):  # past the largest bfloat16: only values within half an ulp of it may not
        assert abs(float(x)) >= 3.3895313892515355e38
        return
    bits = int(bfloat16.from_float(np.array([x]))[0])
    below = bfloat16.to_float32(np.array([bits - 1 if bits & 0x7FFF else bits], np.uint16))[0]
    above = bfloat16.to_float32(np.array([bits + 1], np.uint16))[0]
    err = abs(float(x) - float(r))
    assert err <= abs(float(x) - float(below)) and err <= abs(float(x) - float(above))
    if err == abs(float(x) - float(above)) and r != above or err == abs(float(x) - float(below)) and r != below:
        assert bits % 2 == 0  # a tie went to the even pattern


def test_a_bf16_file_round_trips_and_follows_the_format(tmp_path):
    w = np.array([[1.0, -0.5], [3.140625, 65280.0]], np.float32)  # all exact in bfloat16
    ids = np.arange(3, dtype=np.int64)
    save_safetensors(tmp_path / "m.safetensors", {"w": w, "ids": ids}, {"k": "v"}, bf16=True)
    raw = (tmp_path / "m.safetensors").read_bytes()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    assert header["w"]["dtype"] == "BF16" and header["ids"]["dtype"] == "I64"
    assert header["w"]["data_offsets"][1] - header["w"]["data_offsets"][0] == 8  # 2 bytes a value
    tensors, meta = load_safetensors(tmp_path / "m.safetensors")
    assert tensors["w"].dtype == np.float32 and np.array_equal(tensors["w"], w)
    assert np.array_equal(tensors["ids"], ids) and meta == {"k": "v"}


def test_bf16_written_by_hand_in_the_safetensors_layout_loads(tmp_path):
    bits = np.array([0x3F80, 0x4049, 0xC2F7], "<u2")  # 1.0, 3.140625, -123.5
    header = json.dumps({"x": {"dtype": "BF16", "shape": [3], "data_offsets": [0, 6]}}).encode()
    header += b" " * (-(8 + len(header)) % 8)
    (tmp_path / "h.safetensors").write_bytes(struct.pack("<Q", len(header)) + header + bits.tobytes())
    tensors, _ = load_safetensors(tmp_path / "h.safetensors")
    assert tensors["x"].tolist() == [1.0, 3.140625, -123.5]

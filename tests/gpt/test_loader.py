"""gpt.data.loader: windows are shifted slices of the data; the generator's state restores exactly."""
import json

import numpy as np
import pytest

from gpt.data.loader import BatchLoader, fixed_batches


def test_windows_are_contiguous_slices_and_targets_are_shifted_by_one():
    data = np.arange(1000, dtype=np.uint16)
    loader = BatchLoader(data, batch_size=6, block_size=9, seed=0)
    x, y = loader.next_batch()
    assert x.shape == y.shape == (6, 9) and x.dtype == y.dtype == np.int64
    for row_x, row_y in zip(x, y):
        start = row_x[0]
        assert row_x.tolist() == list(range(start, start + 9))
        assert row_y.tolist() == list(range(start + 1, start + 10))


def test_reads_from_a_memory_map(tmp_path):
    np.arange(300, dtype=np.uint32).tofile(tmp_path / "train.bin")
    data = np.memmap(tmp_path / "train.bin", dtype=np.uint32, mode="r")
    x, y = BatchLoader(data, 4, 16, seed=3).next_batch()
    assert isinstance(x, np.ndarray) and not isinstance(x, np.memmap)
    assert (y - x == 1).all()


def test_every_window_can_be_drawn_up_to_the_last_token():
    data = np.arange(12, dtype=np.uint16)
    loader = BatchLoader(data, batch_size=64, block_size=4, seed=0)
    starts = set()
    for _ in range(20):
        x, y = loader.next_batch()
        starts.update(x[:, 0].tolist())
        assert y.max() <= 11
    assert starts == set(range(12 - 4))  # the last window's target is the last token


def test_same_seed_same_batches_other_seed_other_batches():
    data = np.arange(10_000, dtype=np.uint16)
    a = [BatchLoader(data, 4, 8, seed=5).next_batch()[0] for _ in range(2)]
    assert np.array_equal(a[0], a[1])
    b = BatchLoader(data, 4, 8, seed=6).next_batch()[0]
    assert not np.array_equal(a[0], b)


def test_state_round_trip_through_json_continues_the_same_stream():
    data = np.arange(50_000, dtype=np.uint16)
    loader = BatchLoader(data, 3, 7, seed=11)
    for _ in range(5):
        loader.next_batch()
    state = json.loads(json.dumps(loader.state_dict()))
    expected = [loader.next_batch() for _ in range(4)]
    other = BatchLoader(data, 3, 7, seed=0)
    other.load_state_dict(state)
    assert other.batches_drawn == 5 and other.seed == 11
    for (x1, y1), (x2, y2) in zip(expected, (other.next_batch() for _ in range(4))):
        assert np.array_equal(x1, x2) and np.array_equal(y1, y2)


def test_malformed_state_is_a_clear_error():
    loader = BatchLoader(np.arange(100, dtype=np.uint16), 2, 4)
    with pytest.raises(ValueError, match="loader state"):
        loader.load_state_dict({"seed": 1})
    bad = loader.state_dict()
    bad["rng"]["bit_generator"] = "MT19937"
    with pytest.raises(ValueError, match="MT19937"):
        loader.load_state_dict(bad)


def test_fixed_batches_repeat_and_leave_the_training_stream_alone():
    data = np.arange(5_000, dtype=np.uint16)
    first = fixed_batches(data, 3, 4, 8, seed=1)
    second = fixed_batches(data, 3, 4, 8, seed=1)
    assert all(np.array_equal(a[0], b[0]) for a, b in zip(first, second))
    loader = BatchLoader(data, 4, 8, seed=1)
    x_before = BatchLoader(data, 4, 8, seed=1).next_batch()[0]
    fixed_batches(data, 3, 4, 8, seed=1)
    assert np.array_equal(loader.next_batch()[0], x_before)


def test_too_little_data_names_the_split_and_block_size():
    with pytest.raises(ValueError, match=r"val split has 10 tokens.*block_size \+ 1 = 65"):
        BatchLoader(np.arange(10, dtype=np.uint16), 2, 64, name="val")
    with pytest.raises(ValueError, match="1-D"):
        BatchLoader(np.zeros((4, 4), dtype=np.uint16), 2, 2)

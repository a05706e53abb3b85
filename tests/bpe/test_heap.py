"""bpe.heap: training's heap settings come and go with the block, and what it freed goes back."""
import subprocess
import sys

import pytest

from bpe.heap import _huge_page_advice, training_heap


@pytest.mark.parametrize("before", [True, False])
def test_huge_page_advice_off_inside_and_as_it_was_after(before):
    if _huge_page_advice(before) is None:
        pytest.skip("this NumPy has no huge-page switch")
    try:
        with training_heap():
            assert _huge_page_advice(False) is False
        assert _huge_page_advice(before) is before
        with pytest.raises(KeyError), training_heap():
            raise KeyError("an error inside")
        assert _huge_page_advice(before) is before
    finally:
        _huge_page_advice(True)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt and malloc_trim")
def test_freed_blocks_kept_inside_and_given_back_after():
    """In a fresh process: the block keeps freed memory (the thresholds stay so after it), and
    its end gives the 400 MiB it freed back to the system."""
    code = """if True:
        import numpy as np
        from bpe.heap import freed_memory_kept, training_heap
        def rss():
            return int(open("/proc/self/statm").read().split()[1]) * 4096 >> 20
        with training_heap():
            assert freed_memory_kept()
            blocks = [np.ones(1 << 20) for _ in range(50)]  # 50 x 8 MiB from the heap, not mmap
            del blocks
            kept = rss()
        print(kept, rss(), freed_memory_kept())
    """
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        pytest.fail(out.stderr)
    kept, after, still = out.stdout.split()
    if kept == after == "0":
        pytest.skip("no /proc here")
    assert int(kept) > 300, out.stdout   # freed, yet held for reuse
    assert int(after) < 150, out.stdout  # trimmed at the end
    assert still == "True"


def test_training_inside_a_block_leaves_the_outer_block_its_settings():
    """Training wraps itself in training_heap: inside an outer block it must not switch the
    advice back on, and the merges are those of a training outside any block."""
    from bpe import Tokenizer

    if _huge_page_advice(True) is None:
        pytest.skip("this NumPy has no huge-page switch")
    texts = ["the cat sat on the mat, the rat sat on the cat " * 50, "a rat and a cat and a hat " * 40]
    alone = Tokenizer.train_from_iterator(texts, vocab_size=270, progress=False)
    with training_heap():
        inside = Tokenizer.train_from_iterator(texts, vocab_size=270, progress=False)
        assert _huge_page_advice(False) is False
    assert _huge_page_advice(True) is True
    assert inside.merges == alone.merges

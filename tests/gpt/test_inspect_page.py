"""The `gpt inspect` page: self-contained (no network), its heat-map cells hold the cache's
attention weights, and a real headless Chromium (where installed) opens it without an error."""
import html.parser
import shutil
import subprocess

import numpy as np
import pytest

from autograd import manual_seed
from gpt import GPT, GPTConfig
from gpt.cli import main
from gpt.inspect.page import inspect_page

CFG = GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=2, n_embd=16)
IDS = np.array([[3, 1, 4, 1, 5, 9, 2, 6]])
TOKENS = [f"t{i}<&\"'" for i in IDS[0]]  # characters the page must escape


class Cells(html.parser.HTMLParser):
    """Every heat-map cell: {(head label, q, k): weight}, and the page's script sources."""

    def __init__(self):
        super().__init__()
        self.cells, self.head, self.srcs, self.body = {}, None, [], {}

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "table" and "data-head" in a:
            self.head = a["data-head"]
        if tag == "td" and "data-w" in a:
            self.cells[(self.head, int(a["data-q"]), int(a["data-k"]))] = float(a["data-w"])
        if tag in ("script", "link", "img") and (a.get("src") or a.get("href")):
            self.srcs.append(a.get("src") or a.get("href"))
        if tag == "body":
            self.body = a


def page_and_cache():
    manual_seed(0)
    model = GPT(CFG).eval()
    _, cache = model.run_with_cache(IDS)
    return inspect_page(model, IDS, TOKENS, "test page"), cache


def check_cells(page: str, cache) -> Cells:
    cells = Cells()
    cells.feed(page)
    T = IDS.shape[1]
    assert len(cells.cells) == CFG.n_layer * CFG.n_head * T * T
    for (label, q, k), w in cells.cells.items():
        layer, head = (int(x) for x in label[1:].split("H"))
        assert w == float(cache[f"blocks.{layer}.attn.hook_pattern"][0, head, q, k])
    return cells


def test_page_cells_hold_the_cache_and_nothing_is_fetched():
    page, cache = page_and_cache()
    cells = check_cells(page, cache)
    assert cells.srcs == [] and "http" not in page
    assert "Logit lens" in page and "Direct logit attribution" in page
    assert "t3<&" not in page  # the tokens are escaped


def chromium():
    for name in ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable"):
        if shutil.which(name):
            return shutil.which(name)
    return None


@pytest.mark.skipif(chromium() is None, reason="no chromium binary (Debian: apt-get install chromium)")
def test_headless_chromium_opens_the_page_without_an_error(tmp_path):
    page, cache = page_and_cache()
    path = tmp_path / "page.html"
    path.write_text(page, encoding="utf-8")
    cmd = [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
           f"--user-data-dir={tmp_path / 'profile'}", "--enable-logging=stderr", "--v=0",
           "--virtual-time-budget=2000", "--dump-dom", path.as_uri()]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert ":CONSOLE" not in out.stderr, out.stderr[-2000:]  # Chromium logs every console message so
    cells = check_cells(out.stdout, cache)  # the DOM after the script ran
    assert cells.body.get("data-ready") == "1" and "data-errors" not in cells.body


def test_gpt_inspect_writes_a_page_for_an_hf_folder(tmp_path, capsys):
    pytest.importorskip("safetensors.numpy")
    from tests.gpt.test_pretrained import random_hf_tensors, write_folder

    folder = write_folder(tmp_path / "hf", CFG, random_hf_tensors(CFG, "gpt2"))
    out = tmp_path / "page.html"
    assert main(["inspect", "--hf", str(folder), "--ids", "3,1,4,1,5", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    cells = Cells()
    cells.feed(out.read_text(encoding="utf-8"))
    assert len(cells.cells) == 2 * 2 * 25
    assert main(["inspect", "--hf", str(folder), "--prompt", "hi", "--out", str(out)]) == 2
    assert "no tokenizer" in capsys.readouterr().err
    for ids in ("3,99999999999999999999", f"3,{CFG.vocab_size}", "-1"):
        assert main(["inspect", "--hf", str(folder), f"--ids={ids}", "--out", str(out)]) == 2
        assert "is not a token id of this model" in capsys.readouterr().err

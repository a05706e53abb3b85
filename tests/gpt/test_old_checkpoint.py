"""A run folder written before the gpt package was reorganised (commit a8e482b: a 1-layer RoPE,
RMSNorm, SwiGLU, untied model after 3 steps) loads today and gives the same logits."""
import shutil
from pathlib import Path

import numpy as np

from gpt.cli import main
from gpt.training.checkpoint import load_model

FIXTURE = Path(__file__).parent / "fixtures" / "run_before_redesign"


def test_an_old_checkpoint_gives_the_same_logits():
    model, tok, meta = load_model(FIXTURE / "latest.safetensors")
    x = np.array([tok.encode("the lazy dog")], dtype=np.int64)
    # equal up to float32 rounding: an op's arithmetic may be re-associated for speed (the norms
    # sum their squares with one vecdot since), which moves the last bit of a few logits
    np.testing.assert_allclose(model(x)[0].numpy(), np.load(FIXTURE / "logits.npy"), rtol=1e-6, atol=1e-7)
    assert meta["step"] == 3 and model.config.pos == "rope" and not model.config.tie_weights


def test_an_old_run_folder_samples_through_the_cli(tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(FIXTURE, run)
    assert main(["sample", "--run", str(run), "--prompt", "the ", "--max-new-tokens", "8",
                 "--temperature", "0"]) == 0
    assert capsys.readouterr().out.startswith("the ")

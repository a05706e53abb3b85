"""gpt.inspect on a ViT: the hook points over its encoder layers (every head's pattern against a
NumPy recomputation from the cached stream and the layer's weights; the cache leaves the forward
unchanged) and `gpt inspect --run VIT_RUN --image K` writing the page."""
import numpy as np
import pytest

import autograd
from gpt.cli import main
from gpt.inspect import hook_names, run_with_cache, run_with_hooks
from gpt.vision import data as D
from gpt.vision.model import ViT, ViTConfig

TINY_MODEL = ["--patch", "4", "--d-model", "16", "--nhead", "2", "--layers", "2", "--dim-feedforward", "32"]
TINY_RUN = ["--data", "synthetic", "--batch-size", "16", "--eval-interval", "3", "--log-interval", "2",
            "--warmup", "2"]


def _tiny(norm_first=True):
    autograd.manual_seed(0)
    cfg = ViTConfig(image_size=4, in_channels=2, patch_size=2, n_classes=3, d_model=8, nhead=2, num_layers=2,
                    dim_feedforward=16, norm_first=norm_first)
    return ViT(cfg).double().eval()


def _layer_norm(x, w, b, eps=1e-5):
    xc = x - x.mean(-1, keepdims=True)
    return xc / np.sqrt((xc * xc).mean(-1, keepdims=True) + eps) * w + b


@pytest.mark.parametrize("norm_first", [True, False])
def test_patterns_equal_numpy_from_the_cached_stream_and_the_weights(norm_first):
    model = _tiny(norm_first)
    images = np.random.default_rng(1).random((3, 2, 4, 4))
    logits, cache = run_with_cache(model, images)
    plain, _ = model(images)
    np.testing.assert_allclose(logits, plain.numpy(), rtol=0, atol=1e-12)     # hooks change nothing
    sd = {k: np.asarray(v) for k, v in model.state_dict().items()}
    B, T, C, H = 3, 5, 8, 2
    hs = C // H
    for i in range(2):
        p = f"encoder.layers.{i}."
        x = cache[f"blocks.{i}.hook_resid_pre"]
        assert x.shape == (B, T, C)
        h = _layer_norm(x, sd[p + "norm1.weight"], sd[p + "norm1.bias"]) if norm_first else x
        qkv = h @ sd[p + "self_attn.c_attn.weight"] + sd[p + "self_attn.c_attn.bias"]
        q, k = (qkv[..., j * C:(j + 1) * C].reshape(B, T, H, hs).transpose(0, 2, 1, 3) for j in range(2))
        s = q @ k.transpose(0, 1, 3, 2) / np.sqrt(hs)
        e = np.exp(s - s.max(-1, keepdims=True))
        want = e / e.sum(-1, keepdims=True)                                     # no causal mask
        pattern = cache[f"blocks.{i}.attn.hook_pattern"]
        assert pattern.shape == (B, H, T, T)
        np.testing.assert_allclose(pattern, want, rtol=0, atol=1e-12)
        np.testing.assert_allclose(pattern.sum(-1), 1.0, rtol=0, atol=1e-12)
        assert np.triu(pattern[0, 0], 1).max() > 0                              # later keys are seen
        if i:  # the stream leaving a layer is the one entering the next
            np.testing.assert_array_equal(cache[f"blocks.{i - 1}.hook_resid_post"], x)
    emb = model.embed(images).numpy()
    np.testing.assert_allclose(cache["blocks.0.hook_resid_pre"], emb, rtol=0, atol=1e-12)


def test_names_and_zeroing_the_last_layers_attention_output():
    model = _tiny()
    names = hook_names(model)
    assert names[:5] == ["blocks.0.hook_resid_pre", "blocks.0.hook_attn_out", "blocks.0.hook_resid_mid",
                         "blocks.0.hook_mlp_out", "blocks.0.hook_resid_post"]
    assert "blocks.1.attn.hook_pattern" in names and names[-1] == "ln_final.hook_normalized"
    images = np.random.default_rng(2).random((2, 2, 4, 4))
    _, cache = run_with_cache(model, images, "blocks.1.attn.hook_z")
    assert list(cache) == ["blocks.1.attn.hook_z"]
    _, cache = run_with_cache(model, images, "blocks.1.hook_resid_pre")
    got = {}  # with the attention's output zeroed, the last layer's mid stream is its input
    logits = run_with_hooks(model, images, [("blocks.1.hook_attn_out", lambda a, n: np.zeros_like(a)),
                                            ("blocks.1.hook_resid_mid", lambda a, n: got.setdefault(n, a.copy()))])
    np.testing.assert_array_equal(got["blocks.1.hook_resid_mid"], cache["blocks.1.hook_resid_pre"])
    assert logits.shape == (2, 3)
    with pytest.raises(ValueError, match="unknown hook point 'hook_embed'"):
        run_with_cache(model, images, "hook_embed")
    assert model.encoder.layers[0].hook is None and model.encoder.layers[0].self_attn.hook is None


def test_cli_writes_the_page_of_a_test_image(tmp_path, capsys):
    run, page = str(tmp_path / "vit"), tmp_path / "page.html"
    assert main(["vit", "train", "--out", run, "--steps", "2", *TINY_MODEL, *TINY_RUN]) == 0
    capsys.readouterr()
    assert main(["inspect", "--run", run, "--image", "3", "--out", str(page)]) == 0
    assert "2 layers x 2 heads over 5 tokens" in capsys.readouterr().out
    text = page.read_text()
    assert text.count('<table class="map"') == 4 and 'data-head="L1H1"' in text
    assert '["cls", "p0", "p1", "p2", "p3"]' in text
    assert f"true class {int(D.synthetic(seed=0).test_y[3])}" in text
    assert "Not shown for a ViT" in text
    assert text.count('data-q="0" data-k="4"') == 4                       # the class token sees the last patch
    for bad, message in ((["--image", "400"], "--image 400"), (["--prompt", "hi"], "reads images, not text")):
        assert main(["inspect", "--run", run, *bad, "--out", str(page)]) == 2
        assert message in capsys.readouterr().err

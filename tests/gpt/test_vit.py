"""gpt.vision: the ViT against the same model composed from primitive ops, its image data (the
procedural set; the real digits when scikit-learn is installed), a tiny model learning the
procedural set, exact resume, and `gpt vit train | predict`, `gpt eval`, `gpt plot`, `gpt gradflow`."""
import json
import math

import numpy as np
import pytest

import autograd
from autograd import Tensor
from gpt.cli import main
from gpt.training.progress import ProgressLine
from gpt.training.trainer import TrainingDiverged
from gpt.vision import data as D
from gpt.vision.model import ViT, ViTConfig
from gpt.vision.train import VitSettings, evaluate, load_vit, train_vit

QUIET = ProgressLine(enabled=False)
TINY_MODEL = ["--patch", "4", "--d-model", "16", "--nhead", "2", "--layers", "1", "--dim-feedforward", "32"]
TINY_RUN = ["--data", "synthetic", "--batch-size", "16", "--eval-interval", "3", "--log-interval", "2",
            "--warmup", "2"]


@pytest.fixture(autouse=True)
def _seed():
    autograd.manual_seed(0)


# ---- the model against the same model composed from primitive ops ----------------------------
def _linear(x, sd, name):
    return x @ Tensor(sd[name + ".weight"]) + Tensor(sd[name + ".bias"])


def _norm(x, sd, name):
    xc = x - x.mean(axis=-1, keepdims=True)
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc / (var + 1e-5).sqrt() * Tensor(sd[name + ".weight"]) + Tensor(sd[name + ".bias"])


def _attention(x, sd, p, H):
    B, T, C = x.shape
    hs = C // H
    q, k, v = (_linear(x, sd, p + "c_attn")[:, :, i * C:(i + 1) * C].reshape(B, T, H, hs).transpose(1, 2)
               for i in range(3))                                                  # (B, H, T, hs)
    s = q @ k.transpose(2, 3) * (1.0 / math.sqrt(hs))                             # (B, H, T, T)
    e = (s - s.max(axis=-1, keepdims=True)).exp()
    y = (e / e.sum(axis=-1, keepdims=True)) @ v                                   # (B, H, T, hs)
    return _linear(y.transpose(1, 2).reshape(B, T, C), sd, p + "c_proj")


def _gelu_tanh(x):
    return x * 0.5 * (1.0 + ((x + x * x * x * 0.044715) * math.sqrt(2.0 / math.pi)).tanh())


def test_outputs_equal_the_same_model_composed_from_primitive_ops():
    """The ViT (fused linear, layer_norm and attention ops, nn.TransformerEncoder) against its
    definition written with matmul, +, *, /, exp, max, sum, mean, sqrt, tanh, reshape, transpose,
    indexing and concat, on random weights (norm gains and biases too), in float64."""
    cfg = ViTConfig(image_size=4, in_channels=2, patch_size=2, n_classes=3, d_model=8, nhead=2,
                    num_layers=2, dim_feedforward=12)
    model = ViT(cfg).double().eval()
    rng = np.random.default_rng(3)
    for name, p in model.named_parameters():
        p.data[...] = rng.standard_normal(p.shape) * 0.3 + (name.endswith("norm1.weight") or
                                                            name.endswith("norm2.weight"))
    sd = model.state_dict()
    images = rng.standard_normal((3, 2, 4, 4))
    got = model(images)[0].data

    x = Tensor(images)
    rows = [x[:, :, i:i + 2, j:j + 2].reshape(3, 1, 8) for i in (0, 2) for j in (0, 2)]   # (B, 1, C*P*P)
    h = _linear(autograd.concat(rows, axis=1), sd, "patch_embed.proj")                    # (B, N, D)
    cls = Tensor(np.broadcast_to(sd["cls_token"], (3, 1, 8)).copy())
    h = autograd.concat([cls, h], axis=1) + Tensor(sd["pos_embed.weight"])                # (B, 1 + N, D)
    for i in range(cfg.num_layers):
        p = f"encoder.layers.{i}."
        h = h + _attention(_norm(h, sd, p + "norm1"), sd, p + "self_attn.", cfg.nhead)
        h = h + _linear(_gelu_tanh(_linear(_norm(h, sd, p + "norm2"), sd, p + "linear1")), sd, p + "linear2")
    want = _linear(_norm(h, sd, "encoder.norm")[:, 0, :], sd, "head").data
    assert got.shape == (3, 3)
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


def test_label_smoothing_is_the_mix_of_cross_entropy_and_the_uniform_target():
    model = ViT(ViTConfig(d_model=16, nhead=2, num_layers=1)).double()
    images = D.synthetic(seed=1)
    x, y = images.train_x[:8].astype(np.float64), images.train_y[:8]
    logits, smooth = model(x, y, label_smoothing=0.2)
    lp = logits.data - np.log(np.exp(logits.data).sum(-1, keepdims=True))
    want = 0.8 * -lp[np.arange(8), y].mean() + 0.2 * -lp.mean()
    assert smooth.item() == pytest.approx(want, rel=1e-12)


def test_model_refuses_images_of_another_shape_and_bad_configs():
    model = ViT(ViTConfig())
    with pytest.raises(ValueError, match=r"expected images \(B, 1, 8, 8\), got \(2, 1, 6, 6\)"):
        model(np.zeros((2, 1, 6, 6), np.float32))
    with pytest.raises(ValueError, match="dtype <U1"):
        model(np.array([[["a"]]]))
    with pytest.raises(ValueError, match="must divide image_size=8"):
        ViTConfig(patch_size=3)
    with pytest.raises(ValueError, match="integer labels"):
        model(np.zeros((2, 1, 8, 8), np.float32), np.array([0.5, 1.0]))


# ---- data ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, message", [
    ("not images", "expected an array of images"),
    (np.zeros((4, 8)), "expected images of shape (N, C, H, W)"),
    (np.zeros((2, 1, 0, 8)), "no empty axis"),
    (np.array([[[1, None]]], dtype=object), "dtype object"),
    (np.full((1, 1, 2, 2), np.nan), "NaN or infinite"),
])
def test_data_path_refuses_what_is_not_an_image_array(bad, message):
    with pytest.raises(ValueError) as exc:
        D.check_images(bad)
    assert message in str(exc.value)


def test_split_is_stratified_seeded_and_disjoint():
    a, b, c = D.synthetic(seed=0), D.synthetic(seed=0), D.synthetic(seed=1)
    np.testing.assert_array_equal(a.test_x, b.test_x)
    assert not np.array_equal(a.test_x, c.test_x)
    assert len(a.test_y) == 400 and (np.bincount(a.test_y) == 40).all() and (np.bincount(a.train_y) == 160).all()
    assert a.train_x.dtype == np.float32 and a.image_shape == (1, 8, 8) and 0 <= a.train_x.min() <= a.train_x.max() <= 1
    assert not (a.train_x[:, None] == a.test_x[None]).all(axis=(2, 3, 4)).any()  # no test image is trained on


def test_a_split_that_holds_no_image_out_is_refused_and_evaluate_refuses_no_images():
    with pytest.raises(ValueError, match="5 images over 10 classes leave the test split empty"):
        D.ImageSet.split("five", np.zeros((5, 8, 8)), np.arange(5), 10, seed=0)
    with pytest.raises(ValueError, match="no images to evaluate"):
        evaluate(ViT(ViTConfig()), np.zeros((0, 1, 8, 8), np.float32), np.zeros(0, np.int64))


def test_real_digits_load_with_a_stratified_80_20_split():
    pytest.importorskip("sklearn", reason="the digits come with scikit-learn (the vision extra)")
    d = D.load_images("digits", seed=0)
    assert (len(d.train_y), len(d.test_y), d.image_shape, d.n_classes) == (1438, 359, (1, 8, 8), 10)
    assert set(np.bincount(d.test_y)) <= {35, 36, 37}


def test_digits_without_scikit_learn_say_how_to_get_it(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "sklearn.datasets", None)  # import fails as if absent
    with pytest.raises(ValueError, match=r"vision.*--data synthetic"):
        D.load_images("digits")


def test_shift_moves_each_image_by_its_own_pixels_with_zeros_coming_in():
    x = np.arange(2 * 9, dtype=np.float32).reshape(2, 1, 3, 3) + 1
    out = D.shift_images(x, np.array([1, 0]), np.array([0, -1]))
    np.testing.assert_array_equal(out[0, 0], [[0, 0, 0], [1, 2, 3], [4, 5, 6]])          # down one
    np.testing.assert_array_equal(out[1, 0], [[11, 12, 0], [14, 15, 0], [17, 18, 0]])    # left one


def test_batches_resume_from_their_state_and_cover_an_epoch_once():
    images = D.synthetic(seed=0)
    a = D.ImageBatches(images.train_x, images.train_y, 100, seed=3, shift=True)
    first = [a.next_batch() for _ in range(16)]
    assert sorted(np.concatenate([y for _, y in first]).tolist()) == sorted(images.train_y.tolist())
    state = a.state_dict()
    b = D.ImageBatches(images.train_x, images.train_y, 100, seed=3, shift=True)
    b.load_state_dict(json.loads(json.dumps(state)))
    for (xa, ya), (xb, yb) in zip([a.next_batch() for _ in range(3)], [b.next_batch() for _ in range(3)]):
        np.testing.assert_array_equal(xa, xb)
        np.testing.assert_array_equal(ya, yb)


# ---- training -----------------------------------------------------------------------------------
def test_tiny_vit_learns_the_procedural_digits(tmp_path):
    cfg = ViTConfig(patch_size=4, d_model=32, nhead=2, num_layers=1, dim_feedforward=64)
    s = VitSettings(data="synthetic", steps=1200, batch_size=32, lr=3e-3, warmup=20, eval_interval=1000,
                    log_interval=1000)
    summary = train_vit(tmp_path / "run", cfg, s, progress=QUIET)
    assert summary["test_accuracy"] >= 0.90
    model, meta = load_vit(tmp_path / "run")
    images = D.synthetic(seed=0)
    assert evaluate(model, images.test_x, images.test_y)["accuracy"] == summary["test_accuracy"]
    assert meta["step"] == 1200 and meta["kind"] == "vit"


def test_resume_gives_the_weights_of_the_uninterrupted_run(tmp_path):
    cfg = ViTConfig(patch_size=4, d_model=16, nhead=2, num_layers=1, dim_feedforward=32, dropout=0.1)
    s = dict(data="synthetic", batch_size=16, warmup=2, eval_interval=3, log_interval=2)
    train_vit(tmp_path / "straight", cfg, VitSettings(steps=8, **s), progress=QUIET)
    train_vit(tmp_path / "split", cfg, VitSettings(steps=5, lr_decay_steps=8, **s), progress=QUIET)
    with pytest.raises(FileExistsError, match="--resume"):
        train_vit(tmp_path / "split", cfg, VitSettings(steps=5, **s), progress=QUIET)
    train_vit(None, None, VitSettings(steps=8), resume=tmp_path / "split", explicit={"steps"}, progress=QUIET)
    a, _ = load_vit(tmp_path / "straight")
    b, meta = load_vit(tmp_path / "split")
    assert meta["step"] == 8
    for (name, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
        np.testing.assert_array_equal(x, y, err_msg=name)

    def records(run):
        lines = (tmp_path / run / "metrics.jsonl").read_text().splitlines()
        return {(r["kind"], r["step"]): r.get("loss", r.get("val_loss")) for r in map(json.loads, lines)}

    straight, split = records("straight"), records("split")
    assert set(straight) == {("train", 2), ("train", 4), ("train", 6), ("train", 8), ("eval", 3), ("eval", 6),
                             ("eval", 8)}
    assert {k: split[k] for k in straight} == straight


@pytest.mark.parametrize("eval_interval, kept", [(1000, "no checkpoint was saved yet"),
                                                 (2, "the checkpoint of step 2 is kept")])
def test_a_diverged_run_names_a_kept_checkpoint_only_when_there_is_one(eval_interval, kept, tmp_path, monkeypatch):
    import nn

    real, calls = nn.optim.clip_grad_norm, []

    def nan_from_step_2(params, max_norm):
        calls.append(max_norm)
        return real(params, max_norm) if len(calls) <= 2 else float("nan")

    monkeypatch.setattr(nn.optim, "clip_grad_norm", nan_from_step_2)
    cfg = ViTConfig(patch_size=4, d_model=16, nhead=2, num_layers=1, dim_feedforward=32)
    s = VitSettings(data="synthetic", steps=4, batch_size=16, eval_interval=eval_interval)
    with pytest.raises(TrainingDiverged) as exc:
        train_vit(tmp_path / "run", cfg, s, progress=QUIET)
    assert "at step 2; " + kept in str(exc.value)
    assert (tmp_path / "run" / "latest.safetensors").exists() == (eval_interval == 2)


# ---- the command line ---------------------------------------------------------------------------
def test_cli_train_resume_predict_eval_and_plot(tmp_path, capsys):
    run = str(tmp_path / "vit")
    assert main(["vit", "train", "--out", run, "--steps", "4", *TINY_MODEL, *TINY_RUN]) == 0
    out = capsys.readouterr().out
    assert "test accuracy" in out and f"gpt vit predict --run {run}" in out
    assert main(["vit", "train", "--resume", run, "--steps", "6"]) == 0
    assert "resuming at step 4" in capsys.readouterr().out
    assert json.loads((tmp_path / "vit" / "summary.json").read_text())["steps"] == 6

    assert main(["vit", "train", "--resume", run, "--data", "digits"]) == 2
    assert main(["vit", "train", "--resume", run, "--d-model", "32"]) == 2
    err = capsys.readouterr().err
    assert "cannot change on resume: --data 'digits'" in err and "--d-model 32 (the run's model has 16)" in err

    assert main(["vit", "predict", "--run", run, "--show", "3", "--png", str(tmp_path / "grid.jpg")]) == 2
    assert "--png '" in capsys.readouterr().err  # refused by its flag, before the evaluation
    assert main(["vit", "predict", "--run", run, "--show", "3", "--png", str(tmp_path / "grid.png")]) == 0
    out = capsys.readouterr().out
    assert "true->predicted" in out and "true\\pred" in out and out.count("\n") > 20
    assert main(["eval", "--run", run, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["split"] == "test" and result["images"] == 400 and 0 <= result["accuracy"] <= 1
    assert main(["plot", run, "--x", "tokens", "--out", str(tmp_path / "curves.png")]) == 0
    assert main(["sample", "--run", run]) == 2  # a text command on an image classifier: one line
    assert "holds a ViT (an image classifier): use gpt vit predict" in capsys.readouterr().err


def test_a_huge_whole_number_setting_is_refused_by_its_flag_not_a_float_overflow():
    with pytest.raises(ValueError, match="--seed"):
        VitSettings(seed=-10**400).validate()
    VitSettings(seed=10**400).validate()  # a whole number: no float conversion to overflow


def test_cli_errors_are_one_clear_line(tmp_path, capsys):
    assert main(["vit", "train", "--out", str(tmp_path / "a"), "--patch", "3", "--data", "synthetic"]) == 2
    assert "patch_size=3 must divide image_size=8" in capsys.readouterr().err
    assert not (tmp_path / "a").exists()  # a run that could not start leaves no folder
    assert main(["vit", "predict", "--run", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_gradflow_measures_the_vit_encoder(capsys):
    assert main(["gradflow", "--family", "vit", "--variants", "pre,post", "--depths", "2", "--seeds", "1",
                 "--n-embd", "16", "--n-head", "2", "--jacobian-depth", "2", "--quiet"]) == 0
    out = capsys.readouterr().out
    rows = [line for line in out.splitlines() if line.startswith(("pre-layernorm", "post-layernorm"))]
    assert len(rows) == 2 and all(" encoder " in r for r in rows)
    assert "Jacobian spectra" in out and "procedural digit images" in out


@pytest.mark.parametrize("argv, message", [
    (["--seed", "-1"], "--seed must be a whole number >= 0, got -1"),
    (["--weight-decay", "nan"], "--weight-decay must be >= 0 and finite, got nan"),
    (["--lr", "inf"], "--lr must be > 0 and finite, got inf"),
    (["--lr-decay-steps", "0"], "--lr-decay-steps must be a whole number >= 1, got 0"),
    (["--max-minutes", "-1"], "--max-minutes must be > 0 and finite, got -1.0"),
    (["--max-minutes", "nan"], "--max-minutes must be > 0 and finite, got nan"),
    (["--grad-clip", "0"], "--grad-clip must be > 0 and finite, got 0.0"),
    (["--grad-clip", "-1"], "--grad-clip must be > 0 and finite, got -1.0"),
    (["--grad-clip", "nan"], "--grad-clip must be > 0 and finite, got nan")])
def test_bad_vit_settings_name_the_flag(argv, message, tmp_path, capsys):
    assert main(["vit", "train", "--data", "synthetic", "--steps", "1", "--out", str(tmp_path / "v"), *argv]) == 2
    assert message in capsys.readouterr().err and not (tmp_path / "v").exists()


@pytest.mark.parametrize("value", ["nan", "2.5"])
def test_lr_decay_steps_is_a_whole_number_of_steps(value, tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["vit", "train", "--out", str(tmp_path / "v"), "--steps", "1", *TINY_MODEL, *TINY_RUN,
              "--lr-decay-steps", value])
    assert f"--lr-decay-steps: invalid int value: '{value}'" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--lr-decay-steps must be a whole number >= 1"):
        VitSettings(lr_decay_steps=float(value)).validate()
    VitSettings(lr_decay_steps=8.0).validate()  # as runs before this check saved it: still resumable


def test_a_run_out_of_minutes_says_how_to_continue_it(tmp_path, capsys):
    run = str(tmp_path / "v")
    assert main(["vit", "train", "--out", run, "--steps", "4", "--max-minutes", "1e-9", *TINY_MODEL, *TINY_RUN]) == 0
    out = capsys.readouterr().out
    assert "0 steps" in out and "(time_budget)" in out and f"continue with: gpt vit train --resume {run}\n" in out

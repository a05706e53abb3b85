"""The `gpt` command line: help, prepare -> train -> resume, config files, clear errors."""
import json
import shutil
import subprocess
import sys

import pytest

from gpt.cli import COMMANDS, build_parser, main
from gpt.training.config import TrainConfig, load_config_file, resolve

TINY = ["--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "16", "--batch-size", "4",
        "--eval-interval", "4", "--eval-batches", "1", "--peak-flops", "1e9", "--sample-tokens", "8",
        "--samples", "1"]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    (root / "a.txt").write_text("the quick brown fox jumps over the lazy dog.\n" * 60)
    return root


def test_help_of_every_command(capsys):
    for argv in (["--help"], ["train", "--help"], ["prepare", "--help"]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--max-steps" in out and "--resume" in out and "--config" in out and "--vocab-size" in out
    assert set(COMMANDS) >= {"prepare", "train"}
    assert main([]) == 2  # no command: the overview, not a traceback


def test_console_script_is_installed():
    exe = shutil.which("gpt")
    if exe is None:
        pytest.skip("the `gpt` console script is not on PATH (package not installed)")
    res = subprocess.run([exe, "train", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "--data" in res.stdout


def test_prepare_train_resume(corpus, tmp_path, capsys):
    d, run = tmp_path / "d", tmp_path / "run"
    assert main(["prepare", "--input", str(corpus / "a.txt"), "--char", "--out", str(d), "--workers", "1"]) == 0
    assert {"train.bin", "val.bin", "meta.json", "tokenizer.json"} <= {p.name for p in d.iterdir()}
    assert main(["train", "--data", str(d), "--out", str(run), "--max-steps", "4", *TINY]) == 0
    out = capsys.readouterr().out
    assert "step      4  eval" in out and "sample 1" in out and "done: 4 steps" in out
    assert main(["train", "--resume", str(run), "--max-steps", "6"]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["steps"] == 6
    saved = json.loads((run / "config.json").read_text())
    assert saved["train"]["n_embd"] == 16 and saved["train"]["max_steps"] == 6


def test_train_on_input_files_trains_a_tokenizer_in_the_run(corpus, tmp_path):
    run = tmp_path / "run"
    code = main(["train", "--input", str(corpus / "a.txt"), "--vocab-size", "280", "--out", str(run),
                 "--max-steps", "2", "--workers", "1", *TINY])
    assert code == 0
    meta = json.loads((run / "data" / "meta.json").read_text())
    assert meta["vocab_size"] == 280 and (run / "tokenizer.json").is_file()


def test_config_file_with_flags_winning(tmp_path):
    cfg_file = tmp_path / "c.toml"
    cfg_file.write_text('max_steps = 7\n[model]\nn-layer = 3\nn_embd = 48\n[optim]\nlr = 0.01\n')
    args = build_parser().parse_args(["train", "--config", str(cfg_file), "--lr", "0.5"])
    cfg, explicit = resolve({k: v for k, v in vars(args).items() if k not in ("func", "command")})
    assert (cfg.max_steps, cfg.n_layer, cfg.n_embd, cfg.lr) == (7, 3, 48, 0.5)
    assert cfg.batch_size == TrainConfig().batch_size and {"max_steps", "lr"} <= explicit
    (tmp_path / "c.json").write_text(json.dumps({"max-steps": 9, "dropout": 0.1}))
    assert load_config_file(str(tmp_path / "c.json")) == {"max_steps": 9, "dropout": 0.1}


@pytest.mark.parametrize("name,text,message", [
    ("typo.json", '{"max_step": 5, "n_embd": 32}', r"unknown setting 'max_step' \(did you mean 'max_steps'\?\)"),
    ("typo.toml", "lrr = 0.1\nbogus = 1\n", r"unknown settings 'lrr' \(did you mean 'lr'\?\), 'bogus'"),
    ("type.toml", 'n_layer = "four"\n', r"n_layer = 'four' should be int"),
    ("bad.toml", "max_steps = = 3\n", r"invalid TOML"),
    ("bad.json", "{", r"invalid JSON"),
])
def test_config_file_mistakes_are_named(tmp_path, capsys, name, text, message):
    (tmp_path / name).write_text(text)
    assert main(["train", "--config", str(tmp_path / name)]) == 2
    err = capsys.readouterr().err
    assert name in err and len(err.strip().splitlines()) == 1
    import re

    assert re.search(message, err), err


def test_user_errors_are_one_line_without_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a run without --out would go to ./runs/
    cases = [
        (["train", "--data", str(tmp_path / "nowhere")], "data folder .*nowhere.* does not exist"),
        (["train", "--resume", str(tmp_path / "no.safetensors")], "no.safetensors.* does not exist"),
        (["train", "--n-embd", "30", "--n-head", "4", "--data", str(tmp_path)], "n_embd=30 must be divisible by n_head=4"),
        (["prepare", "--input", str(tmp_path / "missing.txt"), "--out", str(tmp_path / "o")], "missing.txt"),
        (["train", "--config", str(tmp_path / "none.toml")], "config file .*none.toml.* does not exist"),
    ]
    (tmp_path / "corrupt.safetensors").write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json header")
    cases.append((["train", "--resume", str(tmp_path / "corrupt.safetensors")], "corrupt.safetensors"))
    import re

    for argv, pattern in cases:
        assert main(argv) == 2, argv
        err = capsys.readouterr().err
        assert "Traceback" not in err and re.search(pattern, err), (argv, err)
    # A run that could not start leaves no run folder behind.
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_invalid_flag_value_is_argparse_usage_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["train", "--pos", "absolute"])
    assert exc.value.code == 2 and "invalid choice: 'absolute'" in capsys.readouterr().err


def test_python_dash_m_entry_point():
    res = subprocess.run([sys.executable, "-m", "gpt.cli", "--help"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "train" in res.stdout


def test_ctrl_c_stops_after_the_step_and_saves(corpus, tmp_path):
    import os
    import signal
    import time

    d, run = tmp_path / "d", tmp_path / "run"
    assert main(["prepare", "--input", str(corpus / "a.txt"), "--char", "--out", str(d), "--workers", "1"]) == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpt.cli", "train", "--data", str(d), "--out", str(run), "--max-steps", "100000",
         "--log-interval", "1", *TINY], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 300  # generous: a busy machine can take long to import
        m = run / "metrics.jsonl"
        while time.time() < deadline and proc.poll() is None:
            if m.is_file() and '"kind": "train"' in m.read_text():
                break
            time.sleep(0.1)
        assert m.is_file() and '"kind": "train"' in m.read_text(), "training never started"
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert "Ctrl-C" in out and "--resume" in out
    summary = json.loads((run / "summary.json").read_text())
    assert summary["stop_reason"] == "interrupted" and summary["steps"] >= 1
    from gpt.training.checkpoint import load_checkpoint

    assert load_checkpoint(run / "latest.safetensors").step == summary["steps"]


def test_warnings_print_the_message_alone(tmp_path, capsys, monkeypatch):
    import warnings

    import gpt.commands.plot as plot

    def warns(args):
        warnings.warn("something to know")
        return 0

    monkeypatch.setattr(plot, "run", warns)
    assert main(["plot", str(tmp_path)]) == 0
    assert capsys.readouterr().err == "gpt plot: warning: something to know\n"


@pytest.mark.parametrize("argv, flag", [
    (["export", "--run", "r", "--hf", ""], "--hf"),
    (["export", "--run", "r", "--gguf", ""], "--gguf"),
    (["import", "--hf", "", "--out", "x"], "--hf"),
    (["prepare", "--input", "x", "--out", ""], "--out"),
    (["sample", "--run", ""], "--run"),
])
def test_an_empty_path_is_refused_naming_its_flag(argv, flag, capsys):
    with pytest.raises(SystemExit) as e:
        main(argv)
    assert e.value.code == 2 and f"argument {flag}: an empty path" in capsys.readouterr().err

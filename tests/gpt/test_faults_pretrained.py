"""Hugging Face folders and GGUF files under kills, concurrent exporters and hostile inputs: an
export is the old complete output or the new one, never a mix; a config.json or weight file
that lies about its sizes or types is refused at once, in bounded memory, in one line naming
the field; whatever `gpt import` accepts, `gpt sample` runs."""
import json
import math
import re
import signal
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from autograd import manual_seed
from bpe import Tokenizer
from gpt import GPT, GPTConfig
from gpt.cli import main as gpt_main
from gpt.data.char_tokenizer import CharTokenizer
from bpe.files.lock import FolderBusy
from gpt.pretrained import UnsupportedModel, from_pretrained, save_gguf, save_pretrained
from gpt.pretrained.folder import load, weight_shapes
from gpt.training.checkpoint import LATEST
from gpt.training.run_folder import RunFolder
from nn.checkpoint import load_safetensors, save_safetensors

PY = sys.executable
V, T = 300, 16
LLAMA = GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, pos="rope",
                  norm="rmsnorm", mlp="swiglu", mlp_hidden=48, bias=False, tie_weights=False)
GPT2 = GPTConfig(vocab_size=V, block_size=T, n_layer=2, n_head=4, n_embd=32)

# A child that exports `cfg` into `dir` and SIGKILLs (or SIGSTOPs) itself at a named step of the swap.
EXPORT_AND_DIE = """
import json, os, signal, sys
from autograd import manual_seed
from gpt import GPT, GPTConfig
from gpt.pretrained import output, save_pretrained
target, point, sig, cfg = sys.argv[1], sys.argv[2], getattr(signal, sys.argv[3]), json.loads(sys.argv[4])
def reached(p):
    if p == point:
        print("at", p, flush=True)
        os.kill(os.getpid(), sig)
output._reached = reached
manual_seed(1)
save_pretrained(GPT(GPTConfig.from_dict(cfg)), target)
"""


@pytest.fixture(scope="module")
def bpe():
    text = "the cat sat on the mat and the dog ran far away home " * 40
    return Tokenizer.train_from_iterator([text], vocab_size=280, special_tokens=["<|endoftext|>"])


def _export_in_child(target, point, cfg, sig="SIGKILL"):
    p = subprocess.Popen([PY, "-c", EXPORT_AND_DIE, str(target), point, sig, json.dumps(cfg.to_dict())],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == f"at {point}", p.stderr.read()
    return p


def _layers(folder):
    """(config.json's layer count, the layers the weights hold, whether tokenizer.json is there)."""
    hf = json.loads((folder / "config.json").read_text())
    held = {n.split(".")[2] for n in weight_shapes(folder) if n.startswith("model.layers.")}
    return hf["num_hidden_layers"], len(held), (folder / "tokenizer.json").exists()


def _beside(target):
    return sorted(p.name for p in target.parent.iterdir() if p.name != target.name)


# ---- an export is written as a unit -------------------------------------------------------------
@pytest.mark.parametrize("point, after_kill", [("built", (2, 2, True)), ("aside", None), ("swapped", (1, 1, False))])
def test_an_export_killed_at_each_step_leaves_the_old_or_the_new_folder(tmp_path, bpe, point, after_kill):
    target = tmp_path / "hf"
    save_pretrained(GPT(LLAMA), target, tokenizer=bpe)          # the old export: 2 layers and a tokenizer
    p = _export_in_child(target, point, LLAMA.replace(n_layer=1))  # the new one: 1 layer, no tokenizer
    p.wait()
    assert p.returncode == -signal.SIGKILL
    if after_kill is None:  # killed between the two renames: a reader puts the old folder back
        assert not target.exists()
        assert from_pretrained(target).config == LLAMA
        after_kill = (2, 2, True)
    assert _layers(target) == after_kill
    save_pretrained(GPT(LLAMA.replace(n_layer=3)), target)  # the next export cleans up and succeeds
    assert _layers(target) == (3, 3, False)
    assert _beside(target) == [".hf.lock"]  # no temp or old folder of the killed export is left


def test_temp_files_of_killed_exports_do_not_accumulate(tmp_path):
    target, gguf = tmp_path / "hf", tmp_path / "m.gguf"
    (tmp_path / ".hf.tmp-4194301").mkdir()
    (tmp_path / ".hf.tmp-4194301" / ".model.safetensors.0123456789ab.tmp").write_bytes(b"\0" * (1 << 20))
    (tmp_path / ".m.gguf.0123456789ab.tmp").write_bytes(b"\0" * (1 << 20))
    (tmp_path / ".hf.tmp-5.keep").mkdir()  # another target's name that merely starts alike
    save_pretrained(GPT(LLAMA), target)
    save_gguf(GPT(LLAMA), gguf)
    assert _beside(target) == [".hf.lock", ".hf.tmp-5.keep", ".m.gguf.lock", "m.gguf"]


def test_a_second_exporter_into_one_folder_is_refused_naming_the_first(tmp_path):
    target = tmp_path / "hf"
    save_pretrained(GPT(LLAMA), target)
    p = _export_in_child(target, "built", LLAMA.replace(n_layer=1), sig="SIGSTOP")  # holds the lock, stopped
    try:
        with pytest.raises(FolderBusy, match=rf"export folder .*hf' is in use by process {p.pid}"):
            save_pretrained(GPT(LLAMA.replace(n_layer=3)), target)
        assert _layers(target) == (2, 2, False)  # the refused exporter changed nothing
    finally:
        p.send_signal(signal.SIGCONT)
        assert p.wait(timeout=60) == 0
    assert _layers(target) == (1, 1, False)


def test_two_exports_started_together_never_mix(tmp_path):
    script = ("import sys; from gpt.cli import main; sys.exit(main(['export', '--run', sys.argv[1], "
              "'--hf', sys.argv[2]]))")
    runs = [_run(tmp_path / f"r{n}", LLAMA.replace(n_layer=n)) for n in (1, 3)]
    for round_ in range(3):
        target = tmp_path / f"same{round_}"
        procs = [subprocess.Popen([PY, "-c", script, str(r), str(target)], stderr=subprocess.PIPE, text=True)
                 for r in runs]
        codes = [(p.wait(timeout=120), p.stderr.read()) for p in procs]
        assert 0 in [c for c, _ in codes]
        for c, err in codes:
            assert c == 0 or (c == 2 and "is in use by process" in err), err
        n, held, _ = _layers(target)
        assert n == held  # one writer's config beside that writer's weights


def test_gguf_exports_are_locked_and_refuse_to_replace_other_files(tmp_path):
    gguf = tmp_path / "m.gguf"
    code = (f"import time; from pathlib import Path; from gpt.pretrained.output import _lock; "
            f"_lock(Path({str(gguf)!r}), 'export file').acquire(); print('held', flush=True); time.sleep(60)")
    holder = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(FolderBusy, match=rf"m.gguf' is in use by process {holder.pid}"):
            save_gguf(GPT(LLAMA), gguf)
    finally:
        holder.kill()
        holder.wait()
    save_gguf(GPT(LLAMA), gguf)  # the killed holder's lock is stale
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(FileExistsError, match="not a GGUF file"):
        save_gguf(GPT(LLAMA), notes)
    assert notes.read_text() == "mine"


def test_a_folder_that_is_not_an_export_is_never_replaced(tmp_path):
    target = tmp_path / "mine"
    target.mkdir()
    (target / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="holds 'notes.txt', which an export does not write"):
        save_pretrained(GPT(LLAMA), target)
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt"]


def _run(path, cfg, tokenizer_text=None):
    """A run folder of a fresh `cfg` model (step 0) holding `tokenizer_text`."""
    manual_seed(0)
    folder = RunFolder(path).open()
    try:
        meta = {"step": 0, "config": cfg.to_dict(), "tokenizer": tokenizer_text, "vocab_size": cfg.vocab_size,
                "data_dir": None}
        folder.write_config({"model": cfg.to_dict()})
        folder.save_checkpoint(LATEST, GPT(cfg).state_dict(), None, meta)
    finally:
        folder.close()
    return path


def test_a_char_level_export_over_a_bpe_one_leaves_no_tokenizer_json(tmp_path, bpe, capsys):
    bpe.save(tmp_path / "tok.json")
    chars = json.dumps(CharTokenizer(list("abc def"), ["<|endoftext|>"]).to_dict())
    _run(tmp_path / "bpe_run", GPT2, (tmp_path / "tok.json").read_text())
    _run(tmp_path / "char_run", GPT2, chars)
    assert gpt_main(["export", "--run", str(tmp_path / "bpe_run"), "--hf", str(tmp_path / "hf")]) == 0
    assert "config.json, model.safetensors, tokenizer.json, tokenizer_config.json" in capsys.readouterr().out
    assert gpt_main(["export", "--run", str(tmp_path / "char_run"), "--hf", str(tmp_path / "hf")]) == 0
    assert capsys.readouterr().out.strip().endswith("(config.json, model.safetensors)")
    assert sorted(p.name for p in (tmp_path / "hf").iterdir()) == ["config.json", "model.safetensors"]


# ---- sizes a config.json claims are checked against the weights' headers ---------------------
def _hf(tmp_path, cfg=LLAMA, tokenizer=None, **changes):
    """A folder of `cfg`, then config.json's fields changed (None removes one)."""
    folder = tmp_path / "hf"
    if not folder.exists():
        manual_seed(0)
        save_pretrained(GPT(cfg), folder, tokenizer=tokenizer)
    hf = json.loads((folder / "config.json").read_text())
    hf.update(changes)
    (folder / "config.json").write_text(json.dumps({k: v for k, v in hf.items() if v is not None}))
    return folder


HUGE = [
    (LLAMA, dict(num_hidden_layers=1_000_000), r"field 'num_hidden_layers' is 1,000,000 but the weights hold 2 "
                                               r"complete layer\(s\) \(no tensor 'model.layers.2.input_layernorm"),
    (LLAMA, dict(vocab_size=10 ** 9), r"field 'vocab_size' is 1,000,000,000 but tensor 'model.embed_tokens.weight' "
                                      r"has shape \[300, 32\]"),
    (LLAMA, dict(hidden_size=1 << 20, head_dim=None), r"field 'hidden_size' is 1,048,576 but tensor "
                                                      r"'model.embed_tokens.weight'"),
    (LLAMA, dict(intermediate_size=10 ** 9), r"config.json's sizes \(.*intermediate_size=1000000000\) describe"),
    (LLAMA, dict(max_position_embeddings=10 ** 9), r"field 'max_position_embeddings' is 1,000,000,000: its rotary"),
    (GPT2, dict(n_positions=10 ** 9), r"field 'n_positions' is 1,000,000,000 but tensor 'transformer.wpe.weight'"),
    (GPT2, dict(n_layer=10 ** 6), r"field 'n_layer' is 1,000,000 but the weights hold 2"),
    (GPT2, dict(n_inner=10 ** 8), r"n_inner=100000000\) describe"),
]


@pytest.mark.parametrize("cfg, changes, message", HUGE)
def test_a_tiny_config_claiming_a_huge_model_is_refused_at_once_in_bounded_memory(tmp_path, cfg, changes, message):
    folder = _hf(tmp_path, cfg, **changes)
    files = sum(p.stat().st_size for p in folder.iterdir())
    tracemalloc.start()
    try:
        with pytest.raises(UnsupportedModel, match=message):
            load(folder)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * files, (peak, files)


def test_a_tokenizer_with_more_ids_than_the_model_is_refused(tmp_path, bpe, capsys):
    folder = _hf(tmp_path, LLAMA.replace(vocab_size=260), tokenizer=None)
    bpe.save_huggingface(folder / "tokenizer.json")
    assert gpt_main(["import", "--hf", str(folder), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "tokenizer.json: the tokenizer has ids up to 279" in err and "model's vocab_size is 260" in err
    assert not (tmp_path / "run").exists()


# ---- types: one line naming the field, through the command -----------------------------------
TYPES = [
    (dict(num_attention_heads=0), "field 'num_attention_heads' is 0, expected a positive int"),
    (dict(num_attention_heads="2"), "field 'num_attention_heads' is '2', expected a positive int"),
    (dict(num_hidden_layers=2.0), "field 'num_hidden_layers' is 2.0, expected a positive int"),
    (dict(rms_norm_eps=[1]), "field 'rms_norm_eps' is [1], expected a finite number > 0"),
    (dict(rms_norm_eps=math.nan), "field 'rms_norm_eps' is nan, expected a finite number > 0"),
    (dict(rope_theta=math.inf), "field 'rope_theta' is inf, expected a finite number > 0"),
    (dict(rope_parameters="default"), "field 'rope_parameters' is 'default', expected an object or null"),
    (dict(rope_parameters={"rope_theta": "x"}), "field 'rope_parameters.rope_theta' is 'x', expected a finite"),
    (dict(architectures=5), "field 'architectures' is 5, expected a list of strings or null"),
    (dict(architectures={"a": 1}), "field 'architectures' is {'a': 1}, expected a list of strings"),
    (dict(sliding_window="x"), "field 'sliding_window' is 'x', expected a positive int or null"),
    (dict(architectures=None, model_type=["llama"]), "field 'model_type' is ['llama'], expected a string"),
    (dict(tie_word_embeddings="yes"), "field 'tie_word_embeddings' is 'yes', expected true or false"),
    (dict(head_dim="8"), "field 'head_dim' is '8', expected a positive int or null"),
    (dict(num_key_value_heads=-2), "field 'num_key_value_heads' is -2, expected a positive int or null"),
]


@pytest.mark.parametrize("changes, message", TYPES)
def test_a_field_of_the_wrong_type_is_one_line_naming_it(tmp_path, capsys, changes, message):
    folder = _hf(tmp_path, **changes)
    assert gpt_main(["import", "--hf", str(folder), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"config.json: {message}" in err, err


def test_gpt2_fields_of_the_wrong_type_are_named_too(tmp_path):
    folder = _hf(tmp_path, GPT2, layer_norm_epsilon=-1.0)
    with pytest.raises(UnsupportedModel, match="field 'layer_norm_epsilon' is -1.0, expected a finite number > 0"):
        load(folder)


# ---- what import accepts, sample runs ------------------------------------------------------------
def _retype(folder, name, convert):
    tensors, meta = load_safetensors(folder / "model.safetensors")
    tensors[name] = convert(tensors[name])
    save_safetensors(folder / "model.safetensors", tensors, metadata=meta)


@pytest.mark.parametrize("convert, message", [
    (lambda a: a.astype(np.int64), "tensor 'model.norm.weight' is I64; weights must be one of F16, BF16, F32, F64"),
    (lambda a: a > 0, "tensor 'model.norm.weight' is BOOL"),
    (lambda a: np.ones(33, np.float32), r"transformer.ln_f.weight: checkpoint \(33,\) vs model \(32,\)"),
])
def test_weights_that_loading_refuses_are_refused_by_import(tmp_path, capsys, convert, message):
    folder = _hf(tmp_path)
    _retype(folder, "model.norm.weight", convert)
    assert gpt_main(["import", "--hf", str(folder), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and re.search(message, err), err
    assert not (tmp_path / "run" / LATEST).exists()


def test_import_then_sample(tmp_path, bpe, capsys):
    folder = _hf(tmp_path, tokenizer=bpe)
    assert gpt_main(["import", "--hf", str(folder), "--out", str(tmp_path / "run")]) == 0
    assert gpt_main(["sample", "--run", str(tmp_path / "run"), "--prompt", "the cat", "--max-new-tokens", "5",
                     "--seed", "0"]) == 0
    assert "the cat" in capsys.readouterr().out


def test_a_tokenizer_json_with_a_negative_id_is_refused_by_import(tmp_path, bpe, capsys):
    folder = _hf(tmp_path)
    bpe.save_huggingface(folder / "tokenizer.json")
    tj = json.loads((folder / "tokenizer.json").read_text())
    tj["model"]["vocab"][next(iter(tj["model"]["vocab"]))] = -1
    (folder / "tokenizer.json").write_text(json.dumps(tj))
    assert gpt_main(["import", "--hf", str(folder), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "tokenizer.json" in err, err
    assert not (tmp_path / "run" / LATEST).exists()


def test_an_import_interrupted_after_its_tokenizer_can_be_run_again(tmp_path, bpe, monkeypatch):
    """config.json comes first: a folder left with a tokenizer.json but no config.json would be
    refused as no run's (RunFolder) by the same import run again."""
    import gpt.data

    folder = _hf(tmp_path, tokenizer=bpe)

    def interrupted(path):  # the read-back of the tokenizer.json just written
        raise KeyboardInterrupt

    monkeypatch.setattr(gpt.data, "load_tokenizer", interrupted)
    assert gpt_main(["import", "--hf", str(folder), "--out", str(tmp_path / "run")]) == 130
    assert (tmp_path / "run" / "tokenizer.json").exists()
    monkeypatch.undo()
    assert gpt_main(["import", "--hf", str(folder), "--out", str(tmp_path / "run")]) == 0
    assert (tmp_path / "run" / LATEST).exists()

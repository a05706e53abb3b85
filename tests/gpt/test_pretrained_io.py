"""Tokenizers made by the `tokenizers` package encode identically here; GGUF files read back by
the `gguf` package hold the metadata, names, shapes and values llama.cpp expects; the import /
export / fine-tune commands work on each other's folders."""
import glob
import json
import os

import numpy as np
import pytest

from autograd import manual_seed
from bpe import Tokenizer
from gpt import GPT, GPTConfig
from gpt.cli import main as gpt_main
from gpt.pretrained import save_gguf

LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                r"|\s*[\r\n]+|\s+(?!\S)|\s+")
QWEN2_SPLIT = LLAMA3_SPLIT.replace(r"\p{N}{1,3}", r"\p{N}")


def _texts():
    return [open(f, encoding="utf-8").read() for f in sorted(glob.glob(os.path.dirname(json.__file__) + "/*.py"))]


@pytest.mark.parametrize("style", ["gpt2", "llama3", "qwen2"])
@pytest.mark.parametrize("merges_as_pairs", [False, True])
def test_tokenizer_json_of_the_tokenizers_package_encodes_identically(tmp_path, style, merges_as_pairs):
    tk = pytest.importorskip("tokenizers")
    hf = tk.Tokenizer(tk.models.BPE(ignore_merges=style != "gpt2"))
    level = tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=style == "gpt2")
    if style != "gpt2":
        split = tk.pre_tokenizers.Split(tk.Regex(LLAMA3_SPLIT if style == "llama3" else QWEN2_SPLIT), "isolated")
        level = tk.pre_tokenizers.Sequence([split, level])
    hf.pre_tokenizer, hf.decoder = level, tk.decoders.ByteLevel()
    trainer = tk.trainers.BpeTrainer(vocab_size=800, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(),
                                     special_tokens=["<|endoftext|>"], show_progress=False)
    texts = _texts()
    hf.train_from_iterator(texts, trainer)
    hf.add_special_tokens(["<|im_start|>"])
    hf.add_tokens(["<tool_call>"])  # an added token that is not special: matched in the text too
    path = tmp_path / "tokenizer.json"
    hf.save(str(path))
    if merges_as_pairs is not isinstance(json.loads(path.read_text())["model"]["merges"][0], list):
        d = json.loads(path.read_text())  # the other spelling of the merges
        d["model"]["merges"] = [(m.split(" ") if isinstance(m, str) else " ".join(m)) for m in d["model"]["merges"]]
        path.write_text(json.dumps(d))
    ours = Tokenizer.from_huggingface(path)
    text = "".join(texts[:6]) + " héllo wörld 日本語 123456 <|endoftext|> a<|im_start|>b <tool_call>x  \n\n y"
    expected = hf.encode(text, add_special_tokens=False).ids
    assert ours.encode(text, allowed_special="all") == expected
    assert ours.decode(expected) == hf.decode(expected, skip_special_tokens=False)


def test_our_tokenizer_written_as_tokenizer_json_reads_back_with_the_same_ids(tmp_path):
    tok = Tokenizer.train_from_iterator(_texts()[:4], vocab_size=400, special_tokens=["<|endoftext|>"])
    tok.save_huggingface(tmp_path / "t.json")
    back = Tokenizer.from_huggingface(tmp_path / "t.json")
    text = _texts()[-1][:5000]
    assert back.encode(text) == tok.encode(text) and back.pattern == tok.pattern


@pytest.mark.parametrize("change,named", [
    ({"model": {"type": "WordPiece"}}, "model.type"),
    ({"normalizer": {"type": "Lowercase"}}, "normalizer"),
    ({"pre_tokenizer": {"type": "Metaspace"}}, "Metaspace"),
])
def test_tokenizer_json_we_cannot_reproduce_is_refused_by_name(tmp_path, change, named):
    tok = Tokenizer.train_from_iterator(_texts()[:2], vocab_size=300)
    tok.save_huggingface(tmp_path / "t.json")
    d = {**json.loads((tmp_path / "t.json").read_text()), **change}
    (tmp_path / "t.json").write_text(json.dumps(d))
    with pytest.raises(ValueError, match=named):
        Tokenizer.from_huggingface(tmp_path / "t.json")


# ---- GGUF -----------------------------------------------------------------------------------------
GGUF_GPT2 = GPTConfig(vocab_size=300, block_size=16, n_layer=2, n_head=4, n_embd=32)
GGUF_LLAMA = GPTConfig(vocab_size=300, block_size=16, n_layer=2, n_head=4, n_kv_head=2, n_embd=32, pos="rope",
                       norm="rmsnorm", mlp="swiglu", mlp_hidden=48, bias=False, tie_weights=False)
GGUF_QWEN2 = GGUF_LLAMA.replace(qkv_bias=True, tie_weights=True)


def _interleaved(rows, heads):
    """llama.cpp's llama rows: per head, the pairs (x_i, x_{i + hs/2}) interleaved."""
    n, C = rows.shape
    return rows.reshape(heads, 2, n // heads // 2, C).transpose(0, 2, 1, 3).reshape(n, C)


def _check_tensors(W, sd, cfg, arch, tol):
    C, kv, H = cfg.n_embd, cfg.kv_heads * cfg.head_dim, cfg.hidden
    c_attn, c_fc = sd["transformer.h.0.attn.c_attn.weight"], sd["transformer.h.0.mlp.c_fc.weight"]
    if arch == "gpt2":
        np.testing.assert_allclose(W("blk.1.attn_qkv.weight"), sd["transformer.h.1.attn.c_attn.weight"].T, **tol)
        np.testing.assert_allclose(W("position_embd.weight"), sd["transformer.wpe.weight"], **tol)
    elif arch == "phi3":  # fused as they are: q, k, v rows; gate rows, then up rows; half-split RoPE
        np.testing.assert_allclose(W("blk.0.attn_qkv.weight"), c_attn.T, **tol)
        np.testing.assert_allclose(W("blk.0.ffn_up.weight"), c_fc.T, **tol)
        np.testing.assert_allclose(W("blk.0.ffn_up.weight")[:H], c_fc[:, :H].T, **tol)
    else:
        q, k = c_attn[:, :C].T, c_attn[:, C:C + kv].T
        if arch == "llama":
            q, k = _interleaved(q, cfg.n_head), _interleaved(k, cfg.kv_heads)
        np.testing.assert_allclose(W("blk.0.attn_q.weight"), q, **tol)
        np.testing.assert_allclose(W("blk.0.attn_k.weight"), k, **tol)
        np.testing.assert_allclose(W("blk.0.ffn_gate.weight"), c_fc[:, :H].T, **tol)
        if arch == "qwen2":
            np.testing.assert_allclose(W("blk.0.attn_q.bias"), sd["transformer.h.0.attn.c_attn.bias"][:C], **tol)
    if not cfg.tie_weights:
        np.testing.assert_allclose(W("output.weight"), sd["lm_head.weight"].T, **tol)


@pytest.mark.parametrize("cfg,arch,family", [(GGUF_GPT2, "gpt2", None), (GGUF_LLAMA, "llama", None),
                                             (GGUF_QWEN2, "qwen2", None), (GGUF_LLAMA, "phi3", "phi3")])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gguf_reads_back_with_the_gguf_package(tmp_path, cfg, arch, family, dtype):
    gguf = pytest.importorskip("gguf")
    manual_seed(0)
    model = GPT(cfg)
    tok = Tokenizer.train_from_iterator(_texts()[:3], vocab_size=290, special_tokens=["<|endoftext|>"])
    path = save_gguf(model, tmp_path / "m.gguf", tokenizer=tok, dtype=dtype, family=family)
    r = gguf.GGUFReader(str(path))
    field = lambda k: r.fields[k].contents()  # noqa: E731
    assert field("general.architecture") == arch and field(f"{arch}.vocab_size") == cfg.vocab_size
    assert field(f"{arch}.block_count") == cfg.n_layer and field(f"{arch}.embedding_length") == cfg.n_embd
    assert field(f"{arch}.attention.head_count") == cfg.n_head and field(f"{arch}.context_length") == cfg.block_size
    assert field(f"{arch}.feed_forward_length") == cfg.hidden
    assert field(f"{arch}.attention.head_count_kv") == cfg.kv_heads
    if arch != "gpt2":
        assert field(f"{arch}.rope.dimension_count") == cfg.head_dim
    tokens = field("tokenizer.ggml.tokens")
    assert len(tokens) == cfg.vocab_size and tokens[tok.special_tokens["<|endoftext|>"]] == "<|endoftext|>"
    assert field("tokenizer.ggml.model") == "gpt2" and field("tokenizer.ggml.pre") == "llama-bpe"
    assert field("tokenizer.ggml.eos_token_id") == tok.special_tokens["<|endoftext|>"]
    # names: llama.cpp's own for this architecture, as the gguf package spells them
    arch_enum = next(a for a, n in gguf.MODEL_ARCH_NAMES.items() if n == arch)
    known = {gguf.TENSOR_NAMES[t].format(bid=i) for t in gguf.MODEL_TENSORS[arch_enum] for i in range(cfg.n_layer)}
    tensors = {t.name: t for t in r.tensors}
    assert all(name.rsplit(".", 1)[0] in known for name in tensors), sorted(tensors)
    assert ("output.weight" in tensors) == (not cfg.tie_weights)  # tied: llama.cpp uses token_embd
    sd = model.state_dict()
    W = lambda name: np.asarray(tensors[name].data, np.float32)  # noqa: E731
    tol = dict(atol=1e-3 if dtype == "f16" else 0)
    np.testing.assert_allclose(W("token_embd.weight"), sd["transformer.wte.weight"], **tol)
    assert tensors["token_embd.weight"].tensor_type.name == dtype.upper()
    assert tensors["blk.0.attn_norm.weight"].tensor_type.name == "F32"
    _check_tensors(W, sd, cfg, arch, tol)
    assert tuple(int(s) for s in tensors["blk.0.attn_output.weight"].shape) == (cfg.n_embd, cfg.n_embd)


def _gguf_fields(path):
    gguf = pytest.importorskip("gguf")
    r = gguf.GGUFReader(str(path))
    return {k: f.contents() for k, f in r.fields.items() if not k.startswith("GGUF.")}


@pytest.mark.filterwarnings("ignore:the tokenizer has no")  # no end-of-text token: tested below
def test_every_split_pattern_we_read_gets_its_llama_cpp_pre_tokenizer_name(tmp_path):
    from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN

    tk = pytest.importorskip("tokenizers")
    texts, model = _texts()[:2], GPT(GGUF_GPT2)
    cases = {"gpt-2": GPT2_PATTERN, "llama-bpe": GPT4_PATTERN, "gpt-4o": O200K_PATTERN}
    for style, split in (("llama-bpe", LLAMA3_SPLIT), ("qwen2", QWEN2_SPLIT)):  # as from_huggingface reads them
        hf = tk.Tokenizer(tk.models.BPE(ignore_merges=True))
        hf.pre_tokenizer = tk.pre_tokenizers.Sequence([tk.pre_tokenizers.Split(tk.Regex(split), "isolated"),
                                                       tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        hf.train_from_iterator(texts, tk.trainers.BpeTrainer(
            vocab_size=290, initial_alphabet=tk.pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
        hf.save(str(tmp_path / f"{style}.json"))
        tok = Tokenizer.from_huggingface(tmp_path / f"{style}.json")
        save_gguf(model, tmp_path / f"{style}.gguf", tokenizer=tok)
        assert _gguf_fields(tmp_path / f"{style}.gguf")["tokenizer.ggml.pre"] == style
    for name, pattern in cases.items():
        tok = Tokenizer.train_from_iterator(texts, vocab_size=280, pattern=pattern)
        save_gguf(model, tmp_path / "p.gguf", tokenizer=tok)
        assert _gguf_fields(tmp_path / "p.gguf")["tokenizer.ggml.pre"] == name
    odd = Tokenizer.train_from_iterator(texts, vocab_size=280, pattern=r"\w+|\s+|.")
    with pytest.raises(ValueError, match=r"pattern '\\\\w\+.*no llama.cpp pre-tokenizer name"):
        save_gguf(model, tmp_path / "odd.gguf", tokenizer=odd)
    assert not (tmp_path / "odd.gguf").exists()


def test_gguf_without_a_tokenizer_or_with_a_char_level_one_names_its_vocabulary(tmp_path):
    from gpt.data.char_tokenizer import CharTokenizer

    model = GPT(GGUF_GPT2)
    save_gguf(model, tmp_path / "bare.gguf")
    bare = _gguf_fields(tmp_path / "bare.gguf")
    assert bare["tokenizer.ggml.model"] == "none" and bare["gpt2.vocab_size"] == GGUF_GPT2.vocab_size
    assert not any(k.startswith("tokenizer.ggml.") and k != "tokenizer.ggml.model" for k in bare)
    chars = CharTokenizer.train(["hello wörld, 日本 \n"], special_tokens=["<|endoftext|>"])
    save_gguf(model, tmp_path / "char.gguf", tokenizer=chars)
    f = _gguf_fields(tmp_path / "char.gguf")
    assert f["tokenizer.ggml.model"] == "gpt2" and f["tokenizer.ggml.pre"] == "gpt-2"
    tokens, eot = f["tokenizer.ggml.tokens"], chars.special_tokens["<|endoftext|>"]
    assert tokens[chars.encode("h")[0]] == "h" and tokens[chars.encode(" ")[0]] == "Ġ" and tokens[eot] == "<|endoftext|>"
    assert tokens[chars.encode("ö")[0]] == "Ã¶" and f["tokenizer.ggml.eos_token_id"] == eot
    # each multi-byte character is made by merging its bytes left to right, and nothing else merges
    assert set(f["tokenizer.ggml.merges"]) == {"Ã ¶", "æ Ĺ", "æĹ ¥", "æ ľ", "æľ ¬"}


def test_gguf_token_strings_are_distinct_or_the_export_is_refused_naming_both_ids(tmp_path):
    # llama.cpp aborts loading a vocabulary whose token strings repeat (id_to_token vs token_to_id)
    from gpt.data.char_tokenizer import CharTokenizer

    model = GPT(GGUF_LLAMA)
    byte_named = Tokenizer.train_from_iterator(["hello world " * 50], vocab_size=268,
                                               special_tokens=["a", "<|endoftext|>"])
    with pytest.raises(ValueError, match=r"token 'a' is both id 97 and id 266"):
        save_gguf(model, tmp_path / "dup.gguf", tokenizer=byte_named)
    with pytest.raises(ValueError, match=r"token '<' is both id 2 and id 3"):
        save_gguf(model, tmp_path / "dup.gguf", tokenizer=CharTokenizer(list("ab<"), special_tokens=["<"]))
    assert not (tmp_path / "dup.gguf").exists()
    # a special token spelled like a gap's filler name: the filler takes another name
    pad_named = Tokenizer.train_from_iterator(["hello world " * 50], vocab_size=268,
                                              special_tokens={"[PAD300]": 305, "<|endoftext|>": 306})
    save_gguf(GPT(GGUF_LLAMA.replace(vocab_size=310)), tmp_path / "pad.gguf", tokenizer=pad_named)
    tokens = _gguf_fields(tmp_path / "pad.gguf")["tokenizer.ggml.tokens"]
    assert len(set(tokens)) == len(tokens) == 310 and tokens[305] == "[PAD300]" and tokens[300] == "[PAD300_]"
    assert tokens[301] == "[PAD301]"


def test_gguf_f16_export_refuses_a_weight_beyond_float16_naming_the_tensor(tmp_path):
    model = GPT(GGUF_LLAMA)
    dict(model.named_parameters())["transformer.h.0.mlp.c_fc.weight"].data[0, 0] = 70000.0
    with pytest.raises(ValueError, match=r"tensor blk\.0\.ffn_gate\.weight holds a value of magnitude 70000, "
                                         r"beyond float16's largest 65504"):
        save_gguf(model, tmp_path / "big.gguf", dtype="f16")
    assert not (tmp_path / "big.gguf").exists()
    save_gguf(model, tmp_path / "big.gguf", dtype="f32")  # F32 holds it


def test_gguf_of_a_tokenizer_without_end_of_text_warns_which_token_llama_cpp_ends_at(tmp_path):
    tok = Tokenizer.train_from_iterator(_texts()[:2], vocab_size=280)
    with pytest.warns(UserWarning, match=r"no '<\|endoftext\|>' special token.*default id 11 \('ċ'\) as both"):
        save_gguf(GPT(GGUF_GPT2), tmp_path / "m.gguf", tokenizer=tok)
    f = _gguf_fields(tmp_path / "m.gguf")
    assert "tokenizer.ggml.eos_token_id" not in f and "tokenizer.ggml.bos_token_id" not in f
    with pytest.warns(UserWarning, match=r"no '<\|end_of_text\|>' or '</s>' or '<\|endoftext\|>' special token"):
        save_gguf(GPT(GGUF_LLAMA), tmp_path / "m.gguf", tokenizer=tok)


# ---- the commands -----------------------------------------------------------------------------------
def test_export_import_and_fine_tune_through_the_cli(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "input.txt").write_text("".join(_texts()[:4]), encoding="utf-8")
    assert gpt_main(["prepare", "--input", "input.txt", "--vocab-size", "300", "--out", "data"]) == 0
    small = ["--n-layer", "1", "--n-head", "2", "--n-kv-head", "1", "--n-embd", "32", "--block-size", "32",
             "--max-steps", "2", "--eval-batches", "1", "--samples", "0", "--peak-flops", "1e9"]
    assert gpt_main(["train", "--data", "data", "--pos", "rope", "--norm", "rmsnorm", "--mlp", "swiglu",
                     "--no-bias", "--out", "run"] + small) == 0
    assert gpt_main(["export", "--run", "run", "--hf", "hf"]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    assert gpt_main(["export", "--run", "run", "--gguf", "m.gguf", "--dtype", "f16"]) == 0
    assert gpt_main(["import", "--hf", "hf", "--out", "imported"]) == 0
    from gpt.training.checkpoint import load_model

    a, tok_a, _ = load_model("run")
    b, tok_b, meta = load_model("imported")
    ids = np.arange(20)[None] % 300
    assert np.array_equal(a(ids)[0].numpy(), b(ids)[0].numpy()) and meta["step"] == 0
    assert tok_b.encode("def f(x): return x") == tok_a.encode("def f(x): return x")
    assert gpt_main(["train", "--init-from", "imported", "--data", "data", "--dropout", "0.1", "--out", "ft",
                     "--block-size", "32", "--max-steps", "2", "--eval-batches", "1", "--samples", "0",
                     "--peak-flops", "1e9"]) == 0
    ft, _, ft_meta = load_model("ft")
    assert ft_meta["step"] == 2 and ft.config == b.config.replace(dropout=0.1)
    assert gpt_main(["train", "--init-from", "imported", "--data", "data", "--out", "ft2", "--block-size", "64"]) == 2
    assert gpt_main(["train", "--init-from", "imported", "--data", "data", "--out", "ft2", "--n-embd", "64"]) == 2
    # the default block size (128) yields to the model's context of 32; the shape flags' defaults too
    assert gpt_main(["train", "--init-from", "imported", "--data", "data", "--out", "ft3", "--max-steps", "1",
                     "--eval-batches", "1", "--samples", "0", "--peak-flops", "1e9"]) == 0
    assert json.loads((tmp_path / "ft3" / "config.json").read_text())["train"]["block_size"] == 32

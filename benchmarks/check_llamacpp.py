"""Our GGUF exports run by llama.cpp: its logits and its tokens against ours, for each family.

    pip install llama-cpp-python                    # builds llama.cpp from source (minutes); CPU is enough
    python benchmarks/check_llamacpp.py             # every GGUF family, a table
    python benchmarks/check_llamacpp.py --dry-run   # our side only: export, read back, encode (no llama.cpp)
    python benchmarks/check_llamacpp.py --families llama,phi3 --fuzz 3000

For each family with a GGUF layout (gpt.pretrained.families), a small random model of ours
(weights drawn with --init-std, so that logits are far from uniform) is written with a
byte-level BPE tokenizer trained here on the standard library's sources, with the split pattern
that family's models use; two more rows check the o200k pattern and a character-level tokenizer.
llama.cpp (through llama-cpp-python, imported only when needed) loads the file with an F32 KV
cache and logits for every position; "max |dlogit|" is the largest difference from our logits on
--prompts prompts, relative to the largest logit; "tokens" counts the fuzz strings (letters,
digits, case, apostrophes, whitespace runs, punctuation, accents, CJK, emoji) that llama.cpp
tokenizes exactly as we do. --dry-run reads each file back with the `gguf` package (when
installed) and checks the keys llama.cpp requires instead.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import random
import re
import sys
import tempfile
from pathlib import Path

import numpy as np

from autograd import manual_seed, no_grad
from bpe import GPT2_PATTERN, GPT4_PATTERN, O200K_PATTERN, Tokenizer
from gpt.data.char_tokenizer import CharTokenizer
from gpt.model.config import GPTConfig
from gpt.model.gpt import GPT
from gpt.pretrained import save_gguf
from gpt.pretrained.families import FAMILIES
from gpt.pretrained.gguf_vocab import PRE_TOKENIZERS, QWEN2_SPLIT

INSTALL = ("llama-cpp-python is not installed; install it with `pip install llama-cpp-python` (it compiles "
           "llama.cpp, a few minutes), or run with --dry-run to check our side only")
PATTERN_OF = {"gpt2": GPT2_PATTERN, "qwen2": QWEN2_SPLIT}  # the others: cl100k, as LLaMA-3 and ours
PIECES = ["hello", "World", "HTTPServer", "don't", "it's", "WE'LL", "l'amour", "123", "4567890", "3.14", " ", "  ",
          "\t", "\n", "\n\n", "\r\n", "   \n ", "!!", "...", "(x)", "{}", "->", "#", "é", "naïve", "Ünïcödé",
          "日本語", "中文", "한국어", "🙂", "👍🏽", "—", "«»", "_x", "a/b", "'", "''", "/", "\\"]


def fuzz_strings(n: int, seed: int = 0) -> list[str]:
    """n strings of 1-12 pieces drawn from PIECES, joined with nothing or a space."""
    rng = random.Random(seed)
    return [rng.choice(["", " "]).join(rng.choice(PIECES) for _ in range(rng.randint(1, 12))) for _ in range(n)]


def corpus() -> list[str]:
    files = sorted(glob.glob(os.path.join(os.path.dirname(json.__file__), "*.py")))
    return [Path(f).read_text(encoding="utf-8") for f in files] + [" ".join(PIECES) * 20]


def model_config(family, vocab_size: int, init_std: float) -> GPTConfig:
    """A small config of the family's shape that it writes to GGUF."""
    rope = family.shape["pos"] == "rope"
    cfg = GPTConfig(vocab_size=vocab_size, block_size=64, n_layer=2, n_head=4, n_embd=64, init_std=init_std,
                    n_kv_head=2 if rope else None, mlp_hidden=96 if rope else None, tie_weights=not rope,
                    bias=not rope, **family.shape)
    return cfg.replace(qkv_bias=True) if family.name == "qwen2" else cfg


def cases(names: list[str]) -> list[tuple[str, object, object]]:
    """(row label, family, tokenizer) for each family asked for, plus the o200k and char-level rows."""
    texts, rows = corpus(), []
    by_name = {f.name: f for f in FAMILIES if f.gguf is not None}
    unknown = sorted(set(names) - set(by_name))
    if unknown:
        raise SystemExit(f"unknown or GGUF-less famil(y/ies) {', '.join(unknown)}; known: {', '.join(by_name)}")
    for name in names:
        pattern = PATTERN_OF.get(name, GPT4_PATTERN)
        tok = Tokenizer.train_from_iterator(texts, vocab_size=512, pattern=pattern, special_tokens=["<|endoftext|>"])
        rows.append((f"{name} ({PRE_TOKENIZERS[pattern]})", by_name[name], tok))
    if "llama" in names:
        tok = Tokenizer.train_from_iterator(texts, vocab_size=512, pattern=O200K_PATTERN, special_tokens=["<|endoftext|>"])
        rows.append(("llama (gpt-4o)", by_name["llama"], tok))
    if "gpt2" in names:
        chars = CharTokenizer.train(texts + ["".join(PIECES)], special_tokens=["<|endoftext|>"])
        rows.append(("gpt2 (char-level)", by_name["gpt2"], chars))
    return rows


def our_logits(model, ids: list[int]) -> np.ndarray:
    """(T, V) float32 logits of one prompt."""
    with no_grad():
        return model(np.asarray(ids)[None])[0].numpy()[0]


def check_file(path: Path, family, tokenizer, cfg: GPTConfig) -> str:
    """The keys llama.cpp needs, read back with the gguf package; '' when they are all there."""
    try:
        import gguf
    except ImportError:
        return "gguf not installed: file not read back"
    r = gguf.GGUFReader(str(path))
    fields = {k: f.contents() for k, f in r.fields.items()}
    arch = family.gguf.arch
    need = ["tokenizer.ggml.model", f"{arch}.vocab_size", f"{arch}.context_length", f"{arch}.block_count",
            f"{arch}.embedding_length", f"{arch}.feed_forward_length", f"{arch}.attention.head_count"]
    missing = [k for k in need if k not in fields]
    if missing:
        return "missing " + ", ".join(missing)
    if fields.get("tokenizer.ggml.pre") not in set(PRE_TOKENIZERS.values()):
        return f"pre-tokenizer {fields.get('tokenizer.ggml.pre')!r}"
    if len(fields["tokenizer.ggml.tokens"]) != cfg.vocab_size:
        return "token list length"
    return ""


def llama_side(path: Path, cfg: GPTConfig, threads: int):
    """llama.cpp's model of `path`: F32 KV cache, logits for every position."""
    import llama_cpp

    return llama_cpp.Llama(model_path=str(path), n_ctx=cfg.block_size, n_batch=cfg.block_size, logits_all=True,
                           type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32, n_gpu_layers=0,
                           n_threads=threads, seed=0, verbose=False)


def compare(llm, model, tokenizer, prompts: list[str], fuzz: list[str]) -> tuple[float, int, str]:
    """(max |dlogit| / max |logit| over the prompts, fuzz strings tokenized alike, first that is not)."""
    worst = 0.0
    for text in prompts:
        ids = tokenizer.encode_ordinary(text)[: model.config.block_size]
        llm.reset()
        llm.eval(ids)
        theirs = np.asarray(llm.scores[: len(ids)], np.float32)
        ours = our_logits(model, ids)
        worst = max(worst, float(np.abs(theirs - ours).max() / np.abs(ours).max()))
    same, first = 0, ""
    for s in fuzz:
        theirs = llm.tokenize(s.encode("utf-8"), add_bos=False, special=False)
        ours = tokenizer.encode_ordinary(s)
        if list(theirs) == ours:
            same += 1
        elif not first:
            first = f"{s!r}: ours {ours[:8]} llama.cpp {list(theirs)[:8]}"
    return worst, same, first


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--families", default=",".join(f.name for f in FAMILIES if f.gguf is not None))
    ap.add_argument("--fuzz", type=int, default=1000, help="fuzz strings to tokenize (default 1000)")
    ap.add_argument("--prompts", type=int, default=4, help="prompts whose logits are compared (default 4)")
    ap.add_argument("--init-std", type=float, default=0.2)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--dir", default=None, help="where the GGUF files go (default: a temporary folder)")
    ap.add_argument("--dry-run", action="store_true", help="export and check our side only")
    args = ap.parse_args(argv)
    if not args.dry_run:
        try:
            import llama_cpp  # noqa: F401
        except ImportError:
            print(INSTALL)
            return 0
    out = Path(args.dir or tempfile.mkdtemp(prefix="check_llamacpp_"))
    out.mkdir(parents=True, exist_ok=True)
    fuzz = fuzz_strings(args.fuzz)
    prompts = fuzz_strings(args.prompts, seed=1)
    print(f"{'case':<22} {'arch':<6} {'max |dlogit|':>12} {'tokens':>12}  notes")
    failed = 0
    for label, family, tok in cases(args.families.split(",")):
        cfg = model_config(family, vocab_size=tok.vocab_size + 3, init_std=args.init_std)
        manual_seed(0)
        model = GPT(cfg).eval()
        path = save_gguf(model, out / (re.sub(r"\W+", "-", label).strip("-") + ".gguf"), tokenizer=tok,
                         family=family.name)
        if args.dry_run:
            note = check_file(path, family, tok, cfg)
            same = sum(tok.decode(tok.encode_ordinary(s)) == s for s in fuzz)  # the char-level vocab has PIECES
            print(f"{label:<22} {family.gguf.arch:<6} {'-':>12} {f'{same}/{len(fuzz)}':>12}  "
                  f"{note or 'file complete; our encode/decode round trips'}")
            failed += bool(note) or same != len(fuzz)
            continue
        worst, same, first = compare(llama_side(path, cfg, args.threads), model, tok, prompts, fuzz)
        print(f"{label:<22} {family.gguf.arch:<6} {worst:>12.2e} {f'{same}/{len(fuzz)}':>12}  {first}")
        failed += worst > 1e-3 or same != len(fuzz)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""benchmarks/check_llamacpp.py stays runnable without llama.cpp: --dry-run exports every GGUF
family and checks our side, and its comparison reads llama-cpp-python's API as documented."""
import runpy
from pathlib import Path
from types import SimpleNamespace

import numpy as np

script = SimpleNamespace(**runpy.run_path(str(Path(__file__).resolve().parents[2] / "benchmarks" / "check_llamacpp.py")))


def test_dry_run_writes_a_complete_file_per_family_and_pattern(tmp_path, capsys):
    assert script.main(["--dry-run", "--fuzz", "30", "--dir", str(tmp_path)]) == 0
    rows = [line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == ["gpt2", "llama", "qwen2", "mistral", "phi3", "llama", "gpt2"]
    assert len(list(tmp_path.glob("*.gguf"))) == 7


class FakeLlama:
    """llama-cpp-python's Llama as check_llamacpp uses it (reset, eval, scores, tokenize), backed by
    our own model and tokenizer, so a faithful llama.cpp shows no difference."""

    def __init__(self, model, tokenizer, shift=0.0):
        self.model, self.tokenizer, self.shift = model, tokenizer, shift
        self.scores = np.zeros((model.config.block_size, model.config.vocab_size), np.float32)
        self.n_tokens = 0

    def reset(self):
        self.n_tokens = 0

    def eval(self, ids):
        logits = script.our_logits(self.model, list(ids))
        self.scores[self.n_tokens:self.n_tokens + len(ids)] = logits + self.shift
        self.n_tokens += len(ids)

    def tokenize(self, text, add_bos=True, special=False):
        assert isinstance(text, bytes) and not add_bos and not special
        return self.tokenizer.encode_ordinary(text.decode("utf-8"))


def test_the_comparison_finds_no_difference_in_a_faithful_runtime_and_reports_a_shift():
    label, family, tok = script.cases(["phi3"])[0]
    model = script.GPT(script.model_config(family, tok.vocab_size, 0.2)).eval()
    prompts, fuzz = script.fuzz_strings(2, seed=1), script.fuzz_strings(25)
    worst, same, first = script.compare(FakeLlama(model, tok), model, tok, prompts, fuzz)
    assert worst == 0.0 and same == 25 and first == ""
    worst, _, _ = script.compare(FakeLlama(model, tok, shift=0.5), model, tok, prompts, fuzz)
    assert worst > 1e-3


def test_a_phi3_file_name_does_not_make_llama_cpp_ask_for_tokens_the_vocabulary_lacks(tmp_path):
    # llama.cpp looks up "</s>", "<unk>", "<s>" and "<|endoftext|>" in any model whose general.name
    # says Phi-3, and refuses to load the file when one is missing
    import gguf

    script.main(["--dry-run", "--fuzz", "1", "--families", "phi3", "--dir", str(tmp_path)])
    (path,) = tmp_path.glob("*.gguf")
    assert "phi3" in path.stem
    field = gguf.GGUFReader(path).fields["general.name"]
    name = bytes(field.parts[field.data[0]]).decode()
    assert "phi3" not in name.lower() and "phi-3" not in name.lower()
    assert name == path.stem.replace("phi3", "model")

"""The generation loop: cached decoding equals uncached decoding, and the sampler's promises hold.

Models are tiny and randomly initialised with a large init_std, so that their greedy outputs
vary from token to token (a near-uniform model would repeat one token and prove little).
"""
import itertools
import sys
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, strategies as st

import autograd
import nn
from gpt.inference import sample as S
from gpt.model.config import MLP_CHOICES, POS_CHOICES, GPTConfig, settings as model_settings
from gpt.inference.generate import (PAD, Decoder, generate, stream, stream_text,
                          window_start)
from gpt.model.gpt import GPT

generate_module = sys.modules[Decoder.__module__]
POSITIONS = POS_CHOICES
_MODELS: dict = {}


def tiny(pos="learned", block_size=16, vocab=48, seed=0, **kw):
    key = (pos, block_size, vocab, seed, tuple(sorted(kw.items())))
    if key not in _MODELS:
        autograd.manual_seed(seed)
        cfg = GPTConfig(vocab_size=vocab, block_size=block_size, n_layer=2, n_head=2, n_embd=16,
                        pos=pos, init_std=0.3, **kw)
        _MODELS[key] = GPT(cfg)
    return _MODELS[key]


def uncached_last_logits(model, window):
    with autograd.no_grad():
        logits, _ = model(np.asarray(window)[None, :] if np.ndim(window) == 1 else np.asarray(window))
    return logits.numpy()[:, -1, :]


# ---- the cache is exact, for every variant ------------------------------------------------------
def variant_choices() -> dict:
    """Every GPTConfig field with a finite set of values: its choice list, or False/True for a
    bool. Read from the config itself, so a new choice or switch joins the product below."""
    return {s.name: s.choices or (False, True) for s in model_settings() if s.choices or s.type is bool}


def every_variant(**fixed):
    names = [n for n in variant_choices() if n not in fixed]
    for values in itertools.product(*(variant_choices()[n] for n in names)):
        yield {**fixed, **dict(zip(names, values))}


def micro(variant, seed=0):
    autograd.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=24, block_size=6, n_layer=2, n_head=2, n_embd=8, init_std=0.4,
                         n_experts=2, moe_top_k=1, **variant))


def check_cached_equals_uncached(model, label, greedy=True):
    """Teacher-forced: every step's cached logits (through GPT.step where the model has one, and
    through forward with kv_caches) equal the uncached forward of the same window, past
    block_size (window re-prefills); then (``greedy``) generate's tokens with and without the
    cache agree."""
    rng = np.random.default_rng(0)
    prompt, future = rng.integers(0, 24, (2, 2)), rng.integers(0, 24, (2, 7))
    decoders = [Decoder(model, 2, 9), Decoder(model, 2, 9), Decoder(model, 2, 9)]
    decoders[1].stepper = None  # the model's own forward with kv_caches for every step
    assert (decoders[0].stepper is not None) == model.can_step()
    wanted: dict = {}  # window -> its uncached logits: the decoders see the same windows

    def uncached(window):
        key = (window.dtype.str, window.shape, window.tobytes())
        if key not in wanted:
            wanted[key] = uncached_last_logits(model, window)
        return wanted[key]

    with autograd.no_grad():
        for i, dec in enumerate(decoders):
            # the last steps in the weight layouts (nn.step_layouts), which a window this short
            # would not make by itself
            with mock.patch.object(generate_module, "LAYOUT_MIN_STEPS", 0 if i == 2 else 10 ** 9):
                got = dec.prefill(prompt)
                for t in range(future.shape[1] + 1):
                    want = uncached(dec.tokens[:, dec.s:dec.n])
                    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=f"{label}, step {t}")
                    if t < future.shape[1]:
                        got = dec.step(future[:, t])
            # only a tall weight has a layout: an attention-only model (mlp="none") has none
            assert bool(dec.layouts) == (i == 2 and model.can_step() and bool(nn.step_layouts(model))), label
    if greedy:
        np.testing.assert_array_equal(generate(model, prompt, 8, temperature=0),
                                      generate(model, prompt, 8, temperature=0, use_cache=False), err_msg=label)


@pytest.mark.slow  # the whole product of the config's choices
@pytest.mark.parametrize("pos", POS_CHOICES)
@pytest.mark.parametrize("mlp", MLP_CHOICES)
def test_cached_decoding_equals_uncached_for_every_variant(pos, mlp):
    variants = list(every_variant(pos=pos, mlp=mlp))
    for i, variant in enumerate(variants):
        model = micro(variant)
        model.eval()
        # every variant's own step is checked teacher-forced; generate's loop around it is the same
        # for all, so its greedy tokens are compared for the first and last variants only
        check_cached_equals_uncached(model, str(variant), greedy=i in (0, len(variants) - 1))


@pytest.mark.parametrize("pos", POS_CHOICES)
@pytest.mark.parametrize("n_kv_head", [1, 2])
def test_grouped_query_attention_decodes_the_same_with_and_without_the_cache(pos, n_kv_head):
    for qk_norm, prenorm in itertools.product((False, True), repeat=2):
        autograd.manual_seed(1)
        model = GPT(GPTConfig(vocab_size=24, block_size=6, n_layer=2, n_head=4, n_kv_head=n_kv_head, n_embd=16,
                              init_std=0.4, pos=pos, qk_norm=qk_norm, prenorm=prenorm)).eval()
        assert model.new_kv_caches(1)[0].k.shape == (1, n_kv_head, 6, 4)  # a smaller cache
        check_cached_equals_uncached(model, f"{pos} n_kv_head={n_kv_head} qk_norm={qk_norm} prenorm={prenorm}")


def test_the_variant_product_covers_every_choice_of_the_config():
    choices = variant_choices()
    assert {"pos", "norm", "mlp", "prenorm", "residual", "bias", "tie_weights", "qk_norm"} <= set(choices)
    assert set(choices["mlp"]) >= {"gelu", "swiglu", "moe", "relu2"}
    assert sum(1 for _ in every_variant()) == int(np.prod([len(c) for c in choices.values()]))


def test_a_model_without_an_array_step_refuses_one_and_decodes_through_forward():
    model = micro(dict(mlp="moe"))
    assert not model.can_step() and Decoder(model, 1, 4).stepper is None
    with pytest.raises(NotImplementedError, match="mlp='moe'"):
        model.step(np.zeros(1, np.int64), model.new_kv_caches(1), 0)


@pytest.mark.parametrize("pos", POSITIONS)
@pytest.mark.parametrize("prompt_len", [1, 4, 11, 23])  # 23 > block_size: the prompt is windowed
def test_greedy_tokens_are_identical_with_and_without_cache_past_block_size(pos, prompt_len):
    model = tiny(pos)
    prompt = np.arange(prompt_len)[None, :] % 48
    cached = generate(model, prompt, 40, temperature=0, use_cache=True)
    uncached = generate(model, prompt, 40, temperature=0, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    assert cached.shape == (1, prompt_len + 40)


def test_nanogpt_crop_every_step_policy_also_matches():
    model = tiny("learned")
    a = generate(model, [[3, 1, 4]], 30, temperature=0, window_keep=16)
    b = generate(model, [[3, 1, 4]], 30, temperature=0, window_keep=16, use_cache=False)
    np.testing.assert_array_equal(a, b)


@given(st.integers(1, 40), st.integers(1, 200))
def test_window_start_matches_dropping_tokens_one_at_a_time(block_size, n):
    keep = max(1, 3 * block_size // 4)
    s = 0
    for m in range(1, n + 1):
        if m - s > block_size:
            s = m - keep
    assert window_start(n, block_size, keep) == s


def test_cache_is_preallocated_and_its_size_is_reported():
    model = tiny("learned")
    cfg = model.config
    dec = Decoder(model, 3, 40, use_cache=True)
    buffers = [id(c.k) for c in dec.caches]
    with autograd.no_grad():
        dec.prefill(np.ones((3, 4), np.int64))
        for _ in range(20):  # includes a re-prefill
            dec.step(np.zeros(3, np.int64))
    assert [id(c.k) for c in dec.caches] == buffers
    assert cfg.kv_cache_numbers_per_token() == 2 * cfg.n_layer * cfg.n_embd
    assert dec.cache_nbytes == 3 * cfg.block_size * cfg.kv_cache_numbers_per_token() * 4  # float32
    assert dec.cache_nbytes == 3 * cfg.block_size * cfg.kv_cache_bytes_per_token("float32")


# ---- sampling ---------------------------------------------------------------------------------------
def test_same_seed_same_samples_and_seeds_differ():
    model = tiny("rope")
    a = generate(model, [[1, 2]], 20, temperature=1.0, top_k=20, top_p=0.95, seed=5, num_samples=3)
    b = generate(model, [[1, 2]], 20, temperature=1.0, top_k=20, top_p=0.95, seed=5, num_samples=3)
    c = generate(model, [[1, 2]], 20, temperature=1.0, top_k=20, top_p=0.95, seed=6, num_samples=3)
    np.testing.assert_array_equal(a, b)
    assert a.shape == (3, 22) and not np.array_equal(a, c)
    assert len({tuple(r) for r in a.tolist()}) > 1  # the samples of one prompt differ


def test_sampling_with_and_without_cache_draws_the_same_tokens():
    model = tiny("sinusoidal")
    a = generate(model, [[7, 7, 1]], 25, temperature=0.9, seed=3, use_cache=True)
    b = generate(model, [[7, 7, 1]], 25, temperature=0.9, seed=3, use_cache=False)
    np.testing.assert_array_equal(a, b)
    assert len(set(a[0, 3:].tolist())) > 5  # diverse tokens, through two window re-prefills


def test_top_k_one_equals_greedy():
    model = tiny("learned")
    greedy = generate(model, [[5, 9]], 20, temperature=0)
    for seed in range(3):
        np.testing.assert_array_equal(generate(model, [[5, 9]], 20, temperature=1.3, top_k=1, seed=seed), greedy)


def test_repetition_penalty_is_applied_to_the_whole_context():
    model = tiny("learned")
    prompt = [4, 4, 8]
    got = generate(model, [prompt], 12, temperature=0, repetition_penalty=1.8)
    seq = list(prompt)
    for _ in range(12):
        logits = S.apply_repetition_penalty(uncached_last_logits(model, seq), [seq], 1.8)
        seq.append(int(np.argmax(logits)))
    assert got[0].tolist() == seq
    assert not np.array_equal(got, generate(model, [prompt], 12, temperature=0))


# ---- batches ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("use_cache", [True, False])
def test_batched_prompts_of_different_lengths_equal_each_prompt_alone(use_cache):
    model = tiny("learned")
    prompts = [[1], [2, 3, 4, 5, 6, 7, 8], [9, 10, 11], list(range(20, 34))]
    batched = generate(model, prompts, 24, temperature=0, use_cache=use_cache)
    assert isinstance(batched, list)
    for p, row in zip(prompts, batched):
        alone = generate(model, [p], 24, temperature=0, use_cache=use_cache)[0]
        assert row.tolist() == alone.tolist()
        assert len(row) == len(p) + 24


def test_stream_yields_one_token_per_row_per_step():
    model = tiny("rope")
    steps = list(stream(model, [[1, 2, 3], [4]], 5, temperature=0))
    new = np.stack(steps, axis=1)  # (2, steps)
    # the short prompt starts generating at once; the long one after forcing two prompt tokens
    assert (new[1] != PAD).sum() == 5 and (new[0] != PAD).sum() == 5
    assert new[0, :2].tolist() == [PAD, PAD]
    full = generate(model, [[1, 2, 3], [4]], 5, temperature=0)
    assert full[0][3:].tolist() == new[0][new[0] != PAD].tolist()


# ---- beams -------------------------------------------------------------------------------------------
def seq_logprob(model, prompt, new):
    seq, total = list(prompt), 0.0
    for t in new:
        total += S.log_softmax(uncached_last_logits(model, seq))[0, t]
        seq.append(int(t))
    return total


def test_one_beam_equals_greedy():
    model = tiny("rope")
    np.testing.assert_array_equal(generate(model, [[3, 3, 7]], 15, num_beams=1, temperature=0),
                                  generate(model, [[3, 3, 7]], 15, temperature=0))
    from gpt.inference.generate import beam_generate
    np.testing.assert_array_equal(beam_generate(model, np.array([3, 3, 7]), 15, 1)[0],
                                  generate(model, [[3, 3, 7]], 15, temperature=0)[0])


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_beam_search_with_cache_equals_without_and_beats_greedy(pos):
    model = tiny(pos)
    prompt = [6, 2]
    cached = generate(model, [prompt], 8, num_beams=4, length_penalty=0.0, num_samples=2)
    uncached = generate(model, [prompt], 8, num_beams=4, length_penalty=0.0, num_samples=2, use_cache=False)
    np.testing.assert_array_equal(cached, uncached)
    greedy = generate(model, [prompt], 8, temperature=0)[0]
    best = seq_logprob(model, prompt, cached[0, 2:])
    assert best >= seq_logprob(model, prompt, greedy[2:]) - 1e-6
    assert best >= seq_logprob(model, prompt, cached[1, 2:]) - 1e-6


# ---- stopping ---------------------------------------------------------------------------------------
class LetterTokenizer:
    """Token i decodes to a short piece; some pieces span two letters so strings cross tokens."""

    def __init__(self, vocab=48):
        letters = "abcdefghij"
        self.pieces = [letters[i % 10] if i < 30 else letters[i % 10] + letters[(i + 3) % 10] for i in range(vocab)]

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)

    def encode(self, text):
        return [self.pieces.index(c) for c in text]


def test_stop_strings_end_generation_on_the_completing_token():
    model, tok = tiny("learned"), LetterTokenizer()
    prompt = [1, 2]
    free = generate(model, [prompt], 30, temperature=0)[0, 2:].tolist()
    text = tok.decode(free)
    # a stop string that spans the boundary between the 4th and 5th generated tokens
    cut = len(tok.decode(free[:4]))
    stop = text[cut - 1:cut + 1]
    first = text.find(stop)
    out = generate(model, [prompt], 30, temperature=0, stop=[stop], tokenizer=tok)[0, 2:].tolist()
    # generation stops at the first token whose text completes the stop string
    n = next(i for i in range(1, 31) if stop in tok.decode(free[:i]))
    assert out == free[:n] and n <= 5
    pieces = list(stream_text(model, tok, prompt, 30, stop=[stop], temperature=0))
    assert "".join(pieces) == text[:first]
    assert all(stop not in p for p in pieces)


def test_stop_ids_end_each_row_and_pad_the_rest():
    model = tiny("learned")
    free = generate(model, [[1, 2], [3, 4]], 20, temperature=0)
    stop_id = int(free[0, 5])
    out = generate(model, [[1, 2], [3, 4]], 20, temperature=0, stop=[stop_id])
    row0 = out[0].tolist()
    end = row0.index(stop_id, 2) + 1
    assert row0[:end] == free[0, :end].tolist() and set(row0[end:]) <= {PAD}


def test_stream_text_streams_whole_text_without_stop():
    model, tok = tiny("rope"), LetterTokenizer()
    pieces = list(stream_text(model, tok, "ab", 12, temperature=0))
    full = generate(model, [tok.encode("ab")], 12, temperature=0)[0, 2:].tolist()
    assert "".join(pieces) == tok.decode(full) and len(pieces) > 1


# ---- the model's own methods and bad input ------------------------------------------------------------
def test_model_generate_and_stream_methods():
    model = tiny("learned")
    np.testing.assert_array_equal(model.generate(np.array([[1, 2]]), 6, temperature=0),
                                  generate(model, [[1, 2]], 6, temperature=0))
    assert len(list(model.stream(np.array([1, 2]), 6, temperature=0))) == 6
    assert model.training  # generation restores the training flag


def test_a_suspended_stream_leaves_grad_mode_and_training_flag_alone():
    model = tiny("learned")
    model.train()
    it = model.stream([[1, 2]], 5, temperature=0)
    next(it)
    assert autograd.is_grad_enabled() and model.training
    next(it)
    assert autograd.is_grad_enabled() and model.training


def test_zero_new_tokens_returns_the_prompt():
    model = tiny("learned")
    assert generate(model, [[1, 2]], 0).tolist() == [[1, 2]]
    assert generate(model, [[1, 2]], 0, num_beams=3).tolist() == [[1, 2]]


@pytest.mark.parametrize("idx, kwargs, match", [
    ([[]], {}, "non-empty"),
    ([[1, 99]], {}, "outside the vocabulary"),
    ([[1.5]], {}, "integer"),
    ([[1]], {"temperature": -1.0}, "temperature"),
    ([[1]], {"top_p": 2.0}, "top_p"),
    ([[1]], {"stop": ["x"]}, "tokenizer"),
    ([[1]], {"window_keep": 0}, "window_keep"),
])
def test_bad_input_gives_a_clear_error(idx, kwargs, match):
    with pytest.raises((ValueError, TypeError), match=match):
        generate(tiny("learned"), idx, 3, **kwargs)


@pytest.mark.gpu
@pytest.mark.skipif(not autograd.cuda_available(), reason="needs CuPy and an NVIDIA GPU")
def test_greedy_on_the_gpu_equals_the_cpu():
    model = tiny("rope", seed=1)
    cpu = generate(model, [[1, 2, 3]], 30, temperature=0)
    model.to("cuda")
    try:
        gpu = generate(model, [[1, 2, 3]], 30, temperature=0)
        gpu_nocache = generate(model, [[1, 2, 3]], 30, temperature=0, use_cache=False)
    finally:
        model.to("cpu")
    np.testing.assert_array_equal(cpu, gpu)
    np.testing.assert_array_equal(gpu, gpu_nocache)


# ---- the command line -----------------------------------------------------------------------------
def write_run(tmp_path):
    import json

    from gpt.data.char_tokenizer import CharTokenizer
    from gpt.training.checkpoint import save_checkpoint

    tok = CharTokenizer.train(["abcdefgh ij\n"], special_tokens=["<|endoftext|>"])
    autograd.manual_seed(3)
    cfg = GPTConfig(vocab_size=tok.vocab_size, block_size=16, n_layer=2, n_head=2, n_embd=16, init_std=0.5)
    model = GPT(cfg)
    save_checkpoint(tmp_path / "run" / "latest.safetensors", model.state_dict(), None,
                    {"step": 0, "config": cfg.to_dict(), "tokenizer": json.dumps(tok.to_dict())})
    return model, tok


def test_gpt_sample_streams_the_greedy_continuation(tmp_path, capsys):
    from gpt.cli import main

    model, tok = write_run(tmp_path)
    eot = tok.encode("<|endoftext|>")[0]
    rc = main(["sample", "--run", str(tmp_path / "run"), "--prompt", "abc", "--max-new-tokens", "30",
               "--temperature", "0", "-n", "2", "--stats"])
    out, err = capsys.readouterr()
    assert rc == 0
    ids = generate(model, [tok.encode("abc")], 30, temperature=0, stop=[eot])[0, 3:].tolist()
    text = "abc" + tok.decode([t for t in ids if t not in (eot, PAD)])
    assert out.split("\n" + "-" * 40 + "\n") == [text, text + "\n"]
    assert "tokens/s" in err and "KV cache" in err


def test_gpt_sample_reads_a_prompt_file_and_reports_bad_input(tmp_path, capsys):
    from gpt.cli import main

    write_run(tmp_path)
    (tmp_path / "p.txt").write_text("hij", encoding="utf-8")
    assert main(["sample", "--checkpoint", str(tmp_path / "run" / "latest.safetensors"),
                 "--prompt-file", str(tmp_path / "p.txt"), "--max-new-tokens", "5", "--seed", "0"]) == 0
    assert capsys.readouterr().out.startswith("hij")
    assert main(["sample", "--run", str(tmp_path / "nowhere")]) == 2
    assert "nowhere" in capsys.readouterr().err
    assert main(["sample", "--run", str(tmp_path / "run"), "--prompt", "xyz!"]) == 2
    assert "not in this character-level vocabulary" in capsys.readouterr().err
    assert main(["sample", "--run", str(tmp_path / "run"), "--top-p", "1.5"]) == 2
    assert "top_p" in capsys.readouterr().err
    # refused before the prompt is shown, so the error is a line of its own
    assert main(["sample", "--run", str(tmp_path / "run"), "--prompt", "abc", "--stop", ""]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "stop strings must not be empty" in err
    assert main(["sample", "--run", str(tmp_path / "run"), "--prompt", "abc", "--max-new-tokens", str(10**12)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "--max-new-tokens" in err


def test_generate_names_a_bad_count_and_a_beam_search_short_of_samples(tmp_path):
    model, _ = write_run(tmp_path)
    for kw, word in ((dict(max_new_tokens=-1, num_beams=2), "max_new_tokens"), (dict(max_new_tokens=3, num_beams=-3), "num_beams"),
                     (dict(max_new_tokens=3, num_beams=2.5), "num_beams"), (dict(max_new_tokens=3, num_samples=2.5), "num_samples")):
        with pytest.raises(ValueError, match=f"{word} must be an integer >= "):
            generate(model, [[1, 2]], **kw)
    # one new token has at most vocab_size continuations: fewer than the samples asked for
    n = model.config.vocab_size + 1
    with pytest.raises(ValueError, match=f"fewer than num_samples={n}"):
        generate(model, [[1, 2], [3, 4]], 1, num_beams=n, num_samples=n)
    assert generate(model, [[1, 2]], 3.0, num_beams=2).shape == (1, 5)  # a whole float is a count


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_non_finite_weights_are_refused_instead_of_sampling_token_zero(bad):
    from gpt.inference.beam import beam_search

    model = micro(dict(mlp="gelu"))
    model.eval()
    model.transformer.wte.weight.data[3] = bad  # the row of a token the prompt holds
    prompt = np.array([[1, 3]])
    for options in ({}, {"temperature": 0}, {"temperature": 0.8, "top_k": 5}):
        with pytest.raises(ValueError, match="the model produced logits that are NaN or \\+inf"):
            generate(model, prompt, 3, seed=0, **options)
    with pytest.raises(ValueError, match="log-probabilities that are NaN"):
        beam_search(lambda seqs, parents: np.full((1, 4), np.nan), 2, 3)
    assert beam_search(lambda seqs, parents: np.log(np.full((seqs.shape[0], 4), 0.25)), 2, 2)  # finite: fine


@pytest.mark.parametrize("seed", [-1, 1.5, True])
def test_a_bad_seed_is_named(seed):
    with pytest.raises(ValueError, match="seed must be None or an int >= 0"):
        S.make_generator(seed)


def test_ids_past_the_tokenizers_vocabulary_are_never_sampled():
    """Checkpoints pad their vocabulary past the tokenizer's (Qwen2, Phi-3): a padded id has no
    text, so a sampler given the tokenizer leaves them out."""
    from bpe import Tokenizer

    tok = Tokenizer.from_merges([(104, 105)])  # 257 ids
    autograd.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=400, block_size=16, n_layer=1, n_head=2, n_embd=8, init_std=1.0)).eval()
    model.transformer.wte.weight.data[:257] *= 0.01  # the padded rows' logits win unless left out
    prompt = np.array([tok.encode("hi")])
    assert generate(model, prompt, 8, temperature=0)[0, 1:].max() >= 257  # without the tokenizer
    for options in ({"temperature": 0}, {"temperature": 1.0, "seed": 0}, {"num_beams": 2}):
        out = generate(model, prompt, 8, tokenizer=tok, **options)
        assert out[0, 1:].max() < 257 and tok.decode(out[0].tolist())
    assert "".join(stream_text(model, tok, "hi", 8, temperature=0)) == tok.decode(
        generate(model, prompt, 8, tokenizer=tok, temperature=0)[0, 1:].tolist())

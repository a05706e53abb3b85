"""gpt.seq2seq: the generated number data, the 2017 translator and the encoder-only model
(against the NumPy reference of tests/nn/test_transformer.py), cached vs uncached decoding,
beam search, gradients, a smoke training run and the `gpt translate` command."""
import json
import math
import re

import numpy as np
import pytest

import autograd
from gpt.cli import main
from gpt.seq2seq import data as D
from gpt.seq2seq.decode import Seq2SeqDecoder, translate_ids
from gpt.seq2seq.model import EncoderOnly, Seq2Seq, Seq2SeqConfig
from gpt.seq2seq.train import TrainSettings, evaluate_encoder, load_run, train_task
from nn.transformer_layout import to_torch_state_dict
from tests.nn.gradcheck_util import check_gradients
from tests.nn.test_transformer import act_fn, randomise, transformer_ref


@pytest.fixture(autouse=True)
def _seed():
    autograd.manual_seed(0)


def small(**kw):
    base = dict(vocab_size=len(D.VOCAB), d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=2,
                dim_feedforward=16, dropout=0.0, max_len=24)
    return Seq2SeqConfig(**{**base, **kw})


# ---- data ----------------------------------------------------------------------------------
@pytest.mark.parametrize("n,words", [(0, "zero"), (13, "thirteen"), (40, "forty"), (105, "one hundred five"),
                                     (1017, "one thousand seventeen"), (20000, "twenty thousand"),
                                     (342017, "three hundred forty two thousand seventeen"),
                                     (999999, "nine hundred ninety nine thousand nine hundred ninety nine")])
def test_numbers_in_words_and_back_through_the_vocabulary(n, words):
    assert " ".join(D.number_to_words(n)) == words
    assert D.decode(D.encode(D.number_to_words(n))) == words
    assert D.decode(D.encode(D.number_to_digits(n))) == f"{n:,}"


def test_held_out_numbers_are_never_sampled_for_training():
    rng = np.random.default_rng(0)
    train, held = D.sample_numbers(rng, 5000), D.sample_numbers(rng, 500, "held_out", unique=True)
    assert not D.held_out(train).any() and D.held_out(held).all() and len(set(held.tolist())) == 500
    assert 0.04 < D.held_out(np.arange(200_000)).mean() < 0.06


def test_perturbed_numbers_differ_in_exactly_one_digit():
    rng = np.random.default_rng(1)
    n = D.sample_numbers(rng, 300)
    p = D.perturb(n, rng)
    for a, b in zip(n, p):
        sa, sb = str(a), str(b)
        assert len(sa) == len(sb) and sum(x != y for x, y in zip(sa, sb)) == 1


def test_every_word_of_the_vocabulary_is_trained_on():
    train = D.sample_numbers(np.random.default_rng(0), 20_000)
    seen = {t for n in train.tolist() for t in D.number_to_words(n) + D.number_to_digits(n)}
    assert seen == set(D.VOCAB) - set(D.SPECIALS)
    assert not D.held_out(0)  # the only number with the word "zero"


@pytest.mark.parametrize("text", ["", "   ", "-5", "1,2,3", "12,34", "thousand", "one hundred and five",
                                  "forty forty", "1000000", "one thousand thousand"])
def test_inputs_outside_the_task_are_refused_with_the_rule(text):
    with pytest.raises(ValueError, match=re.escape(D.INPUT_RULE)):
        D.parse_source(text)


def test_words_and_digits_read_back_as_their_number():
    assert all(D.words_to_number(D.number_to_words(n)) == n for n in range(0, 1_000_000, 997))
    assert D.parse_source("0") == ("to_words", [D.TO_WORDS, D.ID["0"]])
    assert D.parse_source("zero") == ("to_digits", [D.TO_DIGITS, D.ID["zero"]])


def test_user_inputs_parse_into_tagged_sources():
    assert D.parse_source("342,017") == ("to_words", [D.TO_WORDS] + D.encode(list("342,017")))
    assert D.parse_source("Forty-two")[1] == [D.TO_DIGITS] + D.encode(["forty", "two"])
    with pytest.raises(ValueError, match="unknown token 'fourty'"):
        D.parse_source("fourty two")


# ---- the translator against the reference --------------------------------------------------
@pytest.mark.parametrize("norm_first,share", [(False, True), (True, False)])
def test_translator_logits_equal_the_reference_with_padding_masks(norm_first, share):
    cfg = small(norm_first=norm_first, share_embeddings=share, activation="gelu")
    model = randomise(Seq2Seq(cfg)).double().eval()
    src = D.pad_rows([[3, 9, 10, 11], [4, 20]])
    tgt = D.pad_rows([[D.BOS, 21, 22], [D.BOS, 9]])
    got = model(src, tgt)[0].data
    C = cfg.d_model
    table = np.asarray(model.positions.table, np.float64)
    emb = lambda E, ids: E[ids] * math.sqrt(C) + table[:ids.shape[1]]  # noqa: E731
    masks = dict(tgt_mask=np.triu(np.full((3, 3), -np.inf), 1), src_key_padding_mask=src == D.PAD,
                 memory_key_padding_mask=src == D.PAD, tgt_key_padding_mask=tgt == D.PAD)
    sd = to_torch_state_dict({k[len("transformer."):]: v for k, v in model.state_dict().items()
                              if k.startswith("transformer.")})
    h = transformer_ref(emb(model.src_embed.weight.data, src).transpose(1, 0, 2),
                        emb(model.tgt_embed.weight.data, tgt).transpose(1, 0, 2), sd, 2, 1, 2, norm_first,
                        act_fn("gelu"), masks).transpose(1, 0, 2)
    np.testing.assert_allclose(got, h @ model.tgt_embed.weight.data.T, rtol=1e-9, atol=1e-10)
    assert (model.src_embed is model.tgt_embed) == share and model.lm_head is None


def test_source_padding_does_not_change_the_translation():
    model = randomise(Seq2Seq(small())).double().eval()
    src = [3, 9, 10, 11]
    tgt = np.array([[D.BOS, 21, 22]])
    alone = model(np.array([src]), tgt)[0].data
    padded = model(np.array([src + [D.PAD] * 5]), tgt)[0].data
    np.testing.assert_allclose(padded, alone, rtol=1e-12, atol=1e-12)


def test_untied_output_layer_and_errors_name_the_problem():
    model = Seq2Seq(small(tie_output=False))
    assert model.output_weight() is model.lm_head.weight and model.lm_head.weight.shape == (8, len(D.VOCAB))
    with pytest.raises(ValueError, match=r"token id 99 in src is outside the vocabulary \[0, 49\)"):
        model(np.array([[3, 99]]), np.array([[D.BOS]]))
    with pytest.raises(ValueError, match="src of length 30 exceeds max_len=24"):
        model(np.ones((1, 30), np.int64), np.array([[D.BOS]]))
    with pytest.raises(ValueError, match=r"expected targets of shape \(1, 1\)"):
        model(np.array([[3, 9]]), np.array([[D.BOS]]), np.array([[1, 2]]))
    with pytest.raises(ValueError, match="d_model=10 must be divisible by nhead=4"):
        Seq2SeqConfig(vocab_size=49, d_model=10, nhead=4)


# ---- decoding ------------------------------------------------------------------------------
def test_cached_decoding_gives_the_uncached_logits_at_every_step():
    model = randomise(Seq2Seq(small()), seed=4).double().eval()
    src = D.pad_rows([[3, 9, 10, 8, 11], [4, 22, 47]])
    cached, plain = Seq2SeqDecoder(model, src, 8, use_cache=True), Seq2SeqDecoder(model, src, 8, use_cache=False)
    rng = np.random.default_rng(0)
    for _ in range(6):
        a, b = cached.logits(), plain.logits()
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
        tok = rng.integers(8, 49, size=2)
        cached.push(tok)
        plain.push(tok)
    assert cached.caches[0].length == 6
    # the cross-attention keys and values were computed once, from the memory
    assert cached.memory_kv[0][0].shape == (2, 2, 5, 4)
    assert translate_ids(model, [[3, 9, 10]], 8, use_cache=True) == translate_ids(model, [[3, 9, 10]], 8, use_cache=False)


def test_beam_search_reuses_the_sampler_cached_equals_uncached_and_one_beam_is_greedy():
    model = randomise(Seq2Seq(small()), seed=5).double().eval()
    srcs = [[3, 9, 10, 11], [4, 25, 47]]
    greedy = translate_ids(model, srcs, 6)
    assert translate_ids(model, srcs, 6, num_beams=1) == greedy
    assert translate_ids(model, srcs, 6, num_beams=3) == translate_ids(model, srcs, 6, num_beams=3, use_cache=False)


def test_sampling_with_a_seed_is_reproducible():
    from gpt.inference.sample import SamplingConfig

    model = randomise(Seq2Seq(small()), seed=6).eval()
    s = SamplingConfig(temperature=1.0, top_k=5)
    a = translate_ids(model, [[3, 9, 10]] * 3, 6, sampling=s, seed=1)
    assert a == translate_ids(model, [[3, 9, 10]] * 3, 6, sampling=s, seed=1)



def test_sources_may_be_an_array_and_bad_rows_are_refused_by_name():
    model = randomise(Seq2Seq(small()), seed=7).eval()
    rows = [[3, 9, 10], [4, 25, 47]]
    assert translate_ids(model, np.array(rows), 6) == translate_ids(model, rows, 6)
    assert translate_ids(model, np.zeros((0, 3), np.int64)) == []
    with pytest.raises(ValueError, match=r"source 1 must be a non-empty 1-D sequence of token ids"):
        translate_ids(model, [[3, 9], []])
    with pytest.raises(TypeError, match="source 0 must hold integer token ids, got dtype float64"):
        translate_ids(model, [[3.5, 9]])
    with pytest.raises(ValueError, match=r"source 0: token id 99 is outside the vocabulary \[0, 49\)"):
        translate_ids(model, [[3, 99]])
    with pytest.raises(ValueError, match="max_new_tokens must be an integer >= 0, got -1"):
        translate_ids(model, rows, -1)


def test_beam_search_checks_its_width_and_decodes_no_tokens_as_greedy_does():
    from gpt.inference.sample import SamplingConfig

    model = randomise(Seq2Seq(small()), seed=8).eval()
    assert translate_ids(model, [[3, 9]], 0, num_beams=3) == translate_ids(model, [[3, 9]], 0) == [[]]
    for beams in (0, -3):
        with pytest.raises(ValueError, match=f"num_beams must be >= 1, got {beams}"):
            translate_ids(model, [[3, 9]], 4, num_beams=beams)
    with pytest.raises(ValueError, match="beam search is deterministic: sampling with temperature 2"):
        translate_ids(model, [[3, 9]], 4, num_beams=3, sampling=SamplingConfig(temperature=2.0))
    greedy_config = SamplingConfig(temperature=0.0)  # what `gpt translate sample --beams 3` passes
    assert translate_ids(model, [[3, 9]], 4, num_beams=3, sampling=greedy_config) == \
        translate_ids(model, [[3, 9]], 4, num_beams=3)

# ---- gradients -----------------------------------------------------------------------------
def test_translator_and_encoder_only_gradients_in_float64():
    model = Seq2Seq(small(num_decoder_layers=1)).double()
    src, tgt = D.pad_rows([[3, 9, 10], [4, 20]]), np.array([[D.BOS, 21], [D.BOS, 9]])
    params = [model.src_embed.weight, model.transformer.decoder.layers[0].multihead_attn.c_q.weight]
    check_gradients(lambda: model(src, tgt)[0], params, max_elems=6)
    enc = EncoderOnly(small()).double()
    ids = D.pad_rows([[D.CLS, 9, D.SEP, 20], [D.CLS, 10, 11]])
    check_gradients(lambda: enc(ids)[1], [enc.embed.weight, enc.pooler.weight, enc.classifier.bias], max_elems=6)


def test_encoder_only_attention_is_bidirectional_and_ignores_padding():
    enc = randomise(EncoderOnly(small())).double().eval()
    a = enc(np.array([[D.CLS, 9, D.SEP, 20]]))[1].data
    b = enc(np.array([[D.CLS, 9, D.SEP, 21]]))[1].data        # only the last token differs
    assert not np.allclose(a, b)                               # position 0 sees it
    padded = enc(np.array([[D.CLS, 9, D.SEP, 20, D.PAD, D.PAD]]))[1].data
    np.testing.assert_allclose(padded, a, rtol=1e-12, atol=1e-12)


# ---- training, run folders, the command ----------------------------------------------------
def test_a_short_training_run_lowers_the_loss_and_its_folder_reloads(tmp_path):
    cfg = small(d_model=16, dim_feedforward=32)
    s = TrainSettings(steps=40, batch_size=16, lr=3e-3, warmup=5, log_every=20, eval_examples=8)
    model, summary = train_task("translate", cfg, s, tmp_path, log=lambda *_: None)
    lines = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert lines[-1]["loss"] < math.log(len(D.VOCAB)) - 0.3 and summary["steps"] == 40 and 0.0 <= summary["both"] <= 1.0
    again = load_run(tmp_path, task="translate")
    src, tgt = np.array([[3, 9, 10]]), np.array([[D.BOS, 21]])
    np.testing.assert_array_equal(again(src, tgt)[0].data, model(src, tgt)[0].data)
    with pytest.raises(ValueError, match="holds a 'translate' model, expected 'encoder'"):
        load_run(tmp_path, task="encoder")
    weights = (tmp_path / "model.safetensors").read_bytes()
    for task in ("translate", "encoder"):  # no resume here: a second run would replace the first's files
        with pytest.raises(FileExistsError, match="already holds config.json, metrics.jsonl, model.safetensors"):
            train_task(task, cfg, s, tmp_path, log=lambda *_: None)
    assert (tmp_path / "model.safetensors").read_bytes() == weights


@pytest.mark.parametrize("field, value", [("eval_examples", 10 ** 7), ("eval_examples", 0), ("lr", math.nan),
                                          ("weight_decay", math.inf), ("steps", 0)])
def test_bad_training_settings_are_refused_before_training(field, value):
    with pytest.raises(ValueError, match=rf"invalid training settings: {field}="):
        TrainSettings(**{field: value})
    with pytest.raises(ValueError, match="different numbers asked of the held_out split, which holds"):
        D.sample_numbers(np.random.default_rng(0), D.split_size("held_out") + 1, "held_out", unique=True)


def test_encoder_task_smoke_run():
    s = TrainSettings(steps=5, batch_size=8, warmup=1, log_every=5)
    model, _ = train_task("encoder", small(), s, None, log=lambda *_: None)
    acc = evaluate_encoder(model, 16)
    assert set(acc) == {"masked_token_accuracy", "pair_accuracy"}


def test_gpt_translate_train_then_sample(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["translate", "train", "--out", str(out), "--steps", "15", "--batch-size", "8", "--d-model", "16",
               "--layers", "1", "--dim-feedforward", "32", "--eval-examples", "4"])
    text = capsys.readouterr().out
    assert rc == 0 and "held-out exact match" in text and (out / "model.safetensors").is_file()
    assert main(["translate", "sample", "--run", str(out), "342,017", "forty two", "--beams", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("342,017") and lines[1].startswith("forty two")
    assert main(["translate", "sample", "--run", str(tmp_path / "none")]) == 2
    assert "no config.json" in capsys.readouterr().err


def test_a_corrupt_run_config_names_the_file(tmp_path):
    for text in ("{", "[1]"):
        (tmp_path / "config.json").write_text(text)
        with pytest.raises(ValueError, match=r"config.json: not a run's config.json"):
            load_run(tmp_path)

"""Induction scores on a hand-built 2-layer attention-only model whose heads are a previous-token
head and an induction head by construction, and the study's pieces on a few training steps."""
import numpy as np
import pytest

from gpt import GPT, GPTConfig
from gpt.inspect import analysis
from gpt.inspect.induction import InductionSpec, run_study, table, training_rows

V, S = 64, 8            # vocabulary, tokens per half
TT = 2 * S
C = 3 * V + TT          # stream slots: token | position | previous token | output


def slot(name, i):
    return {"tok": 0, "pos": V, "prev": V + TT, "out": 2 * V + TT}[name] + i


def hand_built() -> GPT:
    """Layer 0's head attends from position i to i - 1 and writes that token into the "prev" slot;
    layer 1's head matches the current token against "prev" (so it attends to the token after the
    current one's earlier occurrence) and copies that token into "out", which the head reads."""
    cfg = GPTConfig(vocab_size=V, block_size=TT, n_layer=2, n_head=1, n_embd=C, mlp="none", norm="rmsnorm",
                    bias=False, tie_weights=False)
    model = GPT(cfg).eval()
    state = {k: np.zeros_like(v) for k, v in model.state_dict().items()}
    for k in state:
        if k.endswith("ln_1.weight") or k.endswith("ln_f.weight"):
            state[k][:] = 1.0
    for v in range(V):
        state["transformer.wte.weight"][v, slot("tok", v)] = 1.0
        state["lm_head.weight"][slot("out", v), v] = 10.0
    for p in range(TT):
        state["transformer.wpe.weight"][p, slot("pos", p)] = 1.0
    beta = 30.0
    a0, a1 = state["transformer.h.0.attn.c_attn.weight"], state["transformer.h.1.attn.c_attn.weight"]
    for p in range(1, TT):
        a0[slot("pos", p), p - 1] = beta              # q: "position p - 1"
    for p in range(TT):
        a0[slot("pos", p), C + p] = 1.0               # k: "position p"
    for v in range(V):
        a0[slot("tok", v), 2 * C + v] = 1.0           # v: the token
        state["transformer.h.0.attn.c_proj.weight"][v, slot("prev", v)] = 1.0
        a1[slot("tok", v), v] = beta                  # q: the current token
        a1[slot("prev", v), C + v] = 1.0              # k: the token before
        a1[slot("tok", v), 2 * C + v] = 1.0           # v: the token, copied into "out"
        state["transformer.h.1.attn.c_proj.weight"][v, slot("out", v)] = 1.0
    model.load_state_dict(state)
    return model


def expected_induction(ids):
    """The hand-built head's score: a query splits its weight evenly over the keys whose previous
    token (position 0's own, which sees only itself) is the query's token."""
    weights = []
    for row in ids:
        prev = np.concatenate([row[:1], row[:-1]])
        for i in range(S, 2 * S):
            weights.append(1.0 / np.sum(prev[:i + 1] == row[i]))
    return np.mean(weights)


def test_a_hand_built_induction_circuit_scores_as_built():
    scores = analysis.induction_scores(hand_built(), length=S, batch=8, seed=1)
    ids = analysis.repeated_tokens(V, S, 8, seed=1)
    assert scores["previous_token"][0, 0] > 0.999
    assert scores["induction"][1, 0] == pytest.approx(expected_induction(ids), abs=1e-3)
    assert scores["induction"][1, 0] > 0.8
    assert scores["induction"][0, 0] < 0.2 and scores["previous_token"][1, 0] < 0.2
    assert scores["copying"][1, 0] > 0.99                  # the induction head's OV circuit copies
    assert scores["loss_second"] < 0.5 < np.log(V) - 0.5 < scores["loss_first"]


def test_a_random_model_has_no_induction_head():
    cfg = GPTConfig(vocab_size=V, block_size=TT, n_layer=2, n_head=2, n_embd=32, mlp="none")
    scores = analysis.induction_scores(GPT(cfg).eval(), length=S, batch=4)
    assert scores["induction"].shape == scores["previous_token"].shape == scores["copying"].shape == (2, 2)
    assert scores["induction"].max() < 0.3


def test_attention_only_blocks_have_no_mlp_and_count_their_parameters():
    cfg = GPTConfig(vocab_size=V, block_size=TT, n_layer=2, n_head=2, n_embd=32, mlp="none")
    model = GPT(cfg)
    assert model.num_params() == cfg.count_params()
    assert not any(".mlp." in n or ".ln_2." in n for n, _ in model.named_parameters())


def test_training_rows_repeat_with_periods_that_vary():
    spec = InductionSpec(length=8, batch_size=16)
    rows = training_rows(spec, np.random.default_rng(0))
    assert rows.shape == (16, 16)
    periods = {next(p for p in range(4, 9) if np.array_equal(r[p:], r[:16 - p])) for r in rows}
    assert len(periods) > 1


def test_the_study_runs_and_tabulates_its_checkpoints():
    _, rows = run_study(InductionSpec(steps=4, eval_every=2, length=6, batch_size=4, vocab_size=32, n_embd=16))
    assert [r["step"] for r in rows] == [0, 2, 4]
    text = table(rows)
    assert "induction" in text and "best heads at the end" in text


@pytest.mark.slow
def test_the_default_study_finds_an_induction_head():
    _, rows = run_study(InductionSpec())
    last = rows[-1]
    assert last["induction"] > 0.8 and last["loss_second"] < last["loss_first"]


def test_degenerate_study_sizes_are_refused_by_name(capsys):
    from gpt.cli import main
    from gpt.gradflow.jacobian import jacobian_study

    with pytest.raises(ValueError, match="induction_scores needs length >= 2"):
        analysis.induction_scores(hand_built(), length=1)
    with pytest.raises(ValueError, match="jacobian_study needs depth and width >= 1, got 0"):
        jacobian_study(depth=0)
    assert main(["inspect", "induction", "--batch-size", "0"]) == 2
    assert "--batch-size must be positive" in capsys.readouterr().err

"""Sampling strategies on plain logits: each test states the property it checks."""
import itertools

import numpy as np
import pytest
from hypothesis import given, strategies as st

from gpt.inference import sample as S
from gpt.inference.beam import _top_candidates, beam_search


def next_token(logits, generator, context=None, **options):
    return S.SamplingConfig(**options).next_token(logits, generator, context)


def logits_of(probs):
    return np.log(np.asarray(probs, dtype=np.float64))[None, :]


def kept(filtered):
    return set(np.flatnonzero(np.isfinite(filtered[0])).tolist())


# ---- top-p --------------------------------------------------------------------------------
@pytest.mark.parametrize("p, expected", [
    (0.3, {0}), (0.5, {0}), (0.51, {0, 1}), (0.75, {0, 1}), (0.76, {0, 1, 2}),
    (0.875, {0, 1, 2}), (0.9, {0, 1, 2, 3}), (1.0, {0, 1, 2, 3}),
])
def test_top_p_keeps_the_smallest_set_whose_mass_reaches_p(p, expected):
    # dyadic probabilities make every cumulative mass exact
    assert kept(S.top_p_filter(logits_of([0.5, 0.25, 0.125, 0.125]), p)) == expected


def test_top_p_ranks_by_probability_not_by_id():
    probs = [0.1, 0.05, 0.6, 0.25]
    assert kept(S.top_p_filter(logits_of(probs), 0.8)) == {2, 3}
    assert kept(S.top_p_filter(logits_of(probs), 0.86)) == {0, 2, 3}


@given(st.lists(st.floats(-8, 8), min_size=2, max_size=30), st.floats(0.01, 0.99))
def test_top_p_set_is_minimal_and_reaches_p(raw, p):
    logits = np.asarray(raw)[None, :]
    probs = S.softmax(logits)[0]
    keep = np.isfinite(S.top_p_filter(logits, p)[0])
    mass = probs[keep].sum()
    assert mass >= p - 1e-9
    # dropping the least likely kept token falls below p: no smaller set reaches it
    assert mass - probs[keep].min() < p + 1e-9
    # every kept token is at least as likely as every dropped one
    if (~keep).any():
        assert probs[keep].min() >= probs[~keep].max()


# ---- top-k, greedy, temperature -----------------------------------------------------------
@given(st.lists(st.floats(-8, 8), min_size=2, max_size=30), st.integers(1, 40))
def test_top_k_keeps_exactly_the_k_largest(raw, k):
    logits = np.asarray(raw)[None, :]
    keep = np.isfinite(S.top_k_filter(logits, k)[0])
    assert keep.sum() == min(k, logits.shape[1])
    if (~keep).any():
        assert logits[0, keep].min() >= logits[0, ~keep].max()


def _top_k_by_sort(logits, k):
    """The definition: a stable sort on -logits (ties by id, NaN last), the first k kept."""
    out = np.array(logits, dtype=np.float64)
    order = np.argsort(-out, axis=1, kind="stable")
    np.put_along_axis(out, order[:, k:], -np.inf, axis=1)
    return out


@given(st.lists(st.lists(st.sampled_from([-np.inf, -1.0, 0.0, 0.5, 2.0, np.nan]) | st.floats(-3, 3),
                         min_size=6, max_size=6), min_size=1, max_size=4),
       st.integers(1, 6))
def test_top_k_keeps_the_same_tokens_as_a_stable_sort(rows, k):
    # few distinct values: ties at the k-th value, rows of -inf, NaNs and fewer than k numbers
    logits = np.asarray(rows, dtype=np.float64)
    np.testing.assert_array_equal(S.top_k_filter(logits, k), _top_k_by_sort(logits, k))


def test_top_k_one_equals_greedy_for_every_seed_and_temperature():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(16, 50))
    logits[3, [7, 9]] = 10.0  # a tie: both greedy and top-1 take the lower id
    want = S.greedy(logits)
    for seed, temp in itertools.product(range(5), (0.5, 1.0, 3.0)):
        got = next_token(logits, np.random.default_rng(seed), temperature=temp, top_k=1)
        np.testing.assert_array_equal(got, want)
    assert want[3] == 7


def test_temperature_zero_is_greedy_and_ignores_filters():
    logits = np.array([[0.1, 2.0, -1.0, 1.9]])
    got = next_token(logits, None, temperature=0, top_k=3, top_p=0.1)
    assert got.tolist() == [1]


def test_samples_follow_the_distribution():
    probs = np.array([0.5, 0.3, 0.15, 0.05])
    gen = np.random.default_rng(123)
    draws = np.concatenate([next_token(np.tile(logits_of(probs), (1000, 1)), gen) for _ in range(20)])
    freq = np.bincount(draws, minlength=4) / draws.size
    np.testing.assert_allclose(freq, probs, atol=0.01)


def test_filtered_tokens_are_never_sampled():
    probs = np.array([0.4, 0.3, 0.2, 0.1])
    gen = np.random.default_rng(1)
    draws = next_token(np.tile(logits_of(probs), (5000, 1)), gen, top_k=2)
    assert set(np.unique(draws).tolist()) == {0, 1}
    draws = next_token(np.tile(logits_of(probs), (5000, 1)), gen, top_p=0.65)
    assert set(np.unique(draws).tolist()) == {0, 1}


def test_low_temperature_sharpens_high_temperature_flattens():
    logits = logits_of([0.6, 0.3, 0.1])
    cold = S.softmax(S.apply_temperature(logits, 0.25))[0]
    hot = S.softmax(S.apply_temperature(logits, 4.0))[0]
    assert cold[0] > 0.6 > hot[0] and hot[0] - hot[2] < 0.6 - 0.1


def test_same_seed_same_samples_different_seed_different_samples():
    logits = np.random.default_rng(0).normal(size=(4, 100))
    a = [next_token(logits, g, temperature=1.0) for g in [S.make_generator(7)] * 10]
    b = [next_token(logits, g, temperature=1.0) for g in [S.make_generator(7)] * 10]
    c = [next_token(logits, g, temperature=1.0) for g in [S.make_generator(8)] * 10]
    np.testing.assert_array_equal(np.stack(a), np.stack(b))
    assert not np.array_equal(np.stack(a), np.stack(c))


# ---- repetition penalty -------------------------------------------------------------------
def test_repetition_penalty_divides_positive_and_multiplies_negative_logits():
    logits = np.array([[2.0, -2.0, 1.0, -1.0]])
    out = S.apply_repetition_penalty(logits, [[0, 1, 1]], 2.0)
    np.testing.assert_allclose(out, [[1.0, -4.0, 1.0, -1.0]])


def test_repetition_penalty_is_per_row_and_ignores_padding():
    logits = np.ones((2, 3))
    out = S.apply_repetition_penalty(logits, [[-1, 2], [0]], 4.0)
    np.testing.assert_allclose(out, [[1, 1, 0.25], [0.25, 1, 1]])


def test_repetition_penalty_changes_the_greedy_choice():
    logits = np.array([[3.0, 2.0, 0.5]])
    assert next_token(logits, None, context=[[0]], temperature=0).tolist() == [0]
    assert next_token(logits, None, context=[[0]], temperature=0, repetition_penalty=2.0).tolist() == [1]


@pytest.mark.parametrize("kwargs, word", [
    ({"temperature": -1}, "temperature"), ({"top_k": 0}, "top_k"), ({"top_p": 1.5}, "top_p"),
    ({"top_p": 0.0}, "top_p"), ({"repetition_penalty": 0.0}, "repetition_penalty"),
    ({"top_k": 2.5}, "top_k"), ({"top_k": np.inf}, "top_k"), ({"top_k": np.nan}, "top_k"),
    ({"repetition_penalty": np.inf}, "repetition_penalty"),
])
def test_bad_sampling_arguments_name_themselves_when_the_config_is_made(kwargs, word):
    with pytest.raises(ValueError, match=word):
        S.SamplingConfig(**kwargs)


def test_a_temperature_near_zero_samples_the_argmax_as_its_limit_does():
    """1 / 1e-310 overflows: dividing raw logits sent the max to +inf, softmax to NaN, the pick to token 0."""
    logits = np.array([[1.0, 3.0, 2.0], [-5.0, -7.0, -6.0]])
    for seed in range(20):
        assert next_token(logits, np.random.default_rng(seed), temperature=1e-310).tolist() == [1, 0]
    for t in (0.3, 1.0, 7.0):  # the shift by the row's max changes no probability
        shifted = S.softmax(S.apply_temperature(logits, t))
        assert np.allclose(shifted, S.softmax(logits / t), rtol=1e-12, atol=0)


def test_a_whole_float_top_k_is_an_int_and_filters():
    cfg = S.SamplingConfig(top_k=2.0)
    assert cfg.top_k == 2 and type(cfg.top_k) is int
    assert cfg.next_token(np.array([[0.0, 5.0, 4.0]]), np.random.default_rng(0)).item() in (1, 2)


def test_a_penalty_past_floats_range_leaves_the_infinite_logits_as_equals():
    """2 / 1e-310 is +inf: the tokens whose logit overflowed share the draw, never NaN or token 0 by default."""
    logits, context = np.array([[-3.0, 2.0, 1.0, -1.0]]), [[1, 2]]
    picks = {next_token(logits, np.random.default_rng(s), context, repetition_penalty=1e-310).item()
             for s in range(40)}
    assert picks == {1, 2}
    assert next_token(logits, None, context, repetition_penalty=1e-310, temperature=0).item() == 1


def test_sampling_config_is_one_frozen_value_and_takes_options_one_way():
    cfg = S.SamplingConfig(temperature=0.7, top_k=5)
    with pytest.raises(AttributeError):
        cfg.temperature = 1.0  # frozen: checked once, never changed after
    assert S.SamplingConfig.of(cfg) is cfg and S.SamplingConfig.of(top_p=0.9) == S.SamplingConfig(top_p=0.9)
    with pytest.raises(TypeError, match="not both"):
        S.SamplingConfig.of(cfg, temperature=0.5)
    with pytest.raises(TypeError, match="unknown sampling option.*tempreature"):
        S.SamplingConfig.of(tempreature=0.5)
    with pytest.raises(ValueError, match="top_k"):
        S.SamplingConfig(top_k=True)


def test_greedy_on_float32_logits_equals_greedy_on_their_float64_copy():
    logits = np.random.default_rng(4).standard_normal((6, 40)).astype(np.float32)
    logits[2, [3, 8]] = 9.0  # a tie
    np.testing.assert_array_equal(S.greedy(logits), np.argmax(logits.astype(np.float64), axis=1))
    assert S.greedy(logits[0]).shape == (1,) and S.greedy(logits.T.copy().T)[2] == 3


# ---- stopping -----------------------------------------------------------------------------
class PieceTokenizer:
    """A toy tokenizer whose token i decodes to pieces[i]."""

    def __init__(self, pieces):
        self.pieces = pieces

    def decode(self, ids):
        return "".join(self.pieces[i] for i in ids)


PIECES = ["a", "b", "\n", "EN", "D", "END", "x\n"]


def run_stop(tokens, stop):
    state = S.make_stop_state(stop, PieceTokenizer(PIECES))
    for i, t in enumerate(tokens):
        if state.push(t):
            return i, state
    return None, state


def test_stop_string_spanning_tokens_stops_on_the_completing_token():
    at, state = run_stop([0, 3, 1, 4, 0, 0], ["END"])
    assert at is None  # "aENbDaa": EN and D are not adjacent
    at, state = run_stop([0, 3, 4, 0], ["END"])
    assert at == 2 and state.text == "a" and state.tokens == [0, 3, 4]


def test_a_token_that_only_begins_a_stop_string_does_not_stop():
    at, _ = run_stop([0, 3, 0, 1], ["END"])
    assert at is None


def test_stop_string_inside_one_token_and_across_a_boundary():
    at, state = run_stop([1, 5, 0], ["END"])
    assert at == 1 and state.text == "b"
    at, state = run_stop([6, 2, 0], ["\n\n"])  # "x\n" + "\n"
    assert at == 1 and state.text == "x"


def test_earliest_stop_string_wins_and_stop_ids_stop_on_the_id():
    at, state = run_stop([0, 6, 0, 1], ["ab", "\n"])
    assert at == 1 and state.text == "ax"
    at, state = run_stop([2, 0, 1, 0], ["b", "ab"])
    assert at == 2 and state.text == "\n"
    at, state = run_stop([0, 1, 2, 0], [2])
    assert at == 2 and state.tokens == [0, 1, 2] and state.text_end is None


def test_stop_strings_need_a_tokenizer_and_reject_bad_entries():
    with pytest.raises(ValueError, match="tokenizer"):
        S.make_stop_state(["END"])
    with pytest.raises(TypeError, match="stop entries"):
        S.make_stop_state([1.5])
    with pytest.raises(ValueError, match="empty"):
        S.make_stop_state([""], PieceTokenizer(PIECES))


def test_holdback_keeps_back_possible_stop_prefixes():
    assert S.holdback("hello EN", ["END"]) == 2
    assert S.holdback("hello E", ["END", "Ex"]) == 1
    assert S.holdback("hello", ["END"]) == 0
    assert S.holdback("ab\ufffd", []) == 1


# ---- beam search --------------------------------------------------------------------------
def markov_fn(first, trans):
    """logprob_fn of a Markov chain: first-token distribution and a transition matrix."""
    lf, lt = np.log(first), np.log(trans)

    def fn(seqs, parents):
        if seqs.shape[1] == 0:
            return lf[None, :]
        return lt[seqs[:, -1]]
    return fn


def brute_force_best(first, trans, length):
    best, best_lp = None, -np.inf
    for seq in itertools.product(range(len(first)), repeat=length):
        lp = np.log(first[seq[0]]) + sum(np.log(trans[a, b]) for a, b in zip(seq, seq[1:]))
        if lp > best_lp:
            best, best_lp = list(seq), lp
    return best, best_lp


def test_beam_search_finds_the_sequence_greedy_misses():
    # greedy takes 0 (p=.6) then at best 1/3; the best sequence is 1 -> 2 (p=.4 * 1.0)
    first = np.array([0.6, 0.4, 1e-9])
    trans = np.array([[1 / 3, 1 / 3, 1 / 3], [1e-9, 1e-9, 1.0], [1 / 3, 1 / 3, 1 / 3]])
    fn = markov_fn(first, trans)
    greedy_seq = beam_search(fn, 1, 2)[0].tokens
    assert greedy_seq[0] == 0
    best = beam_search(fn, 2, 2)[0]
    assert best.tokens == [1, 2]
    assert best.logprob == pytest.approx(np.log(0.4))


@given(st.integers(0, 10_000), st.integers(2, 4), st.integers(1, 3))
def test_exhaustive_beam_search_equals_brute_force(seed, vocab, length):
    rng = np.random.default_rng(seed)
    first = rng.dirichlet(np.ones(vocab))
    trans = rng.dirichlet(np.ones(vocab), size=vocab)
    best, best_lp = brute_force_best(first, trans, length)
    got = beam_search(markov_fn(first, trans), vocab ** length, length)[0]
    assert got.tokens == best and got.logprob == pytest.approx(best_lp)


@given(st.integers(0, 10_000))
def test_one_beam_is_greedy(seed):
    rng = np.random.default_rng(seed)
    first = rng.dirichlet(np.ones(5))
    trans = rng.dirichlet(np.ones(5), size=5)
    seq = [int(np.argmax(first))]
    for _ in range(5):
        seq.append(int(np.argmax(trans[seq[-1]])))
    assert beam_search(markov_fn(first, trans), 1, 6)[0].tokens == seq


def test_length_normalisation_prefers_longer_hypotheses_when_asked():
    # token 2 ends a hypothesis. Ending at once: p=.5; going on: .5 * .9 = .45 over two tokens.
    first = np.array([0.5, 1e-9, 0.5])
    trans = np.array([[1e-9, 0.1, 0.9], [1 / 3] * 3, [1 / 3] * 3])
    fn = markov_fn(first, trans)
    final = lambda toks: toks[-1] == 2  # noqa: E731
    # raw log-probability (no normalisation) prefers the short one
    assert beam_search(fn, 2, 3, final, length_penalty=0.0)[0].tokens == [2]
    # normalised by length: log(.45)/2 > log(.5)
    assert beam_search(fn, 2, 3, final, length_penalty=1.0)[0].tokens == [0, 2]


def test_beam_search_passes_parents_so_state_can_follow_beams():
    calls = []

    def fn(seqs, parents):
        calls.append((seqs.copy(), None if parents is None else parents.copy()))
        return np.log(np.full((max(len(seqs), 1), 3), 1 / 3))
    beam_search(fn, 3, 3)
    for (prev, _), (seqs, parents) in zip(calls, calls[1:]):
        np.testing.assert_array_equal(seqs[:, :-1], prev[parents])


@given(st.lists(st.integers(-3, 3), min_size=1, max_size=40), st.integers(1, 45))
def test_top_candidates_equal_a_full_stable_sort(raw, n):
    scores = np.asarray(raw, dtype=np.float64)  # small ints: many ties
    want = np.argsort(-scores, kind="stable")[:n]
    np.testing.assert_array_equal(_top_candidates(scores, min(n, scores.size)), want)

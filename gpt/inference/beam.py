"""Beam search over any next-token log-probability function, with length normalisation.

The model-facing loop (a Decoder whose KV-cache rows follow the beams) is
gpt.inference.generate.beam_generate; this module only searches.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from gpt.inference.sample import check_finite


@dataclass
class Hypothesis:
    tokens: list
    logprob: float
    score: float


def _top_candidates(scores: np.ndarray, n: int) -> np.ndarray:
    """Indices of the n largest scores, best first, ties to the lower index: the same as a full
    stable sort, but partitioning first (beams x vocab scores, n = 2 x beams)."""
    if n < scores.size:
        kth = scores[np.argpartition(-scores, n - 1)[n - 1]]
        pool = np.flatnonzero(scores >= kth)  # every tie at the boundary, in index order
    else:
        pool = np.arange(scores.size)
    return pool[np.argsort(-scores[pool], kind="stable")][:n]


def beam_search(logprob_fn: Callable[[np.ndarray, np.ndarray | None], np.ndarray],
                num_beams: int, max_new_tokens: int, is_final: Callable[[list], bool] | None = None,
                length_penalty: float = 1.0, num_return: int = 1) -> list[Hypothesis]:
    """Beam search with length normalisation; the best `num_return` hypotheses, best first.

    logprob_fn(seqs, parents) -> (K, V) log-probabilities of the next token for each live beam,
    where seqs (K, t) int64 are the tokens generated so far (t = 0 on the first call, K = 1) and
    parents (K,) says which row of the previous call each beam extends (None on the first call;
    a model with a KV cache reorders its cache rows by it).
    is_final(tokens) says whether a hypothesis has ended (a stop id or stop string).
    A hypothesis scores sum(log p) / len ** length_penalty (length = generated tokens).
    The best `num_beams` finished hypotheses are kept. The search stops after max_new_tokens
    steps (the live beams then compete as they are), or once `num_beams` have finished and no
    live beam can beat the worst of them: log-probabilities are <= 0, so a live beam's best
    reachable score is its sum over the longest length for length_penalty > 0, over the next
    length otherwise (`_best_reachable`). With num_beams=1 it is exactly greedy decoding.
    """
    if num_beams < 1:
        raise ValueError(f"num_beams must be >= 1, got {num_beams}")
    if not 1 <= num_return <= num_beams:
        raise ValueError(f"beam search returns 1..num_beams={num_beams} sequences, asked for {num_return}")
    norm = lambda lp, n: lp / (max(n, 1) ** length_penalty)  # noqa: E731
    seqs = np.zeros((1, 0), dtype=np.int64)
    sums = np.zeros(1)
    parents = None
    finished: list[Hypothesis] = []
    for step in range(max_new_tokens):
        lp = np.asarray(logprob_fn(seqs, parents), dtype=np.float64)
        check_finite(lp, "log-probabilities")
        vocab = lp.shape[1]
        total = (sums[:, None] + lp).ravel()
        new_rows, new_sums, new_parents, done = _extend(seqs, total, vocab, num_beams, is_final, norm)
        finished = sorted(finished + done, key=lambda h: -h.score)[:num_beams]  # stable: earlier first on ties
        if not new_rows:
            break
        seqs = np.asarray(new_rows, dtype=np.int64)
        sums = np.asarray(new_sums)
        parents = np.asarray(new_parents, dtype=np.int64)
        if len(finished) == num_beams and _best_reachable(
                max(new_sums), step + 1, max_new_tokens, length_penalty) <= finished[-1].score:
            return finished[:num_return]
    # max_new_tokens reached (or nothing left to extend): the live beams compete as they are
    live = [Hypothesis(s.tolist(), float(v), norm(float(v), len(s))) for s, v in zip(seqs, sums)] \
        if seqs.shape[1] > 0 else []
    pool = sorted(finished + live, key=lambda h: -h.score)
    return pool[:num_return]


def _extend(seqs: np.ndarray, total: np.ndarray, vocab: int, num_beams: int, is_final, norm):
    """One step's choice among the (beams x vocab) summed log-probabilities `total`: up to K =
    num_beams live rows (tokens, sum, parent beam) and the hypotheses that finished this step."""
    # 2K candidates leave room for K live beams even if K of them finish now
    cand = _top_candidates(total, min(2 * num_beams, total.size))
    rows, sums, parents, done = [], [], [], []
    for rank, c in enumerate(cand):
        if not np.isfinite(total[c]):
            break
        beam, tok = divmod(int(c), vocab)
        toks = seqs[beam].tolist() + [tok]
        if is_final is not None and is_final(toks):
            # a finished hypothesis counts only if it ranks among the top K this step
            if rank < num_beams:
                done.append(Hypothesis(toks, float(total[c]), norm(float(total[c]), len(toks))))
        else:
            rows.append(toks)
            sums.append(float(total[c]))
            parents.append(beam)
        if len(rows) == num_beams:
            break
    return rows, sums, parents, done


def _best_reachable(logprob: float, length: int, max_length: int, length_penalty: float) -> float:
    """The highest score a live hypothesis of `length` tokens and summed log-probability
    `logprob` (<= 0) can still reach: its sum can only fall, so the bound is logprob / n **
    length_penalty at the n in (length, max_length] that divides it most (for a positive
    penalty the longest; otherwise the next length). At max_length it stays as it is."""
    n = length if length >= max_length else max_length if length_penalty > 0 else length + 1
    return logprob / n ** length_penalty

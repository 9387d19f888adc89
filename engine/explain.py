"""Explanations of generated tokens: the target's top tokens where each was chosen, the proposer's,
and verification's verdict in numbers (:class:`engine.events.Explanation`).

Only a run whose config asks (``RunConfig.explain``) makes them. Everything here is sized by the
vocabulary, so it is numpy, and the top tokens are found through block maxima: a whole-vocabulary
``argpartition`` costs ~0.3 ms on 49k logits, the blocks' way ~0.07 ms; with the softmax's
denominator an explained token costs ~0.12 ms of host time.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from specdec_studio.engine.events import Explanation, Ranked

TOP_N = 8  # tokens an explanation lists, the target's and the proposer's
BLOCK = 64  # values per block when narrowing the search for the top tokens
MATCHED_TOKENS = 24  # at most this many context tokens are shown as the n-gram a proposal continued


def top_indices(values: np.ndarray, n: int = TOP_N) -> np.ndarray:
    """The indices of the ``n`` largest of ``values``, largest first, a tie to the lower index (so
    the first is ``np.argmax``'s choice).

    If m is the ``n``-th largest block maximum, ``n`` blocks hold a value of at least m each, so
    the ``n``-th largest value is at least m, and every block holding one of the ``n`` largest has
    a maximum of at least m: only the blocks whose maximum reaches m (``n`` of them unless there
    are ties) and the tail that fills no block are sorted."""
    size = values.shape[0]
    n = min(n, size)
    n_blocks = size // BLOCK
    if n_blocks <= 4 * n:
        candidates = np.arange(size)
    else:
        block_max = values[: n_blocks * BLOCK].reshape(n_blocks, BLOCK).max(axis=1)
        m = np.partition(block_max, n_blocks - n)[n_blocks - n]
        best_blocks = np.flatnonzero(block_max >= m)
        candidates = (best_blocks[:, None] * BLOCK + np.arange(BLOCK)).ravel()
        candidates = np.concatenate([candidates, np.arange(n_blocks * BLOCK, size)])
    order = np.lexsort((candidates, -values[candidates].astype(np.float64)))[:n]
    return candidates[order]


def rounded(p: float) -> float:
    """A probability to 4 significant digits: what a person reads, a quarter of a trace's bytes."""
    return float(f"{p:.4g}")


class Explainer:
    """Makes the explanations of one run's tokens; ``piece(token) -> bytes`` names them."""

    def __init__(self, piece, greedy: bool, distribution=None) -> None:
        self.piece = piece
        self.greedy = greedy
        # the sampler's distribution (filtered, tempered): what sampled verification reads
        self.distribution = distribution

    def text(self, token: int) -> str:
        return self.piece(int(token)).decode("utf-8", "replace")

    def ranked(self, probs: np.ndarray, ids: np.ndarray) -> tuple[Ranked, ...]:
        return tuple((int(t), self.text(t), rounded(float(probs[t]))) for t in ids)

    def target_probs(self, logits: np.ndarray, dist: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(top ids, a vector whose entries at those ids and anywhere asked for are probabilities).

        Greedy: the model's own softmax at temperature 1 (computed only where read); sampled: the
        sampler's distribution (``dist`` if the caller has it already)."""
        if not self.greedy:
            p = dist if dist is not None else self.distribution(logits)
            return top_indices(p), p
        return top_indices(logits), _Softmax(logits)

    def explain(self, logits: np.ndarray, chosen: int, *, dist: np.ndarray | None = None, proposed: int = -1,
                proposer: str = "", accepted: bool = False, proposer_top: tuple[Ranked, ...] = (),
                matched: str = "", q: float | None = None, draw: float | None = None) -> Explanation:
        """The explanation of ``chosen``, emitted at the position whose target logits are ``logits``."""
        ids, p = self.target_probs(logits, dist)
        p_proposed = float(p[proposed]) if proposed >= 0 and not self.greedy else None
        return Explanation(self.ranked(p, ids), rounded(float(p[chosen])), int(proposed),
                           self.text(proposed) if proposed >= 0 else "", proposer if proposed >= 0 else "",
                           bool(accepted), proposer_top,
                           matched, not self.greedy, p_proposed, q, draw)

    def proposer_top(self, logits: np.ndarray, dist: np.ndarray | None = None) -> tuple[Ranked, ...]:
        """A draft's (or MTP head's) top tokens: from its sampling distribution ``dist`` where it
        drew its proposal, else from the softmax of its ``logits``."""
        if dist is not None:
            return self.ranked(dist, top_indices(dist))
        return self.ranked(_Softmax(logits), top_indices(logits))

    def matched_text(self, context: Sequence[int], n_matched: int) -> str:
        """The context's last ``n_matched`` tokens (at most MATCHED_TOKENS of them) as text."""
        n = min(n_matched, MATCHED_TOKENS, len(context))
        if n <= 0:
            return ""
        text = "".join(self.text(t) for t in context[len(context) - n:])
        return ("…" if n < n_matched else "") + text


class _Softmax:
    """The softmax of ``logits`` read entry by entry: the denominator once (float32 exponentials
    summed in float64, ~50 µs on 49k logits), each probability on demand, never the whole
    vocabulary's vector."""

    def __init__(self, logits: np.ndarray) -> None:
        self.logits = logits
        self.top = float(logits.max())
        self.log_total = math.log(float(np.exp(logits - np.float32(self.top)).sum(dtype=np.float64)))

    def __getitem__(self, token) -> float:
        return math.exp(float(self.logits[int(token)]) - self.top - self.log_total)


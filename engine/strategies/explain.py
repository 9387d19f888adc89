"""Explanations of generated tokens: the target's top tokens where each was chosen, the proposer's,
and verification's verdict in numbers (:class:`engine.events.Explanation`).

Only a run whose config asks (``RunConfig.explain``) makes them. Everything here is sized by the
vocabulary, so it is numpy, and the top tokens are found through column maxima: a whole-vocabulary
``argpartition`` costs ~0.3 ms on 49k logits, maxima of contiguous blocks ~0.09 ms, of strided
columns ~8 µs. Inside a run (SmolLM2's 49k vocabulary, its logits fresh from llama.cpp; median of
3,072 tokens) an explained token costs ~90 µs of host time: ~42 µs the top tokens, ~28 µs the
softmax's denominator, ~11 µs the ranked entries. A session can have them made on a thread of their
own while the next step decodes (:class:`ExplainerThread`): the run's path then keeps only a copy
of the logit row.
"""

from __future__ import annotations

import dataclasses
import math
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import Future

import numpy as np

from specdec_studio.engine.events import Explanation, Ranked

TOP_N = 8  # tokens an explanation lists, the target's and the proposer's
GROUPS = 768  # columns the vocabulary is read as when narrowing the search for the top tokens
MATCHED_TOKENS = 24  # at most this many context tokens are shown as the n-gram a proposal continued


def top_indices(values: np.ndarray, n: int = TOP_N) -> np.ndarray:
    """The indices of the ``n`` largest of ``values``, largest first, a tie to the lower index (so
    the first is ``np.argmax``'s choice).

    The values are read as a table of GROUPS columns (index i in column i % GROUPS). If m is the
    ``n``-th largest column maximum, ``n`` columns hold a value of at least m each, so the ``n``-th
    largest value is at least m, and every column holding one of the ``n`` largest has a maximum
    of at least m: only the columns whose maximum reaches m (``n`` of them unless there are ties)
    and the tail that fills no row are searched. Columns, not contiguous blocks: the maxima are then
    one elementwise maximum down the rows, several times faster than a maximum per block. Among
    those candidates a partition finds the ``n``-th largest value v; the values above v are in, and
    the candidates equal to v fill what is left by index, so only ``n`` values are ever sorted."""
    size = values.shape[0]
    n = min(n, size)
    n_rows = size // GROUPS
    if n_rows <= 4 or 4 * n > GROUPS:  # a short vector, or so many asked for that columns would not narrow it
        candidates = np.arange(size)
        picked = values
    else:
        table = values[: n_rows * GROUPS].reshape(n_rows, GROUPS)
        column_max = table.max(axis=0)
        m = np.partition(column_max, GROUPS - n)[GROUPS - n]
        best_columns = np.flatnonzero(column_max >= m)
        candidates = (best_columns + GROUPS * np.arange(n_rows)[:, None]).ravel()
        picked = table[:, best_columns].ravel()
        if n_rows * GROUPS < size:
            candidates = np.concatenate([candidates, np.arange(n_rows * GROUPS, size)])
            picked = np.concatenate([picked, values[n_rows * GROUPS:]])
    if picked.shape[0] > n:
        nth = np.partition(picked, picked.shape[0] - n)[picked.shape[0] - n]
        above = candidates[picked > nth]
        tied = np.sort(candidates[picked == nth])[: n - above.shape[0]]
        candidates = np.concatenate([above, tied])
        picked = values[candidates]
    order = np.lexsort((candidates, -picked.astype(np.float64)))
    return candidates[order]


def rounded(p: float) -> float:
    """A probability to 4 significant digits: what a person reads, a quarter of a trace's bytes."""
    return float(f"{p:.4g}")


class Deferred:
    """An explanation still to be made on the explainer's thread (:class:`Explainer` with a
    ``thread``). The run's output gives it the token's text (known before the explanation is
    done); :meth:`result` is the finished :class:`Explanation`. Never leaves the engine: the run's
    events carry the result (engine.runner)."""

    __slots__ = ("future", "chosen_text")

    def __init__(self, future: Future) -> None:
        self.future = future
        self.chosen_text = ""

    def done(self) -> bool:
        return self.future.done()

    def result(self) -> Explanation:
        return dataclasses.replace(self.future.result(), chosen_text=self.chosen_text)


class ExplainerThread:
    """The thread a session's explanations are made on: batches of jobs, in the order given.

    Python threads share one interpreter lock, and an explanation is mostly short numpy calls that
    hold it. A job handed over at once would take the lock from the run's thread in the middle of
    its step. So the run queues a step's jobs and hands them over just before its next decode
    (:meth:`Explainer.dispatch`): they are made while llama.cpp decodes, with the lock free."""

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._serve, name="specdec-explain", daemon=True)
        self._thread.start()

    def run(self, jobs: list) -> None:
        """Make ``jobs`` ((future, call, args), …) in order, after every batch given before."""
        self._jobs.put(jobs)

    def close(self) -> None:
        """Finish the jobs given, then end the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (jobs := self._jobs.get()) is not None:
            for future, call, args in jobs:
                try:
                    future.set_result(call(*args))
                except BaseException as exc:  # noqa: BLE001 - the run's thread raises it where it reads the result
                    future.set_exception(exc)


class Explainer:
    """Makes the explanations of one run's tokens; ``piece(token) -> bytes`` names them.

    With a ``thread`` (:class:`ExplainerThread`) the work is done there: :meth:`explain` copies
    the logit row it is given (llama.cpp's buffer, which the next decode overwrites) and returns a
    :class:`Deferred`, and the run's thread goes on to its next decode while the explanation is
    made beside it, on a core the decode does not use. The run calls :meth:`dispatch` before each
    decode, and before it waits for a result."""

    def __init__(self, piece, greedy: bool, distribution=None, thread: ExplainerThread | None = None) -> None:
        self.piece = piece
        self.greedy = greedy
        # the sampler's distribution (filtered, tempered): what sampled verification reads
        self.distribution = distribution
        self.thread = thread
        self.queued: list = []  # jobs not yet handed to the thread: (future, call, args)
        self.scratch: np.ndarray | None = None  # the softmax's working buffer, one per run
        self.texts: dict[int, str] = {}  # each token's text, decoded once a run

    def _later(self, call, *args) -> Future:
        future: Future = Future()
        self.queued.append((future, call, args))
        return future

    def dispatch(self) -> None:
        """Hand the queued jobs to the thread (a run does just before it decodes); nothing is ever
        queued without one."""
        if self.queued:
            self.thread.run(self.queued)
            self.queued = []

    def text(self, token: int) -> str:
        text = self.texts.get(token)
        if text is None:
            text = self.texts[token] = self.piece(int(token)).decode("utf-8", "replace")
        return text

    def ranked(self, probs: np.ndarray | _Softmax, ids: np.ndarray) -> tuple[Ranked, ...]:
        """(id, text, probability) of each of ``ids``: their probabilities read in one call."""
        at = probs.at(ids) if isinstance(probs, _Softmax) else probs[ids]
        return tuple((t, self.text(t), rounded(p)) for t, p in zip(ids.tolist(), at.tolist()))

    def target_probs(self, logits: np.ndarray, dist: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(top ids, a vector whose entries at those ids and anywhere asked for are probabilities).

        Greedy: the model's own softmax at temperature 1 (computed only where read); sampled: the
        sampler's distribution (``dist`` if the caller has it already)."""
        if not self.greedy:
            p = dist if dist is not None else self.distribution(logits)
            return top_indices(p), p
        ids = top_indices(logits)
        return ids, _Softmax(logits, float(logits[ids[0]]), self._scratch(logits.shape))

    def _scratch(self, shape: tuple[int, ...]) -> np.ndarray:
        if self.scratch is None or self.scratch.shape != shape:
            self.scratch = np.empty(shape, dtype=np.float32)
        return self.scratch

    def explain(self, logits: np.ndarray, chosen: int, *, dist: np.ndarray | None = None, proposed: int = -1,
                proposer: str = "", accepted: bool = False, proposer_top: tuple[Ranked, ...] | Future = (),
                matched: str = "", q: float | None = None, draw: float | None = None) -> Explanation | Deferred:
        """The explanation of ``chosen``, emitted at the position whose target logits are ``logits``
        (a :class:`Deferred` one with a thread). ``dist``, where given, is a distribution the caller
        made for this row alone (the sampler's are new arrays): it is not copied."""
        if self.thread is None:
            return self._explain(logits, chosen, dist, proposed, proposer, accepted, proposer_top, matched, q, draw)
        logits = None if logits is None or dist is not None and not self.greedy else np.array(logits)
        return Deferred(self._later(self._explain, logits, chosen, dist, proposed, proposer, accepted,
                                    proposer_top, matched, q, draw))

    def _explain(
        self, logits, chosen, dist, proposed, proposer, accepted, proposer_top, matched, q, draw
    ) -> Explanation:
        if isinstance(proposer_top, Future):  # made earlier on the same thread: done already
            proposer_top = proposer_top.result()
        ids, p = self.target_probs(logits, dist)
        p_proposed = float(p[proposed]) if proposed >= 0 and not self.greedy else None
        # the chosen token's text is the one the output shows: Output.push puts it in
        return Explanation(self.ranked(p, ids), rounded(float(p[chosen])), "", int(proposed),
                           self.text(proposed) if proposed >= 0 else "", proposer if proposed >= 0 else "",
                           bool(accepted), proposer_top,
                           matched, not self.greedy, p_proposed, q, draw)

    def proposer_top(self, logits: np.ndarray, dist: np.ndarray | None = None) -> tuple[Ranked, ...] | Future:
        """A draft's (or MTP head's) top tokens: from its sampling distribution ``dist`` where it
        drew its proposal, else from the softmax of its ``logits``; with a thread, a future of them
        (for :meth:`explain`'s ``proposer_top``)."""
        if self.thread is not None:
            return self._later(self._proposer_top, None if dist is not None else np.array(logits), dist)
        return self._proposer_top(logits, dist)

    def _proposer_top(self, logits: np.ndarray | None, dist: np.ndarray | None) -> tuple[Ranked, ...]:
        if dist is not None:
            return self.ranked(dist, top_indices(dist))
        ids = top_indices(logits)
        return self.ranked(_Softmax(logits, float(logits[ids[0]]), self._scratch(logits.shape)), ids)

    def matched_text(self, context: Sequence[int], n_matched: int) -> str:
        """The context's last ``n_matched`` tokens (at most MATCHED_TOKENS of them) as text."""
        n = min(n_matched, MATCHED_TOKENS, len(context))
        if n <= 0:
            return ""
        text = "".join(self.text(t) for t in context[len(context) - n:])
        return ("…" if n < n_matched else "") + text


class _Softmax:
    """The softmax of ``logits`` read entry by entry: the denominator once (~28 µs on 49k logits),
    each probability on demand, never the whole vocabulary's vector.

    The exponentials are summed in float32: numpy sums a contiguous float32 vector pairwise, within
    about 1e-6 of the float64 sum here, and a probability is shown to 4 digits. Each e^x is taken as
    2^(x·log2 e): numpy's float32 exp2 runs at twice its exp (0.22 against 0.48 ns a value here),
    and the product's rounding moves a term within ±EXP_SAFE by at most ~4e-6 of itself (one
    further down is too small to count). Taken of the logits themselves, not less the largest,
    wherever that cannot overflow or lose the largest term (the largest within ±EXP_SAFE);
    otherwise of the logits less the largest."""

    EXP_SAFE = 60.0  # e^60 times 152k tokens stays far below float32's largest, e^-60 above its smallest normal
    LOG2_E = np.float32(1.0 / math.log(2.0))

    def __init__(self, logits: np.ndarray, top: float | None = None, scratch: np.ndarray | None = None) -> None:
        """``top``: the largest logit where the caller knows it already; ``scratch``: a float32
        buffer of the vocabulary's size to compute in (no allocation per token)."""
        self.logits = logits
        top = float(logits.max()) if top is None else top
        if scratch is None or scratch.shape != logits.shape:
            scratch = np.empty(logits.shape, dtype=np.float32)
        if -self.EXP_SAFE <= top <= self.EXP_SAFE:
            self.shift = 0.0
            np.multiply(logits, self.LOG2_E, out=scratch)
        else:
            self.shift = top
            np.subtract(logits, np.float32(top), out=scratch)
            np.multiply(scratch, self.LOG2_E, out=scratch)
        np.exp2(scratch, out=scratch)
        self.log_total = math.log(float(scratch.sum()))

    def __getitem__(self, token) -> float:
        return math.exp(float(self.logits[int(token)]) - self.shift - self.log_total)

    def at(self, ids: np.ndarray) -> np.ndarray:
        """The probabilities of ``ids``, as float64."""
        return np.exp(self.logits[ids].astype(np.float64) - (self.shift + self.log_total))


# ----------------------------------------------------------------------------- words
PROPOSER_NAMES = {
    "draft": "the draft model", "mtp": "the MTP head", "lookahead": "a lookahead n-gram",
    "lookup:cache": "prompt lookup (n-gram cache)", "lookup:latest": "prompt lookup (latest match)",
    "lookup:simple": "ngram-simple", "lookup:map-k": "ngram-map-k", "lookup:map-k4v": "ngram-map-k4v",
    "lookup:mod": "ngram-mod",
    # Auto's sources
    "ngram": "the context n-gram cache", "ngram_alt": "the context n-gram cache (a less frequent follower)",
    "suffix": "the suffix match", "memory": "the n-gram memory", "target": "the target",
}


def proposer_name(proposer: str) -> str:
    """"ngram+suffix" (Auto's sources that proposed the same token) as words."""
    names = [PROPOSER_NAMES.get(p, p) for p in proposer.split("+") if p]
    return names[0] if len(names) == 1 else " and ".join(names) + ", which agreed" if names else ""


def shown(text: str) -> str:
    """A token's text quoted so that its spaces and line breaks can be seen."""
    return repr(text)[1:-1].join("''") if text else "''"


def verdict(why: Explanation, rejected_ghost: bool = False) -> str:
    """Verification's decision at the token's position in one sentence, with its numbers.

    ``rejected_ghost``: said of the rejected proposal itself (the stream's struck-out token),
    rather than of the token that replaced it."""
    chosen = f"{shown(why.chosen_text)} (p {why.p_chosen:.2f})"
    if why.proposed < 0:
        kind = "argmax" if not why.sampled else "draw"
        return f"Nothing was proposed here: the target's {kind} was {chosen}."
    by = proposer_name(why.proposer) or "the proposer"
    q_top = dict((t, q) for t, _, q in why.proposer_top)
    q_text = f" (q {q_top[why.proposed]:.2f})" if why.proposed in q_top else ""
    proposal = f"{by} proposed {shown(why.proposed_text)}{q_text}"
    if not why.sampled:
        outcome = "accepted" if why.accepted else f"rejected; {shown(why.chosen_text)} replaced it"
        return f"Greedy: the target's argmax was {chosen}; {proposal}: {outcome}."
    if why.q is None:  # lookahead and Auto sample the target's token, then keep a proposal equal to it
        outcome = "the proposal matched: accepted" if why.accepted else "no match: rejected"
        return (f"Sampled: {proposal} (the target's p {why.p:.3f}); the target drew {chosen}, and a proposal "
                f"is kept where it equals the draw: {outcome}.")
    if why.draw is None:
        rule = "it had q 0, so no chance"
    else:
        chance = 1.0 if why.p >= why.q else why.p / why.q
        rule = (f"accepted with probability min(1, p/q) = min(1, {why.p:.3f}/{why.q:.3f}) = {chance:.2f}; "
                f"drew {why.draw:.2f}")
    outcome = "accepted" if why.accepted else f"rejected; {chosen} was drawn from what remained"
    if rejected_ghost and not why.accepted:
        outcome = f"rejected; {chosen} took its place"
    return f"Sampled: {proposal}, {rule}: {outcome}."

"""Lookahead decoding (Fu et al. 2024) with W, N and G chosen per run.

The algorithm of llama.cpp's ``examples/lookahead``: one ``llama_decode`` per step over a batch of
W + G + 1 coupled sequences.

- sequence 0 holds the current input token; it is shared by every sequence;
- sequences 1..W are the Jacobi window: N - 1 levels of W guessed tokens, each level one iteration
  older than the next; the newest level's predictions become the next guesses, and every column
  of the window yields an N-gram for the pool;
- sequences W+1..W+G carry the pooled n-grams that start with the current token; verification
  walks them with the target's own choices and keeps the longest match.

Lossless by construction: every emitted token is the target's own choice (argmax, or a draw from
its distribution) at that position; an n-gram only decides how many positions one step covers.

Beyond the reference: the n-gram pool can be seeded from the prompt, the window can start from
prompt tokens, and the window's guesses are argmax (the run's sampler only draws emitted tokens,
so a seeded stochastic run draws exactly as often and in the same order as plain decoding).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from specdec_studio.engine.config import LookaheadParams
from specdec_studio.engine.events import Event, StepDone
from specdec_studio.engine.strategies.common import Runtime, begin_run

# The reference starts the window with this run of token ids (100 + i); kept for comparability.
WINDOW_INIT_BASE = 100


class NgramPool:
    """For each first token, a ring buffer of at most G continuations of N - 1 tokens.

    Sparse: only first tokens that were ever seen get a buffer (a run meets a few hundred of a
    vocabulary of 49k-262k), so the pool costs G × (N - 1) × 4 bytes per distinct first token
    instead of the whole vocabulary's worth. A continuation already stored is not added again.
    """

    def __init__(self, N: int, G: int) -> None:
        self.N, self.G = N, G
        self._rows: dict[int, np.ndarray] = {}  # first token -> (G, N - 1) continuations
        self._count: dict[int, int] = {}
        self._head: dict[int, int] = {}
        self.n_total = 0

    def count(self, first: int) -> int:
        return self._count.get(first, 0)

    def continuations(self, first: int) -> np.ndarray:
        """A copy of the stored continuations of ``first``, oldest slot first: (count, N - 1)."""
        rows = self._rows.get(first)
        if rows is None:
            return np.zeros((0, self.N - 1), dtype=np.int32)
        return rows[: self._count[first]].copy()

    def add(self, first: int, continuation: np.ndarray) -> bool:
        if self.G == 0:
            return False
        rows = self._rows.get(first)
        if rows is None:
            rows = self._rows[first] = np.zeros((self.G, self.N - 1), dtype=np.int32)
            self._count[first] = self._head[first] = 0
        n = self._count[first]
        if n and (rows[:n] == continuation).all(axis=1).any():
            return False
        h = self._head[first]
        rows[h] = continuation
        self._count[first] = min(self.G, n + 1)
        self._head[first] = (h + 1) % self.G
        self.n_total += 1
        return True

    @property
    def nbytes(self) -> int:
        return sum(rows.nbytes for rows in self._rows.values())

    def seed(self, tokens: Sequence[int], N: int) -> int:
        """Add every n-gram of ``tokens``; return how many were new."""
        arr = np.asarray(tokens, dtype=np.int32)
        added = 0
        for p in range(len(arr) - (N - 1)):
            added += self.add(int(arr[p]), arr[p + 1 : p + N])
        return added


def run_lookahead(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    params: LookaheadParams = rt.config.lookahead
    W, N, G = params.W, params.N, params.G
    n_seq = W + G + 1
    n_vocab = rt.vocab.n_tokens
    batch, memory, out, counters = rt.batch, rt.memory, rt.output, rt.counters

    def prepare() -> None:  # every sequence starts from the prompt's cells
        for s in range(1, n_seq):
            memory.seq_cp(0, s, -1, -1)

    pool = NgramPool(N, G)
    if params.seed_pool_from_prompt:
        pool.seed(prompt, N)

    # window[j, i]: the guess of level j (0 = oldest) for column i, at position n_past + j + i.
    if params.init_window_from_prompt and len(prompt) > 1:
        rng = np.random.default_rng(rt.config.sampling.seed or 0)
        window = rng.choice(np.asarray(prompt[1:], dtype=np.int32), size=(N - 1, W))
    else:
        window = np.tile(np.arange(WINDOW_INIT_BASE, WINDOW_INIT_BASE + W, dtype=np.int32) % n_vocab, (N - 1, 1))
    all_seqs = tuple(range(n_seq))
    every_seq = np.arange(n_seq, dtype=np.int32)
    # the window's rows are written as blocks (a step of a GPU-fast model is a millisecond or two,
    # and a token at a time cost a quarter of it): the oldest level's columns 1..W-1, column i in
    # sequences i+1..W (the columns that see it), then each newer level, column i in sequence i+1
    first_level = np.zeros((max(W - 1, 0), W), dtype=np.int32)
    first_level_counts = np.arange(W - 1, 0, -1, dtype=np.int32)
    for i in range(1, W):
        first_level[i - 1, : W - i] = np.arange(i + 1, W + 1)
    column_seqs = np.arange(1, W + 1, dtype=np.int32)
    columns = np.arange(W)

    start = yield from begin_run(rt, prompt, prepare=prepare)
    if start is None:
        return
    token, n_past = start.token, start.n_past
    t_prev = rt.t_start
    step = 1

    redecode: list[int] = []
    while not rt.should_stop(n_past, 1):
        # ---- build the batch: input token, then verification n-grams, then the window --------
        fits = n_past + params.batch_size <= rt.n_ctx
        batch.clear()
        # accepted tokens whose cells were dropped to keep the cache in position order
        if redecode:
            k = len(redecode)
            batch.add_block(np.asarray(redecode, dtype=np.int32), np.arange(n_past - k, n_past),
                            np.broadcast_to(every_seq, (k, n_seq)), False, np.full(k, n_seq))
        redecode = []
        input_row = batch.add(token, n_past, all_seqs, True)
        # a copy: the window update below may overwrite these pool slots mid-verification
        candidates = pool.continuations(token) if fits else np.zeros((0, N - 1), dtype=np.int32)
        g_cur = len(candidates)  # (g_cur, N-1)
        # batch row of candidate g's j-th token (level by level, candidate g in sequence W+1+g);
        # queued before the window for less fragmentation
        cand_rows = np.zeros((g_cur, N - 1), dtype=np.int64)
        if g_cur:
            first = batch.add_block(candidates.T.ravel(), np.repeat(n_past + 1 + np.arange(N - 1), g_cur),
                                    np.tile(np.arange(W + 1, W + 1 + g_cur, dtype=np.int32), N - 1), True)
            cand_rows[:] = first + np.arange(N - 1)[None, :] * g_cur + np.arange(g_cur)[:, None]
        last_level_rows = np.zeros(W, dtype=np.int64)
        if fits:
            if W > 1:
                first = batch.add_block(window[0, 1:], n_past + columns[1:], first_level, N == 2, first_level_counts)
                last_level_rows[1:] = first + columns[:-1]
            for j in range(1, N - 1):
                first = batch.add_block(window[j], n_past + j + columns, column_seqs, j == N - 2)
                last_level_rows[:] = first + columns
            # with N == 2 the input token itself is column 0 of the newest level
            if N == 2:
                last_level_rows[0] = input_row

        t_decode = rt.decode()
        if t_decode is None:
            break
        n_redecoded = input_row
        roles = ["redecode"] * n_redecoded + ["input"] + ["ngram"] * cand_rows.size
        roles += ["window"] * (batch.n_tokens - len(roles))
        verdicts: dict[int, str] = {}

        # ---- verify: the target's choice at each position, walking the n-grams that still match --
        emitted = []
        active = np.ones(g_cur, dtype=bool)
        seq_best = 0
        n_accepted = 0
        verify_row = input_row
        for v in range(N):
            if v > 0:
                live = np.flatnonzero(active)
                if live.size == 0:
                    break
                g_best = int(live[0])
                verify_row = int(cand_rows[g_best, v - 1])
                seq_best = W + 1 + g_best
            logits = rt.logits(verify_row)
            token = rt.sampler.sample(logits)
            # the target's choice is accepted where an n-gram still in play proposed it (the first
            # such n-gram carries the verification on)
            hits = np.flatnonzero(active & (candidates[:, v] == token)) if g_cur and v < N - 1 else ()
            hit = len(hits) > 0
            if hit:
                verdicts[int(cand_rows[hits[0], v])] = "accepted"
                n_accepted += 1
            why = _explain(rt, logits, token, candidates, active, v) if rt.explainer is not None else None
            info = out.push(token, "accepted_ngram" if hit else "sampled", why)
            if info is not None:
                emitted.append(info)
                n_past += 1
            if out.done:
                break
            # an n-gram stays active while its next token is the one just chosen
            if g_cur:
                if v == N - 1:
                    active[:] = False
                else:
                    matches = candidates[:, v] == token
                    for g in np.flatnonzero(active & ~matches):  # each n-gram's first mismatch
                        verdicts[int(cand_rows[g, v])] = "rejected"
                    active &= matches
            if fits:
                _advance_window(rt, window, pool, last_level_rows, fresh=v == 0)

        # ---- KV: keep the accepted prefix in every sequence ------------------------------------
        if not out.done and params.ordered_kv and seq_best != 0:
            memory.seq_rm(-1, n_past - n_accepted, -1)
            redecode = [e.id for e in emitted[:n_accepted]]
        elif not out.done:
            memory.seq_rm(-1, n_past, -1)
            if seq_best != 0:
                memory.seq_keep(seq_best)
                memory.seq_cp(seq_best, 0, -1, -1)
                memory.seq_rm(seq_best, -1, -1)
                for s in range(1, n_seq):
                    memory.seq_cp(0, s, -1, -1)

        now = rt.clock()
        counters.record_step(len(emitted), g_cur * (N - 1), n_accepted, t_decode)
        if g_cur:
            counters.record_positions(N - 1, n_accepted)
        if emitted:
            if rt.observed:
                yield rt.step_batch(step, roles, verdicts)
            yield StepDone(step, tuple(emitted), g_cur * (N - 1), n_accepted, t_decode, now - t_prev,
                           {"n_ngrams": g_cur, "pool_size": pool.n_total})
        t_prev = now
        step += 1


def _explain(rt: Runtime, logits: np.ndarray, token: int, candidates: np.ndarray, active: np.ndarray, v: int):
    """The explanation of the token chosen at depth ``v``: the n-gram still in play that proposed
    it (or the first one in play, rejected here), and the pooled n-gram's tokens before it (its
    key is the step's input token, the context's last)."""
    proposed, accepted, matched = -1, False, ""
    live = np.flatnonzero(active) if v < candidates.shape[1] else np.zeros(0, dtype=np.int64)
    if live.size:
        hits = live[candidates[live, v] == token]
        g = int(hits[0]) if hits.size else int(live[0])
        proposed, accepted = int(candidates[g, v]), bool(hits.size)
        key = rt.output.ids[len(rt.output.ids) - v - 1] if len(rt.output.ids) > v else -1
        matched = "".join(rt.explainer.text(t) for t in ([key] if key >= 0 else []) + candidates[g, :v].tolist())
    return rt.explainer.explain(logits, token, proposed=proposed, proposer="lookahead", accepted=accepted,
                                matched=matched)


def _advance_window(rt: Runtime, window: np.ndarray, pool: NgramPool, last_level_rows: np.ndarray, *,
                    fresh: bool) -> None:
    """One Jacobi iteration of the window, once per emitted token as in the reference.

    After the step's first token the newest level takes the target's predictions and every
    column becomes an n-gram (first token: the column's oldest guess). After each accepted token
    the sequence has moved on without fresh predictions, so the newest level restarts from the
    oldest one.
    """
    previous_oldest = window[0].copy()
    window[:-1] = window[1:]
    if fresh:
        window[-1] = _rows_argmax(rt, last_level_rows, rt.vocab.n_tokens)
        for f in range(window.shape[1]):
            pool.add(int(previous_oldest[f]), window[:, f])
    else:
        window[-1] = window[0]


def _rows_argmax(rt: Runtime, rows: np.ndarray, n_vocab: int) -> np.ndarray:
    """Argmax of the logits of several batch rows: one numpy call when the rows are consecutive."""
    first = int(rows[0])
    if np.array_equal(rows, np.arange(first, first + rows.size)):
        return rt.argmax_rows(first, rows.size).astype(np.int32)
    return np.array([int(np.argmax(rt.logits(int(r)))) for r in rows], dtype=np.int32)

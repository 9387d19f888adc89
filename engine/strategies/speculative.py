"""Speculative decoding with a draft model (Leviathan et al. 2023; llama.cpp's
``examples/speculative-simple``): a smaller model of the same vocabulary proposes k tokens one at a
time on its own context, and the target verifies them in one batch."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterator, Sequence

import numpy as np

from specdec_studio.engine.events import Event
from specdec_studio.engine.sampling import Sampler, logits_row
from specdec_studio.engine.context import ModelContext
from specdec_studio.engine.kv.prefix import common_prefix
from specdec_studio.engine.strategies.common import Runtime
from specdec_studio.engine.strategies.verify import Draft, run_draft_verify


class DraftModelDrafter:
    """Proposes tokens with the draft model, keeping the draft's KV cache in step with the context.

    The draft cache holds a prefix of the context plus the last proposals; before drafting, cells
    past the common prefix are dropped and whatever the draft has not seen yet is decoded in one
    batch. Drafting stops early when the draft's top probability falls below ``p_min``. The
    draft's cache outlives the run: the next run keeps as much of it as the target kept of its
    own (``n_reused``).
    """

    def __init__(self, draft: ModelContext, sampler: Sampler, p_min: float, n_vocab_target: int,
                 is_eog=lambda _token: False, cancel=None, n_reused: int = 0, keep_probs: bool = False,
                 seq: int = 0, owns_context: bool = True) -> None:
        self.draft = draft
        # the draft context's sequence this drafter drafts on (batch decoding gives each prompt its own)
        self.seq = seq
        # A single run's drafter owns the draft context: its sequence 0 is the context's own record,
        # which prefix reuse reads and may clear. A batch slot's drafter shares the context with the
        # other slots and touches only its own sequence.
        self.owns_context = owns_context
        self._cached: list[int] = []
        self.n_reused = n_reused
        self.keep_probs = keep_probs  # record each greedy proposal's probability (Auto calibrates on it)
        self.last_probs: list[float] = []
        self.is_eog = is_eog
        self.cancel = cancel  # checked between the draft's single-token decodes
        params = sampler.params
        # Its own random stream: drafting never shifts the draws of the target's sampler.
        self.sampler = Sampler(dataclasses.replace(params, seed=None if params.seed is None else params.seed + 1))
        self.p_min = p_min
        self.n_vocab_target = n_vocab_target
        self.last_decode_times: list[float] = []  # the last proposal's single-token draft decodes (s)
        self.decode_shapes: list[tuple[int, int]] = []  # the last proposal's draft decodes (tokens, logit rows)
        self.explainer = None  # set in a run that explains its tokens: each proposal's top tokens are kept

    @property
    def cached(self) -> list[int]:
        return self.draft.cached if self.owns_context else self._cached

    def begin(self, prompt: Sequence[int]) -> None:
        """Decode the prompt exactly as the target did (same reused prefix, same chunks): a draft
        that is the target itself then holds bit-identical KV values, so it agrees with the target
        on every token even where large batches are not batch-invariant."""
        if self.owns_context:
            n_keep = self.draft.keep_prefix(prompt, limit=self.n_reused)
        else:
            self.draft.memory.seq_rm(self.seq, -1, -1)
            self._cached.clear()
            n_keep = 0
        self._decode_chunks(prompt[n_keep:], n_keep)

    def settle(self, context: Sequence[int]) -> None:
        """Trim the draft's cache to the longest prefix it shares with the accepted context."""
        common = common_prefix(self.cached, context)
        if common < len(self.cached):
            self.draft.memory.seq_rm(self.seq, common, -1)
            del self.cached[common:]

    def _sync(self, context: Sequence[int]) -> int:
        """Make the draft cache hold ``context``; return the batch row of the newest token's logits."""
        common = min(common_prefix(self.cached, context), len(context) - 1)  # always decode the newest token
        self.draft.memory.seq_rm(self.seq, common, -1)
        del self.cached[common:]
        return self._decode_chunks(context[common:], common)

    def _decode_chunks(self, tokens: Sequence[int], start_pos: int) -> int:
        """Decode ``tokens`` from ``start_pos`` on the draft's cache; return the last logits row."""
        row = self.draft.memory.decode_tokens(self.draft.batch, list(tokens), start_pos, self.seq)
        capacity = self.draft.batch.capacity
        for start in range(0, len(tokens), capacity):  # decode_tokens' chunks, logits for the last only
            self.decode_shapes.append((min(capacity, len(tokens) - start), 1))
        self.cached.extend(tokens)
        return row

    def _target_sized(self, q: np.ndarray) -> np.ndarray:
        n = self.n_vocab_target
        if q.shape[0] == n:
            return q
        sized = np.zeros(n, dtype=np.float64)
        m = min(n, q.shape[0])
        sized[:m] = q[:m]
        return sized / sized.sum()

    def propose(self, context: Sequence[int], k: int, stop=None) -> Draft:
        """Up to ``k`` tokens after ``context``; fewer where the draft's probability of its token
        is below ``p_min``, or where ``stop(i, reach)`` says token i, reached with chance
        ``reach`` (the product of the draft's probabilities so far), is not worth its cost."""
        t0 = time.perf_counter()
        self.last_decode_times = []
        self.decode_shapes = []
        logits = self._first_logits(context)
        tokens: list[int] = []
        dists: list[np.ndarray] = []
        probs: list[float] = []
        tops: list[tuple] | None = [] if self.explainer is not None else None
        reach = 1.0
        # A draft may have a few more tokens than the target (the vocabulary check allows padding):
        # it proposes only ids the target has.
        n_shared = min(self.n_vocab_draft, self.n_vocab_target)
        for i in range(k):
            logits = logits[:n_shared]
            if self.sampler.greedy:
                token = int(np.argmax(logits))
                if self.p_min > 0.0 or self.keep_probs or stop is not None:
                    top = 1.0 / float(np.exp(logits.astype(np.float64) - logits[token]).sum())
                    if top < self.p_min:
                        break
                    reach *= top
                    if stop is not None and stop(i, reach):
                        break
                    probs.append(top)
            else:
                q = self.sampler.distribution(logits)
                if q.max() < self.p_min:
                    break
                token = self.sampler.draw(q)
                reach *= float(q[token])
                if stop is not None and stop(i, reach):
                    break
                dists.append(self._target_sized(q))
                probs.append(float(q[token]))
            if tops is not None:
                tops.append(self.explainer.proposer_top(logits, None if self.sampler.greedy else q))
            tokens.append(token)
            if i == k - 1 or self.is_eog(token):
                break  # the last proposal needs no draft decode; nothing follows an end of generation
            if self.cancel is not None and self.cancel.is_set():
                break
            logits = self._next_logits(token, i, k)
        self.last_probs = probs
        return Draft(tokens, dists if not self.sampler.greedy else None, time.perf_counter() - t0, tops,
                     decode_shapes=tuple(self.decode_shapes))

    # The two places a drafter of this kind differs: what gives the first proposal's logits, and
    # what decodes a proposal to give the next one's.
    @property
    def n_vocab_draft(self) -> int:
        return self.draft.n_vocab

    def _first_logits(self, context: Sequence[int]) -> np.ndarray:
        return logits_row(self.draft.ctx, self._sync(context), self.draft.n_vocab)

    def _next_logits(self, token: int, i: int, k: int) -> np.ndarray:
        d = self.draft
        if i == 0:  # these single-token decodes are undone in part when the target rejects
            d.memory.prepare_rollback(self.seq, len(self.cached), k - 1, decodes=k - 1)
        d.batch.clear()
        row = d.batch.add(token, len(self.cached), (self.seq,), True)
        self.last_decode_times.append(d.memory.decode(d.batch))
        self.decode_shapes.append((1, 1))
        self.cached.append(token)
        return logits_row(d.ctx, row, d.n_vocab)


def run_speculative(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    assert rt.draft is not None, "the session checks that a draft model is loaded"
    drafter = DraftModelDrafter(rt.draft, rt.sampler, rt.config.speculative.p_min, rt.vocab.n_tokens,
                                rt.vocab.is_eog, rt.cancel, rt.n_reused)
    drafter.explainer = rt.explainer
    yield from run_draft_verify(rt, prompt, drafter)

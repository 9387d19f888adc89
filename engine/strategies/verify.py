"""Draft-then-verify: the loop that speculative decoding and prompt lookup share.

Each step a drafter proposes up to k tokens; the target decodes its input token and all the
proposals in one batch; verification keeps the longest prefix the target agrees with and adds the
target's own next token, so every step emits at least one token. Greedy: a proposal is kept while
it equals the target's argmax. Stochastic: the speculative sampling rule
(:meth:`engine.sampling.Sampler.accept_draft`), which leaves the target's distribution unchanged.
The target's KV cache is trimmed to the accepted prefix after every step.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from specdec_studio.engine.config import SpeculativeParams
from specdec_studio.engine.events import Event, RejectedDraft, StepDone
from specdec_studio.engine.strategies.common import Runtime, begin_run


@dataclass
class Draft:
    tokens: list[int]
    # the drafter's distribution for each proposal (after the run's sampling transform);
    # None means a point mass on the proposal (prompt lookup)
    dists: list[np.ndarray] | None
    t_draft_s: float
    # explanations only: the drafter's top tokens at each proposal (a draft model's, an MTP
    # head's), and how many of the context's last tokens the proposal continued (an n-gram's key)
    tops: list[tuple] | None = None
    matched: int = 0
    # (tokens, logit rows) of each decode the drafter made for this proposal (a draft model's):
    # the cost model prices them on the draft's profile
    decode_shapes: tuple[tuple[int, int], ...] = ()


class Drafter(Protocol):
    def begin(self, prompt: Sequence[int]) -> None:
        """Called once the target has decoded the prompt."""

    def propose(self, context: Sequence[int], k: int) -> Draft:
        """Up to ``k`` tokens to follow ``context`` (every token so far, the newest last)."""

    def settle(self, context: Sequence[int]) -> None:
        """Called after verification: drop whatever the drafter cached beyond ``context``."""


class ContextOnlyDrafter:
    """A drafter that reads everything it needs from the context at each proposal: nothing to set
    up from the prompt, nothing cached to drop after verification."""

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def settle(self, context: Sequence[int]) -> None:
        pass


class AdaptiveK:
    """The draft length for the next step: fixed, or adapted to recent acceptance.

    ``tutorial``: the mean of the last 10 acceptance rates above 0.8 grows k by one, below 0.5
    shrinks it by one. ``heuristic`` (transformers' assisted generation): every proposal
    accepted grows k by two, otherwise k shrinks by one. k stays within [k_min, k_max].
    """

    def __init__(self, params: SpeculativeParams) -> None:
        self.rule = params.adaptive
        self.k = params.k
        self.k_min, self.k_max = params.k_min, params.k_max
        self.recent: deque[float] = deque(maxlen=10)

    def update(self, n_drafted: int, n_accepted: int) -> None:
        if self.rule == "off" or n_drafted == 0:
            return
        if self.rule == "tutorial":
            self.recent.append(n_accepted / n_drafted)
            mean = sum(self.recent) / len(self.recent)
            if mean > 0.8:
                self.k += 1
            elif mean < 0.5:
                self.k -= 1
        else:
            self.k += 2 if n_accepted == n_drafted else -1
        self.k = min(self.k_max, max(self.k_min, self.k))


def run_draft_verify(rt: Runtime, prompt: Sequence[int], drafter: Drafter) -> Iterator[Event]:
    params: SpeculativeParams = rt.config.speculative
    batch, memory, out, counters, sampler = rt.batch, rt.memory, rt.output, rt.counters, rt.sampler

    start = yield from begin_run(rt, prompt, prepare=lambda: drafter.begin(prompt), extra={"k": params.k})
    if start is None:
        return
    token, n_past = start.token, start.n_past  # n_past: tokens in the target's KV cache
    context = [*prompt, token]
    t_prev = rt.t_start
    k_control = AdaptiveK(params)
    step = 1
    proposer = {"lookup": f"lookup:{params.lookup}", "mtp": "mtp"}.get(rt.config.mode, "draft")

    while not rt.should_stop(n_past, 1):
        # ---- draft: at most k, and no more than the context or the token budget can take ------
        room = min(rt.n_ctx - n_past - 1, rt.n_batch - 1, rt.config.max_tokens - len(out.ids) - 1)
        k = max(0, min(k_control.k, room))
        draft = rt.guarded(lambda: drafter.propose(context, k))  # noqa: B023 - called at once if k > 0 else Draft([], None, 0.0)
        if draft is None:  # the draft model's decode was stopped (or its cache filled)
            break
        counters.t_draft_s += draft.t_draft_s
        for n_tokens, n_logits in draft.decode_shapes:
            counters.record_draft_decode(n_tokens, n_logits)
        proposals = through_end_of_generation(draft.tokens[:k], rt.vocab.is_eog)

        # ---- verify: the input token and every proposal in one target batch --------------------
        batch.clear()
        batch.add(token, n_past, (0,), True)
        for i, t in enumerate(proposals):
            batch.add(t, n_past + 1 + i, (0,), True)
        memory.prepare_rollback(0, n_past, len(proposals))  # a recurrent state may have to drop them
        t_decode = rt.decode()
        if t_decode is None:
            break

        why = None
        if rt.explainer is not None:
            why = Why(rt.explainer, proposer, draft.tops, rt.explainer.matched_text(context, draft.matched))
        emitted, n_accepted = verify_proposals(sampler, rt.logits, 0, proposals, draft.dists, out, context,
                                               why=why, argmax_rows=rt.argmax_rows)

        # ---- the target's cache keeps the input token and the accepted proposals ----------------
        n_past += 1 + n_accepted
        if n_accepted < len(proposals):  # a rejected tail to drop (nothing to do when all were kept)
            memory.seq_rm(0, n_past, -1)
        token = context[-1]
        drafter.settle(context)

        rejected = proposals[n_accepted:]
        now = rt.clock()
        counters.record_step(len(emitted), len(proposals), n_accepted, t_decode)
        counters.record_positions(len(proposals), n_accepted)
        if emitted and rt.observed:
            role = "draft" if rt.config.mode_entry.needs else "ngram"  # a model's draft, or the context's n-grams
            verdicts = {1 + i: "accepted" for i in range(n_accepted)}
            if n_accepted < len(proposals):
                verdicts[1 + n_accepted] = "rejected"
            yield rt.step_batch(step, ("input",) + (role,) * len(proposals), verdicts)
        if rejected:
            yield RejectedDraft(
                step, tuple(rejected), tuple(rt.vocab.piece(t).decode("utf-8", "replace") for t in rejected)
            )
        if emitted:
            yield StepDone(step, tuple(emitted), len(proposals), n_accepted, t_decode, now - t_prev,
                           {"k": k, "t_draft_s": draft.t_draft_s})
        t_prev = now
        step += 1
        k_control.update(len(proposals), n_accepted)
        if out.done:
            break


@dataclass(frozen=True)
class Why:
    """What explaining a step's verified tokens needs beside the logits: the explainer, who
    proposed, the drafter's top tokens per proposal and the context text its n-gram matched."""

    explainer: object  # engine.strategies.explain.Explainer
    proposer: str
    tops: list[tuple] | None
    matched: str

    def explain(self, logits: np.ndarray, chosen: int, proposals: Sequence[int], i: int, accepted: bool,
                p: np.ndarray | None, q: np.ndarray | None, draw: float | None):
        if i >= len(proposals):  # the target's own token after every proposal was accepted
            return self.explainer.explain(logits, chosen, dist=p)
        proposed = int(proposals[i])
        top = self.tops[i] if self.tops is not None and i < len(self.tops) else ()
        q_x = None if p is None else (1.0 if q is None else float(q[proposed]))
        return self.explainer.explain(logits, chosen, dist=p, proposed=proposed, proposer=self.proposer,
                                      accepted=accepted, proposer_top=top, matched=self.matched, q=q_x, draw=draw)


def verify_proposals(sampler, logits_of_row, first_row: int, proposals: Sequence[int],
                     dists: list[np.ndarray] | None, out, context: list[int],
                     accepted_source: str = "accepted_draft", why: Why | None = None,
                     argmax_rows=None) -> tuple[list, int]:
    """Verify ``proposals``, decoded in batch rows ``first_row + 1 …`` after the input token's
    row ``first_row``: keep each while the target agrees (greedy: its argmax; stochastic: the
    speculative sampling rule with the drafter's ``dists``), then add the target's own token.
    Pushes the emitted tokens to ``out`` and ``context`` (explained, with ``why``); returns them
    and the accepted count. ``argmax_rows(first, count)``, where given, finds the greedy targets
    of every row in one call (rows of a verification all asked for logits)."""
    emitted = []
    n_accepted = 0
    targets = None
    if sampler.greedy and argmax_rows is not None:
        targets = argmax_rows(first_row, len(proposals) + 1).tolist()
    for i in range(len(proposals) + 1):
        # a row's logits are read only where a rule or an explanation needs more than its argmax
        logits = logits_of_row(first_row + i) if targets is None or why is not None else None
        p = q = draw = None
        if targets is not None:
            chosen = targets[i]
            accepted = i < len(proposals) and chosen == proposals[i]
        elif i == len(proposals):  # every proposal accepted: the target adds one of its own
            chosen, accepted = sampler.sample(logits), False
        elif sampler.greedy:
            chosen = int(np.argmax(logits))
            accepted = chosen == proposals[i]
        else:
            q = dists[i] if dists is not None else None
            p = sampler.distribution(logits)
            accepted, chosen = sampler.accept_draft(p, q, proposals[i])
            draw = sampler.last_draw
        explanation = why.explain(logits, chosen, proposals, i, accepted, p, q, draw) if why is not None else None
        info = out.push(chosen, accepted_source if accepted else "sampled", explanation)
        if info is not None:
            emitted.append(info)
        context.append(chosen)
        n_accepted += accepted
        if not accepted or out.done:
            break
    return emitted, n_accepted


def through_end_of_generation(tokens: list[int], is_eog) -> list[int]:
    """The proposals up to and including the first end-of-generation token: nothing after it can
    be emitted, so verifying it would only count as rejected."""
    for i, token in enumerate(tokens):
        if is_eog(token):
            return tokens[: i + 1]
    return tokens

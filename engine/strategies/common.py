"""What every strategy shares: the run's resources, its start (the prompt decoded, the first token
sampled, the clock started) and the output it builds."""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass, field

import numpy as np

import llama_cpp as llama

from specdec_studio.engine.batch import Batch
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.context import ModelContext
from specdec_studio.engine.events import BatchRow, Event, Explanation, StepBatch, StepDone, TokenInfo, TokenSource
from specdec_studio.engine.memory import DecodeAborted, Memory, NoKvSlot
from specdec_studio.engine.sampling import Sampler, argmax_rows, logits_row
from specdec_studio.engine.stats import RunCounters
from specdec_studio.engine.strategies.explain import Deferred, Explainer
from specdec_studio.engine.tokens import IncrementalDetokenizer, Vocab

FINISH_STOP = "stop"  # the model produced an end-of-generation token
FINISH_LENGTH = "length"  # max_tokens reached
FINISH_CONTEXT_FULL = "context_full"
FINISH_CANCELLED = "cancelled"


@dataclass
class Output:
    """The generated tokens of a run and why it ended. End-of-generation tokens are not kept."""

    vocab: Vocab
    max_tokens: int
    detok: IncrementalDetokenizer = field(init=False)
    ids: list[int] = field(default_factory=list)
    pieces: list[str] = field(default_factory=list)
    finish_reason: str | None = None
    end_token: int | None = None  # the end-of-generation token that ended the run, if one did

    def __post_init__(self) -> None:
        self.detok = IncrementalDetokenizer(self.vocab)

    @property
    def done(self) -> bool:
        return self.finish_reason is not None

    def push(self, token: int, source: TokenSource, why: Explanation | None = None) -> TokenInfo | None:
        """Append a generated token (with its explanation, in a run that makes them); return it for
        the event, or None if it ended the run."""
        if self.done:
            return None
        if self.vocab.is_eog(token):
            self.finish_reason = FINISH_STOP
            self.end_token = token
            return None
        text = self.detok.feed(token)
        if isinstance(why, Deferred):  # made on the explainer's thread: it takes the text when done
            why.chosen_text = text
        elif why is not None:
            why = dataclasses.replace(why, chosen_text=text)
        self.ids.append(token)
        self.pieces.append(text)
        if len(self.ids) >= self.max_tokens:
            self.finish_reason = FINISH_LENGTH
        return TokenInfo(token, text, source, why)

    def finish(self, reason: str) -> None:
        if self.finish_reason is None:
            self.finish_reason = reason

    def text(self) -> str:
        return "".join(self.pieces) + self.detok.flush()

    def all_ids(self) -> list[int]:
        """Every token the run produced, the end-of-generation token included."""
        return self.ids + ([self.end_token] if self.end_token is not None else [])


@dataclass
class Runtime:
    """The resources one run uses. Built by the session, handed to exactly one strategy."""

    ctx: llama.llama_context_p
    memory: Memory
    batch: Batch
    vocab: Vocab
    n_ctx: int
    n_batch: int
    config: RunConfig
    sampler: Sampler
    cancel: threading.Event
    counters: RunCounters
    output: Output
    draft: ModelContext | None = None
    mtp: object | None = None  # the target's MTP head (engine.drafts.mtp.MtpHead) in an MTP run
    # prompt tokens whose cells were kept from the previous run (prefix reuse): not decoded again
    n_reused: int = 0
    t_start: float | None = None  # when the first token was sampled: the generation clock
    # time the consumer spent on work that is not decoding while the run waited (a chat's periodic
    # save, a demo's pause): taken off the generation clock, so a slow disk or a held step never
    # shows as a slow model
    t_off_clock_s: float = 0.0
    cost_curve: object | None = None  # the batch-cost profile's curve, for strategies that price steps
    # one decode of the draft model in decodes of the target (the session's estimate; Auto prices
    # the draft with it until the run has timed its own)
    draft_token_cost: float = 1.0
    # what past runs generated (engine.strategies.ngram_memory.NgramMemory): an Auto source, and
    # it learns this run's output at the end; None unless the run's config asks for it
    ngram_memory: object | None = None
    # what strategies keep from one run of the session to the next, by name: their indexes of the
    # context (Auto's ContextIndex, prompt lookup's n-gram cache), which a chat turn, whose prompt is
    # the last run's context and more, brings up to date by reading only what its prompt adds
    kept: dict = field(default_factory=dict)
    # makes each generated token's Explanation (engine.strategies.explain.Explainer); None unless the run's
    # config asks for explanations
    explainer: Explainer | None = None
    # a window or a trace watches: every step's batch is described (StepBatch) for the step inspector
    observed: bool = True
    # every StepDone is followed by the KV map's picture of that step (KvSnapshot), taken before
    # the next step: a consumer that asked for it need not (and, with explanations made on their
    # own thread, must not: it would see the cache of the step after)
    step_snapshots: bool = False
    # with explanations made on their own thread, whether the run may decode its next step while
    # the last one's are still being made; None: always. A demo that holds the run between steps
    # says no, so that the step it shows is the one the cache holds
    run_ahead: Callable[[], bool] | None = None

    def logits(self, i: int) -> np.ndarray:
        return logits_row(self.ctx, i, self.vocab.n_tokens)

    def argmax_rows(self, first: int, count: int) -> np.ndarray:
        """The argmax of ``count`` consecutive batch rows, all of which asked for logits."""
        return argmax_rows(self.ctx, first, count, self.vocab.n_tokens)

    def decode(self) -> float | None:
        """Decode ``self.batch``; on a full context or a cancel, record why and return None.

        Every decode of a generation step goes through here, so its shape is counted once."""
        if self.memory.mirror is not None:
            self.memory.mirror.stamp = self.counters.steps  # the step this decode belongs to
        if self.explainer is not None:  # the last step's explanations (if queued) are made while this decodes
            self.explainer.dispatch()
        try:  # guarded(), written out: this is every step's path
            dt = self.memory.decode(self.batch)
        except NoKvSlot:
            self.output.finish(FINISH_CONTEXT_FULL)
            return None
        except DecodeAborted:
            self.output.finish(FINISH_CANCELLED)
            return None
        self.counters.record_decode(self.batch.n_tokens, self.batch.n_logits)
        return dt

    def step_batch(self, step: int, roles: Sequence[str], verdicts: dict[int, str] | None = None) -> StepBatch:
        """The batch the step just decoded (still in ``self.batch``), each row with its role and
        what verification made of it, for the step inspector."""
        b, piece = self.batch, self.vocab.piece
        verdicts = verdicts or {}
        n = b.n_tokens
        # read the batch's arrays once (a step of a fast model is a fraction of a millisecond)
        tokens, positions, wants = b.token[:n].tolist(), b.pos[:n].tolist(), b.logits[:n].tolist()
        one_seq = (b.single_seq,) if b.single_seq >= 0 else None
        rows = tuple(
            BatchRow(token, piece(token).decode("utf-8", "replace"), pos, one_seq or tuple(b.seqs_of(i).tolist()),
                     bool(want), roles[i], verdicts.get(i, ""))
            for i, (token, pos, want) in enumerate(zip(tokens, positions, wants)))
        return StepBatch(step, rows)

    def guarded(self, call):
        """``call()``, or None with the finish reason recorded if a decode inside it found the
        context full or was stopped (the target's, or a draft model's)."""
        return guarded(self.output, call)

    def clock(self) -> float:
        """The generation clock: wall time less the time spent off it (see ``t_off_clock_s``);
        step times and the run's tokens per second are read on it."""
        return time.perf_counter() - self.t_off_clock_s

    def should_stop(self, n_past: int, n_new: int) -> bool:
        """True (with the finish reason set) if the run cannot or must not decode ``n_new`` more."""
        if self.output.done:
            return True
        if self.cancel.is_set():
            self.output.finish(FINISH_CANCELLED)
            return True
        if n_past + n_new > self.n_ctx:
            self.output.finish(FINISH_CONTEXT_FULL)
            return True
        return False


@dataclass(frozen=True)
class Start:
    """Where a strategy's loop begins: the first generated token (not decoded yet) and the cells
    of sequence 0 (the prompt)."""

    token: int
    n_past: int


def guarded(output: Output, call):
    """``call()``, or None with ``output``'s finish reason recorded if a decode inside it found
    the context full or was stopped."""
    try:
        return call()
    except NoKvSlot:
        output.finish(FINISH_CONTEXT_FULL)
    except DecodeAborted:
        output.finish(FINISH_CANCELLED)
    return None


def begin_run(rt: Runtime, prompt: Sequence[int], *, prepare: Callable[[], None] | None = None,
              extra: dict | None = None) -> Generator[Event, None, Start | None]:
    """The start every strategy shares: decode the prompt (after the reused prefix), let the
    strategy ``prepare`` (a draft model decodes the prompt too), sample the first token, count
    it as step 0 and start the generation clock. Returns None if the run was stopped (or the
    cache filled) meanwhile; the strategy then returns at once.

    Use as ``start = yield from begin_run(rt, prompt)``.
    """
    if rt.memory.mirror is not None:
        rt.memory.mirror.begin_run()
    if rt.cancel.is_set():  # stopped before it began (a Stop right after Regenerate): not a token made
        rt.output.finish(FINISH_CANCELLED)
        return None
    row = decode_prompt(rt, prompt)
    if row is None:
        return None
    if prepare is not None:
        rt.guarded(prepare)
        if rt.output.done:
            return None
    token, info = first_token(rt.sampler, rt.output, rt.counters, rt.logits(row), rt.explainer)
    rt.t_start = rt.clock()
    if info is not None:
        yield StepDone(0, (info,), 0, 0, 0.0, 0.0, dict(extra or {}))
    return Start(token, len(prompt))


def first_token(sampler, output: Output, counters, logits, explainer: Explainer | None = None
                ) -> tuple[int, TokenInfo | None]:
    """The token sampled from the prompt's logits, pushed to ``output`` and counted as step 0
    (its TokenInfo is None if it ended the generation)."""
    token = sampler.sample(logits)
    info = output.push(token, "sampled", explainer.explain(logits, token) if explainer else None)
    counters.record_step(1 if info else 0, 0, 0, 0.0)
    return token, info


def decode_prompt(rt: Runtime, tokens: Sequence[int], seq_id: int = 0) -> int | None:
    """Decode the prompt after its reused prefix into ``seq_id`` in chunks of n_batch; return the
    batch row of its logits.

    Returns None if the run was cancelled (or the cache filled) meanwhile; the abort callback
    interrupts every full-size chunk.
    """
    t0 = time.perf_counter()
    fresh = list(tokens[rt.n_reused :])
    row = rt.guarded(lambda: rt.memory.decode_tokens(rt.batch, fresh, rt.n_reused, seq_id))
    if row is None:
        return None
    rt.counters.n_prompt = len(tokens)
    rt.counters.n_prompt_reused = rt.n_reused
    rt.counters.t_encode_s = time.perf_counter() - t0
    return row

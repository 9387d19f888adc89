"""Many prompts decoded together, as llama.cpp's ``examples/parallel``: P slots share one context,
each slot a sequence of its own (a KV stream of its own where nothing follows the cells, as
llama-server's slots), and every step one ``llama_batch`` carries each busy slot's input token and
its drafts. Each slot has its own drafter (prompt lookup's n-gram cache, or a draft model on its
own sequence of the draft's context), its own adaptive k, sampler and figures. A prompt that
finishes leaves its cells in its sequence: the next prompt goes to the free slot whose cells hold
the longest start of it (a chat's next turn, a client that resends the conversation) and decodes
only the rest (``usage``'s cached tokens); cells a slot gives up may be kept in RAM for a later
prompt (engine.kv.prompt_cache).

Every prompt's tokens are those of its single run: its prompt is decoded alone, in a single run's
chunks (bit-identical KV values), and verified as draft-then-verify does (engine.strategies.verify);
only kernels that are not batch-invariant can flip a near-tie (see the exactness probe)."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.events import KvSnapshot, TokenInfo
from specdec_studio.engine.kv.prefix import common_prefix, keep_sequence_prefix
from specdec_studio.engine.kv.prompt_cache import reuse_cells
from specdec_studio.engine.memory import DecodeAborted, NoKvSlot
from specdec_studio.engine.sampling import Sampler, logits_row
from specdec_studio.engine.stats import RunCounters
from specdec_studio.engine.strategies import registry
from specdec_studio.engine.strategies.auto.slot import slot_planner
from specdec_studio.engine.strategies.common import (
    FINISH_CANCELLED,
    FINISH_CONTEXT_FULL,
    FINISH_LENGTH,
    Output,
    first_token,
    guarded,
)
from specdec_studio.engine.strategies.lookup import make_drafter
from specdec_studio.engine.strategies.speculative import DraftModelDrafter
from specdec_studio.engine.strategies.verify import AdaptiveK, through_end_of_generation, verify_proposals

BATCH_MODES = tuple(m.name for m in registry.TABLE if m.batch_slot is not None)
FINISH_ERROR = "error"  # the prompt could not run (it does not fit in a slot): nothing decoded
IDLE_WAIT_S = 0.1  # an open inbox's idle loop looks at Stop this often


@dataclass(frozen=True)
class BatchJob:
    id: str
    tokens: tuple[int, ...]
    max_tokens: int | None = None  # this prompt's own limit, or the config's
    # a server's request: its own sampling and drafting (a mode the batch's slots can run, k at most
    # the batch's), and whether its client went away (the job then ends at the next step)
    config: RunConfig | None = None
    cancelled: Callable[[], bool] | None = None


class Inbox(Protocol):
    """Where the loop's free slots take their next prompts from."""

    def take(self) -> BatchJob | None:
        """The next job waiting, or None."""

    def wait(self, timeout_s: float) -> None:
        """Idle until a job may be waiting (at most ``timeout_s``)."""

    @property
    def open(self) -> bool:
        """More jobs may come: the loop idles when every slot is free, instead of ending."""


class _Listed:
    """A batch's prompts, all known at its start (``specdec batch``, the Batch tab)."""

    open = False

    def __init__(self, jobs: Sequence[BatchJob]) -> None:
        self.jobs = deque(jobs)

    def take(self) -> BatchJob | None:
        return self.jobs.popleft() if self.jobs else None

    def wait(self, timeout_s: float) -> None:
        pass


@dataclass(frozen=True)
class BatchStarted:
    n_jobs: int
    parallel: int
    config: dict


@dataclass(frozen=True)
class JobStarted:
    job_id: str
    slot: int
    n_prompt: int


@dataclass(frozen=True)
class JobStep:
    job_id: str
    slot: int
    step: int
    tokens: tuple[TokenInfo, ...]
    n_drafted: int
    n_accepted: int


@dataclass(frozen=True)
class JobFinished:
    job_id: str
    slot: int
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    stats: dict


@dataclass(frozen=True)
class BatchFinished:
    stats: dict


@dataclass
class _Slot:
    seq: int
    job: BatchJob | None = None
    config: RunConfig | None = None  # the job's, or the batch's
    output: Output | None = None
    sampler: Sampler | None = None
    counters: RunCounters | None = None
    drafter: SlotDrafter | None = None
    k_control: AdaptiveK | None = None
    context: list[int] = field(default_factory=list)
    cached: list[int] = field(default_factory=list)  # what its sequence's cells hold while it is free
    n_past: int = 0
    token: int = -1
    step: int = 0
    t_start: float = 0.0


class SlotDrafter(Protocol):
    """What a slot drafts with, whichever source is behind it: the loop never asks which."""

    def begin(self, prompt: Sequence[int]) -> None:
        """The slot's prompt is decoded."""

    def propose(self, context: Sequence[int], room: int, n_busy: int) -> tuple[list[int], list | None, float] | None:
        """Up to ``room`` tokens to verify after ``context`` in a step that ``n_busy`` slots share:
        (tokens, the drafter's distributions or None, seconds spent drafting); None where a decode
        of the drafter was stopped or found its cache full (the finish reason is recorded)."""

    def settle(self, context: Sequence[int]) -> None:
        """Verification is done: drop whatever was cached beyond ``context``."""

    def verified(self, n_accepted: int, n_batch_tokens: int, t_decode: float) -> None:
        """What verification made of the last proposal, and what the shared batch took."""

    def figures(self) -> dict:
        """What the drafter adds to the job's stats."""

    def release(self, seq: int) -> None:
        """The job is done: free what the drafter holds for sequence ``seq``."""


class _DraftThenVerify:
    """A draft-then-verify drafter (prompt lookup's, a draft model's) in a slot."""

    def __init__(self, drafter, output: Output, is_eog) -> None:
        self.drafter, self.output, self.is_eog = drafter, output, is_eog

    def begin(self, prompt: Sequence[int]) -> None:
        self.drafter.begin(prompt)

    def propose(self, context: Sequence[int], room: int, n_busy: int) -> tuple[list[int], list | None, float] | None:
        if room <= 0:
            return [], None, 0.0
        draft = guarded(self.output, lambda: self.drafter.propose(context, room))
        if draft is None:
            return None
        return through_end_of_generation(draft.tokens[:room], self.is_eog), draft.dists, draft.t_draft_s

    def settle(self, context: Sequence[int]) -> None:
        self.drafter.settle(context)

    def verified(self, n_accepted: int, n_batch_tokens: int, t_decode: float) -> None:
        pass  # its k adapts in the slot's AdaptiveK

    def figures(self) -> dict:
        return {}

    def release(self, seq: int) -> None:
        if hasattr(self.drafter, "draft"):  # a draft model's sequence in the draft's context
            self.drafter.draft.memory.seq_rm(seq, -1, -1)
            self.drafter.cached.clear()


def run_batch(session, config: RunConfig, jobs: Sequence[BatchJob] | Inbox, parallel: int) -> Iterator[object]:
    """Validate now; return the generator of the batch's events (the last is BatchFinished).
    ``jobs``: the prompts, or an open Inbox (a JobQueue) the loop takes them from as they come; a
    job's own config must run in the batch's slots (:func:`check_job_config`)."""
    mode = config.mode_entry
    if mode.batch_slot is None:
        raise ConfigError(f"batch decoding runs {', '.join(BATCH_MODES)}; {config.mode!r} is not one of them yet")
    if parallel < 1:
        raise ConfigError(f"--parallel must be at least 1, got {parallel}")
    config.validate(session.n_batch)
    if mode.batch_slot == "draft" and session.draft is None:
        raise ConfigError(f"{mode.name} decoding needs a draft model; pass -md PATH")
    k_max = slot_k_max(config)
    if parallel * (k_max + 1) > session.n_batch:
        raise ConfigError(f"{parallel} prompts × (k + 1) = {parallel * (k_max + 1)} tokens a step exceed the "
                          f"batch of {session.n_batch}; lower --parallel or k")
    session.ensure_sequences(parallel, draft=mode.batch_slot == "draft", streams=True)
    inbox = jobs if hasattr(jobs, "take") else _Listed(list(jobs))
    return _batch_events(session, config, inbox, parallel, k_max)


def slot_k_max(config: RunConfig) -> int:
    """The most tokens a slot running ``config`` drafts in one step."""
    mode = config.mode_entry
    if mode.batch_slot == "none":
        return 0
    if mode.plans:  # Auto's slot proposes at most k_max, whatever the fixed k
        return config.speculative.k_max
    return max(config.speculative.k, config.speculative.k_max)


def check_job_config(batch: RunConfig, job: RunConfig, session) -> None:
    """A ConfigError (one sentence) unless a job's own ``job`` config can run in slots made for
    ``batch`` on ``session``: a mode with a batch slot, whose drafts fit the slot's share of a step."""
    mode = job.mode_entry
    if mode.batch_slot is None:
        raise ConfigError(f"{job.mode!r} cannot run beside other requests; choose one of {', '.join(BATCH_MODES)}")
    if mode.batch_slot == "draft" and session.draft is None:
        raise ConfigError(f"{job.mode!r} needs a draft model, and none is loaded")
    if slot_k_max(job) > slot_k_max(batch):
        raise ConfigError(f"this server's slots take k of at most {slot_k_max(batch)} (their share of a step), "
                          f"got {slot_k_max(job)}")
    job.validate(session.n_batch)


def _batch_events(session, config: RunConfig, inbox: Inbox, parallel: int, k_max: int) -> Iterator[object]:
    target = session.target
    memory, batch, vocab, cancel = target.memory, target.batch, session.vocab, session.cancel_flag
    target.forget()
    if session.draft is not None and config.mode_entry.batch_slot == "draft":
        session.draft.forget()
    slot_cells = session.slot_cells(parallel)
    slots = [_Slot(seq) for seq in range(parallel)]
    n_jobs = len(inbox.jobs) if isinstance(inbox, _Listed) else 0
    yield BatchStarted(n_jobs, parallel, config.as_dict())
    t0 = time.perf_counter()
    n_steps = n_rows = n_tokens = n_taken = 0
    while True:
        if cancel.is_set():
            for slot in slots:
                if slot.job is not None:
                    yield _finish(slot, memory, FINISH_CANCELLED)
            while (job := inbox.take()) is not None:
                yield JobFinished(job.id, -1, "", (), FINISH_CANCELLED, {"n_predict": 0})
            break
        for slot in slots:  # a job whose client went away (or the operator stopped) ends here
            if slot.job is not None and slot.job.cancelled is not None and slot.job.cancelled():
                yield _finish(slot, memory, FINISH_CANCELLED)
        # ---- free slots take the next prompts: each the slot holding the longest start of it -----
        while (free := [s for s in slots if s.job is None]) and (job := inbox.take()) is not None:
            slot = _slot_for(free, job.tokens)
            n_taken += 1
            job_config = job.config or config
            need = len(job.tokens) + (job.max_tokens or job_config.max_tokens) + k_max + 1
            if need > slot_cells:
                yield JobFinished(job.id, slot.seq, "", (), FINISH_ERROR, {
                    "n_predict": 0, "error": f"the prompt needs {need} cells but each of the {parallel} "
                                             f"slots has {slot_cells}; raise the context or lower --parallel"})
                continue
            for event in _start(slot, job, session, job_config):
                if isinstance(event, JobStep):  # the first token, sampled from the prompt
                    n_tokens += len(event.tokens)
                yield event
        busy = [s for s in slots if s.job is not None]
        if not busy:
            if not inbox.open:
                break
            inbox.wait(IDLE_WAIT_S)  # a server's loop waits for the next request, Stop still seen
            continue
        # ---- one batch: every busy slot's input token and drafts, each in its own sequence ------
        batch.clear()
        proposals: dict[int, tuple[int, list[int], list | None]] = {}  # seq -> (first row, drafts, dists)
        for slot in busy:
            budget = slot.output.max_tokens - len(slot.output.ids) - 1
            room = min(slot.k_control.k, budget) if slot.k_control else budget
            drafts, dists = [], None
            if slot.drafter is not None:
                proposed = slot.drafter.propose(slot.context, room, len(busy))
                if proposed is None:
                    continue
                drafts, dists, t_draft = proposed
                slot.counters.t_draft_s += t_draft
            first = batch.add(slot.token, slot.n_past, (slot.seq,), True)
            for i, t in enumerate(drafts):
                batch.add(t, slot.n_past + 1 + i, (slot.seq,), True)
            proposals[slot.seq] = (first, drafts, dists)
        if cancel.is_set():
            continue
        n_in_batch = batch.n_tokens
        if n_in_batch == 0:  # every busy slot's drafter stopped: they finish below
            yield from _finish_done(busy, memory)
            continue
        for slot in busy:  # a recurrent state may have to drop a slot's proposals
            if slot.seq in proposals:
                memory.prepare_rollback(slot.seq, slot.n_past, len(proposals[slot.seq][1]))
        try:
            t_decode = memory.decode(batch)
        except NoKvSlot:
            for slot in busy:
                yield _finish(slot, memory, FINISH_CONTEXT_FULL)
            continue
        except DecodeAborted:
            continue  # the cancel is seen at the top of the loop
        n_steps += 1
        n_rows += n_in_batch
        # ---- verify each slot against its rows; keep its accepted cells ----------------------------
        for slot in busy:
            if slot.seq not in proposals:
                continue
            first, drafts, dists = proposals[slot.seq]
            emitted, n_accepted = verify_proposals(
                slot.sampler, lambda row: logits_row(target.ctx, row, vocab.n_tokens), first, drafts, dists,
                slot.output, slot.context, slot.config.mode_entry.accepted_source)
            slot.n_past += 1 + n_accepted
            memory.seq_rm(slot.seq, slot.n_past, -1)
            slot.token = slot.context[-1]
            if slot.drafter is not None:
                slot.drafter.settle(slot.context)
                slot.drafter.verified(n_accepted, n_in_batch, t_decode)
            slot.counters.record_decode(n_in_batch, n_in_batch)
            slot.counters.record_step(len(emitted), len(drafts), n_accepted, t_decode)
            if drafts:
                slot.counters.record_positions(len(drafts), n_accepted)
            if slot.k_control is not None:
                slot.k_control.update(len(drafts), n_accepted)
            n_tokens += len(emitted)
            if emitted:
                yield JobStep(slot.job.id, slot.seq, slot.step, tuple(emitted), len(drafts), n_accepted)
            slot.step += 1
        yield from _finish_done(busy, memory)
    elapsed = time.perf_counter() - t0
    yield BatchFinished({"n_jobs": n_taken, "parallel": parallel, "n_predict": n_tokens, "steps": n_steps,
                         "mean_batch_tokens": n_rows / n_steps if n_steps else 0.0, "t_total_s": elapsed,
                         "tokens_per_second": n_tokens / elapsed if elapsed > 0 else 0.0})


def _slot_for(free: list[_Slot], prompt: Sequence[int]) -> _Slot:
    """The free slot whose cells hold the longest start of ``prompt``; among equals the one that
    holds the least (another conversation's cells are kept for its next turn where a slot can)."""
    return max(free, key=lambda slot: (common_prefix(slot.cached, prompt), -len(slot.cached)))


def _start(slot: _Slot, job: BatchJob, session, config: RunConfig) -> Iterator[object]:
    """Decode the job's prompt into the slot's sequence (alone, in a single run's chunks) and
    sample its first token."""
    target, vocab = session.target, session.vocab
    slot.job, slot.config = job, config
    slot.output = Output(vocab, job.max_tokens or config.max_tokens)
    slot.sampler = Sampler(config.sampling)
    slot.counters = RunCounters()
    slot.context = list(job.tokens)
    slot.step = 1
    slot.drafter = _drafter(slot, session, config)
    mode = config.mode_entry
    slot.k_control = AdaptiveK(config.speculative) if mode.draft_then_verify else None
    yield JobStarted(job.id, slot.seq, len(job.tokens))
    t0 = time.perf_counter()
    cells = reuse_cells(target.prompt_cache, target.memory, slot.seq, slot.cached, job.tokens)
    n_kept = keep_sequence_prefix(target.memory, slot.seq, cells, job.tokens)
    slot.cached = []  # while the job runs its context says what the cells hold
    try:
        row = target.memory.decode_tokens(target.batch, list(job.tokens[n_kept:]), n_kept, slot.seq)
        if slot.drafter is not None:
            slot.drafter.begin(job.tokens)
    except NoKvSlot:
        yield _finish(slot, target.memory, FINISH_CONTEXT_FULL)
        return
    except DecodeAborted:
        yield _finish(slot, target.memory, FINISH_CANCELLED)
        return
    slot.counters.n_prompt = len(job.tokens)
    slot.counters.extra["n_prompt_cached"] = n_kept  # cells kept from the slot's last prompt
    slot.counters.t_encode_s = time.perf_counter() - t0
    token, info = first_token(slot.sampler, slot.output, slot.counters, logits_row(target.ctx, row, vocab.n_tokens))
    slot.t_start = time.perf_counter()
    slot.context.append(token)
    slot.n_past = len(job.tokens)
    slot.token = token
    if info is not None:
        yield JobStep(job.id, slot.seq, 0, (info,), 0, 0)
    if slot.output.done:
        yield _finish(slot, target.memory, slot.output.finish_reason)


def _drafter(slot: _Slot, session, config: RunConfig) -> SlotDrafter | None:
    """The slot's drafter for the mode's ``batch_slot`` (engine.strategies.registry)."""
    source = config.mode_entry.batch_slot
    if source == "auto":
        return slot_planner(slot.job.tokens, session.cost_curve(), config.speculative.k_max, session.target.streams)
    if source == "lookup":
        return _DraftThenVerify(make_drafter(config.speculative), slot.output, session.vocab.is_eog)
    if source == "draft":
        drafter = DraftModelDrafter(session.draft, slot.sampler, config.speculative.p_min, session.vocab.n_tokens,
                                    session.vocab.is_eog, session.cancel_flag, seq=slot.seq, owns_context=False)
        return _DraftThenVerify(drafter, slot.output, session.vocab.is_eog)
    return None


def _finish_done(slots: list[_Slot], memory) -> Iterator[JobFinished]:
    for slot in slots:
        if slot.job is not None and slot.output.done:
            yield _finish(slot, memory, slot.output.finish_reason)


def _finish(slot: _Slot, memory, reason: str) -> JobFinished:
    """The job is done: its sequence keeps the cells of its verified tokens for a next prompt that
    starts the same way (every cell, where the cache is full or the job never decoded)."""
    out, job, counters = slot.output, slot.job, slot.counters
    out.finish(reason or FINISH_LENGTH)
    if slot.t_start:
        counters.t_generate_s = time.perf_counter() - slot.t_start
    keep = slot.n_past if slot.t_start and reason != FINISH_CONTEXT_FULL else 0
    memory.seq_rm(slot.seq, keep or -1, -1)  # -1: every cell of the sequence
    slot.cached = slot.context[:keep]
    if slot.drafter is not None:
        counters.extra.update(slot.drafter.figures())
        slot.drafter.release(slot.seq)
    event = JobFinished(job.id, slot.seq, out.text(), tuple(out.ids), out.finish_reason, counters.as_dict())
    slot.job = slot.output = slot.drafter = slot.k_control = slot.config = None
    slot.t_start = 0.0
    return event


def kv_snapshot(session, parallel: int) -> KvSnapshot:
    """The shared cache with every slot's sequence, for the Batch view's KV map."""
    from specdec_studio.engine.runner import kv_snapshot as snapshot

    return snapshot(session.target, 0, parallel)

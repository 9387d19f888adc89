"""One run from its first event to its last: the strategy's events framed by RunStarted and
RunFinished, a warning when the KV map stops following the cache, a final KV snapshot (and one
after every step where the session is asked for them), and the cache's token record brought up to
date for the next run's prefix reuse. Where explanations are made on their own thread, a step's
events wait here for them while the next step decodes.
"""

from __future__ import annotations

import dataclasses
from collections import deque
from collections.abc import Callable, Iterator, Sequence

import numpy as np

from specdec_studio.engine.context import ModelContext
from specdec_studio.engine.events import Event, KvSnapshot, RunFinished, RunStarted, RunWarning, StepDone
from specdec_studio.engine.kv.cells import seq_ranges
from specdec_studio.engine.strategies.common import FINISH_LENGTH, Runtime
from specdec_studio.engine.strategies.explain import Deferred


def run_events(rt: Runtime, strategy: Callable[[Runtime, Sequence[int]], Iterator[Event]],
               prompt: list[int], target: ModelContext, started: RunStarted) -> Iterator[Event]:
    memory, output = rt.memory, rt.output
    yield started
    if rt.ngram_memory is not None and rt.ngram_memory.problem:
        yield RunWarning(rt.ngram_memory.problem)
        rt.ngram_memory.problem = None
    step = 0
    failures = memory.observer_failures
    n_failures = len(failures)
    # With explanations made on their own thread, a step's events wait here until its explanations
    # are done, while the strategy goes on to decode the next step (run ahead); they leave in order
    explainer = rt.explainer if rt.explainer is not None and rt.explainer.thread is not None else None
    held: deque[Event] = deque()
    try:
        for event in strategy(rt, prompt):
            held.append(event)
            if len(failures) > n_failures:
                held.append(RunWarning(f"the KV map stopped following the cache ({failures[-1]}); "
                                       "decoding goes on unaffected"))
                n_failures = len(failures)
            if isinstance(event, StepDone):
                step = event.step
                if rt.step_snapshots and memory.mirror_ok:
                    held.append(kv_snapshot(target, step, rt.config.n_sequences))
            if explainer is None:  # every explanation made in line: nothing waits
                while held:
                    yield held.popleft()
            elif rt.run_ahead is not None and not rt.run_ahead():
                explainer.dispatch()
                yield from _release(held, wait=True)  # held between steps: show the step the cache holds
            else:
                yield from _release(held, wait=False)
        if explainer is not None:
            explainer.dispatch()
        yield from _release(held)
    finally:
        # Even a run abandoned by its consumer leaves the record of the cache true.
        if rt.t_start is not None:
            rt.counters.t_generate_s = rt.clock() - rt.t_start
        target.note_cached([*prompt, *output.all_ids()])
        save_problem = learn_output(rt, prompt)
        if rt.draft is not None and rt.draft.memory.pos_max(0) + 1 != len(rt.draft.cached):
            rt.draft.forget()  # a draft decode stopped part-way: start the draft afresh next time
    if save_problem:
        yield RunWarning(save_problem)
    if memory.mirror_ok:
        yield kv_snapshot(target, step, rt.config.n_sequences)
    output.finish(FINISH_LENGTH)  # a strategy that returns without a reason ran out of tokens
    yield RunFinished(output.text(), tuple(output.ids), output.finish_reason or FINISH_LENGTH, rt.counters.as_dict(),
                      output.end_token)


def _release(held: deque, wait: bool = True) -> Iterator[Event]:
    """The held events in order, their explanations finished; without ``wait``, only up to the
    first whose explanations are still being made."""
    while held:
        event = held[0]
        if isinstance(event, StepDone):
            pending = [t.why for t in event.tokens if isinstance(t.why, Deferred)]
            if pending:
                if not wait and not all(why.done() for why in pending):
                    return
                event = dataclasses.replace(event, tokens=tuple(
                    dataclasses.replace(t, why=t.why.result()) if isinstance(t.why, Deferred) else t
                    for t in event.tokens))
        held.popleft()
        yield event


def learn_output(rt: Runtime, prompt: list[int]) -> str | None:
    """The n-gram memory (if the run has one) learns what the run generated and is saved; returns
    why it could not be saved (a full disk costs the memory's update, never the run)."""
    if rt.ngram_memory is None or not rt.output.ids:
        return None
    rt.ngram_memory.learn([*prompt, *rt.output.all_ids()], len(prompt))
    try:
        rt.ngram_memory.save()
    except OSError as exc:
        return f"the n-gram memory could not be saved ({exc}); this run's n-grams are kept until the app closes"
    return None


def kv_snapshot(target: ModelContext, step: int, n_seq: int) -> KvSnapshot:
    """The KV cells as the latest decode left them (every sequence of the step in place), as
    plain arrays the GUI may keep (they are copies)."""
    mirror = target.memory.mirror
    cache = mirror.after_last_decode or mirror.base
    kept = mirror.base
    n_seq = min(n_seq, cache.n_seq)
    top = cache.used_max_p1()  # no cell past the last used one holds a sequence
    holes, largest = cache.fragmentation(top)
    # The arrays stop at the last used cell: the copies, and what the window keeps of every step,
    # grow with the cells in use rather than with the cache. The kept picture needs no more: only
    # memory calls came after the decode (another decode drops the picture), and none of them
    # fills a free cell.
    seq_of_cell = cache.seqs[:top, :n_seq].T.copy()  # a new array even when it is one column
    pos_min, pos_max = seq_ranges(seq_of_cell, cache.pos[:top])
    return KvSnapshot(
        step=step,
        seq_of_cell=seq_of_cell,
        pos_of_cell=cache.pos[:top].astype(np.int32),  # a copy
        used=cache.used,
        holes=holes,
        largest_free_run=largest,
        seq_pos_min=tuple(pos_min.tolist()),
        seq_pos_max=tuple(pos_max.tolist()),
        kept_seq_of_cell=None if kept is cache else kept.seqs[:top, :n_seq].T.copy(),
        written_step=mirror.written_at[:top].copy(),
        states=target.memory.recurrent_states(n_seq),
        n_cells=cache.size,
    )

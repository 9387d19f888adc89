"""The batch job: many prompts decoded together in one context."""

from __future__ import annotations

import time

from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.app.worker.messages import BatchKv, BatchRequest


def decode_batch(state: WorkerState, command: BatchRequest) -> None:
    from specdec_studio.engine import parallel
    from specdec_studio.engine.tuning import prompts
    from specdec_studio.engine.tuning.sweep import prompt_tokens

    session = state.require_session()
    chosen = prompts.shipped() if command.source == "shipped" else prompts.load_file(command.source)
    chosen = chosen[: command.count]
    jobs = [parallel.BatchJob(p.id, tuple(prompt_tokens(session, p, command.chat))) for p in chosen]
    shown_at = 0.0
    for event in parallel.run_batch(session, command.config, jobs, command.parallel):
        state.emit(event)
        # the shared cache's picture, at the rate the window can use
        if isinstance(event, parallel.JobStep) and time.perf_counter() - shown_at >= 0.05 \
                and session.memory.mirror_ok:
            state.emit(BatchKv(parallel.kv_snapshot(session, command.parallel)))
            shown_at = time.perf_counter()
    if session.memory.mirror_ok:
        state.emit(BatchKv(parallel.kv_snapshot(session, command.parallel)))

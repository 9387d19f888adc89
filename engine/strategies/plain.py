"""Plain decoding: one target decode per generated token. The baseline every strategy must match."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from specdec_studio.engine.events import Event, StepDone
from specdec_studio.engine.strategies.common import Runtime, begin_run


def run_plain(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    start = yield from begin_run(rt, prompt)
    if start is None:
        return
    token, n_past = start.token, start.n_past
    t_prev = rt.t_start
    step = 1
    while not rt.should_stop(n_past, 1):
        rt.batch.clear()
        row = rt.batch.add(token, n_past, (0,), True)
        t_decode = rt.decode()
        if t_decode is None:
            break
        n_past += 1
        logits = rt.logits(row)
        token = rt.sampler.sample(logits)
        info = rt.output.push(token, "sampled", rt.explainer.explain(logits, token) if rt.explainer else None)
        now = rt.clock()
        rt.counters.record_step(1 if info else 0, 0, 0, t_decode)
        if info is not None:
            if rt.observed:
                yield rt.step_batch(step, ("input",))
            yield StepDone(step, (info,), 0, 0, t_decode, now - t_prev)
        t_prev = now
        step += 1

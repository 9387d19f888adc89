"""Plain decoding: one target decode per generated token. The baseline every strategy must match."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from engine.events import Event, StepDone
from engine.strategies.common import Runtime, decode_prompt


def run_plain(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    row = decode_prompt(rt, prompt)
    if row is None:
        return
    n_past = len(prompt)
    t_decode = 0.0
    t_start = t_prev = time.perf_counter()
    step = 0
    while True:
        token = rt.sampler.sample(rt.logits(row))
        info = rt.output.push(token, "sampled")
        now = time.perf_counter()
        rt.counters.record_step(1 if info else 0, 0, 0, t_decode)
        if info is not None:
            yield StepDone(step, (info,), 0, 0, t_decode, now - t_prev)
        t_prev = now
        step += 1
        if rt.should_stop(n_past, 1):
            break
        rt.batch.clear()
        row = rt.batch.add(token, n_past, (0,), True)
        t_decode = rt.decode()
        if t_decode is None:
            break
        n_past += 1
    rt.counters.t_generate_s = time.perf_counter() - t_start

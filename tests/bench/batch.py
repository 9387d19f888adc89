"""Batch decoding of many prompts against the same prompts run one after another, plain, prompt
lookup and Auto, for P = 1, 2, 4, 8 prompts at a time.

    .venv/bin/python tests/bench/batch.py [-n 64] [--prompts 8] [--rounds 2]

Each round runs, in turn: the prompts one after another (single runs), then the batch at each P;
the second round goes in reverse order, so a drift of the machine's speed hits both alike. Prints
aggregate tokens per second — all prompts' tokens ÷ the wall time of the whole set, and the same
without the time spent decoding the prompts (each prompt is decoded alone, as its single run
does, so that part cannot speed up) — and the batch's ratio to the single runs, median of the
rounds. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

from _common import THREADS, model_path

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.parallel import BatchFinished, BatchJob, JobFinished, run_batch
from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

PARALLEL = (1, 2, 4, 8)


def singles(session, config, jobs) -> tuple[float, float]:
    """(tokens/s over the wall time, tokens/s without the prompts' decoding)."""
    t0 = time.perf_counter()
    n, t_prompts = 0, 0.0
    for job in jobs:
        for event in session.run(config, list(job.tokens)):
            if isinstance(event, RunFinished):
                n += len(event.token_ids)
                t_prompts += event.stats["t_encode_s"]
    wall = time.perf_counter() - t0
    return n / wall, n / (wall - t_prompts)


def batched(session, config, jobs, parallel) -> tuple[float, float, dict]:
    t0 = time.perf_counter()
    n, t_prompts, summary = 0, 0.0, {}
    for event in run_batch(session, config, jobs, parallel):
        if isinstance(event, JobFinished):
            n += len(event.token_ids)
            t_prompts += event.stats.get("t_encode_s", 0.0)
        elif isinstance(event, BatchFinished):
            summary = event.stats
    wall = time.perf_counter() - t0
    return n / wall, n / (wall - t_prompts), summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=64, help="tokens per prompt")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    configs = {"plain": RunConfig(max_tokens=args.n),
               "lookup k=3": RunConfig(mode="lookup", max_tokens=args.n, speculative=SpeculativeParams(k=3)),
               "auto": RunConfig(mode="auto", max_tokens=args.n)}
    with Session(model_path(), n_ctx=4096, n_threads=THREADS) as session:
        session.ensure_sequences(max(PARALLEL))
        prompts = shipped()[: args.prompts]
        jobs = [
            BatchJob(f"{p.category}-{i}", tuple(prompt_tokens(session, p, chat=True))) for i, p in enumerate(prompts)
        ]
        print(f"{model_path().name}, {THREADS} threads, {len(jobs)} prompts of "
              f"{min(len(j.tokens) for j in jobs)}-{max(len(j.tokens) for j in jobs)} tokens, {args.n} tokens each")
        for name, config in configs.items():
            rates: dict[str, list[tuple[float, float]]] = {"single": [], **{f"P={p}": [] for p in PARALLEL}}
            rows: dict[int, float] = {}
            for r in range(args.rounds):
                order = ["single", *PARALLEL]
                for what in (order if r % 2 == 0 else order[::-1]):
                    if what == "single":
                        rates["single"].append(singles(session, config, jobs))
                    else:
                        wall, gen, summary = batched(session, config, jobs, what)
                        rates[f"P={what}"].append((wall, gen))
                        rows[what] = summary["mean_batch_tokens"]
            base = [statistics.median(r[i] for r in rates["single"]) for i in (0, 1)]
            print(f"\n{name}: one after another {base[0]:.1f} tokens/s ({base[1]:.1f} without the prompts)")
            for p in PARALLEL:
                wall, gen = (statistics.median(r[i] for r in rates[f"P={p}"]) for i in (0, 1))
                print(f"  P={p}: {wall:7.1f} tokens/s = {wall / base[0]:.2f}x   without the prompts "
                      f"{gen:7.1f} = {gen / base[1]:.2f}x   ({rows[p]:.1f} tokens a decode)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

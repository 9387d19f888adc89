"""Soak: 300 runs in one session, every mode, random valid settings, Stop at random moments.

No run may raise; after a warm-up the resident memory may grow by less than 50 MB, and no thread
or file descriptor may leak. Slow (about 5 minutes): run it with ``pytest -m slow`` before a
release.
"""

from __future__ import annotations

import os
import random
import threading

import pytest

from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.sampling import SamplingParams
from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning import prompts
from specdec_studio.engine.tuning.sweep import prompt_tokens
from tests.conftest import N_THREADS

N_RUNS = 300
WARM_UP = 40
MAX_GROWTH_BYTES = 50 << 20


def resident_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def native_threads() -> int:
    return len(os.listdir("/proc/self/task"))


def random_config(rng: random.Random) -> RunConfig:
    mode = rng.choice(["plain", "lookahead", "speculative", "lookup", "auto"])
    sampling = SamplingParams() if rng.random() < 0.6 else SamplingParams(
        temperature=rng.choice([0.5, 0.8, 1.0]), top_p=rng.choice([0.9, 1.0]), seed=rng.randrange(1000))
    return RunConfig(
        mode=mode,
        max_tokens=rng.randrange(4, 64),
        sampling=sampling,
        lookahead=LookaheadParams(W=rng.randrange(1, 7), N=rng.randrange(2, 5), G=rng.randrange(0, 7),
                                  ordered_kv=rng.random() < 0.8),
        speculative=SpeculativeParams(k=rng.randrange(1, 9), adaptive=rng.choice(["off", "tutorial", "heuristic"]),
                                      lookup=rng.choice(["cache", "latest"]), k_max=12),
    )


@pytest.mark.slow
def test_soak_300_runs(smollm_path, smollm_drafts):
    rng = random.Random(2026)
    prompt_set = prompts.shipped()
    finishes: dict[str, int] = {}
    with Session(smollm_path, n_ctx=2048, n_threads=N_THREADS, draft_path=smollm_drafts["default-q3_k_m"]) as session:
        token_sets = [prompt_tokens(session, p, True) for p in prompt_set]
        baseline = None
        final, previous, n_reused = None, [], 0
        for i in range(N_RUNS):
            if i == WARM_UP:
                baseline = (resident_bytes(), open_fds(), native_threads(), threading.active_count())
            config = random_config(rng)
            timer = None
            if rng.random() < 0.5:  # Stop at a random moment: before the first step or mid-run
                timer = threading.Timer(rng.uniform(0.0, 0.4), session.cancel)
                timer.start()
            tokens = rng.choice(token_sets)
            reuse = rng.random() < 0.5  # half the runs keep what the cache holds (as a chat turn does)
            if reuse and final is not None and rng.random() < 0.5:  # continue the previous run
                tokens = (previous + list(final.token_ids) + tokens[-8:])[-1500:]
            previous = tokens
            final = None
            for event in session.run(config, tokens, fresh_cancel=timer is None, reuse_prefix=reuse):
                final = event
            if timer is not None:
                timer.cancel()
                timer.join()
            assert isinstance(final, RunFinished), f"run {i} ({config.mode}) ended without a result"
            finishes[final.finish_reason] = finishes.get(final.finish_reason, 0) + 1
            n_reused += final.stats["n_prompt_reused"]
            session.cancel_flag.clear()
        growth = resident_bytes() - baseline[0]
        print(
            f"\nsoak: {N_RUNS} runs, finishes {finishes}, resident growth after warm-up "
            f"{growth / 2**20:.1f} MB, fds {baseline[1]} -> {open_fds()}, threads {baseline[2]} -> {native_threads()}, "
            f"{n_reused} prompt tokens reused"
        )
        assert growth < MAX_GROWTH_BYTES
        assert open_fds() <= baseline[1]
        assert native_threads() <= baseline[2] and threading.active_count() <= baseline[3]
    assert finishes.get("cancelled", 0) > 0 and finishes.get("length", 0) > 0 and n_reused > 0

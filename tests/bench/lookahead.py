"""Lookahead against plain decoding, measured side by side in one run.

SmolLM2-135M, 2 threads, greedy, 256 tokens, a code prompt and a chat prompt. For plain and for
(W, N, G) in (15,5,15), (4,3,4), (2,3,1) and the best of a small sweep: t/s, tokens per step,
n_accept and the ratio to plain. Also what seeding the n-gram pool from the prompt changes.
"""

from __future__ import annotations

import itertools
import sys

from _common import GPU_LAYERS, THREADS, bench_prompts, measure, model_path

from specdec_studio.engine.config import LookaheadParams, RunConfig
from specdec_studio.engine.session import Session

N_TOKENS = int(sys.argv[1]) if len(sys.argv) > 1 else 256
FIXED = [(15, 5, 15), (4, 3, 4), (2, 3, 1)]
SWEEP = [w for w in itertools.product((1, 2, 3, 4), (2, 3, 4), (1, 2, 4)) if w not in FIXED]


def row(label: str, stats: dict, plain_tps: float) -> str:
    return (f"{label:<26} {stats['tokens_per_second']:8.2f} t/s  {stats['tokens_per_step']:5.2f} tok/step  "
            f"n_accept {stats['n_accept']:4d}  ratio {stats['tokens_per_second'] / plain_tps:5.2f}")


def main() -> None:
    session = Session(model_path("default"), n_ctx=4096, n_threads=THREADS, n_gpu_layers=GPU_LAYERS)
    prompts = bench_prompts(session)
    print(f"model {model_path('default').name}, {THREADS} threads, greedy, {N_TOKENS} tokens")
    for name, tokens in prompts.items():
        print(f"\n== {name} prompt ({len(tokens)} tokens)")
        measure(session, tokens, RunConfig(max_tokens=16))  # warm-up
        plain = measure(session, tokens, RunConfig(max_tokens=N_TOKENS))
        print(row("plain", plain, plain["tokens_per_second"]))
        for wng in FIXED:
            stats = measure(session, tokens, RunConfig(mode="lookahead", max_tokens=N_TOKENS,
                                                       lookahead=LookaheadParams(*wng)))
            print(row("lookahead W={} N={} G={}".format(*wng), stats, plain["tokens_per_second"]))
        # the sweep uses fewer tokens to stay short; the winner is measured again at full length
        best, best_tps = None, 0.0
        for wng in SWEEP:
            stats = measure(session, tokens, RunConfig(mode="lookahead", max_tokens=N_TOKENS // 2,
                                                       lookahead=LookaheadParams(*wng)))
            if stats["tokens_per_second"] > best_tps:
                best, best_tps = wng, stats["tokens_per_second"]
        plain = measure(session, tokens, RunConfig(max_tokens=N_TOKENS))
        stats = measure(session, tokens, RunConfig(mode="lookahead", max_tokens=N_TOKENS,
                                                   lookahead=LookaheadParams(*best)))
        print(row("best W={} N={} G={}".format(*best), stats, plain["tokens_per_second"]) + "   (plain re-measured)")
        unseeded = measure(session, tokens, RunConfig(mode="lookahead", max_tokens=N_TOKENS,
                                                      lookahead=LookaheadParams(*best, seed_pool_from_prompt=False)))
        print(row("  same, pool not seeded", unseeded, plain["tokens_per_second"]))
        for wng in [(15, 5, 15)]:
            ref = measure(session, tokens, RunConfig(mode="lookahead", max_tokens=N_TOKENS,
                                                     lookahead=LookaheadParams(*wng, seed_pool_from_prompt=False,
                                                                               ordered_kv=False)))
            print(row("W=15 N=5 G=15 as llama.cpp", ref, plain["tokens_per_second"])
                  + "   (pool not seeded, reference KV layout)")
    session.close()


if __name__ == "__main__":
    main()

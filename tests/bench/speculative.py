"""Speculative decoding and prompt lookup against plain decoding, side by side in one run.

SmolLM2-135M target, 256 greedy tokens, code and chat prompts: plain; prompt lookup with
k in {1, 2, 3, 4, 8} and adaptive, drafting from n-gram counts ("cache") and from the latest
match ("latest"); the target as its own draft and a Q3_K_M requantised draft with k in {2, 4};
adaptive k. Prints t/s, acceptance, mean accepted length per step and the ratio to plain.
"""

from __future__ import annotations

import sys

from _common import THREADS, bench_prompts, measure, model_path

from specdec_studio.engine.models import catalog
from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.session import Session

N_TOKENS = int(sys.argv[1]) if len(sys.argv) > 1 else 256


def row(label: str, s: dict, plain_tps: float) -> str:
    return (f"{label:<34} {s['tokens_per_second']:8.2f} t/s  accept {100 * s['accept_rate']:5.1f}%  "
            f"accepted/step {s['mean_accepted_per_step']:4.2f}  ratio {s['tokens_per_second'] / plain_tps:5.2f}")


def main() -> None:
    target = model_path("default")
    drafts = {"self": target, "Q3_K_M": catalog.make_derived("default-q3_k_m", log=lambda _m: None)}
    session = Session(target, n_ctx=4096, n_threads=THREADS)
    prompts = bench_prompts(session)
    print(f"target {target.name}, {THREADS} threads, greedy, {N_TOKENS} tokens")
    for name, tokens in prompts.items():
        print(f"\n== {name} prompt ({len(tokens)} tokens)")
        measure(session, tokens, RunConfig(max_tokens=16))
        plain = measure(session, tokens, RunConfig(max_tokens=N_TOKENS))["tokens_per_second"]
        print(f"{'plain':<34} {plain:8.2f} t/s")
        for lookup in ("cache", "latest"):
            for k in (1, 2, 3, 4, 8):
                s = measure(session, tokens, RunConfig(mode="lookup", max_tokens=N_TOKENS,
                                                       speculative=SpeculativeParams(k=k, ngram_max=3, lookup=lookup)))
                print(row(f"lookup {lookup} k={k}", s, plain))
            s = measure(session, tokens, RunConfig(mode="lookup", max_tokens=N_TOKENS, speculative=SpeculativeParams(
                k=2, adaptive="heuristic", k_max=8, lookup=lookup)))
            print(row(f"lookup {lookup} adaptive (heuristic)", s, plain))
        for label, path in drafts.items():
            session.load_draft(path)
            for k in (2, 4):
                s = measure(session, tokens, RunConfig(mode="speculative", max_tokens=N_TOKENS,
                                                       speculative=SpeculativeParams(k=k)))
                print(row(f"draft {label} k={k}", s, plain) + f"  draft time {s['t_draft_s']:.2f}s")
            s = measure(session, tokens, RunConfig(mode="speculative", max_tokens=N_TOKENS,
                                                   speculative=SpeculativeParams(k=4, adaptive="tutorial")))
            print(row(f"draft {label} adaptive (tutorial)", s, plain))
        session.unload_draft()
        plain_again = measure(session, tokens, RunConfig(max_tokens=N_TOKENS))["tokens_per_second"]
        print(f"{'plain (again, drift check)':<34} {plain_again:8.2f} t/s")
    session.close()


if __name__ == "__main__":
    main()

"""What following the KV cells costs: the mirror's work on every decode and memory call, and the
snapshot the app takes after every step (the KV map's picture and the step inspector's record),
timed inside the runs they follow. Default: a lookahead (15,5,15) run of the default model with
n_ctx = 4096 (target: the mirror < 3 % of decode time).

    .venv/bin/python tests/bench/kv_mirror.py [--mode lookahead|lookup|plain] [--layers 1]
                                              [--n-ctx 16384] [--repeat-prompt 80] [--rounds 3]

``--layers 1`` runs the default model cut to its first layer (GPU-like step times, where this work
is a larger share of a step); ``--repeat-prompt R`` makes the prompt the code prompt R times over
(80: 11,520 tokens), so that the cells in use are many. Prints the medians over the rounds of the
mirror's and the snapshot's microseconds per step. The host is noisy: compare two trees by running
them alternately, several times.
"""

from __future__ import annotations

import argparse
import statistics
import time

from _common import CODE_PROMPT, THREADS, model_path

from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.kv.cells import KvMirror
from specdec_studio.engine.session import Session

N_TOKENS = 128
MIRROR_CALLS = ("on_decode", "on_seq_rm", "on_seq_cp", "on_seq_keep", "on_seq_add", "on_clear")
CONFIGS = {
    "lookahead": RunConfig(mode="lookahead", max_tokens=N_TOKENS, lookahead=LookaheadParams(15, 5, 15)),
    "lookup": RunConfig(mode="lookup", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=3, ngram_max=4)),
    "plain": RunConfig(mode="plain", max_tokens=N_TOKENS),
}


def timed_mirror(spent: list[float]) -> None:
    """Every mirror call adds its seconds to ``spent[0]``."""
    for name in MIRROR_CALLS:
        original = getattr(KvMirror, name)

        def wrapper(self, *args, _original=original):
            t0 = time.perf_counter()
            _original(self, *args)
            spent[0] += time.perf_counter() - t0

        setattr(KvMirror, name, wrapper)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=sorted(CONFIGS), default="lookahead")
    ap.add_argument("--layers", type=int, default=0, help="the default model cut to its first LAYERS layers (0: whole)")
    ap.add_argument("--n-ctx", type=int, default=4096)
    ap.add_argument("--repeat-prompt", type=int, default=1, help="the code prompt this many times over")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if args.layers:
        from host_cost import cut_model

        model = cut_model(args.layers)
    else:
        model = model_path("default")
    spent = [0.0]
    timed_mirror(spent)
    config = CONFIGS[args.mode]
    mirror_us, snapshot_us, shares = [], [], []
    with Session(model, n_ctx=args.n_ctx, n_threads=THREADS) as session:
        tokens = session.tokenize_prompt(CODE_PROMPT * args.repeat_prompt)
        for _event in session.run(config, tokens, reuse_prefix=True):  # the prompt's cells, once
            pass
        for _ in range(args.rounds):
            spent[0], in_snapshots, decode_before = 0.0, 0.0, session.memory.t_decode_s
            final = None
            for event in session.run(config, tokens, reuse_prefix=True):
                if isinstance(event, StepDone):  # as the app does after every step
                    t0 = time.perf_counter()
                    session.kv_snapshot(event.step, config.n_sequences)
                    in_snapshots += time.perf_counter() - t0
                elif isinstance(event, RunFinished):
                    final = event
            steps = final.stats["steps"]
            mirror_us.append(1e6 * spent[0] / steps)
            snapshot_us.append(1e6 * in_snapshots / steps)
            shares.append(spent[0] / (session.memory.t_decode_s - decode_before))
    print(f"{args.mode}, {model.name}, n_ctx={args.n_ctx}, {len(tokens)} prompt tokens, {steps} steps of "
          f"{N_TOKENS} tokens, {args.rounds} rounds")
    print(
        f"mirror: {statistics.median(mirror_us):.1f} us a step ({100 * statistics.median(shares):.2f}% of decode time)"
    )
    print(f"snapshot: {statistics.median(snapshot_us):.1f} us a step")


if __name__ == "__main__":
    main()

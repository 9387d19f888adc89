"""Speculation over llama.cpp's RPC backend: each mode's speed-up over plain when the target's
layers sit on two ``rpc-server`` processes behind a link with a set round-trip latency, measured
and as the cost model predicts it from a profile measured over the same link.

Two ``specdec rpc-server`` processes on this machine hold the default model's layers (split as
llama.cpp splits them); a relay in front of each adds the latency to every round trip (0, 1 and
5 ms by default); the draft model, where a mode has one, stays on this machine. Every run's
output is checked against plain's over the same servers. Rounds go forward and back (ABBA).

    .venv/bin/python tests/bench/rpc_latency.py [--rounds 2] [--latency-ms 0,1,5] [-n 128]

Nothing else may run meanwhile: on 2 cores a second process distorts every figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from _common import CODE_PROMPT, model_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams  # noqa: E402
from specdec_studio.engine.models import catalog  # noqa: E402
from specdec_studio.engine.session import Session, last_event  # noqa: E402
from specdec_studio.engine.tuning import cost_model, profile  # noqa: E402
from tests.rpc_local import LatencyRelay, rpc_servers  # noqa: E402


def configs(n: int) -> dict[str, RunConfig]:
    return {
        "plain": RunConfig(mode="plain", max_tokens=n),
        "lookup k=3": RunConfig(mode="lookup", max_tokens=n, speculative=SpeculativeParams(k=3)),
        "lookahead 15/5/15": RunConfig(mode="lookahead", max_tokens=n, lookahead=LookaheadParams(15, 5, 15)),
        "draft k=4": RunConfig(mode="speculative", max_tokens=n, speculative=SpeculativeParams(k=4)),
        "auto": RunConfig(mode="auto", max_tokens=n),
    }


def bench_latency(endpoints: list[str], latency_ms: float, args, draft: Path) -> dict[str, dict]:
    relays = [LatencyRelay(e, latency_ms / 1000) for e in endpoints]
    try:
        with Session(model_path(), n_ctx=2048, n_threads=args.threads, observe=False, draft_path=draft,
                     rpc_servers=tuple(r.endpoint for r in relays)) as session:
            tokens = session.tokenize_prompt(CODE_PROMPT)
            # the profile this link gives: every batch size's decode over the relays
            curve = profile.load_or_measure(session, remeasure=True).curve
            draft_curve = profile.load_or_measure(session, draft=True).curve
            runs = configs(args.n_predict)
            speeds: dict[str, list[float]] = {name: [] for name in runs}
            last: dict[str, dict] = {}
            reference = None
            for r in range(args.rounds):
                order = list(runs) if r % 2 == 0 else list(reversed(runs))
                for name in order:
                    done = last_event(session.run(runs[name], tokens))
                    if reference is None and name == "plain":
                        reference = done.token_ids
                    speeds[name].append(done.stats["tokens_per_second"])
                    last[name] = done.stats
                    last[name]["same_as_plain"] = reference is None or done.token_ids == reference
            # the relays' ports are random: this link's profile is of no use to a later run
            (profile.profile_dir() / profile.profile_key(session).filename()).unlink(missing_ok=True)
            plain = statistics.median(speeds["plain"])
            out = {}
            for name, cfg in runs.items():
                measured = statistics.median(speeds[name]) / plain
                predicted = cost_model.predict_from_stats(
                    last[name], curve, mode=cfg.mode, draft_curve=draft_curve if cfg.mode == "speculative" else None
                )
                out[name] = {"tps": statistics.median(speeds[name]), "measured": measured, "predicted": predicted,
                             "same": last[name]["same_as_plain"], "tokens_per_step": last[name]["tokens_per_step"],
                             "t1_ms": curve.t_plain_s * 1000}
            return out
    finally:
        for relay in relays:
            relay.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--latency-ms", default="0,1,5")
    ap.add_argument("-n", "--n-predict", type=int, default=128)
    ap.add_argument("--threads", type=int, default=1, help="this machine's threads (the draft's)")
    ap.add_argument("--server-threads", type=int, default=2, help="each rpc-server's threads")
    args = ap.parse_args()
    latencies = [float(x) for x in args.latency_ms.split(",")]
    draft = catalog.resolve("default-q8_0")
    results = {}
    with rpc_servers(2, threads=args.server_threads) as servers:
        endpoints = [s.endpoint for s in servers]
        for latency in latencies:
            print(f"latency {latency:g} ms per round trip…", file=sys.stderr, flush=True)
            results[latency] = bench_latency(endpoints, latency, args, draft)

    print(f"\nSmolLM2 on 2 local rpc-servers ({args.server_threads} threads each), code prompt, {args.n_predict} "
          f"tokens, {args.rounds} ABBA rounds; speed-up over plain at the same latency, measured / predicted")
    names = list(configs(1))
    print(f"{'mode':<20}" + "".join(f"{f'{lat:g} ms':>24}" for lat in latencies))
    print(f"{'plain t/s (T(1))':<20}" + "".join(
        f"{results[lat]['plain']['tps']:>12.1f} ({results[lat]['plain']['t1_ms']:5.1f} ms)" for lat in latencies))
    worst_gap = 0.0
    for name in names[1:]:
        cells = []
        for lat in latencies:
            r = results[lat][name]
            pred = r["predicted"] or 0.0
            worst_gap = max(worst_gap, abs(pred / r["measured"] - 1) if r["measured"] else 1.0)
            cells.append(f"{r['measured']:>9.2f}x / {pred:4.2f}x{'' if r['same'] else ' DIFF':>5}")
        print(f"{name:<20}" + "".join(f"{c:>24}" for c in cells))
    same = all(r["same"] for by in results.values() for r in by.values())
    print(f"\nevery output equals plain's over the same servers: {same}")
    print(f"largest |predicted / measured - 1|: {worst_gap:.1%} (bar: within 15 %)")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())

"""What explaining every token costs a run, made in line or on a thread of its own (the window's
way: ``Session.explain_in_background``), where the host waits on a decode and where it computes it.

Explanations (the hover card of every token: the target's top tokens and the verdict in numbers)
are ~0.1-0.15 ms of numpy a token. Made in line they are on the run's path; made on their own
thread they are made while the next step decodes, and the run's path keeps a copy of the logit
row (~0.02 ms). Whether that pays depends on what the host does while a step decodes:

- ``local``: the default model cut to one layer (``host_cost.cut_model``, ~1,000 tokens/s with
  prompt lookup), decoded by llama.cpp on this machine's cores with ``SPECDEC_BENCH_THREADS``
  threads: 2 (the default) take every core of this machine, and the explanations' thread then takes
  one from the decode; 1 leaves it a core, as a machine with more cores than llama.cpp's threads;
- ``rpc``: the same cut on two local ``rpc-server`` processes behind relays (each a process of its
  own: ``tests.rpc_local.RelayProcess``) that add ``--latency-ms`` to every round trip: while a step
  crosses the link the host waits, as a GPU's host waits on the GPU. The servers still compute on
  this machine's cores.

For each, prompt lookup k=3 on the code prompt (``-n`` tokens) runs without explanations, with them
in line and with them on their own thread, in turn (ABBA rounds); it prints the medians' tokens/s,
each explaining setting's ratio to the run without, and what explanations cost per token. Every
run's tokens are checked equal.

    .venv/bin/python tests/bench/explain_cost.py [--where local,rpc] [--rounds 3] [-n 512] [--latency-ms 1]

Nothing else may run meanwhile: on 2 cores a second process distorts every figure.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

from _common import CODE_PROMPT, THREADS
from host_cost import cut_model

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from specdec_studio.engine.config import RunConfig, SpeculativeParams  # noqa: E402
from specdec_studio.engine.session import Session, last_event  # noqa: E402
from tests.rpc_local import RelayProcess, rpc_servers  # noqa: E402

SETTINGS = ("no explanations", "in line", "own thread")


def measure(session: Session, n: int, rounds: int) -> dict[str, list[float]]:
    """Tokens/s of each setting, ``rounds`` ABBA rounds, the prompt's cells kept between runs."""
    prompt = session.tokenize_prompt(CODE_PROMPT)
    speeds: dict[str, list[float]] = {name: [] for name in SETTINGS}
    first: tuple | None = None  # the tokens every run must make
    order = list(SETTINGS)
    for r in range(2 * rounds + 1):  # the first pass warms up and is not counted
        for name in order if r % 2 else order[::-1]:
            session.explain_in_background = name == "own thread"
            config = RunConfig(mode="lookup", max_tokens=n, speculative=SpeculativeParams(k=3),
                               explain=name != "no explanations")
            done = last_event(session.run(config, prompt, reuse_prefix=True))
            first = first or done.token_ids
            if done.token_ids != first:
                raise SystemExit(f"{name}: not the tokens the first run made")
            if r:
                speeds[name].append(done.stats["tokens_per_second"])
    session.explain_in_background = False
    return speeds


def report(where: str, speeds: dict[str, list[float]]) -> None:
    base = statistics.median(speeds[SETTINGS[0]])
    print(f"{where}: {SETTINGS[0]} {base:7.1f} tokens/s")
    for name in SETTINGS[1:]:
        tps = statistics.median(speeds[name])
        print(f"  {name:<12} {tps:7.1f} tokens/s  ratio {tps / base:.3f}  "
              f"explanations cost {1e6 * (1 / tps - 1 / base):6.1f} us a token  "
              f"(runs: {', '.join(f'{x:.0f}' for x in speeds[name])})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", default="local,rpc", help="local, rpc or both")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-n", "--tokens", type=int, default=512)
    ap.add_argument("--latency-ms", type=float, default=1.0, help="added to each round trip to the servers")
    ap.add_argument("--server-threads", type=int, default=2, help="each rpc-server's threads")
    args = ap.parse_args()
    model = cut_model(1)
    wanted = args.where.split(",")
    print(f"{model.name}, prompt lookup k=3, code prompt, {args.tokens} tokens, {args.rounds} ABBA rounds")
    if "local" in wanted:
        with Session(model, n_ctx=4096, n_threads=THREADS) as session:
            report(f"local ({THREADS} threads)", measure(session, args.tokens, args.rounds))
    if "rpc" in wanted:
        with rpc_servers(2, threads=args.server_threads) as servers:
            relays = [RelayProcess(s.endpoint, args.latency_ms / 1000) for s in servers]
            try:
                with Session(model, n_ctx=4096, n_threads=THREADS,
                             rpc_servers=tuple(r.endpoint for r in relays)) as session:
                    report(f"rpc (2 servers, {args.latency_ms:g} ms a round trip)",
                           measure(session, args.tokens, args.rounds))
            finally:
                for relay in relays:
                    relay.close()


if __name__ == "__main__":
    main()

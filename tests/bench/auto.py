"""Auto against plain and the best fixed prompt-lookup setting, on every category of the prompt
set, interleaved in one process (plain, lookup k=2/4/8, auto, then again in reverse order) so a
drift of the machine's speed hits every setting alike.

    .venv/bin/python tests/bench/auto.py [-n 256] [--rounds 2] [--no-siblings]

Prints tokens/s per category and setting, each setting's speed-up over plain, the geometric mean
over categories, Auto's decisions and sources, and its calibration table (predicted against
observed acceptance). ``--no-siblings`` adds Auto without the n-gram cache's sibling branches, to
see what the tree's extra branches earn. Run it with nothing else on the machine; it measures the
batch-cost profile first if none is cached (Auto prices its steps with it).
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _common import THREADS, model_path

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies.auto import sources as auto_sources  # where the sibling branches are made
from specdec_studio.engine.tuning import profile
from specdec_studio.engine.tuning.cost_model import geometric_mean
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

LOOKUP_KS = (2, 4, 8)


def _run(session, config, tokens, alt_branches: int = auto_sources.ALT_BRANCHES) -> dict:
    final = None
    default, auto_sources.ALT_BRANCHES = auto_sources.ALT_BRANCHES, alt_branches
    try:
        for event in session.run(config, tokens):
            if isinstance(event, RunFinished):
                final = event
    finally:
        auto_sources.ALT_BRANCHES = default
    return final.stats


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=256, help="tokens per run")
    ap.add_argument("--rounds", type=int, default=2, help="forward-and-back rounds per category")
    ap.add_argument("--category", action="append", help="only these categories (repeatable)")
    ap.add_argument("--no-siblings", action="store_true",
                    help="also run Auto without the n-gram cache's sibling branches (one branch per source)")
    args = ap.parse_args()
    prompts = {}
    for p in shipped():
        if args.category is None or p.category in args.category:
            prompts.setdefault(p.category, p)
    settings = {"plain": RunConfig(max_tokens=args.n)}
    for k in LOOKUP_KS:
        settings[f"lookup k={k}"] = RunConfig(mode="lookup", max_tokens=args.n, speculative=SpeculativeParams(k=k))
    settings["auto"] = RunConfig(mode="auto", max_tokens=args.n)
    if args.no_siblings:
        settings["auto 1/source"] = settings["auto"]
    with Session(model_path(), n_ctx=4096, n_threads=THREADS) as session:
        profile.load_or_measure(session)
        speeds: dict[str, dict[str, list[float]]] = {}
        auto_stats: dict[str, dict] = {}
        for category, prompt in sorted(prompts.items()):
            tokens = prompt_tokens(session, prompt, chat=True)
            speeds[category] = {name: [] for name in settings}
            order = list(settings)
            for _ in range(args.rounds):
                for names in (order, order[::-1]):
                    for name in names:
                        siblings = 0 if name == "auto 1/source" else auto_sources.ALT_BRANCHES
                        stats = _run(session, settings[name], tokens, siblings)
                        speeds[category][name].append(stats["tokens_per_second"])
                        if name == "auto":
                            auto_stats[category] = stats
        names = list(settings)
        print(f"{model_path().name}, {THREADS} threads, {args.n} tokens, median of {2 * args.rounds} runs, "
              "speed-up over plain:")
        print(f"{'category':<16}" + "".join(f"{n:>14}" for n in names) + "   plain t/s")
        ratios: dict[str, list[float]] = {n: [] for n in names}
        for category, by_name in speeds.items():
            plain = statistics.median(by_name["plain"])
            row = []
            for n in names:
                r = statistics.median(by_name[n]) / plain
                ratios[n].append(r)
                row.append(f"{r:14.3f}")
            print(f"{category:<16}" + "".join(row) + f"   {plain:9.1f}")
        best_fixed = max((n for n in names if n.startswith("lookup")), key=lambda n: geometric_mean(ratios[n]))
        print(f"{'geometric mean':<16}" + "".join(f"{geometric_mean(ratios[n]):14.3f}" for n in names))
        print(f"best fixed setting: {best_fixed}; Auto's worst category: {min(ratios['auto']):.3f}x plain")
        # Interference from the rest of the machine only ever slows a run down, so each setting's
        # fastest run is its least disturbed one: the same table from the best runs.
        print(f"\nthe same, from each setting's fastest of {2 * args.rounds} runs:")
        best_ratios: dict[str, list[float]] = {n: [] for n in names}
        for category, by_name in speeds.items():
            plain = max(by_name["plain"])
            row = []
            for n in names:
                r = max(by_name[n]) / plain
                best_ratios[n].append(r)
                row.append(f"{r:14.3f}")
            print(f"{category:<16}" + "".join(row) + f"   {plain:9.1f}")
        print(f"{'geometric mean':<16}" + "".join(f"{geometric_mean(best_ratios[n]):14.3f}" for n in names))
        print(f"Auto's worst category (fastest runs): {min(best_ratios['auto']):.3f}x plain")
        print("\nAuto's decisions and sources per category:")
        for category, stats in auto_stats.items():
            a = stats["auto"]
            sources = ", ".join(f"{s} {c['accepted']}/{c['offered']}" for s, c in a["sources"].items())
            print(f"  {category:<16} {stats['tokens_per_step']:.2f} tokens/step · {a['decisions']} · accepted {sources}")
        print("\ncalibration (last run of each category, pooled): predicted vs observed acceptance")
        pooled: dict[str, list[float]] = {}
        for stats in auto_stats.values():
            for row in stats["auto"]["calibration"]:
                entry = pooled.setdefault(row["bin"], [0.0, 0.0, 0])
                entry[0] += row["predicted"] * row["n"]
                entry[1] += row["observed"] * row["n"]
                entry[2] += row["n"]
        for name, (pred, obs, n) in sorted(pooled.items()):
            print(f"  {name}: n={n:5d}  predicted {pred / n:.2f}  observed {obs / n:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

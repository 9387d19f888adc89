"""Auto against plain and the best fixed prompt-lookup setting, on every category of the prompt
set, interleaved in one process (plain, lookup k=2/4/8, auto, then again in reverse order: one
round) so a drift of the machine's speed hits every setting alike.

    .venv/bin/python tests/bench/auto.py [-n 128] [--rounds 3] [--min-seconds 8] [--prompts 1] [--only auto]
                                         [--no-siblings] [--aa]
    SPECDEC_BENCH_MODEL=default-q4_0 .venv/bin/python tests/bench/auto.py --only auto   # on a copy
    SPECDEC_BENCH_MODEL=coder .venv/bin/python tests/bench/auto.py --only auto --draft coder-draft

Each round gives every setting a speed-up over plain: its tokens/s over plain's in the same round,
over two runs (forward and back) of each of the category's first ``--prompts`` prompts. A category
gets ``--rounds`` rounds, and more until plain has generated for ``--min-seconds`` there: one run
of a short answer (30 tokens of SmolLM2 take 0.35 s) varies by ±5 % here, so short answers need
more runs than long ones for the same resolution. ``--aa`` adds "plain again", plain measured as
a setting of its own: its spread around 1.00 is what a ratio's noise is in that run. Prints,
per category, the median of the rounds' speed-ups and the worst round's, the geometric mean over
categories of both, Auto's decisions and sources, and its calibration table (predicted against
observed acceptance). ``--only auto`` runs plain and Auto alone (more
rounds in the same time); ``--no-siblings`` adds Auto without the n-gram cache's sibling branches,
to see what the tree's extra branches earn. ``--draft KEY`` loads a draft model for Auto (which
prices it: engine/strategies/auto/draft_price.py) and adds "auto, no draft", the same session's
Auto told not to use it. Run it with nothing else on the machine; it measures the batch-cost
profiles first if none are cached (Auto prices its steps, and its draft, with them).
"""

from __future__ import annotations

import argparse
import math
import statistics
import sys

from _common import GPU_LAYERS, THREADS, model_path

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies.auto import sources as auto_sources  # where the sibling branches are made
from specdec_studio.engine.tuning import profile
from specdec_studio.engine.tuning.cost_model import geometric_mean
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

LOOKUP_KS = (2, 4, 8)
MAX_ROUNDS = 30


def _run(session, config, tokens, alt_branches: int = auto_sources.ALT_BRANCHES,
         with_draft: bool = True) -> tuple[dict, float]:
    """The run's stats, and the median time of its one-token decodes (its own plain step)."""
    final = None
    one_token: list[float] = []
    default, auto_sources.ALT_BRANCHES = auto_sources.ALT_BRANCHES, alt_branches
    draft, session.draft = session.draft, (session.draft if with_draft else None)  # the run takes it from here
    try:
        for event in session.run(config, tokens):
            if isinstance(event, RunFinished):
                final = event
            elif isinstance(event, StepDone) and event.step > 0 and event.n_drafted == 0 and len(event.tokens) == 1:
                one_token.append(event.t_decode_s)  # (step 0's token came from the prompt's decode)
    finally:
        auto_sources.ALT_BRANCHES = default
        session.draft = draft
    return final.stats, statistics.median(one_token) if one_token else math.nan  # nan: every step drafted


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=128, help="tokens per run")
    ap.add_argument("--rounds", type=int, default=3, help="forward-and-back rounds per category, at least")
    ap.add_argument("--min-seconds", type=float, default=8.0,
                    help=f"more rounds (up to {MAX_ROUNDS}) until plain has generated for this long in the category")
    ap.add_argument("--aa", action="store_true",
                    help="also run plain a second time as a setting of its own: the noise floor of a ratio")
    ap.add_argument("--category", action="append", help="only these categories (repeatable)")
    ap.add_argument("--only", choices=("auto",), help="run plain and Auto only")
    ap.add_argument("--prompts", type=int, default=1,
                    help="prompts per category (its first ones); a category's speed is their tokens over their time")
    ap.add_argument("--draft", help="a draft model (catalog key or path) for Auto")
    ap.add_argument("--no-siblings", action="store_true",
                    help="also run Auto without the n-gram cache's sibling branches (one branch per source)")
    args = ap.parse_args()
    prompts: dict[str, list] = {}
    for p in shipped(args.category):
        if len(prompts.setdefault(p.category, [])) < args.prompts:
            prompts[p.category].append(p)
    settings = {"plain": RunConfig(max_tokens=args.n)}
    if args.only is None:
        for k in LOOKUP_KS:
            settings[f"lookup k={k}"] = RunConfig(mode="lookup", max_tokens=args.n, speculative=SpeculativeParams(k=k))
    settings["auto"] = RunConfig(mode="auto", max_tokens=args.n)
    if args.draft:
        settings["auto, no draft"] = settings["auto"]
    if args.no_siblings:
        settings["auto 1/source"] = settings["auto"]
    if args.aa:
        settings["plain again"] = settings["plain"]
    names = list(settings)
    draft = str(model_path(args.draft)) if args.draft else None
    with Session(model_path(), n_ctx=4096, n_threads=THREADS, n_gpu_layers=GPU_LAYERS, draft_path=draft) as session:
        profile.load_or_measure(session)
        if draft:
            profile.load_or_measure(session, draft=True)
            print(f"draft {model_path(args.draft).name}: one decode costs {session.draft_token_cost():.2f} "
                  "of the target's (the profiles')")
        # category -> setting -> one speed-up over plain per round
        rounds: dict[str, dict[str, list[float]]] = {}
        corrected: dict[str, dict[str, list[float]]] = {}  # the same, in each run's own plain steps
        plain_speed: dict[str, list[float]] = {}
        auto_stats: dict[str, dict] = {}
        for category, chosen in prompts.items():
            token_lists = [prompt_tokens(session, prompt, chat=True) for prompt in chosen]
            rounds[category] = {name: [] for name in names}
            corrected[category] = {name: [] for name in names}
            plain_speed[category] = []
            # at least --rounds rounds, and more until plain has run --min-seconds in all: a short
            # answer's run is as noisy as a long one's, so it needs more of them
            n_rounds, plain_seconds = 0, 0.0
            while n_rounds < args.rounds or (plain_seconds < args.min_seconds and n_rounds < MAX_ROUNDS):
                n_rounds += 1
                # setting -> [tokens, seconds] over the round's runs of every prompt of the category
                totals: dict[str, list[float]] = {name: [0.0, 0.0] for name in names}
                in_steps: dict[str, float] = {name: 0.0 for name in names}  # time in own plain steps
                for tokens in token_lists:
                    for order in (names, names[::-1]):
                        for name in order:
                            siblings = 0 if name == "auto 1/source" else auto_sources.ALT_BRANCHES
                            stats, t_step = _run(session, settings[name], tokens, siblings, name != "auto, no draft")
                            totals[name][0] += stats["n_predict"]
                            totals[name][1] += stats["t_generate_s"]
                            in_steps[name] += stats["t_generate_s"] / t_step
                            if name == "auto":
                                auto_stats[category] = stats
                speeds = {name: n / seconds for name, (n, seconds) in totals.items()}
                plain_seconds += totals["plain"][1]
                plain_speed[category].append(speeds["plain"])
                for name in names:
                    rounds[category][name].append(speeds[name] / speeds["plain"])
                    corrected[category][name].append(
                        totals[name][0] / in_steps[name] / (totals["plain"][0] / in_steps["plain"]))
        print(
            f"{model_path().name}, {THREADS} threads, {args.n} tokens, chat template, {args.prompts} prompt(s) per "
            f"category, {args.rounds}+ rounds of 2 runs each (more until plain ran {args.min_seconds:g} s); "
            "speed-up over plain, median of the rounds / worst round:"
        )
        print(f"{'category':<16}" + "".join(f"{n:>16}" for n in names[1:]) + "   plain t/s  rounds")
        medians: dict[str, list[float]] = {n: [] for n in names}
        worsts: dict[str, list[float]] = {n: [] for n in names}
        for category, by_name in rounds.items():
            row = []
            for n in names[1:]:
                median, worst = statistics.median(by_name[n]), min(by_name[n])
                medians[n].append(median)
                worsts[n].append(worst)
                row.append(f"{median:9.3f} /{worst:5.2f}")
            print(f"{category:<16}" + "".join(row) + f"   {statistics.median(plain_speed[category]):9.1f}"
                  f"  {len(plain_speed[category]):6d}")
        print(f"{'geometric mean':<16}"
              + "".join(f"{geometric_mean(medians[n]):9.3f} /{geometric_mean(worsts[n]):5.2f}" for n in names[1:]))
        print("\ndrift-corrected: each run's time counted in its own median one-token decode, so a change of "
              "the machine's speed between runs cancels (it would also hide a setting that slowed its own "
              "plain steps: compare with the table above); median of the rounds:")
        print(f"{'category':<16}" + "".join(f"{n:>16}" for n in names[1:]))
        for category, by_name in corrected.items():
            print(f"{category:<16}" + "".join(f"{statistics.median(by_name[n]):16.3f}" for n in names[1:]))
        print(f"{'geometric mean':<16}" + "".join(
            f"{geometric_mean([statistics.median(c[n]) for c in corrected.values()]):16.3f}" for n in names[1:]))
        lookups = [n for n in names if n.startswith("lookup")]
        if lookups:
            best_fixed = max(lookups, key=lambda n: geometric_mean(medians[n]))
            print(f"best fixed setting: {best_fixed}")
        worst_category = min(rounds, key=lambda c: statistics.median(rounds[c]["auto"]))
        print(
            f"Auto's worst category: {worst_category}, {statistics.median(rounds[worst_category]['auto']):.3f}x plain "
            f"(median of the rounds); its worst round anywhere: {min(min(r['auto']) for r in rounds.values()):.3f}x"
        )
        print("\nAuto's decisions and sources per category (its last run):")
        for category, stats in auto_stats.items():
            a = stats["auto"]
            sources = ", ".join(f"{s} {c['accepted']}/{c['offered']}" for s, c in a["sources"].items())
            print(f"  {category:<16} {stats['tokens_per_step']:.2f} tokens/step · trust {a.get('trust', 1.0):.2f} · "
                  f"{a['decisions']} · accepted {sources}")
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

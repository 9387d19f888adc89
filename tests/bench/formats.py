"""What a weight format plus a mode buys together: plain on the shipped file against plain, Auto
and prompt lookup on a copy in another format, per category, in one process.

    .venv/bin/python tests/bench/formats.py [--format Q4_0] [-n 128] [--rounds 1] [--prompts 1]

Both files stay loaded; every round runs, for each of a category's first ``--prompts`` prompts,
plain on the shipped file, then plain, Auto and lookup (k = 2, 4, 8) on the copy, then the same
in reverse order. Prints per category each setting's tokens/s over plain on the shipped file
(median of the rounds), the best of Auto and lookup on the copy, and the same-file figure (Auto on
the copy over plain on the copy), each with its geometric mean. The copy is made once into the
model cache if it is not there. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _common import THREADS, model_path

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.session import Session, last_event
from specdec_studio.engine.tuning import formats, profile
from specdec_studio.engine.tuning.cost_model import geometric_mean
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--format", default="Q4_0", help="the copy's weight format")
    ap.add_argument("-n", type=int, default=128, help="tokens per run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--prompts", type=int, default=1, help="prompts per category")
    args = ap.parse_args()
    original_path = model_path()
    copy_path = formats.make_copy(original_path, args.format.upper())
    settings = {"plain": RunConfig(max_tokens=args.n), "auto": RunConfig(mode="auto", max_tokens=args.n)}
    for k in (2, 4, 8):
        settings[f"lookup k={k}"] = RunConfig(mode="lookup", max_tokens=args.n, speculative=SpeculativeParams(k=k))
    runs = [("shipped", "plain")] + [("copy", name) for name in settings]
    prompts: dict[str, list] = {}
    for p in shipped():
        if len(prompts.setdefault(p.category, [])) < args.prompts:
            prompts[p.category].append(p)
    with Session(original_path, n_ctx=4096, n_threads=THREADS) as original, \
            Session(copy_path, n_ctx=4096, n_threads=THREADS) as copy:
        profile.load_or_measure(copy)
        sessions = {"shipped": original, "copy": copy}
        ratios: dict[str, dict[tuple[str, str], list[float]]] = {}
        for category, chosen in prompts.items():
            ratios[category] = {run: [] for run in runs}
            for _ in range(args.rounds):
                totals = {run: [0, 0.0] for run in runs}
                for prompt in chosen:
                    tokens = prompt_tokens(original, prompt, chat=True)  # the two files share the vocabulary
                    for order in (runs, runs[::-1]):
                        for which, name in order:
                            stats = last_event(sessions[which].run(settings[name], tokens)).stats
                            totals[(which, name)][0] += stats["n_predict"]
                            totals[(which, name)][1] += stats["t_generate_s"]
                base = totals[("shipped", "plain")][0] / totals[("shipped", "plain")][1]
                for run, (n, seconds) in totals.items():
                    ratios[category][run].append(n / seconds / base)
    names = [f"copy {name}" for _, name in runs[1:]]
    print(f"{original_path.name} against its {args.format} copy, {THREADS} threads, {args.n} tokens, chat template, "
          f"{args.prompts} prompt(s) per category, {args.rounds} round(s); tokens/s over plain on the shipped file "
          f"(\"copy\": the {args.format} copy):")
    print(f"{'category':<16}" + "".join(f"{n:>16}" for n in names) + f"{'best A/L':>10}{'same-file auto':>16}")
    columns: dict[str, list[float]] = {n: [] for n in [*names, "best", "same"]}
    for category, by_run in ratios.items():
        row = [statistics.median(by_run[run]) for run in runs[1:]]
        best = max(row[1:])  # Auto or a lookup setting on the copy
        same = row[1] / row[0]  # Auto on the copy over plain on the copy
        for n, r in zip(names, row):
            columns[n].append(r)
        columns["best"].append(best)
        columns["same"].append(same)
        print(f"{category:<16}" + "".join(f"{r:16.3f}" for r in row) + f"{best:10.3f}{same:16.3f}")
    print(f"{'geometric mean':<16}" + "".join(f"{geometric_mean(columns[n]):16.3f}" for n in names)
          + f"{geometric_mean(columns['best']):10.3f}{geometric_mean(columns['same']):16.3f}")
    print(f"worst category: best of Auto and lookup on the copy {min(columns['best']):.3f}x plain on the shipped "
          f"file; Auto on the copy {min(columns['same']):.3f}x plain on the copy")
    return 0


if __name__ == "__main__":
    sys.exit(main())

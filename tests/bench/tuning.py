"""Predicted against measured speed-up, and the best setting per prompt category.

For a grid of fixed lookahead and prompt-lookup settings on three categories of the shipped prompt
sets, every setting is measured against plain decoding with the sweep machinery (plain runs
bracket each block of settings, greedy, ids checked against plain) and predicted by the cost
model from the batch-cost profile and the run's own counters. Prints one row per setting and
category, the median absolute error of the prediction relative to the measured value (target:
<= 15 %), the profile's measuring time and the best setting per category. With ``--default-sweep``
it also times ``specdec sweep`` with its defaults (target: <= 3 minutes).

    .venv/bin/python tests/bench/tuning.py [--tokens 128] [--per-category 2] [--default-sweep]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time

from _common import THREADS, model_path

from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning import profile, prompts, sweep

CATEGORIES = ("code_editing", "summarisation", "chat")
GRIDS = {
    "lookahead": {"N": (2, 3), "W": (1, 2, 4), "G": (1, 4)},
    "lookup": {"lookup": ("cache", "latest"), "k": (1, 2, 4, 8)},
}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--per-category", type=int, default=2)
    parser.add_argument("--default-sweep", action="store_true", help="also time `specdec sweep` with its defaults")
    args = parser.parse_args()

    rows = []
    best: dict[str, tuple[float, str]] = {}
    with Session(model_path(), n_threads=THREADS) as session:
        t0 = time.perf_counter()
        prof = profile.load_or_measure(session, remeasure=True)
        t_profile = time.perf_counter() - t0
        print(f"profile: measured in {prof.t_measure_s:.1f} s (KV fill {prof.key.kv_fill}, {THREADS} threads); "
              "T(B)/T(1): " + ", ".join(f"{b}: {prof.curve.relative(b):.2f}" for b in (2, 4, 8, 16, 32, 64, 128)))
        for category in CATEGORIES:
            prompt_set = tuple(prompts.shipped([category], args.per_category))
            for mode, axes in GRIDS.items():
                spec = sweep.SweepSpec(mode, axes, prompt_set, args.tokens)
                for event in sweep.run_sweep(session, spec, curve=prof.curve):
                    if isinstance(event, sweep.SweepCell):
                        label = f"{mode} {sweep.setting_label(event.setting)}"
                        error = abs(event.predicted - event.measured) / event.measured
                        rows.append((category, label, event, error))
                        print(f"{category:14} {label:34} measured {event.measured:5.2f}  predicted "
                              f"{event.predicted:5.2f}  error {100 * error:5.1f}%  tokens/step "
                              f"{event.tokens_per_step:4.2f}  {'lossless' if event.lossless else event.divergences}",
                              flush=True)
                        if event.measured > best.get(category, (0.0, ""))[0]:
                            flag = "" if event.lossless else " (a near-tie flipped; see its row)"
                            best[category] = (event.measured, label + flag)

    errors = [e for *_rest, e in rows]
    print()
    print(f"settings x categories: {len(rows)}; median |predicted - measured| / measured = "
          f"{100 * statistics.median(errors):.1f}% (target <= 15%); mean {100 * statistics.mean(errors):.1f}%; "
          f"max {100 * max(errors):.1f}%")
    for mode in GRIDS:
        mode_errors = [e for _c, label, _ev, e in rows if label.startswith(mode)]
        print(f"  {mode}: median error {100 * statistics.median(mode_errors):.1f}%")
    print(f"profile time: {t_profile:.1f} s")
    for category, (value, label) in best.items():
        print(f"best for {category}: {label} at {value:.2f}x plain")

    if args.default_sweep:
        with tempfile.TemporaryDirectory() as out:
            t0 = time.perf_counter()
            done = subprocess.run(
                [sys.executable, "-m", "specdec_studio.engine.cli", "sweep", "-t", str(THREADS), "-o", out],
                capture_output=True,
                text=True,
            )
            t_sweep = time.perf_counter() - t0
            print(f"default `specdec sweep` (lookahead): {t_sweep:.0f} s (target <= 180 s); "
                  f"{done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr[-300:]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

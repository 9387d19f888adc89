"""What one of Auto's plain steps (a step that sends no tree) costs beyond a plain decoding step.

    .venv/bin/python tests/bench/auto_overhead.py [-n 128] [--rounds 3] [--category C ...]

Every step's wall time minus its decode time is the Python the strategy spends around the decode
(sources, planner, verification, bookkeeping, events). For each category's first prompt, plain and
Auto run interleaved (forward and back); the script prints, per category, the mean of that figure
over plain's steps and over Auto's steps that sent no tree (the slowest 2 % of each left out: a
step the machine interrupted), their difference as a share of plain's mean step, and the same over
all categories pooled. A mean, not a median: Auto asks its sources on some plain steps and not on
others, and what a run loses is the sum. The consumer of the events is this
script, which only keeps them, so what is measured is the strategy's own cost.
"""

from __future__ import annotations

import argparse
import sys

from _common import THREADS, model_path

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.events import StepDone
from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning import profile
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens


def _trimmed_mean(values: list[float], cut: float = 0.02) -> float:
    kept = sorted(values)[: max(1, int(len(values) * (1 - cut)))]
    return sum(kept) / len(kept)


def _steps(session, config, tokens) -> list[StepDone]:
    return [e for e in session.run(config, tokens) if isinstance(e, StepDone)]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=128, help="tokens per run")
    ap.add_argument("--rounds", type=int, default=3, help="forward-and-back rounds per category")
    ap.add_argument("--category", action="append", help="only these categories (repeatable)")
    args = ap.parse_args()
    prompts: dict[str, object] = {}
    for p in shipped(args.category):
        prompts.setdefault(p.category, p)
    configs = {"plain": RunConfig(max_tokens=args.n), "auto": RunConfig(mode="auto", max_tokens=args.n)}
    pooled: dict[str, list[float]] = {"plain": [], "auto": [], "step": []}
    print(f"{model_path().name}, {THREADS} threads, {args.n} tokens, {2 * args.rounds} runs of each; "
          "per-step time outside the decode, in ms (trimmed mean):")
    print(f"{'category':<22}{'plain step':>12}{'plain':>9}{'auto plain':>12}{'overhead':>10}{'auto steps':>12}")
    with Session(model_path(), n_ctx=4096, n_threads=THREADS) as session:
        profile.load_or_measure(session)
        for category, prompt in prompts.items():
            tokens = prompt_tokens(session, prompt, chat=True)
            outside: dict[str, list[float]] = {"plain": [], "auto": []}
            plain_steps: list[float] = []
            n_auto_steps = n_auto_plain = 0
            for _ in range(args.rounds):
                for names in (("plain", "auto"), ("auto", "plain")):
                    for name in names:
                        steps = _steps(session, configs[name], tokens)[1:]  # the first one waits on the prompt
                        if name == "plain":
                            plain_steps.extend(s.t_step_s for s in steps)
                        else:
                            n_auto_steps += len(steps)
                            steps = [s for s in steps if s.n_drafted == 0]
                            n_auto_plain += len(steps)
                        outside[name].extend(s.t_step_s - s.t_decode_s for s in steps)
            step = _trimmed_mean(plain_steps)
            plain, auto = _trimmed_mean(outside["plain"]), _trimmed_mean(outside["auto"])
            pooled["plain"].extend(outside["plain"])
            pooled["auto"].extend(outside["auto"])
            pooled["step"].extend(plain_steps)
            print(f"{category:<22}{step * 1e3:12.2f}{plain * 1e3:9.3f}{auto * 1e3:12.3f}"
                  f"{(auto - plain) / step:10.1%}{n_auto_plain:>6}/{n_auto_steps:<5}")
    step = _trimmed_mean(pooled["step"])
    plain, auto = _trimmed_mean(pooled["plain"]), _trimmed_mean(pooled["auto"])
    print(
        f"{'all steps pooled':<22}{step * 1e3:12.2f}{plain * 1e3:9.3f}{auto * 1e3:12.3f}{(auto - plain) / step:10.1%}"
    )
    print(f"Auto's plain steps cost {(auto - plain) * 1e3:.3f} ms more than plain's outside the decode: "
          f"{(auto - plain) / step:.2%} of a plain step.")
    return 0


if __name__ == "__main__":
    sys.exit(main())

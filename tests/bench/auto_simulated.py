"""Auto's plans priced on a machine that keeps time: a planner change A/B'd without this VM's noise.

Every decode "takes" what a measured batch-cost profile says a decode of its shape takes
(``tests.auto_plan.simulated_machine``; the tokens are still SmolLM2's own, greedy), so a setting's
speed-up over plain is its plan's worth alone: no host time, no other process, no noisy size. On
the code prompt and every ``--every``-th shipped chat prompt, ``-n`` tokens each, it prints each
setting's simulated speed-up over plain, then per setting the chat prompts' geometric mean, their
worst, and the code prompt:

- ``auto``: Auto as it ships (up to 64 proposed tokens a step, as many as the machine's profile
  prices within ``MAX_STEP_COST`` plain steps: 16 on the shipped CPU profiles, or round a loop as
  many as the loop has gone on);
- ``auto 16 tokens``: Auto held to 16 proposed tokens whatever the profile (its cap before);
- ``lookup mod``: our port of llama.cpp's ``ngram-mod`` (24-gram match, copies of 48-64 tokens).

Noise-free is not the same as real: the machine is the profile, so a size the profile misprices
is mispriced for every setting alike (Auto prices with the same curve it is timed by).

    .venv/bin/python tests/bench/auto_simulated.py [-n 128] [--every 3] [--machine smollm2-q4_1-bumpy]
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

from _common import CODE_PROMPT, model_path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from tests.auto_plan import SHARED_PROFILES, load_curve, simulated_machine, simulated_seconds  # noqa: E402

from specdec_studio.engine.config import RunConfig, SpeculativeParams  # noqa: E402
from specdec_studio.engine.session import Session, last_event  # noqa: E402
from specdec_studio.engine.tuning.prompts import shipped  # noqa: E402
from specdec_studio.engine.tuning.sweep import prompt_tokens  # noqa: E402

SETTINGS = {
    "auto": SpeculativeParams(),
    "auto 16 tokens": SpeculativeParams(auto_k_max=16),
    "lookup mod": SpeculativeParams(k=64, lookup="mod"),
}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=128, help="tokens per prompt")
    ap.add_argument("--every", type=int, default=3, help="every how many-th shipped chat prompt (1: all 94)")
    ap.add_argument(
        "--machine",
        default="smollm2-q4_1-smooth",
        help="the profile that keeps time: a name in tests/data/profiles, or a profile's .json path",
    )
    args = ap.parse_args()
    machine = load_curve(
        Path(args.machine) if args.machine.endswith(".json") else SHARED_PROFILES / f"{args.machine}.json"
    )
    print(f"SmolLM2, greedy, {args.n} tokens, decodes timed by the {args.machine} profile")
    with Session(model_path(), n_ctx=4096, n_threads=2, observe=False) as session, \
            simulated_machine(session, machine, machine):
        prompts = {"code": session.tokenize_prompt(CODE_PROMPT)}
        prompts.update({p.id: prompt_tokens(session, p, True) for p in shipped()[:: args.every]})
        speedups: dict[str, dict[str, float]] = {name: {} for name in SETTINGS}
        for prompt_id, tokens in prompts.items():
            plain = last_event(session.run(RunConfig(mode="plain", max_tokens=args.n), tokens))
            t_plain = simulated_seconds(plain.stats, machine) / plain.stats["n_predict"]
            row = []
            for name, params in SETTINGS.items():
                mode = "lookup" if params.lookup == "mod" else "auto"
                done = last_event(session.run(RunConfig(mode=mode, max_tokens=args.n, speculative=params), tokens))
                per_token = simulated_seconds(done.stats, machine) / done.stats["n_predict"]
                speedups[name][prompt_id] = t_plain / per_token
                same = list(done.token_ids) == list(plain.token_ids)
                row.append(f"{name} {speedups[name][prompt_id]:.3f}{'' if same else ' (differs: see models.md)'}")
            print(f"{prompt_id}: " + ", ".join(row), flush=True)
        for name, by_prompt in speedups.items():
            chat = [v for k, v in by_prompt.items() if k != "code"]
            geomean = math.exp(sum(map(math.log, chat)) / len(chat))
            print(f"{name}: chat geometric mean {geomean:.3f}, worst {min(chat):.3f}; code {by_prompt['code']:.3f}")


if __name__ == "__main__":
    main()

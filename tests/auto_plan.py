"""Auto's plan on the code prompt against a given batch-cost profile, on a machine that keeps time.

What Auto decides depends on two clocks: the profile it prices with, and the decode times the run
measures as it goes (its guard and step-cost correction learn from them). To see what the profile
alone does to the plan, the run's clock is replaced by a fixed machine: every decode "takes" what
``machine`` (a cost curve) says a decode of its shape takes. The tokens are real (SmolLM2, greedy),
so the output still equals plain's; only the timings Auto sees are simulated. Used by
``tests/engine/test_auto_profile_noise.py``, by the golden plans of ``tests/engine/test_auto_plans.py``
(``tests/data/auto_plans.json``, written again with ``--golden`` after a change that means to plan
differently) and, with more seeds, by hand:

    .venv/bin/python -m tests.auto_plan [--seeds 8] [-n 256]
    .venv/bin/python -m tests.auto_plan --golden
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
from pathlib import Path

import numpy as np

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import StepDone
from specdec_studio.engine.session import Session, last_event
from specdec_studio.engine.tuning.cost_model import CostCurve
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

# two profiles of the default model measured minutes apart (copied from the project's shared folder):
# one smooth, one with a bumpy size that flipped Auto's plan before its profile was fitted
SHARED_PROFILES = Path(__file__).resolve().parent / "data" / "profiles"
PERTURBATION = 0.08  # each size's times scaled by a factor in [1 - 0.08, 1 + 0.08]
# Auto's golden plans: every step of every shipped prompt and the code prompt, on the smooth profile
GOLDEN_PLANS = Path(__file__).resolve().parent / "data" / "auto_plans.json"
GOLDEN_TOKENS = 128
GOLDEN_N_CTX = 2048  # the test session's context (tests/conftest.py: SMOLLM_N_CTX)


def load_curve(path: Path) -> CostCurve:
    data = json.loads(path.read_text())
    return CostCurve(tuple(data["sizes"]), tuple(data["t_all_logits_s"]), tuple(data["t_last_logit_s"]))


def perturbed(curve: CostCurve, seed: int, spread: float = PERTURBATION) -> CostCurve:
    """``curve`` with every size's two times scaled by one factor drawn in [1 - spread, 1 + spread]."""
    factors = np.random.default_rng(seed).uniform(1.0 - spread, 1.0 + spread, len(curve.sizes))
    return CostCurve(curve.sizes, tuple((np.asarray(curve.t_all_logits) * factors).tolist()),
                     tuple((np.asarray(curve.t_last_logit) * factors).tolist()))


@contextlib.contextmanager
def simulated_machine(session: Session, priced_with: CostCurve, machine: CostCurve):
    """Within it, every run of ``session`` prices with ``priced_with`` and every decode "takes" what
    ``machine`` says a decode of its shape takes (the tokens are still the model's own).

    The clock is replaced on the memory's class, not on the session's memory of the moment: a run
    that needs more sequences than the context has makes a new context, and with it a new memory
    (an Auto run after a plain one does), whose decodes would otherwise keep the real clock. So
    within it every memory of the process (a draft model's too) keeps the machine's time."""
    memory_class = type(session.target.memory)
    real_decode = memory_class.decode

    def machine_decode(memory, batch) -> float:
        real_decode(memory, batch)
        n = batch.n_tokens
        return machine.seconds(n, int(np.count_nonzero(batch.logits[:n])))

    session.cost_curve = lambda: priced_with  # what a run prices with (read once at its start)
    memory_class.decode = machine_decode
    try:
        yield
    finally:
        memory_class.decode = real_decode
        del session.cost_curve


def auto_plan(session: Session, prompt: list[int], priced_with: CostCurve, machine: CostCurve,
              n_tokens: int) -> tuple[list[int], dict]:
    """One greedy Auto run priced with ``priced_with`` while every decode is timed as ``machine``
    says: its tokens and stats (``n_drafted`` is the plan's size)."""
    with simulated_machine(session, priced_with, machine):
        config = RunConfig(mode="auto", max_tokens=n_tokens, speculative=SpeculativeParams())
        done = last_event(session.run(config, prompt))
    return list(done.token_ids), done.stats


def step_plans(session: Session, prompt: list[int], machine: CostCurve, n_tokens: int) -> list[list]:
    """Every step of one greedy Auto run on ``machine`` (priced and timed by it), as plain data:
    ``[decision, k, branches, depth, proposers, tokens]`` a step, what the golden plans hold."""
    config = RunConfig(mode="auto", max_tokens=n_tokens, speculative=SpeculativeParams())
    with simulated_machine(session, machine, machine):
        # step 0 is the token sampled from the prompt: nothing was planned for it
        steps = [e for e in session.run(config, prompt) if isinstance(e, StepDone) and e.step > 0]
    plans = []
    for step in steps:
        auto = step.auto
        plans.append([auto.decision, auto.k, auto.branches, auto.depth, list(auto.proposers),
                      [t.id for t in step.tokens]])
    return plans


def golden_prompts(session: Session) -> dict[str, list[int]]:
    """The golden plans' prompts, by id: the code prompt, then every shipped prompt (chat template)."""
    from tests.bench._common import CODE_PROMPT

    prompts = {"code": session.tokenize_prompt(CODE_PROMPT)}
    prompts.update({p.id: prompt_tokens(session, p, True) for p in shipped()})
    return prompts


def write_golden_plans() -> None:
    from tests.bench._common import model_path

    machine = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    with Session(model_path(), n_ctx=GOLDEN_N_CTX, n_threads=2) as session:
        plans = {pid: step_plans(session, tokens, machine, GOLDEN_TOKENS)
                 for pid, tokens in golden_prompts(session).items()}
    # one prompt a line: a changed plan shows as a changed line in a diff
    lines = [f"{json.dumps(pid)}: {json.dumps(steps, separators=(',', ':'))}" for pid, steps in plans.items()]
    GOLDEN_PLANS.write_text("{\n" + ",\n".join(lines) + "\n}\n")
    print(f"{GOLDEN_PLANS}: {len(plans)} prompts, {sum(map(len, plans.values()))} steps")


def simulated_seconds(stats: dict, machine: CostCurve) -> float:
    """What a run's generation decodes (``stats["decode_shapes"]``) take on ``machine``."""
    return sum(machine.seconds(b, r) * count for b, r, count in stats["decode_shapes"])


def main() -> None:
    from tests.bench._common import CODE_PROMPT, model_path

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=8)
    ap.add_argument("-n", type=int, default=256)
    ap.add_argument("--golden", action="store_true", help=f"write {GOLDEN_PLANS.name} again, and nothing else")
    args = ap.parse_args()
    if args.golden:
        write_golden_plans()
        return
    profiles = {p.stem: load_curve(p) for p in sorted(SHARED_PROFILES.glob("*.json"))}
    machine = profiles["smollm2-q4_1-smooth"]
    with Session(model_path(), n_ctx=4096, n_threads=2) as session:
        prompt = session.tokenize_prompt(CODE_PROMPT)
        for name, curve in profiles.items():
            drafted = []
            for seed in [None, *range(args.seeds)]:
                priced = curve if seed is None else perturbed(curve, seed)
                _, stats = auto_plan(session, prompt, priced, machine, args.n)
                drafted.append(stats["n_drafted"])
                print(f"{name} seed {seed}: drafted {stats['n_drafted']}, accepted {stats['n_accept']}, "
                      f"steps {stats['steps']}", flush=True)
            print(f"{name}: drafted median {statistics.median(drafted)}, min {min(drafted)}, max {max(drafted)}")


if __name__ == "__main__":
    main()

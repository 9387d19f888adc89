"""Auto's plans in a slot of batch decoding, simulated without a model: each golden answer of
``tests/data/auto_plans.json`` (its emitted tokens) is decoded again as a slot would, proposals
verified against the answer itself, every batch "taking" what the smooth shared profile says a
decode of the shared batch's shape takes. The tokens each step proposed are pinned in
``tests/data/auto_slot_plans.json`` (``python -m tests.auto_slot_plan --golden`` writes it again
after a change that means to plan differently)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tests.auto_plan import GOLDEN_PLANS, SHARED_PROFILES, load_curve

GOLDEN_SLOT_PLANS = Path(__file__).resolve().parent / "data" / "auto_slot_plans.json"
N_BUSY = 3  # slots decoding beside this one: a slot's drafts are priced on the shared batch
K_MAX = 16
PROMPT_TOKENS = 8  # the answer's first tokens stand in for the prompt


def answers() -> dict[str, list[int]]:
    """Each golden run's emitted tokens, in order."""
    golden = json.loads(GOLDEN_PLANS.read_text())
    return {pid: [t for step in steps for t in step[5]] for pid, steps in golden.items()}


def slot_plan(make_planner, answer: list[int]) -> list[list[int]]:
    """Every step's proposal of a slot planner (``make_planner(prompt)``) decoding ``answer``."""
    curve = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    prompt, position = answer[:PROMPT_TOKENS], PROMPT_TOKENS
    planner = make_planner(prompt)
    planner.begin(prompt)
    proposals = []
    while position < len(answer):
        context = answer[:position]
        found = planner.propose(context, min(K_MAX, len(answer) - position), N_BUSY)
        tokens = found[0]
        proposals.append(tokens)
        truth = answer[position:position + len(tokens)]
        n_accepted = next((i for i, (a, b) in enumerate(zip(tokens, truth)) if a != b), len(truth))
        n_batch = N_BUSY + len(tokens)
        planner.verified(n_accepted, n_batch, curve.seconds(n_batch, n_batch))
        position += n_accepted + 1
        planner.settle(answer[:position])
    return proposals


def all_slot_plans(make_planner) -> dict[str, list[list[int]]]:
    return {pid: slot_plan(make_planner, answer) for pid, answer in answers().items()}


def main() -> None:
    from specdec_studio.engine.strategies.auto.slot import slot_planner

    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--golden", action="store_true", help=f"write {GOLDEN_SLOT_PLANS.name}")
    args = parser.parse_args()
    curve = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    plans = all_slot_plans(lambda prompt: slot_planner(prompt, curve, K_MAX))
    if args.golden:
        GOLDEN_SLOT_PLANS.write_text(json.dumps(plans, separators=(",", ":")) + "\n")
    print(f"{len(plans)} answers, {sum(map(len, plans.values()))} steps, "
          f"{sum(len(p) > 0 for ps in plans.values() for p in ps)} with a proposal")


if __name__ == "__main__":
    main()

"""Auto's plans in a batch slot equal the pinned ones (tests/auto_slot_plan.py: every golden
answer decoded again as a slot would, without a model)."""

from __future__ import annotations

import json

from specdec_studio.engine.strategies.auto.slot import slot_planner
from tests.auto_plan import SHARED_PROFILES, load_curve
from tests.auto_slot_plan import GOLDEN_SLOT_PLANS, K_MAX, all_slot_plans


def test_every_slot_plan_equals_the_pinned_one():
    curve = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    golden = json.loads(GOLDEN_SLOT_PLANS.read_text())
    plans = all_slot_plans(lambda prompt: slot_planner(prompt, curve, K_MAX))
    assert sum(len(p) > 0 for ps in plans.values() for p in ps) > 1000  # the slots did propose
    assert plans == golden

"""Auto's plans in a batch slot equal the pinned ones (tests/auto_slot_plan.py: every golden
answer decoded again as a slot would, without a model), and a slot's drafts are priced by what
they cost the whole batch."""

from __future__ import annotations

import json

import pytest

from specdec_studio.engine.strategies.auto.calibration import StepCost
from specdec_studio.engine.strategies.auto.slot import BatchStepCost, slot_planner
from tests.auto_plan import SHARED_PROFILES, load_curve
from tests.auto_slot_plan import GOLDEN_SLOT_PLANS, K_MAX, all_slot_plans


def test_every_slot_plan_equals_the_pinned_one():
    curve = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    golden = json.loads(GOLDEN_SLOT_PLANS.read_text())
    plans = all_slot_plans(lambda prompt: slot_planner(prompt, curve, K_MAX))
    assert sum(len(p) > 0 for ps in plans.values() for p in ps) > 1000  # the slots did propose
    assert plans == golden


def test_a_slots_drafts_are_priced_by_what_they_cost_the_whole_batch():
    """Drafts slow every busy slot's token: the extra time, at the batch's rate, is base tokens'
    worth, so a slot's k drafts cost 1 + base × (T(step with them) / T(base) - 1); a second ubatch
    where each slot has a KV stream of its own."""
    curve = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    alone = StepCost(curve)
    unified, streams = BatchStepCost(curve), BatchStepCost(curve, streams=True)
    for cost in (unified, streams):
        assert [cost.relative(n) for n in range(1, 8)] == [alone.relative(n) for n in range(1, 8)]  # base 1
        cost.base = 4
        assert cost.relative(1) == 1.0
    t = unified.curve.relative  # the profile's fit, as every price reads it
    for k in range(1, 8):
        assert unified.relative(1 + k) == pytest.approx(1 + 4 * (t(4 + k) / t(4) - 1))
        assert streams.relative(1 + k) == pytest.approx(1 + 4 * t(k) / t(4))
        assert streams.relative(1 + k) > unified.relative(1 + k) > t(4 + k) / t(4)
    # what a step may propose follows the busy slots (never a table shared with single runs)
    assert streams.affordable_tokens(16) <= unified.affordable_tokens(16) < alone.affordable_tokens(16)
    unified.base = 1
    assert unified.affordable_tokens(16) == alone.affordable_tokens(16)
    # without a profile the same price, on the run's own timings (here still the prior)
    unpriced, alone = BatchStepCost(None, streams=True), StepCost(None)
    unpriced.base = 4
    assert unpriced.relative(4) == pytest.approx(1 + 4 * alone.relative(3) / alone.relative(4))

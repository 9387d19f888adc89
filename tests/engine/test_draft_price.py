"""Auto's price of a draft model (engine/strategies/auto/draft_price.py): a draft that cannot pay
is never run, one that can is asked for the k that pays best, and a draft that stopped paying is
re-tried at growing intervals. Pure arithmetic on measured cost curves: no model needed."""

from __future__ import annotations

import pytest

from specdec_studio.engine.strategies.auto.calibration import StepCost
from specdec_studio.engine.strategies.auto.draft_price import PROBE_FIRST, PROBE_MAX, TRUSTED, DraftPrice
from specdec_studio.engine.strategies.auto.priors import MIN_GAIN
from specdec_studio.engine.tuning.cost_model import (
    CostCurve,
    acceptance_words,
    draft_break_even,
    draft_break_even_table_words,
    draft_break_even_words,
)

# Qwen2.5-Coder-1.5B Q4_K_M, 2 threads on this machine (`specdec profile`, every row's logits):
# T(B)/T(1) = 1.86, 2.70, 2.92 at B = 2, 3, 4, 7.40 at 8; its 0.5B draft decodes a token in 0.54 of
# the target's time (56 against 30 t/s).
CODER_CPU = CostCurve(sizes=(1, 2, 3, 4, 8), t_all_logits=(0.032, 0.0595, 0.0864, 0.0934, 0.2368),
                      t_last_logit=(0.032, 0.050, 0.070, 0.080, 0.150))
# A GPU-like curve: verifying a few tokens costs hardly more than one.
NEARLY_FREE = CostCurve(sizes=(1, 2, 16), t_all_logits=(0.010, 0.0101, 0.0115), t_last_logit=(0.010, 0.0101, 0.011))


def test_a_draft_that_could_not_pay_even_as_right_as_hoped_is_never_run():
    cost = StepCost(CODER_CPU)
    price = DraftPrice(token_cost=0.54, k_max=16)
    # the best a perfect draft could do: k + 1 tokens for T(k+1)/T(1) + k·0.54 plain steps
    assert max(price.gain(cost, k, 1.0) for k in range(1, 17)) < 1.0
    assert price.best(cost, 16, 1.0) == (0, 1.0)  # no k beats a plain step
    assert not price.may_pay(cost, 16, MIN_GAIN)
    assert all(price.plan(step, cost, 16, MIN_GAIN) == 0 for step in range(1, 2000))  # not even probed


def test_long_drafts_right_every_time_are_no_reason_to_probe():
    # Qwen2.5-Coder 1.5B as profiled here on 2026-12-02 (T(1) = 67 ms): 16 tokens for 13.8 steps at
    # k = 15 would "pay" for a draft that is never wrong; at the hoped-for 90 % nothing does
    curve = CostCurve(sizes=(1, 2, 4, 8, 16), t_all_logits=(0.0673, 0.108, 0.133, 0.259, 0.330),
                      t_last_logit=(0.0673, 0.100, 0.125, 0.240, 0.300))
    cost = StepCost(curve)
    price = DraftPrice(token_cost=0.59, k_max=16)
    assert price.best(cost, 16, 1.0)[1] > MIN_GAIN
    assert price.hopeful_accept() == 0.9 and not price.may_pay(cost, 16, MIN_GAIN)
    assert all(price.plan(step, cost, 16, MIN_GAIN) == 0 for step in range(1, 2000))


def test_a_cheap_draft_is_asked_for_the_k_that_pays_best():
    cost = StepCost(NEARLY_FREE)
    price = DraftPrice(token_cost=0.05, k_max=16)
    k = price.plan(1, cost, 16, MIN_GAIN)
    assert k > 1
    gains = {j: price.gain(cost, j, price.accept_rate()) for j in range(1, 17)}
    assert gains[k] == max(gains.values()) and gains[k] >= MIN_GAIN
    # the gain by hand at k = 3 and the prior acceptance 0.7: (1 - 0.7^4) / (1 - 0.7) = 2.533 tokens
    # for T(4)/T(1) = (0.0101 + 0.0014 · 2/14) / 0.010 = 1.03, the graph rebuild's 0.05 before any
    # is measured, and three draft decodes of 0.05: 1.23 plain steps
    assert price.accept_rate() == pytest.approx(0.7)
    assert price.gain(cost, 3, 0.7) == pytest.approx(2.5330 / 1.23, abs=1e-4)
    assert price.plan(2, cost, 1, MIN_GAIN) == 1  # never more than the room left


def test_a_draft_that_stops_paying_is_retried_at_growing_intervals():
    cost = StepCost(NEARLY_FREE)
    price = DraftPrice(token_cost=0.3, k_max=16)
    for _ in range(200):  # a draft that is almost always wrong
        price.observe_outcome(False)
    assert price.accept_rate() < 0.05
    asked = [step for step in range(1, 3000) if price.plan(step, cost, 16, MIN_GAIN)]
    gaps = [b - a for a, b in zip(asked, asked[1:])]
    assert gaps[0] == PROBE_FIRST and gaps == sorted(gaps) and max(gaps) == PROBE_MAX
    assert len(asked) < 3000 / 100  # about 1 step in 100 or fewer pays the probe's price
    # a probe asks for the k that would pay best if the draft were as right as hoped
    assert price.plan(asked[-1] + PROBE_MAX, cost, 16, MIN_GAIN) == price.best(cost, 16, 0.9)[0]


def test_accepted_drafts_bring_the_draft_back_at_once():
    cost = StepCost(NEARLY_FREE)
    price = DraftPrice(token_cost=0.3, k_max=16)
    for _ in range(50):
        price.observe_outcome(False)
    assert price.plan(1, cost, 16, MIN_GAIN) > 0 and price.plan(2, cost, 16, MIN_GAIN) == 0  # probed, then waits
    for _ in range(300):
        price.observe_outcome(True)
    assert price.plan(3, cost, 16, MIN_GAIN) > 0


def test_the_runs_own_timing_replaces_the_estimate():
    cost = StepCost(CODER_CPU)
    for seconds in (0.030, 0.031, 0.030, 0.032, 0.030):  # the run's plain steps
        cost.observe(1, seconds)
    price = DraftPrice(token_cost=0.05, k_max=8)  # an estimate far too low
    assert price.token_cost(cost) == 0.05
    price.observe_decodes([0.018] * (TRUSTED - 1))
    assert price.token_cost(cost) == 0.05  # not trusted yet
    price.observe_decodes([0.017])
    assert price.token_cost(cost) == pytest.approx(0.017 / cost.typical_plain_time())
    assert not price.may_pay(cost, 8, MIN_GAIN)


def test_each_draft_token_must_pay_for_its_own_decode():
    cost = StepCost(NEARLY_FREE)
    price = DraftPrice(token_cost=0.2, k_max=16)
    needed = [price.min_reach(cost, depth, MIN_GAIN) for depth in range(8)]
    # a draft decode plus the extra verification row, with the planner's margin
    assert needed[0] == pytest.approx(MIN_GAIN * (0.2 + cost.relative(2) - cost.relative(1)))
    assert all(0.2 * MIN_GAIN <= n < 0.5 for n in needed)
    # on this CPU no draft token is worth its cost, however sure the draft is
    cpu = StepCost(CODER_CPU)
    assert DraftPrice(0.54, 16).min_reach(cpu, 0, MIN_GAIN) > 1.0


def test_the_break_even_of_a_pair_in_words():
    draft_like = CostCurve(sizes=(1, 2), t_all_logits=(0.0173, 0.030), t_last_logit=(0.0173, 0.028))
    words = draft_break_even_words(CODER_CPU, draft_like, 3)
    assert words.startswith("a 4-token verification costs 2.9 tokens here and the draft 0.54 a token")
    assert "cannot pay here" in words and draft_break_even(CODER_CPU, draft_like, 3) is None
    cheap = CostCurve(sizes=(1, 2), t_all_logits=(0.002, 0.003), t_last_logit=(0.002, 0.003))
    alpha = draft_break_even(NEARLY_FREE, cheap, 3)
    assert 0.0 < alpha < 0.5 and f"pays above {100 * alpha:.0f} % acceptance" in draft_break_even_words(
        NEARLY_FREE, cheap, 3
    )
    # no rate is above 100 %: the last digits show where it is that close
    assert [acceptance_words(a) for a in (0.5, 0.9949, 0.9962, 0.99991)] == ["50 %", "99 %", "99.6 %", "99.9 %"]
    # every usual k in one line: "never" where no acceptance pays, the needed rate growing with k
    assert draft_break_even_table_words(CODER_CPU, draft_like, (1, 3)) == "k = 1: never, k = 3: never"
    table = draft_break_even_table_words(NEARLY_FREE, cheap, (1, 3))
    assert table.endswith(f"k = 3: {100 * alpha:.0f} %")
    assert table.startswith(f"k = 1: {100 * draft_break_even(NEARLY_FREE, cheap, 1):.0f} %")



def test_the_draft_and_the_tree_price_a_verification_by_one_clock():
    """Defect 14 of issue 47: the draft's verification was priced with the run's timings and the
    tree's with the profile. Both now come from the cost the tree uses (auto.guard.Wary): the
    profile's curve, each extra row scaled by the guard's trust."""
    from specdec_studio.engine.strategies.auto.guard import Wary

    # a profile measured while the machine was busy: a 2-token decode "cheaper" than a 1-token one
    wrong = CostCurve(sizes=(1, 2, 4), t_all_logits=(0.031, 0.024, 0.040), t_last_logit=(0.031, 0.024, 0.039))
    cost = StepCost(wrong)
    for _ in range(5):  # what the run itself times: 2 tokens cost 1.4 of one
        cost.observe(1, 0.0117)
        cost.observe(2, 0.0164)
    price = DraftPrice(token_cost=0.9, k_max=4)
    trusted = Wary(cost, 1.0)
    # one clock for both: the profile's fit (more tokens never cost less than fewer: 0.024 and
    # 0.031 pool into one flat stretch), its extra per row scaled by what the run measured
    # (StepCost._rescale, here at its bound of 2: the fit says a second token is free, the run 0.4)
    assert price.verify_cost(trusted, 2) == trusted.relative(2) == cost.relative(2) == 1.0
    assert cost.scale == StepCost.SCALE_RANGE[1]
    assert price.verify_cost(trusted, 4) == trusted.relative(4) == cost.relative(4)
    assert cost.relative(4) > 0.040 / 0.031  # the run's clock raised the profile's price
    # k = 1 at the hoped-for 0.9: 1.9 tokens for 1.0 + 0.05 + 0.9 = 1.95 steps, no gain
    assert not price.may_pay(trusted, 4, MIN_GAIN)

    # T(2), T(3), T(4) = 1.3, 1.55, 1.8 plain steps; a draft token costs 0.3 of one
    mid = StepCost(CostCurve(sizes=(1, 2, 4), t_all_logits=(0.010, 0.013, 0.018), t_last_logit=(0.010, 0.012, 0.016)))
    cheap = DraftPrice(token_cost=0.3, k_max=4)
    # trusting the curve, k = 3 at 0.9 pays: (1 - 0.9^4) / 0.1 = 3.439 tokens for 1.8 + 0.05 + 0.9 = 2.75
    assert cheap.gain(Wary(mid, 1.0), 3, 0.9) == pytest.approx(3.439 / 2.75)
    assert cheap.may_pay(Wary(mid, 1.0), 4, MIN_GAIN)
    # after trees that realised half their prediction every extra row costs twice what the curve
    # says, for the draft as for the tree: k = 3 is now 3.439 for 2.6 + 0.1 + 0.9 = 3.6, and no k pays
    halved = Wary(mid, 0.5)
    assert cheap.verify_cost(halved, 4) == halved.relative(4) == pytest.approx(2.6)
    assert cheap.gain(halved, 3, 0.9) == pytest.approx(3.439 / 3.6)
    assert not cheap.may_pay(halved, 4, MIN_GAIN)

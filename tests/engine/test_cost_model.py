"""The cost model: pure functions, no model needed."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.tuning import cost_model
from specdec_studio.engine.tuning.cost_model import CostCurve

# A curve shaped like SmolLM2's on 2 cores (seconds); the last-row variant pays less output work.
CURVE = CostCurve(
    sizes=(1, 2, 4, 8, 16, 32, 64, 128),
    t_all_logits=(0.010, 0.016, 0.025, 0.040, 0.070, 0.140, 0.270, 0.530),
    t_last_logit=(0.010, 0.014, 0.021, 0.034, 0.060, 0.125, 0.240, 0.460),
)


def test_plain_is_one():
    assert cost_model.predict_from_stats({"n_predict": 50, "decode_shapes": [[1, 1, 49]]}, CURVE, mode="plain") == 1.0
    # a run of single-token decodes priced as such is plain, whatever its mode says
    stats = {"n_predict": 50, "decode_shapes": [[1, 1, 49]], "n_drafted": 0, "t_draft_s": 0.0}
    assert cost_model.predict_from_stats(stats, CURVE, mode="lookup") == pytest.approx(1.0)
    assert CURVE.relative(1) == 1.0 and CURVE.relative(1, 1) == 1.0


def test_k_zero_and_degenerate_lookahead_equal_plain():
    assert cost_model.expected_tokens_per_step(0.7, 0) == 1.0
    assert cost_model.predict_draft_verify(CURVE, 0.7, 0) == 1.0
    degenerate = RunConfig(mode="lookahead", lookahead=LookaheadParams(W=1, N=2, G=0))
    assert degenerate.step_shape() == (1, 1)
    assert cost_model.break_even_tokens_per_step(CURVE, degenerate.step_shape()) == 1.0
    assert RunConfig(mode="plain").step_shape() == (1, 1)


@pytest.mark.parametrize("alpha, k, expected", [
    (0.0, 4, 1.0),
    (0.5, 1, 1.5),
    (0.5, 3, 1.875),
    (0.8, 4, (1 - 0.8 ** 5) / 0.2),  # 3.3616
    (0.9, 10, (1 - 0.9 ** 11) / 0.1),
    (1.0, 4, 5.0),
])
def test_leviathan_expected_tokens(alpha, k, expected):
    assert cost_model.expected_tokens_per_step(alpha, k) == pytest.approx(expected)


def test_expected_tokens_from_measured_positions_matches_leviathan_for_constant_alpha():
    alpha, k = 0.7, 5
    accepted_through = [alpha ** (i + 1) for i in range(k)]
    assert cost_model.expected_tokens_from_positions(accepted_through) == pytest.approx(
        cost_model.expected_tokens_per_step(alpha, k))


@given(alpha=st.floats(0.01, 0.99), k=st.integers(1, 16))
def test_alpha_from_acceptance_inverts_the_accepted_share(alpha, k):
    share = (cost_model.expected_tokens_per_step(alpha, k) - 1) / k
    assert cost_model.alpha_from_acceptance(share, k) == pytest.approx(alpha, abs=1e-6)


def test_curve_interpolates_and_extrapolates():
    assert CURVE.seconds(4) == pytest.approx(0.025)
    assert CURVE.seconds(3) == pytest.approx((0.016 + 0.025) / 2)
    assert CURVE.seconds(256) == pytest.approx(0.530 + (0.530 - 0.270) / 64 * 128)
    # logits for 1 of 8 rows cost the last-row time, for all 8 the all-rows time, in between linearly
    assert CURVE.seconds(8, 1) == pytest.approx(0.034)
    assert CURVE.seconds(8, 8) == pytest.approx(0.040)
    assert CURVE.seconds(8, 4) == pytest.approx(0.034 + 3 / 7 * 0.006)


def test_draft_verify_cost_adds_the_drafter():
    draft = CostCurve((1, 2), (0.004, 0.006), (0.004, 0.006))
    k = 4
    verify_only = cost_model.draft_verify_step_cost(CURVE, k)
    assert verify_only == pytest.approx(CURVE.relative(5, 5))
    assert cost_model.draft_verify_step_cost(CURVE, k, draft_curve=draft) == pytest.approx(verify_only + 4 * 0.4)
    assert cost_model.draft_verify_step_cost(CURVE, k, t_draft_s=0.002) == pytest.approx(verify_only + 0.2)
    predicted = cost_model.predict_draft_verify(CURVE, 0.8, k, draft_curve=draft)
    assert predicted == pytest.approx(cost_model.expected_tokens_per_step(0.8, k) / (verify_only + 1.6))


def test_prediction_from_a_runs_counters():
    # 10 verification steps of 5 tokens that emitted 31 tokens after the first, plus 1 ms of lookup each
    stats = {"n_predict": 32, "decode_shapes": [[5, 5, 10]], "n_drafted": 40, "t_draft_s": 0.010}
    expected = (31 * CURVE.t_plain_s) / (10 * CURVE.seconds(5, 5) + 0.010)
    assert cost_model.predict_from_stats(stats, CURVE, mode="lookup") == pytest.approx(expected)
    # the same as tokens per step over the step's relative cost
    tokens_per_step, step_cost = 3.1, CURVE.relative(5, 5) + 0.001 / CURVE.t_plain_s
    assert expected == pytest.approx(cost_model.speedup(tokens_per_step, step_cost))
    # a draft model is priced at k single-token draft decodes per step
    draft = CostCurve((1, 2), (0.005, 0.008), (0.005, 0.008))
    spec = cost_model.predict_from_stats(stats, CURVE, mode="speculative", draft_curve=draft)
    assert spec == pytest.approx((31 * 0.010) / (10 * CURVE.seconds(5, 5) + 40 * 0.005))
    assert cost_model.predict_from_stats({"n_predict": 1, "decode_shapes": []}, CURVE, mode="lookup") is None


def test_step_shape_comes_from_the_strategy_config():
    la = LookaheadParams(W=4, N=3, G=4)
    assert RunConfig(mode="lookahead", lookahead=la).step_shape() == (la.batch_size, la.logit_rows)
    assert la.logit_rows == 1 + 4 * 2 + 4
    assert LookaheadParams(W=3, N=2, G=2).logit_rows == 1 + 2 + 2
    fixed = RunConfig(mode="lookup", speculative=SpeculativeParams(k=6))
    assert fixed.step_shape() == (7, 7)
    adaptive = RunConfig(mode="lookup", speculative=SpeculativeParams(k=2, adaptive="heuristic", k_max=8))
    assert adaptive.step_shape() == (9, 9)


def test_geometric_mean():
    assert cost_model.geometric_mean([0.5, 2.0]) == pytest.approx(1.0)
    assert cost_model.geometric_mean([]) == 0.0
    assert math.isclose(cost_model.geometric_mean([1.2]), 1.2)

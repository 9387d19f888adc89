"""The speed-up curve: the cost model's prediction at every acceptance and k, its break-evens,
and a run placed on it from its counters."""

from __future__ import annotations

import pytest

from specdec_studio.engine.tuning import cost_model
from specdec_studio.engine.tuning.speedup_curve import run_point, speedup_curves
from tests.auto_plan import SHARED_PROFILES, load_curve


@pytest.fixture(scope="module", params=sorted(p.name for p in SHARED_PROFILES.glob("*.json")))
def curve(request):
    # the shared profiles' raw points (format 1: measured before B = 1 was timed settled)
    return load_curve(SHARED_PROFILES / request.param)


def test_each_curve_is_the_cost_models_prediction_and_crosses_one_at_its_break_even(curve):
    curves = speedup_curves(curve)
    fitted = curve.fitted()
    for i, k in enumerate(curves.ks):
        row = curves.speedups[i]
        assert all(b >= a for a, b in zip(row, row[1:]))  # more acceptance never costs speed
        # at α = 1 every proposal is accepted: k + 1 tokens for one (k + 1)-token verification
        assert row[-1] == pytest.approx((k + 1) / fitted.relative(k + 1, k + 1))
        alpha = curves.break_even[i]
        if alpha is None:
            assert row[-1] <= 1.0
        else:
            assert cost_model.predict_draft_verify(fitted, alpha, k) == pytest.approx(1.0, abs=1e-6)


def test_a_draft_models_decodes_lower_every_curve(curve):
    alone, with_draft = speedup_curves(curve), speedup_curves(curve, curve)
    assert with_draft.with_draft and not alone.with_draft
    assert (with_draft.speedups < alone.speedups).all()
    # a draft that costs what the target does never pays
    assert with_draft.break_even == (None,) * len(with_draft.ks)


def test_a_run_sits_at_the_alpha_of_its_acceptance_and_its_measured_speedup():
    point = run_point(n_drafted=40, n_accepted=30, k=4, tokens_per_second=60.0, t_plain_s=0.02)
    assert point.k == 4 and point.measured_against == "profile"
    assert point.speedup == pytest.approx(1.2)
    assert (cost_model.expected_tokens_per_step(point.alpha, 4) - 1) / 4 == pytest.approx(0.75, abs=1e-9)
    against_plain = run_point(40, 30, 4, 60.0, 0.02, baseline_tps=40.0)
    assert against_plain.speedup == pytest.approx(1.5) and against_plain.measured_against == "baseline"
    assert run_point(0, 0, 4, 60.0, 0.02) is None and run_point(10, 5, None, 60.0, 0.02) is None

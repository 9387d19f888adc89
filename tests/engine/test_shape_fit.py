"""The batch-cost profile fitted to a decode's shape (engine.tuning.shape_fit), and Auto's step
cost that prices with the fit and corrects it with the run's own clock."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from specdec_studio.engine.strategies.auto.calibration import StepCost
from specdec_studio.engine.tuning.cost_model import CostCurve
from specdec_studio.engine.tuning.shape_fit import isotonic, off_fit, physical_fit
from tests.auto_plan import SHARED_PROFILES, load_curve

SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64)


def _is_physical(sizes, times) -> bool:
    t, b = np.asarray(times), np.asarray(sizes, dtype=float)
    return bool(np.all(np.diff(t) >= 0) and np.all(np.diff(t / b) <= 1e-15 * t[1:] / b[1:]))


def test_isotonic_pools_violators_to_their_weighted_mean():
    fit = isotonic(np.array([1.0, 3.0, 2.0, 4.0]), np.array([1.0, 1.0, 3.0, 1.0]))
    assert np.allclose(fit, [1.0, 2.25, 2.25, 4.0])


@settings(max_examples=200, deadline=None)
@given(base=st.floats(1e-4, 1e-1), fixed=st.floats(0.0, 1.0), power=st.floats(0.3, 1.0),
       noise=st.lists(st.floats(-0.15, 0.15), min_size=len(SIZES), max_size=len(SIZES)))
def test_the_fit_is_physical_and_leaves_a_physical_curve_as_it_is(base, fixed, power, noise):
    # a fixed share of a decode (reading the weights) and a share that grows with B, sublinearly
    clean = base * (fixed + (1.0 - fixed) * np.asarray(SIZES, dtype=float) ** power)
    assert _is_physical(SIZES, clean)
    assert np.allclose(physical_fit(SIZES, clean), clean, rtol=1e-9)
    noisy = clean * (1.0 + np.asarray(noise))
    fit = physical_fit(SIZES, noisy)
    assert _is_physical(SIZES, fit)
    # the projection is never further from the measurement than the clean curve is
    assert np.sum(((fit - noisy) / noisy) ** 2) <= np.sum(((clean - noisy) / noisy) ** 2) + 1e-12


def test_the_bumpy_profiles_off_size_is_flagged_and_the_smooth_one_has_none():
    bumpy = load_curve(SHARED_PROFILES / "smollm2-q4_1-bumpy.json")
    smooth = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    flagged = off_fit(bumpy.t_last_logit, physical_fit(bumpy.sizes, bumpy.t_last_logit), 0.08)
    assert 13 in [bumpy.sizes[i] for i in flagged]
    for times in (smooth.t_all_logits, smooth.t_last_logit):
        assert off_fit(times, physical_fit(smooth.sizes, times), 0.08) == []
    fitted = bumpy.fitted()
    assert _is_physical(fitted.sizes, fitted.t_all_logits) and _is_physical(fitted.sizes, fitted.t_last_logit)
    assert all(last <= every for last, every in zip(fitted.t_last_logit, fitted.t_all_logits))


def test_a_runs_own_timings_correct_the_profiles_extra_cost():
    """A profile that says every extra row costs half what this run's decodes take is corrected
    once the run has timed a few of them; a run that agrees with its profile keeps it."""
    machine = CostCurve((1, 2, 8, 16), (0.010, 0.016, 0.040, 0.064), (0.010, 0.015, 0.036, 0.060))
    profile = CostCurve(machine.sizes, tuple(0.010 + (t - 0.010) / 2 for t in machine.t_all_logits),
                        tuple(0.010 + (t - 0.010) / 2 for t in machine.t_last_logit))
    for curve, expected_scale in ((profile, 2.0), (machine, 1.0)):
        cost = StepCost(curve)
        before = cost.relative(8)
        for _ in range(1 + StepCost.TRUSTED):  # the first decode of a shape builds its graph: not counted
            for b in (1, 8):
                cost.observe(b, machine.seconds(b))
        assert abs(cost.scale - expected_scale) < 0.02
        assert abs(cost.relative(8) - machine.relative(8)) < 0.02 * machine.relative(8)
        assert (cost.relative(8) > before * 1.5) == (expected_scale == 2.0)


class _Clock:
    """A stand-in for engine.memory.Memory whose decodes take what a smooth curve says, except the
    first ``slow_calls`` decodes of ``slow_size`` tokens (a machine busy while that size was timed)."""

    def __init__(self, slow_size: int, slow_calls: int) -> None:
        self.slow_size, self.slow_calls = slow_size, slow_calls
        self.calls: dict[int, int] = {}

    def decode(self, batch) -> float:
        n = batch.n_tokens
        self.calls[n] = self.calls.get(n, 0) + 1
        t = 0.01 * (1.0 + 0.4 * (n - 1))
        return t * 1.4 if n == self.slow_size and self.calls[n] <= self.slow_calls else t

    def decode_tokens(self, batch, tokens, start_pos, seq_id=0) -> int:
        return len(tokens) - 1

    def prepare_rollback(self, *_args) -> None: ...
    def seq_rm(self, *_args) -> None: ...
    def clear(self) -> None: ...


def test_a_size_timed_while_the_machine_was_busy_is_timed_again():
    from specdec_studio.engine.batch import Batch
    from specdec_studio.engine.tuning import profile

    sizes = (1, 2, 3, 4, 5, 6, 7, 8)
    batch = Batch(16, 1)
    try:
        # every timed round of B = 5 (and its warm-up), both logit variants, ran slow
        slow = 2 * (profile.ROUNDS_SMALL + 1)
        curve, rounds = profile.measure_curve(_Clock(5, slow), batch, list(range(10)), sizes=sizes)
        assert rounds[sizes.index(5)] > profile.ROUNDS_SMALL
        # the fit pools a bump with its neighbours, which may be timed again too; the rest are not
        assert all(r == profile.ROUNDS_SMALL for b, r in zip(sizes, rounds) if abs(b - 5) > 1)
        assert curve.seconds(5) == pytest.approx(0.01 * (1.0 + 0.4 * 4))
        # a size that stays off (the machine really is like that) is kept as measured
        curve, rounds = profile.measure_curve(_Clock(5, 10**6), batch, list(range(10)), sizes=sizes)
        assert curve.seconds(5) == pytest.approx(1.4 * 0.01 * (1.0 + 0.4 * 4))
        assert rounds[sizes.index(5)] == profile.ROUNDS_SMALL * (1 + profile.REMEASURE_PASSES)
    finally:
        batch.close()


class _Unsettled(_Clock):
    """A machine whose one-token decodes run 60 % slow for the first three after any larger decode
    (a graph rebuilt, a CPU settling), as measured on this VM after a tree step."""

    def __init__(self) -> None:
        super().__init__(0, 0)
        self.since_larger = 0

    def decode(self, batch) -> float:
        t = super().decode(batch)
        if batch.n_tokens > 1:
            self.since_larger = 0
            return t
        self.since_larger += 1
        return t * 1.6 if self.since_larger <= 3 else t


def test_the_profile_times_a_one_token_decode_as_plain_decoding_runs_it():
    """Plain decoding runs one-token decodes back to back: the curve's unit is the settled one, not
    the one straight after the round's largest size (which made every relative cost read too low)."""
    from specdec_studio.engine.batch import Batch
    from specdec_studio.engine.tuning import profile

    batch = Batch(16, 1)
    try:
        curve, _ = profile.measure_curve(_Unsettled(), batch, list(range(10)), sizes=(1, 2, 4, 8))
    finally:
        batch.close()
    assert curve.seconds(1) == pytest.approx(0.01)
    assert curve.relative(8) == pytest.approx(1.0 + 0.4 * 7)

"""The speed-up curve: what a per-token acceptance buys at each draft length k on this machine.

For draft-then-verify with k proposals a step emits (1 - α^(k+1)) / (1 - α) tokens at per-token
acceptance α (:func:`engine.tuning.cost_model.expected_tokens_per_step`) and costs a (k + 1)-token
verification plus, with a draft model, k of its single-token decodes, all priced with the measured
batch-cost profiles (:func:`engine.tuning.cost_model.predict_draft_verify`). A run is placed on the
curves by its measured acceptance (turned into α at its k) and its measured speed-up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specdec_studio.engine.tuning.cost_model import (CostCurve, alpha_from_acceptance, draft_break_even,
                                                     predict_draft_verify)

CURVE_KS = tuple(range(1, 9))
N_POINTS = 101  # α from 0 to 1 in steps of 0.01


@dataclass(frozen=True)
class SpeedupCurves:
    """Predicted speed-up over plain decoding, one row per k, against α (``alphas``)."""

    alphas: np.ndarray  # (N_POINTS,)
    ks: tuple[int, ...]
    speedups: np.ndarray  # (len(ks), N_POINTS)
    break_even: tuple[float | None, ...]  # per k: the α above which it beats plain (None: never)
    with_draft: bool  # priced with a draft model's decodes

    def as_dict(self) -> dict:
        """Plain data for a report or figures file (speed-ups to 3 decimals)."""
        return {"alpha": [round(float(a), 2) for a in self.alphas],
                "k": list(self.ks),
                "speedup": [[round(float(s), 3) for s in row] for row in self.speedups],
                "break_even_alpha": [None if b is None else round(b, 3) for b in self.break_even],
                "with_draft": self.with_draft}


def speedup_curves(curve: CostCurve, draft_curve: CostCurve | None = None, ks=CURVE_KS,
                   n_points: int = N_POINTS) -> SpeedupCurves:
    """The predicted speed-up of every k in ``ks`` at every α, from the target's measured profile
    (and the draft's, whose single-token decodes each step pays ``k`` of)."""
    curve = curve.fitted()  # one size timed on a busy machine does not bend every curve
    draft_curve = draft_curve.fitted() if draft_curve is not None else None
    alphas = np.linspace(0.0, 1.0, n_points)
    speedups = np.array([[predict_draft_verify(curve, float(a), k, draft_curve=draft_curve) for a in alphas]
                         for k in ks])
    return SpeedupCurves(alphas, tuple(ks), speedups, tuple(draft_break_even(curve, draft_curve, k) for k in ks),
                         draft_curve is not None)


@dataclass(frozen=True)
class RunPoint:
    """Where a run sits on the curves: its per-token acceptance α at its k and its speed-up."""

    alpha: float
    speedup: float
    k: int
    measured_against: str  # "baseline" (a plain run of the same prompt) or "profile" (the profile's T(1))


def run_point(n_drafted: int, n_accepted: int, k: int | None, tokens_per_second: float, t_plain_s: float,
              baseline_tps: float | None = None) -> RunPoint | None:
    """A run's point from its counters: None until it has drafted and been timed. The speed-up is
    measured against a plain run of the same prompt where one was measured, else against plain
    decoding's step time in the profile."""
    if not n_drafted or not k or tokens_per_second <= 0 or t_plain_s <= 0:
        return None
    alpha = alpha_from_acceptance(n_accepted / n_drafted, k)
    if baseline_tps:
        return RunPoint(alpha, tokens_per_second / baseline_tps, k, "baseline")
    return RunPoint(alpha, tokens_per_second * t_plain_s, k, "profile")

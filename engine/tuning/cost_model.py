"""Predicted speed-up of a decoding setting: pure functions over a measured batch-cost curve.

A step of any strategy is one target decode of B tokens (R of them asking for logits) plus the
drafting it needed; it emits some number of tokens. Plain decoding is the step B = R = 1 that
emits one token. So

    predicted speed-up = expected tokens per step / (step cost / T(1, 1))

where T(B, R) is the measured time of one decode (:mod:`engine.tuning.profile`). The shape of a
step comes from the strategy itself: before a run from :meth:`engine.config.RunConfig.step_shape`,
after a run from the decodes it really made (``stats["decode_shapes"]``).

Expected tokens per step for draft-then-verify with k proposals and a constant per-token
acceptance α is Leviathan et al.'s (1 - α^(k+1)) / (1 - α); with a measured acceptance per draft
position it is 1 plus the sum of the probabilities that each prefix was accepted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specdec_studio.engine.strategies import registry


@dataclass(frozen=True)
class CostCurve:
    """Seconds per decode of B tokens, measured for a grid of B, with logits for every row
    (``t_all_logits``) and for the last row only (``t_last_logit``).

    A decode of B tokens with R logit rows costs the one-logit time plus R - 1 rows' share of the
    extra the all-logits decode paid (the output projection grows with R). Between grid points the
    time is interpolated linearly in B; past the largest size it grows linearly with the last
    segment's slope.
    """

    sizes: tuple[int, ...]
    t_all_logits: tuple[float, ...]
    t_last_logit: tuple[float, ...]

    def __post_init__(self) -> None:
        if not self.sizes or self.sizes[0] != 1:
            raise ValueError("a cost curve starts at a batch of one token")
        if not len(self.sizes) == len(self.t_all_logits) == len(self.t_last_logit):
            raise ValueError("a cost curve needs one time per size and variant")

    def seconds(self, n_tokens: int, n_logits: int | None = None) -> float:
        """Time of one decode of ``n_tokens`` tokens, ``n_logits`` of them with logits (default all)."""
        if n_tokens < 1:
            return 0.0
        n_logits = n_tokens if n_logits is None else max(1, min(n_logits, n_tokens))
        t_all = _interpolate(self.sizes, self.t_all_logits, n_tokens)
        t_one = _interpolate(self.sizes, self.t_last_logit, n_tokens)
        if n_tokens == 1:
            return t_all
        share = (n_logits - 1) / (n_tokens - 1)
        return t_one + share * max(0.0, t_all - t_one)

    def relative(self, n_tokens: int, n_logits: int | None = None) -> float:
        """Cost of a decode in units of one plain step, T(B, R) / T(1, 1)."""
        return self.seconds(n_tokens, n_logits) / self.t_all_logits[0]

    @property
    def t_plain_s(self) -> float:
        return self.t_all_logits[0]

    def fitted(self) -> CostCurve:
        """This curve with its noise taken out: each variant fitted to a decode's shape (never
        cheaper for more tokens, never dearer per token; :func:`engine.tuning.shape_fit.physical_fit`),
        and the one-logit time never above the all-logits time. Plans priced with it do not turn
        on one size timed while the machine was busy."""
        from specdec_studio.engine.tuning.shape_fit import physical_fit

        t_all = physical_fit(self.sizes, self.t_all_logits)
        t_last = np.minimum(physical_fit(self.sizes, self.t_last_logit), t_all)
        return CostCurve(self.sizes, tuple(t_all.tolist()), tuple(t_last.tolist()))


def _interpolate(sizes: Sequence[int], times: Sequence[float], n: int) -> float:
    if n >= sizes[-1] and len(sizes) > 1:
        slope = (times[-1] - times[-2]) / (sizes[-1] - sizes[-2])
        return times[-1] + slope * (n - sizes[-1])
    return float(np.interp(n, sizes, times))


# ------------------------------------------------------------------------- expected tokens
def expected_tokens_per_step(alpha: float, k: int) -> float:
    """Leviathan et al.: tokens one draft-then-verify step emits with k proposals, each accepted
    with probability ``alpha`` given the ones before it were (the target always adds one)."""
    if k <= 0:
        return 1.0
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"acceptance must be in [0, 1], got {alpha}")
    if alpha == 1.0:
        return float(k + 1)
    return (1.0 - alpha ** (k + 1)) / (1.0 - alpha)


def expected_tokens_from_positions(accepted_through: Sequence[float]) -> float:
    """Tokens per step from the measured share of steps whose first i + 1 proposals were all
    accepted (``stats["accept_per_position"]``): 1 + the sum of those shares."""
    return 1.0 + float(sum(accepted_through))


def alpha_from_acceptance(accept_rate: float, k: int) -> float:
    """The constant per-token acceptance α whose expected accepted share of k proposals equals
    the measured ``accept_rate`` (n_accept / n_drafted), found by bisection (the share grows with α)."""
    if k <= 0 or accept_rate <= 0.0:
        return 0.0
    if accept_rate >= 1.0:
        return 1.0

    def share(a: float) -> float:
        return (expected_tokens_per_step(a, k) - 1.0) / k

    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if share(mid) < accept_rate:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


# ------------------------------------------------------------------------- step cost
def draft_verify_step_cost(curve: CostCurve, k: int, *, draft_curve: CostCurve | None = None,
                           t_draft_s: float = 0.0) -> float:
    """Relative cost of one draft-then-verify step with k proposals: the target verifies k + 1
    tokens, all with logits; a draft model decodes k single tokens (k · T_draft(1) / T(1)); any
    other drafter (prompt lookup) costs its measured ``t_draft_s`` per step."""
    cost = curve.relative(k + 1, k + 1)
    if draft_curve is not None:
        cost += k * draft_curve.t_plain_s / curve.t_plain_s
    return cost + t_draft_s / curve.t_plain_s


def speedup(tokens_per_step: float, step_cost: float) -> float:
    """Predicted speed-up over plain decoding: tokens per step over the step's relative cost."""
    return tokens_per_step / step_cost if step_cost > 0 else 0.0


def predict_draft_verify(curve: CostCurve, alpha: float, k: int, *, draft_curve: CostCurve | None = None,
                         t_draft_s: float = 0.0) -> float:
    """Predicted speed-up of a fixed-k draft-then-verify setting at per-token acceptance α."""
    if k <= 0:
        return 1.0
    cost = draft_verify_step_cost(curve, k, draft_curve=draft_curve, t_draft_s=t_draft_s)
    return speedup(expected_tokens_per_step(alpha, k), cost)


def draft_break_even(curve: CostCurve, draft_curve: CostCurve | None, k: int) -> float | None:
    """The per-token acceptance above which drafting ``k`` tokens with this draft model (None: a
    drafter that costs nothing, the verification alone) beats plain decoding; None where no
    acceptance could (a draft always right still costs more)."""
    if k <= 0 or predict_draft_verify(curve, 1.0, k, draft_curve=draft_curve) <= 1.0:
        return None
    lo, hi = 0.0, 1.0
    for _ in range(40):  # the predicted speed-up grows with the acceptance
        mid = (lo + hi) / 2
        if predict_draft_verify(curve, mid, k, draft_curve=draft_curve) > 1.0:
            hi = mid
        else:
            lo = mid
    return hi


def acceptance_words(alpha: float) -> str:
    """A break-even acceptance as a percentage that never reads 100 % (which no rate is above)."""
    if alpha < 0.995:
        return f"{100 * alpha:.0f} %"
    return f"{math.floor(1000 * alpha) / 10:.1f} %" if alpha < 0.999 else "99.9 %"


def draft_break_even_words(curve: CostCurve, draft_curve: CostCurve, k: int) -> str:
    """The break-even of a draft model in one sentence, from the two measured profiles."""
    verify = curve.relative(k + 1, k + 1)
    per_token = draft_curve.t_plain_s / curve.t_plain_s
    head = (f"a {k + 1}-token verification costs {verify:.1f} tokens here and the draft "
            f"{per_token:.2f} a token")
    alpha = draft_break_even(curve, draft_curve, k)
    if alpha is None:
        best = predict_draft_verify(curve, 1.0, k, draft_curve=draft_curve)
        return head + f": drafting {k} cannot pay here, even with every draft accepted ({best:.2f}x at best)"
    return head + f": drafting {k} pays above {acceptance_words(alpha)} acceptance"


def draft_break_even_table_words(
    curve: CostCurve, draft_curve: CostCurve, ks: Sequence[int] = (1, 2, 3, 4, 5, 8)
) -> str:
    """The acceptance each draft length needs to pay with this draft model, in one line
    ("k = 1: 71 %, k = 2: 88 %, …, k = 8: never")."""
    parts = []
    for k in ks:
        alpha = draft_break_even(curve, draft_curve, k)
        parts.append(f"k = {k}: " + ("never" if alpha is None else acceptance_words(alpha)))
    return ", ".join(parts)


def break_even_tokens_per_step(curve: CostCurve, step_shape: tuple[int, int]) -> float:
    """Tokens a step of this shape must emit on average to match plain decoding."""
    return curve.relative(*step_shape)


def predict_from_stats(
    stats: dict, curve: CostCurve, *, mode: str, draft_curve: CostCurve | None = None
) -> float | None:
    """Predicted speed-up of a finished run from its own counters: the tokens it emitted per step,
    priced with the decodes it really made and the drafting it needed.

    The first token comes from the prompt's logits in every strategy, plain included, so the
    comparison counts the steps after it: a plain run of n tokens makes n - 1 decodes. Returns
    None when the run made no decode to price.
    """
    entry = registry.mode(mode)
    if not entry.verifies:
        return 1.0
    shapes = stats.get("decode_shapes") or []
    n_decodes = sum(n for _b, _r, n in shapes)
    if n_decodes == 0:
        return None
    emitted = stats["n_predict"] - 1  # tokens the decoded steps produced (the first came free)
    if emitted <= 0:
        return None
    t_target = sum(curve.seconds(b, r) * n for b, r, n in shapes)
    draft_shapes = stats.get("draft_decode_shapes")
    if entry.needs == "draft" and draft_curve is not None and draft_shapes:
        # the draft's decodes as made: a catch-up batch of the accepted tokens, then single tokens
        t_draft = sum(draft_curve.seconds(b, r) * n for b, r, n in draft_shapes)
    elif entry.needs == "draft" and draft_curve is not None:  # a run recorded before the shapes were
        t_draft = stats["n_drafted"] * draft_curve.t_plain_s
    else:
        t_draft = stats.get("t_draft_s", 0.0)
    t_plain = emitted * curve.t_plain_s
    return t_plain / (t_target + t_draft)


def geometric_mean(values: Sequence[float]) -> float:
    values = [v for v in values if v > 0]
    if not values:
        return 0.0
    return math.exp(sum(math.log(v) for v in values) / len(values))

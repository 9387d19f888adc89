"""A measured batch-cost curve fitted to the shape every decode has.

A decode of more tokens never costs less than one of fewer (T is non-decreasing in B), and a
token never costs more in a larger batch than in a smaller one (T(B)/B is non-increasing: the
weights are read once per decode, whatever B). A profile measured on a real machine breaks both
here and there: one size timed while something else ran sits a few percent above its
neighbours, and a planner that prices every step with it changes its plan on that one size.

:func:`physical_fit` returns the closest curve (in relative error) that has both properties: the
projection onto the intersection of two convex sets, found with Dykstra's alternating
projections; each projection is a weighted isotonic regression (pool adjacent violators).
:func:`off_fit` names the sizes the fit had to move by more than a tolerance: the ones worth
timing again.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

MAX_ITERATIONS = 200
CONVERGED = 1e-10  # relative change of the fit between two rounds of projections


def isotonic(values: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """The non-decreasing sequence closest to ``values`` in the ``weights``-weighted squared
    distance (pool adjacent violators: merge neighbouring blocks while they are out of order)."""
    means: list[float] = []
    mass: list[float] = []
    counts: list[int] = []
    for v, w in zip(values.tolist(), weights.tolist()):
        means.append(v)
        mass.append(w)
        counts.append(1)
        while len(means) > 1 and means[-2] > means[-1]:
            m2, w2, c2 = means.pop(), mass.pop(), counts.pop()
            m1, w1, c1 = means.pop(), mass.pop(), counts.pop()
            means.append((m1 * w1 + m2 * w2) / (w1 + w2))
            mass.append(w1 + w2)
            counts.append(c1 + c2)
    return np.repeat(np.asarray(means), counts)


def physical_fit(sizes: Sequence[int], times: Sequence[float]) -> np.ndarray:
    """The times nearest to ``times`` (least squares in relative error) with T non-decreasing and
    T/B non-increasing over ``sizes`` (ascending). A curve that has both already is returned as is."""
    b = np.asarray(sizes, dtype=np.float64)
    y = np.asarray(times, dtype=np.float64)
    if len(y) < 2:
        return y.copy()
    w = 1.0 / np.maximum(y, 1e-12) ** 2  # relative error: a 1 ms decode counts as much as a 100 ms one

    def rising(t: np.ndarray) -> np.ndarray:
        return isotonic(t, w)

    def per_token_falling(t: np.ndarray) -> np.ndarray:
        # T = B·u with u non-increasing; the weighted distance in T is B²-weighted in u
        return -isotonic(-t / b, w * b * b) * b

    x = y.copy()
    p = np.zeros_like(y)
    q = np.zeros_like(y)
    for _ in range(MAX_ITERATIONS):
        z = rising(x + p)
        p = x + p - z
        x_next = per_token_falling(z + q)
        q = z + q - x_next
        moved = float(np.max(np.abs(x_next - x) / y))
        x = x_next
        if moved < CONVERGED:
            break
    # Dykstra's iterate is in the second set and meets the first only in the limit. Raising a
    # time to its left neighbour's keeps T/B non-increasing (the left neighbour's per-token cost
    # is higher still), so a running maximum makes both hold to the last bit.
    return np.maximum.accumulate(x)


def off_fit(times: Sequence[float], fitted: Sequence[float], tolerance: float) -> list[int]:
    """Indices whose measured time is more than ``tolerance`` (relative) away from the fit."""
    y = np.asarray(times, dtype=np.float64)
    f = np.asarray(fitted, dtype=np.float64)
    return np.flatnonzero(np.abs(y / f - 1.0) > tolerance).tolist()

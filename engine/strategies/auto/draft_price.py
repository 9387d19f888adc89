"""What a draft model's proposals cost Auto, and whether running the draft can pay.

A draft model is the one source that is not free: each token it proposes is a decode of the draft
(``token_cost`` target plain steps each, ``c`` below), and the target then verifies them in a
batch of k + 1 (``StepCost.relative(k + 1)``). With each proposal accepted with chance ``a`` when
the one before it was, a step that sends k draft tokens emits (1 - a^(k+1)) / (1 - a) tokens for

    T(k + 1) / T(1) + k · c          plain steps.

Auto asks the draft only where the best k beats a plain step by the planner's margin at the
acceptance the run has measured (the draft's prior until it has some). A draft that does not pay
now is asked again after PROBE_FIRST steps, then twice as far each time it still does not pay (at
most PROBE_MAX), with the k that would pay at a hopeful acceptance: HOPEFUL_ACCEPT, what a good
same-family draft reaches, or the upper end of what this one has shown if that is higher. Where
even that could not pay, the draft is not probed at all (nor does it read the prompt): its price
alone rules it out. A bound of a = 1 would not do: with long drafts almost any price "pays" for a
draft that is never wrong (Qwen2.5-Coder 1.5B here: 16 tokens for 13.8 steps at k = 15), and the
probes it allowed cost 7 % of the run.

The verification's T(k + 1)/T(1) and the graph rebuild come from the cost the tree is priced with
(``auto.guard.Wary``: the profile's curve, or the run's own timings without one, each row beyond the
first scaled by the guard's trust), so a draft token and an n-gram token of the same step are priced
by one clock; a profile that says verifying is cheaper than it is loses the guard's trust and with
it both the trees and the draft. ``c`` starts as the session's estimate (the two models' batch-cost
profiles where both were measured, else the ratio of their files' sizes: on a CPU a decode of one
token reads every weight once) and becomes the run's own measurement once the draft has made TRUSTED
single-token decodes:
the fastest recent one against the target's typical plain step.

Within a proposal the draft stops at the first token that does not pay for itself: token i
(reached with chance r, the product of the draft's own probabilities so far) adds r tokens for
c + T(i + 2)/T(1) - T(i + 1)/T(1) plain steps, and is worth drafting only while
r ≥ min_gain · that cost (:meth:`DraftPrice.min_reach`, the p_min of llama.cpp's examples worked
out from the costs instead of fixed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from specdec_studio.engine.strategies.auto.calibration import StepCost
from specdec_studio.engine.strategies.auto.guard import Wary
from specdec_studio.engine.tuning.cost_model import expected_tokens_per_step

PROBE_FIRST = 16
PROBE_MAX = 256
TRUSTED = 3  # single-token draft decodes timed before the run's own price replaces the estimate
KEEP = 8
# Before the run has verified any draft token: what a same-family draft is usually right about
# (llama.cpp's examples and the pairs measured here accept 0.6-0.9 of greedy proposals).
PRIOR_ACCEPT = 0.7
PRIOR_WEIGHT = 4.0
HOPEFUL_ACCEPT = 0.9  # the acceptance a probe hopes for (the best of that range)
HOPEFUL_MAX = 0.99
SHOWN = 8  # verified draft tokens before their rate may raise the hope


class DraftPrice:
    """The draft model's price in target plain steps, its measured acceptance, and the k (if
    any) for which asking it can pay."""

    def __init__(self, token_cost: float, k_max: int) -> None:
        self.estimate = token_cost  # the session's estimate of c, until the run measures its own
        self.k_max = k_max
        self.decode_times: list[float] = []  # the draft's recent single-token decodes (seconds)
        self.accepted = 0
        self.offered = 0
        self.next_probe = 0  # the step from which a draft that does not pay now may be asked again
        self.probe_gap = PROBE_FIRST

    # ------------------------------------------------------------------ what the run learns
    def observe_decodes(self, seconds: Sequence[float]) -> None:
        self.decode_times.extend(seconds)
        del self.decode_times[:-KEEP]

    def observe_outcome(self, accepted: bool) -> None:
        """One draft token verified: accepted, or the first rejected one of its proposal."""
        self.offered += 1
        self.accepted += accepted

    def token_cost(self, cost: StepCost | Wary) -> float:
        """c: one draft decode in target plain steps (the run's own, once timed)."""
        plain = cost.typical_plain_time()
        if len(self.decode_times) < TRUSTED or not plain:
            return self.estimate
        return min(self.decode_times) / plain

    def accept_rate(self) -> float:
        """The chance a draft token is accepted when the one before it was."""
        return (self.accepted + PRIOR_ACCEPT * PRIOR_WEIGHT) / (self.offered + PRIOR_WEIGHT)

    def hopeful_accept(self) -> float:
        """The acceptance a probe hopes for: HOPEFUL_ACCEPT, or the upper end (two standard
        errors) of the rate measured over at least SHOWN outcomes where the draft has shown better."""
        if self.offered < SHOWN:
            return HOPEFUL_ACCEPT
        a = self.accepted / self.offered
        return max(HOPEFUL_ACCEPT, min(HOPEFUL_MAX, a + 2.0 * math.sqrt(a * (1.0 - a) / self.offered)))

    # ------------------------------------------------------------------ what the planner asks
    def gain(self, cost: StepCost | Wary, k: int, accept: float) -> float:
        """Tokens per plain step's time of a step sending k draft tokens."""
        return self._gain(cost, k, accept, self.token_cost(cost), cost.return_penalty())

    def _gain(self, cost: StepCost | Wary, k: int, accept: float, token_cost: float, penalty: float) -> float:
        price = self.verify_cost(cost, k + 1) + penalty + k * token_cost
        return expected_tokens_per_step(accept, k) / price

    @staticmethod
    def verify_cost(cost: StepCost | Wary, n_tokens: int) -> float:
        """T(B)/T(1) of the target, as the tree prices a verification of that size."""
        return cost.relative(n_tokens)

    def best(self, cost: StepCost | Wary, room: int, accept: float) -> tuple[int, float]:
        """The k ≤ min(room, k_max) with the highest gain at ``accept``, and that gain."""
        best_k, best_gain = 0, 1.0
        token_cost, penalty = self.token_cost(cost), cost.return_penalty()
        for k in range(1, min(room, self.k_max) + 1):
            g = self._gain(cost, k, accept, token_cost, penalty)
            if g > best_gain:
                best_k, best_gain = k, g
        return best_k, best_gain

    def may_pay(self, cost: StepCost | Wary, room: int, min_gain: float) -> bool:
        """Whether the draft would beat ``min_gain`` at this price if it were as right as hoped."""
        return self.best(cost, room, self.hopeful_accept())[1] >= min_gain

    def plan(self, step: int, cost: StepCost | Wary, room: int, min_gain: float) -> int:
        """How many tokens to ask the draft for at this step (0: do not run it)."""
        if room <= 0:
            return 0
        k, g = self.best(cost, room, self.accept_rate())
        if k and g >= min_gain:
            self.probe_gap = PROBE_FIRST
            return k
        if step < self.next_probe:
            return 0
        # Not paying at the acceptance measured so far: ask again now and then, for the k that
        # would pay if the draft turned out as right as hoped; never where even that could not.
        k_hoped, g_hoped = self.best(cost, room, self.hopeful_accept())
        self.next_probe = step + self.probe_gap
        self.probe_gap = min(PROBE_MAX, 2 * self.probe_gap)
        return k_hoped if g_hoped >= min_gain else 0

    def verdict(self, cost: StepCost | Wary, min_gain: float, steps_asked: int) -> str:
        """Why the run did or did not ask the draft, in one sentence for the run's summary."""
        if steps_asked:
            return (f"asked on {steps_asked} step{'s' * (steps_asked != 1)}: {self.accepted} of its "
                    f"{self.offered} judged tokens were right")
        hoped, token_cost, penalty = self.hopeful_accept(), self.token_cost(cost), cost.return_penalty()
        k, g = max(((k, self._gain(cost, k, hoped, token_cost, penalty)) for k in range(1, self.k_max + 1)),
                   key=lambda kg: kg[1])
        if g < min_gain:
            return (f"never run: a draft token costs {token_cost:.2f} target steps, so even at {hoped:.0%} "
                    f"acceptance its best k ({k}) would emit {g:.2f}× a plain step's tokens per unit of "
                    f"time, under the {min_gain:.2f}× a step must beat")
        return "never run: it could pay, but the answer ended before its acceptance was worth a try"

    def min_reach(self, cost: StepCost | Wary, depth: int, min_gain: float) -> float:
        """The least chance of being reached for which the draft's token at ``depth`` (0-based)
        pays for its own draft decode and verification row."""
        extra = self.verify_cost(cost, depth + 2) - self.verify_cost(cost, depth + 1)
        return min_gain * (self.token_cost(cost) + max(0.0, extra))

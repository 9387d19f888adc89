"""Auto in a slot of batch decoding (``engine.parallel``): the batch's step cost, and the run's
planner unpaced, which sends one source's chain where it pays (a slot has one sequence: no tree,
no siblings)."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_studio.engine.config import SpeculativeParams
from specdec_studio.engine.strategies.auto.calibration import StepCost
from specdec_studio.engine.strategies.auto.planner import Planner


class BatchStepCost(StepCost):
    """Auto's step cost inside a shared batch, as the batch's throughput sees it: ``base`` rows are
    decoded this step anyway (one per busy slot), and a slot's k drafts slow every one of them.

    The step with the drafts costs T(base + k) in one unified cache, or T(base) + T(k) where each
    slot has a KV stream of its own (llama.cpp then splits a step into ubatches of equal rows per
    sequence, so the drafts are a second ubatch). Its extra time would have decoded ``base`` tokens
    at the step's rate, so the drafts pay only where they are accepted for more than that:
    relative cost 1 + base × (T(step with drafts) / T(base) - 1). (Priced T(base + k) / T(base)
    alone, a slot's drafts looked ``base`` times cheaper than they are: measured here, Auto's 4
    slots decoded 0.94× plain's tokens before this, in one cache.)"""

    def __init__(self, curve, streams: bool = False) -> None:
        super().__init__(curve)
        self.base = 1
        self.streams = streams
        self._priced: dict[tuple[int, int], float] = {}  # (base, n_tokens) -> relative: read every step
        self._affordable_by_base: dict[tuple[int, int], int] = {}  # (base, ceiling) -> affordable_tokens

    def relative(self, n_tokens: int) -> float:
        if self.base <= 1:
            return super().relative(n_tokens)
        if n_tokens <= 1:
            return 1.0
        if self.curve is None:  # the run's own timings of each size (or the prior): they change
            return self._batch_price(super().relative, n_tokens)
        price = self._priced.get((self.base, n_tokens))
        if price is None:
            price = self._priced[self.base, n_tokens] = self._batch_price(self.curve.relative, n_tokens)
        return price

    def _batch_price(self, cost, n_tokens: int) -> float:
        """1 + base × (T(step with the slot's n_tokens - 1 drafts) / T(base) - 1), T from ``cost``."""
        base_cost = cost(self.base)
        if self.streams:
            with_drafts = base_cost + cost(n_tokens - 1)
        else:
            with_drafts = cost(self.base - 1 + n_tokens)
        return 1.0 + self.base * (with_drafts / base_cost - 1.0)

    def affordable_tokens(self, ceiling: int) -> int:
        if self.curve is None or self.base <= 1:  # priced as a single run's step
            return super().affordable_tokens(ceiling)
        # by busy slots, in a table of its own (the inherited one is shared with single runs)
        tokens = self._affordable_by_base.get((self.base, ceiling))
        if tokens is None:
            tokens = self._affordable_by_base[self.base, ceiling] = self.most_tokens_within(ceiling)
        return tokens

    def return_penalty(self) -> float:
        return 0.0  # the batch's shape changes every step anyway


class AutoSlot:
    """Auto in one slot of a batch (a ``parallel.SlotDrafter``): the run's Planner, unpaced, with
    one sequence (a slot has one: its candidates form a chain), no sibling branches, a step cost
    priced inside the shared batch, and at most ``k_max`` tokens a step."""

    def __init__(self, prompt: Sequence[int], curve, k_max: int, streams: bool = False) -> None:
        self.cost = BatchStepCost(curve, streams)
        self.planner = Planner(prompt, SpeculativeParams(), curve, None, n_sequences=1, paced=False,
                               alternatives=False, cost=self.cost)
        self.k_max = k_max
        self.nodes: list = []

    def begin(self, prompt: Sequence[int]) -> None:
        pass  # the sources were built from the prompt

    def settle(self, context: Sequence[int]) -> None:
        pass  # the sources follow the context at the next plan

    def propose(self, context: Sequence[int], room: int, n_busy: int) -> tuple[list[int], None, float]:
        self.cost.base = n_busy  # the rows the batch decodes this step anyway
        self.nodes = self.planner.plan(0, context, max(0, min(room, self.k_max))).nodes
        return [n.token for n in self.nodes], None, 0.0

    def verified(self, n_accepted: int, n_batch_tokens: int, t_decode: float) -> None:
        """What verification made of the plan: the step's timing and the calibration learn."""
        self.planner.decoded(n_batch_tokens, t_decode)
        for i, node in enumerate(self.nodes[: n_accepted + 1]):
            self.planner.offered(node, i < n_accepted)

    def figures(self) -> dict:
        return {"auto": self.planner.figures()}

    def release(self, seq: int) -> None:
        pass  # nothing native: the sources are Python's


def slot_planner(prompt: Sequence[int], curve, k_max: int, streams: bool = False) -> AutoSlot:
    """Auto for one slot of batch decoding, over ``prompt``, priced on ``curve`` (None: unpriced),
    each slot in a KV stream of its own with ``streams``."""
    return AutoSlot(prompt, curve, k_max, streams)

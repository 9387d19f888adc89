"""Auto in a slot of batch decoding (``engine.parallel``): the batch's step cost, and a planner
that sends one source's chain where it pays (a slot has one sequence: no tree, no siblings)."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_studio.engine.strategies.auto.calibration import Calibrator, StepCost
from specdec_studio.engine.strategies.auto.report import AutoReport
from specdec_studio.engine.strategies.auto.sources import Sources
from specdec_studio.engine.strategies.auto.tree import build_tree


class BatchStepCost(StepCost):
    """Auto's step cost inside a shared batch: ``base`` rows are decoded this step anyway (one
    per busy slot), so a slot's k drafts cost T(base + k) / T(base) of what the step costs
    without them, not T(1 + k) / T(1)."""

    def __init__(self, curve) -> None:
        super().__init__(curve)
        self.base = 1

    def relative(self, n_tokens: int) -> float:
        if self.curve is None or self.base <= 1:
            return super().relative(n_tokens)
        return self.curve.relative(self.base - 1 + n_tokens) / self.curve.relative(self.base)

    def return_penalty(self) -> float:
        return 0.0  # the batch's shape changes every step anyway


class AutoSlotPlanner:
    """Auto's per-step choice for one slot of a batch (a ``parallel.SlotDrafter``). A slot has one
    sequence, so its candidates form a chain: the single source (n-gram cache or suffix match)
    whose tokens promise the most emitted tokens per step cost, cut where that gain peaks; nothing
    when nothing pays. It proposes at most ``k_max`` tokens a step."""

    def __init__(self, prompt: Sequence[int], curve, k_max: int) -> None:
        self.sources = Sources(prompt, alternatives=False)
        self.calibrator = Calibrator()
        self.cost = BatchStepCost(curve)
        self.report = AutoReport()
        self.k_max = k_max
        self.nodes: list = []

    def begin(self, prompt: Sequence[int]) -> None:
        pass  # the sources were built from the prompt

    def settle(self, context: Sequence[int]) -> None:
        pass  # the sources follow the context at the next plan

    def propose(self, context: Sequence[int], room: int, n_busy: int) -> tuple[list[int], None, float]:
        self.cost.base = n_busy  # the rows the batch decodes this step anyway
        return self.plan(context, max(0, min(room, self.k_max))), None, 0.0

    def verified(self, n_accepted: int, n_batch_tokens: int, t_decode: float) -> None:
        self.observe(n_accepted, n_batch_tokens, t_decode)

    def figures(self) -> dict:
        return {"auto": self.report.as_dict(self.calibrator, self.sources.kinds())}

    def release(self, seq: int) -> None:
        pass  # nothing native: the sources are Python's

    def plan(self, context: Sequence[int], room: int) -> list[int]:
        best, best_gain = [], 1.0
        if room > 0:
            self.sources.advance(context)
            for proposal in self.sources.propose(context, room):
                nodes, gain = build_tree([proposal], self.calibrator, self.cost, room)
                if gain > best_gain:
                    best, best_gain = nodes, gain
        self.nodes = best
        self.report.decide(best)
        return [n.token for n in best]

    def observe(self, n_accepted: int, n_tokens: int, t_decode: float) -> None:
        """What verification made of the plan: the calibration and the step's timing learn."""
        self.cost.observe(n_tokens, t_decode)
        for i, node in enumerate(self.nodes[: n_accepted + 1]):
            accepted = i < n_accepted
            self.calibrator.observe(node.source, node.signal, node.depth - 1, node.p, accepted, node.agreed)
            self.report.offer(node, accepted)


def slot_planner(prompt: Sequence[int], curve, k_max: int) -> AutoSlotPlanner:
    """Auto for one slot of batch decoding, over ``prompt``, priced on ``curve`` (None: unpriced)."""
    return AutoSlotPlanner(prompt, curve, k_max)

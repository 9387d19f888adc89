"""What Auto did, counted for ``--json`` and the app: decisions, offers and acceptances per source."""

from __future__ import annotations

from specdec_studio.engine.strategies.auto.calibration import Calibrator
from specdec_studio.engine.strategies.auto.priors import SOURCES
from specdec_studio.engine.strategies.auto.tree import Node


class AutoReport:
    """Counts per source and per decision for ``--json`` and the app."""

    def __init__(self) -> None:
        self.offered: dict[str, int] = {}
        self.accepted: dict[str, int] = {}
        self.decisions: dict[str, int] = {}
        self.agreed = [0, 0]  # offered, accepted: tokens sources of two families proposed

    @staticmethod
    def count(table: dict[str, int], key: str) -> None:
        table[key] = table.get(key, 0) + 1

    def offer(self, node: Node, accepted: bool) -> None:
        """A verified node: counted for its source (and as agreed, if another family proposed it too)."""
        self.count(self.offered, node.source)
        if accepted:
            self.count(self.accepted, node.source)
        if node.agreed:
            self.agreed[0] += 1
            self.agreed[1] += accepted

    def decide(self, nodes: list[Node]) -> str:
        used = sorted({n.source for n in nodes})
        decision = "plain" if not used else ("tree:" + "+".join(used) if len(used) > 1 else used[0])
        self.count(self.decisions, decision)
        return decision

    def as_dict(self, calibrator: Calibrator, trust: float | None = None) -> dict:
        """``trust``: the guard's at the end of the run (None where there is no guard)."""
        extra = {} if trust is None else {"trust": round(trust, 3)}
        return {**extra, "decisions": dict(sorted(self.decisions.items())),
                "sources": {s: {"offered": self.offered.get(s, 0), "accepted": self.accepted.get(s, 0)}
                            for s in SOURCES if self.offered.get(s)},
                "agreed": {"offered": self.agreed[0], "accepted": self.agreed[1]},
                "calibration": calibrator.table()}

"""What Auto did, counted for ``--json`` and the app: decisions, and per source what it proposed,
what was sent and accepted, and for a source never sent what ruled it out."""

from __future__ import annotations

from specdec_studio.engine.strategies.auto.calibration import Calibrator
from specdec_studio.engine.strategies.auto.sources import Proposal
from specdec_studio.engine.strategies.auto.tree import Node
from specdec_studio.engine.strategies.sources.base import LABEL, Kind


class Considered:
    """One source's proposals over the run's planning steps: on how many it proposed, and the
    likeliest first token it ever offered against the chance a step then needed to pay."""

    __slots__ = ("steps", "best_chance", "needed")

    def __init__(self) -> None:
        self.steps = 0
        self.best_chance = 0.0
        self.needed = 1.0  # the chance a one-node tree needed on the step of best_chance

    def add(self, chance: float, needed: float) -> None:
        self.steps += 1
        if chance > self.best_chance:
            self.best_chance, self.needed = chance, needed


class AutoReport:
    """Counts per source and per decision for ``--json`` and the app."""

    def __init__(self) -> None:
        self.offered: dict[str, int] = {}
        self.accepted: dict[str, int] = {}
        self.decisions: dict[str, int] = {}
        self.agreed = [0, 0]  # offered, accepted: tokens sources of two families proposed
        self.considered: dict[str, Considered] = {}

    def consider(self, proposals: list[Proposal], chances: list[float], needed: float) -> None:
        """A planning step's proposals (at its first, cheapest test), with their first tokens'
        calibrated chances and the chance a step needed to pay (``StepCost.first_chance_needed``)."""
        for proposal, chance in zip(proposals, chances):
            self.considered.setdefault(proposal.source, Considered()).add(chance, needed)

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

    def ruled_out(self, source: str) -> str | None:
        """Why a source that proposed was never sent, in one sentence; None if it was sent or never proposed."""
        seen = self.considered.get(source)
        if seen is None or self.offered.get(source):
            return None
        if seen.best_chance <= seen.needed:
            return (f"never sent: its likeliest first token had a {seen.best_chance:.0%} chance, under the "
                    f"{seen.needed:.0%} a step needed to pay for its batch")
        return ("never sent: its first tokens were likely enough, "
                "but no chain of it promised enough tokens for its batch's cost")

    def as_dict(self, calibrator: Calibrator, kinds: list[Kind], trust: float | None = None) -> dict:
        """``kinds``: what the run's sources proposed under (``Sources.kinds``); ``trust``: the
        guard's at the end of the run (None where there is no guard).
        Every kind is listed: proposed (planning steps it proposed on), offered (its tokens sent to
        verification), accepted, and for one never sent, ``ruled_out``."""
        extra = {} if trust is None else {"trust": round(trust, 3)}
        sources = {}
        for s in (kind.name for kind in kinds):
            seen = self.considered.get(s)
            entry = {"proposed": seen.steps if seen else 0, "offered": self.offered.get(s, 0),
                     "accepted": self.accepted.get(s, 0)}
            why = self.ruled_out(s)
            if why is not None:
                entry["ruled_out"] = why
            sources[s] = entry
        return {**extra, "decisions": dict(sorted(self.decisions.items())), "sources": sources,
                "agreed": {"offered": self.agreed[0], "accepted": self.agreed[1]},
                "calibration": calibrator.table()}


def _name(source: str, auto: dict) -> str:
    """A source as the summaries name it (the decoding source as what it was: draft model or MTP head)."""
    if source == "draft" and "draft" in auto:
        return auto["draft"].get("source", LABEL["draft"])
    return LABEL.get(source, source)


def source_lines(auto: dict) -> list[str]:
    """One line per source of a finished run's ``stats["auto"]`` (:meth:`AutoReport.as_dict`):
    what it proposed, what was sent and accepted, and why a source never sent was ruled out.
    Shared by the CLI's summary and the window's."""
    lines = []
    for source, c in auto.get("sources", {}).items():
        line = f"{_name(source, auto)}: "
        if "proposed" in c:  # (a trace recorded before the report counted proposals has offers only)
            line += f"proposed on {c['proposed']} step{'s' * (c['proposed'] != 1)}, "
        line += f"{c['accepted']} of {c['offered']} sent tokens accepted"
        if c["offered"]:
            line += f" ({100 * c['accepted'] / c['offered']:.0f} %)"
        if "ruled_out" in c:
            line += f"; {c['ruled_out']}"
        lines.append(line)
    return lines


def step_limit_line(auto: dict) -> str | None:
    """How long a step of the run could be: the profile's cap, and the steps a loop took past it
    (None for a trace recorded before runs reported it)."""
    if "step_tokens_max" not in auto:
        return None
    line = f"steps of at most {auto['step_tokens_max']} proposed tokens (the profile's price)"
    loops = auto.get("loop_steps", 0)
    if loops:
        line += f"; {loops} step{'s' * (loops != 1)} went past that round a loop the text repeated"
    return line


def source_counts(auto: dict) -> str:
    """The short form of :func:`source_lines`, for one line of the window: each source's accepted
    and sent tokens, or that it was never sent."""
    parts = []
    for source, c in auto.get("sources", {}).items():
        name = _name(source, auto)
        parts.append(f"{name} {c['accepted']}/{c['offered']}" if c["offered"] else f"{name}: never sent")
    return " · ".join(parts)

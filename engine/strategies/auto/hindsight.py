"""What the proposals Auto did not send would have earned: each is checked against the tokens the
target went on to choose, so the calibration learns on plain steps as well as on tree steps."""

from __future__ import annotations

from specdec_studio.engine.strategies.auto.calibration import Calibrator
from specdec_studio.engine.strategies.auto.sources import Proposal
from specdec_studio.engine.strategies.auto.tree import support_of


class Hindsight:
    """Proposals a step did not verify, followed token by token as the run emits its tokens.

    A proposal's token at position i is judged when the target chooses the token there, exactly
    as verification would have judged it (right if it is the target's choice and every token
    before it was right too), and the calibrator learns from it like from a verified one. Without
    this, a run would learn only from the trees it sends, and a conservative start could never
    find out that a source has become worth a tree."""

    def __init__(self, calibrator: Calibrator) -> None:
        self.calibrator = calibrator
        self.pending: list[tuple[Proposal, list[tuple[str, ...]], int]] = []  # proposal, support, next position

    def keep(self, proposals: list[Proposal]) -> None:
        for proposal, support in zip(proposals, support_of(proposals)):
            self.pending.append((proposal, support, 0))

    def see(self, token: int) -> None:
        """The target chose ``token`` next: every pending proposal's next token is judged."""
        if not self.pending:
            return
        observe, going = self.calibrator.observe, []
        for proposal, support, i in self.pending:
            right = proposal.tokens[i] == token
            observe(proposal.source, proposal.signals[i], i, None, right, len(support[i]) > 1)
            if right and i + 1 < len(proposal.tokens):
                going.append((proposal, support, i + 1))
        self.pending = going

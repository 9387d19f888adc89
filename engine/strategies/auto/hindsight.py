"""What the proposals Auto did not send would have earned: each is checked against the tokens the
target went on to choose, so the calibration learns on plain steps as well as on tree steps."""

from __future__ import annotations

from specdec_studio.engine.strategies.auto.calibration import Calibrator
from specdec_studio.engine.strategies.auto.sources import Proposal
from specdec_studio.engine.strategies.auto.tree import Node, support_of


class Hindsight:
    """Proposals a step did not verify, followed token by token as the run emits its tokens.

    A proposal's token at position i is judged when the target chooses the token there, exactly
    as verification would have judged it (right if it is the target's choice and every token
    before it was right too), and the calibrator learns from it like from a verified one. Without
    this, a run would learn only from the trees it sends, and a conservative start could never
    find out that a source has become worth a tree.

    A proposal a tree sent in part goes on here past the part it sent: verification judges the
    sent tokens, hindsight the ones after them. Otherwise a run that sends 3 tokens of a chain
    never learns whether the 4th would have been right, and its trees stay as shallow as its
    first ones (on the code prompt, ten steps of 3 tokens, every one accepted, before the prior
    let a 4th in)."""

    def __init__(self, calibrator: Calibrator) -> None:
        self.calibrator = calibrator
        # proposal, support, next position, first position to judge (those before it were verified)
        self.pending: list[tuple[Proposal, list[tuple[str, ...]], int, int]] = []

    def keep(self, proposals: list[Proposal], sent: list[int] | None = None,
             support: list[list[tuple[str, ...]]] | None = None) -> None:
        """Follow ``proposals`` from the next token on; ``sent``: how many of each one's first
        tokens the step verifies (none are judged twice); ``support``: their :func:`support_of`,
        where the caller has it already (the tree it built from them did)."""
        sent = sent or [0] * len(proposals)
        support = support if support is not None else support_of(proposals)
        for proposal, families, n_sent in zip(proposals, support, sent):
            if n_sent < len(proposal.tokens):
                self.pending.append((proposal, families, 0, n_sent))

    def see(self, token: int) -> None:
        """The target chose ``token`` next: every pending proposal's next token is judged."""
        if not self.pending:
            return
        observe, going = self.calibrator.observe, []
        for proposal, support, i, first in self.pending:
            right = proposal.tokens[i] == token
            if i >= first:
                observe(proposal.source, proposal.signals[i], i, None, right, len(support[i]) > 1)
            if right and i + 1 < len(proposal.tokens):
                going.append((proposal, support, i + 1, first))
        self.pending = going


def sent_lengths(proposals: list[Proposal], nodes: list[Node]) -> list[int]:
    """How many of each proposal's first tokens a tree of ``nodes`` (in batch order, each with
    its parent's index) holds: the length of its longest prefix that is a path of the tree,
    followed down the tree node by node (the parent is -1 at the input token)."""
    child: dict[tuple[int, int], int] = {(node.parent, node.token): i for i, node in enumerate(nodes)}
    lengths = []
    for proposal in proposals:
        n, at = 0, -1
        for token in proposal.tokens:
            at = child.get((at, token), -2)
            if at == -2:
                break
            n += 1
        lengths.append(n)
    return lengths

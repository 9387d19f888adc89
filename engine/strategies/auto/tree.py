"""A step's tree: candidate tokens added likeliest first, shared prefixes once, cut where expected
emitted tokens ÷ the step's cost peaks; then laid out in batch order."""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec_studio.engine.strategies.auto.calibration import Calibrator, StepCost
from specdec_studio.engine.strategies.auto.priors import FAMILY, MIN_GAIN, MIN_REACH
from specdec_studio.engine.strategies.auto.sources import Proposal


@dataclass
class Node:
    """A token of the step's tree: its depth (1 = right after the input token), the branches
    (sequence ids) that pass through it, and the calibrated chance that it is accepted."""

    token: int
    depth: int
    parent: int  # index of the parent node, -1 for the input token
    source: str  # the source whose branch put it in the tree (the likeliest one)
    signal: tuple
    p: float  # P(accepted | parent accepted)
    reach: float  # P(this node accepted)
    support: tuple[str, ...] = ()  # the source families that proposed it after the same path
    seqs: list[int] = field(default_factory=list)
    row: int = -1

    def __post_init__(self) -> None:
        self.support = self.support or (FAMILY[self.source],)

    @property
    def agreed(self) -> bool:
        return len(self.support) > 1

    @property
    def proposer(self) -> str:
        """Its source, joined by the other families that proposed it ("ngram+suffix")."""
        own = FAMILY[self.source]
        return "+".join([self.source, *(f for f in self.support if f != own)])


def _support(proposals: list[Proposal]) -> list[list[tuple[str, ...]]]:
    """For each proposed token, the source families that proposed it after the same path."""
    families: dict[tuple[int, ...], set[str]] = {}
    paths = [[tuple(prop.tokens[: i + 1]) for i in range(len(prop.tokens))] for prop in proposals]
    for prop, prop_paths in zip(proposals, paths):
        for path in prop_paths:
            families.setdefault(path, set()).add(FAMILY[prop.source])
    return [[tuple(sorted(families[path])) for path in prop_paths] for prop_paths in paths]


def build_tree(proposals: list[Proposal], calibrator: Calibrator, cost: StepCost, room: int) -> tuple[list[Node], float]:
    """The step's tree: candidate tokens added likeliest first (a token another branch already
    put in the tree costs nothing), then cut at the size whose expected emitted tokens ÷ relative
    step cost is highest. Returns the nodes in batch order and the predicted gain over a plain
    step (1.0 for an empty tree: a plain step)."""
    support = _support(proposals)
    chance: dict[tuple[int, int], float] = {}  # (proposal, position) -> calibrated probability
    trie: dict[tuple[int, int], int] = {}  # (parent node, token) -> node
    nodes: list[Node] = []
    frontier = [(b, 0, -1) for b in range(len(proposals))]  # (proposal, next position, parent node)
    expected = 1.0  # tokens the step emits: the target's own, plus each node's chance
    taken: dict[int, float] = {}  # parent node -> the summed chances of its children so far
    best_gain, best_size = 1.0, 0
    penalty = cost.return_penalty()
    while len(nodes) < room:
        pick = None
        for fi, (b, i, parent) in enumerate(frontier):
            prop = proposals[b]
            if i >= len(prop.tokens):
                continue
            if (parent, prop.tokens[i]) in trie:  # already in the tree: follow it for free
                pick = (fi, 1.0, -1.0)
                break
            parent_reach = 1.0 if parent < 0 else nodes[parent].reach
            p = chance.get((b, i))
            if p is None:
                p = chance[b, i] = calibrator.probability(prop.source, prop.signals[i], i, len(support[b][i]) > 1)
            # children of one node are alternatives: together they cannot exceed certainty
            p = min(p, max(0.0, 1.0 - taken.get(parent, 0.0)))
            if pick is None or parent_reach * p > pick[1]:
                pick = (fi, parent_reach * p, p)
        if pick is None or pick[1] < MIN_REACH:
            break
        fi, reach, p = pick
        b, i, parent = frontier[fi]
        prop = proposals[b]
        key = (parent, prop.tokens[i])
        if key not in trie:
            trie[key] = len(nodes)
            taken[parent] = taken.get(parent, 0.0) + p
            nodes.append(Node(prop.tokens[i], i + 1, parent, prop.source, prop.signals[i], p, reach, support[b][i]))
            expected += reach
            gain = expected / (cost.relative(len(nodes) + 1) + penalty)
            if gain > best_gain:
                best_gain, best_size = gain, len(nodes)
        frontier[fi] = (b, i + 1, trie[key])
    if best_gain <= MIN_GAIN:
        return [], 1.0
    return _in_batch_order(nodes[:best_size]), best_gain


def _in_batch_order(nodes: list[Node]) -> list[Node]:
    """The tree depth first, the likeliest child first: the likeliest path is contiguous in the
    batch (and in the cache). Branches become sequences 0, 1, … in that order, and a node carries
    the sequence of every branch that passes through it."""
    children: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        children.setdefault(n.parent, []).append(i)
    order: list[int] = []
    stack = sorted(children.get(-1, []), key=lambda i: nodes[i].reach)
    while stack:
        i = stack.pop()
        order.append(i)
        stack.extend(sorted(children.get(i, []), key=lambda j: nodes[j].reach))
    new_index = {old: new for new, old in enumerate(order)}
    ordered = [nodes[i] for i in order]
    for n in ordered:
        n.parent = new_index.get(n.parent, -1)
        n.seqs = []
    # a branch per leaf, numbered in batch order
    has_child = {n.parent for n in ordered}
    leaves = [i for i in range(len(ordered)) if i not in has_child]
    for seq, leaf in enumerate(leaves):
        i = leaf
        while i >= 0:
            ordered[i].seqs.append(seq)
            i = ordered[i].parent
    return ordered

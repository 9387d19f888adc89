"""A step's tree: candidate tokens added likeliest first, shared prefixes once, cut where expected
emitted tokens ÷ the step's cost peaks; then laid out in batch order."""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec_studio.engine.strategies.auto.calibration import Calibrator, StepCost
from specdec_studio.engine.strategies.auto.priors import MIN_GAIN, MIN_REACH
from specdec_studio.engine.strategies.auto.sources import Proposal
from specdec_studio.engine.strategies.sources.base import FAMILY

EARLY_ANSWER_DEPTHS = frozenset((8, 16, 32))  # where could_pay looks at the bound it has so far


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


def support_of(proposals: list[Proposal]) -> list[list[tuple[str, ...]]]:
    """For each proposed token, the source families that proposed it after the same path.

    The proposals are walked as one trie (a path is its parent's node and its last token), so the
    work is linear in the tokens: a loop's 64-token proposals made paths of every length, a
    quadratic cost paid twice a step."""
    node_of: dict[tuple[int, int], int] = {}  # (parent node, token) -> node; -1 is the input token
    families: list[set[str]] = []  # node -> the families whose proposals pass through it
    nodes_of: list[list[int]] = []  # proposal -> its nodes, one per token
    for prop in proposals:
        family, parent, walk = FAMILY[prop.source], -1, []
        for token in prop.tokens:
            node = node_of.setdefault((parent, token), len(families))
            if node == len(families):
                families.append(set())
            families[node].add(family)
            walk.append(node)
            parent = node
        nodes_of.append(walk)
    support = [tuple(sorted(f)) for f in families]
    return [[support[node] for node in walk] for walk in nodes_of]


def first_chances(proposals: list[Proposal], calibrator: Calibrator) -> list[float]:
    """Each proposal's calibrated chance that its first token is accepted (agreed where a source
    of another family proposed the same first token)."""
    first_families: dict[int, set[str]] = {}  # first token -> the families proposing it
    for p in proposals:
        first_families.setdefault(p.tokens[0], set()).add(FAMILY[p.source])
    return [calibrator.probability(p.source, p.signals[0], 0, len(first_families[p.tokens[0]]) > 1)
            for p in proposals]


def could_pay(proposals: list[Proposal], calibrator: Calibrator, cost: StepCost, room: int,
              min_gain: float = MIN_GAIN, cut: int | None = None, chances: list[float] | None = None) -> bool:
    """Whether any tree of these proposals could beat ``min_gain``: an upper bound on
    :func:`build_tree`'s gain, several times cheaper than building the tree (and the sibling
    branches, which are asked for only when it passes).

    A node of the tree is a path the proposals share up to its depth, reached with at most the
    product, along the path, of the best chance any proposal on it gives its token there. So a
    tree of m nodes expects at most 1 plus the m largest of these bounds.

    ``cut``: the proposals were asked for at most ``cut`` tokens, so a proposal that long may go
    on; every node deeper than that is counted as likely as the likeliest node at depth ``cut``
    (no node is likelier than its parent). The run asks with cut 1, then 4, then in full: most of
    a chat's steps fail the first test and cost no more than plain decoding's. ``chances``: the
    proposals' :func:`first_chances`, if the caller has them already."""
    if room <= 0 or not proposals:
        return False
    if cut == 1:  # every node as likely as the likeliest first token: one threshold to pass
        first = max(chances if chances is not None else first_chances(proposals, calibrator))
        return first >= MIN_REACH and first > cost.first_chance_needed(room, min_gain)
    reaches: list[float] = []
    at: list[int | None] = [-1] * len(proposals)  # each proposal's node one depth up (-1: the input token)
    reach_at = {-1: 1.0}  # the reach bound of each node one depth up
    for depth in range(min(room, max(len(p.tokens) for p in proposals))):
        index: dict[tuple[int, int], int] = {}  # (parent node, token) -> node at this depth
        families: list[set[str]] = []  # the families proposing each node
        node_of: list[int | None] = []
        for b, p in enumerate(proposals):
            if at[b] is None or depth >= len(p.tokens) or reach_at[at[b]] < MIN_REACH:
                node_of.append(None)
                continue
            node = index.setdefault((at[b], p.tokens[depth]), len(families))
            if node == len(families):
                families.append(set())
            families[node].add(FAMILY[p.source])
            node_of.append(node)
        if not families:
            break
        best = [0.0] * len(families)
        for p, node in zip(proposals, node_of):
            if node is not None:
                chance = calibrator.probability(p.source, p.signals[depth], depth, len(families[node]) > 1)
                best[node] = max(best[node], chance)
        reach_at = {node: reach_at[parent] * best[node] for (parent, _), node in index.items()}
        reaches.extend(r for r in reach_at.values() if r >= MIN_REACH)
        at = node_of
        # More nodes only ever raise the m largest bounds' sum, so a bound that already beats
        # min_gain is the answer: a sure copy is known after 8 of its 64 tokens, not all of them
        if depth + 1 in EARLY_ANSWER_DEPTHS and _beats(sorted(reaches, reverse=True)[:room], cost, min_gain):
            return True
        if cut is not None and depth + 1 == cut:  # the unknown deeper nodes
            deepest = max(reach_at.values())
            if deepest >= MIN_REACH:
                reaches.extend([deepest] * (room - len(reaches)))
    reaches.sort(reverse=True)
    return _beats(reaches[:room], cost, min_gain)


def _beats(reaches: list[float], cost: StepCost, min_gain: float) -> bool:
    """Whether a tree whose nodes, likeliest first, have these reaches beats ``min_gain`` at some size."""
    penalty = cost.return_penalty()
    expected = 1.0
    for m, r in enumerate(reaches, start=1):
        expected += r
        if expected / (cost.relative(m + 1) + penalty) > min_gain:
            return True
    return False


def build_tree(proposals: list[Proposal], calibrator: Calibrator, cost: StepCost, room: int,
               min_gain: float = MIN_GAIN, support: list[list[tuple[str, ...]]] | None = None
               ) -> tuple[list[Node], float]:
    """The step's tree: candidate tokens added likeliest first (a token another branch already
    put in the tree costs nothing), then cut at the size whose expected emitted tokens ÷ relative
    step cost is highest. Returns the nodes in batch order and the predicted gain over a plain
    step; no nodes and 1.0 (a plain step) unless that gain beats ``min_gain``.

    The candidates are kept as rows of plain tuples while the tree grows; only those before the
    cut become :class:`Node` objects (a loop's step weighs up to 64 and sends fewer). ``support``:
    the proposals' :func:`support_of`, where the caller has it already."""
    support = support if support is not None else support_of(proposals)
    chance: list[list[float | None]] = [[None] * len(prop.tokens) for prop in proposals]  # calibrated, as asked
    # node n: (the proposal that put it in, its position there, its parent node, its chance, its reach)
    rows: list[tuple[int, int, int, float, float]] = []
    frontier = [[b, 0, -1] for b in range(len(proposals))]  # [proposal, next position, parent node]
    # each entry's offer for its next token, (reach, chance), or None past its last token. A new
    # node changes only the offers of the entries under its parent (they follow it, or its sibling
    # now caps their chance), so only those are worked out again
    offers: list[tuple[float, float] | None] = [None] * len(frontier)
    stale = list(range(len(frontier)))
    expected = 1.0  # tokens the step emits: the target's own, plus each node's chance
    taken: dict[int, float] = {}  # parent node -> the summed chances of its children so far
    best_gain, best_size = 1.0, 0
    penalty = cost.return_penalty()
    while len(rows) < room:
        for fi in stale:
            b, i, parent = frontier[fi]
            prop = proposals[b]
            if i >= len(prop.tokens):
                offers[fi] = None
                continue
            p = chance[b][i]
            if p is None:
                p = chance[b][i] = calibrator.probability(prop.source, prop.signals[i], i, len(support[b][i]) > 1)
            # children of one node are alternatives: together they cannot exceed certainty
            p = min(p, max(0.0, 1.0 - taken.get(parent, 0.0)))
            offers[fi] = (p if parent < 0 else rows[parent][4] * p, p)
        pick = -1  # the likeliest token not in the tree yet (the first entry offering it, on a tie)
        for fi, offer in enumerate(offers):
            if offer is not None and (pick < 0 or offer[0] > offers[pick][0]):
                pick = fi
        if pick < 0 or offers[pick][0] < MIN_REACH:
            break
        reach, p = offers[pick]
        b, i, parent = frontier[pick]
        token = proposals[b].tokens[i]
        node = len(rows)
        taken[parent] = taken.get(parent, 0.0) + p
        rows.append((b, i, parent, p, reach))
        expected += reach
        gain = expected / (cost.relative(node + 2) + penalty)
        if gain > best_gain:
            best_gain, best_size = gain, node + 1
        # every branch whose next token is the new node follows it there for free (no further: it
        # has no children yet, and every branch already stood as deep in the tree as it could)
        stale = []
        for fi, entry in enumerate(frontier):
            if entry[2] == parent:
                tokens = proposals[entry[0]].tokens
                if entry[1] < len(tokens) and tokens[entry[1]] == token:
                    entry[1], entry[2] = entry[1] + 1, node
                stale.append(fi)
    if best_gain <= min_gain:
        return [], 1.0
    nodes = []
    for b, i, parent, p, reach in rows[:best_size]:  # a node's parent was added before it: all are in the cut
        prop = proposals[b]
        nodes.append(Node(prop.tokens[i], i + 1, parent, prop.source, prop.signals[i], p, reach, support[b][i]))
    return _in_batch_order(nodes), best_gain


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

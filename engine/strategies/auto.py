"""Auto: each step verifies whatever set of candidate tokens is expected to emit the most tokens
per second, and nothing (a plain step) when no candidate pays for itself.

Candidate sources, each proposing a continuation of the context:

- ``ngram``: llama-lookup's context n-gram cache (every n-gram of the context counts its followers);
  each proposed token's signal is the n-gram size it came from and its follower share and count;
- ``ngram_alt``: the same cache's other frequent followers wherever along the n-gram branch the
  text went another way before, each continued by the cache: sibling branches that fork off the
  n-gram branch at that depth;
- ``suffix``: the longest suffix of the context that occurred earlier (a suffix automaton over the
  prompt, which holds the earlier turns of a chat, and the output so far) and what followed it;
  the signal is the match length (SAM-Decoding, SuffixDecoding: speculate more on a long match);
- ``draft``: a draft model's greedy proposals, when one is loaded; the signal is its probability.

Every proposed token gets a probability of being accepted, calibrated online from the run's own
verifications of tokens with the same source, signal and draft position, and whether a source of
another family proposed the same token after the same path (a beta-binomial mean that leans on
the signal's prior until its bin has data). A step's candidates form a tree:
continuations that share a prefix share its tokens (each such token carries every branch's
sequence id, as in llama.cpp's ``examples/speculative``). The tree grows one token at a time while
that raises expected emitted tokens ÷ predicted step cost, where a decode of B tokens costs
T(B)/T(1) from the batch-cost profile (or, without one, from the decodes the run makes). An empty
tree is a plain step.

Verification is lookahead's: the target's own token at each position (argmax, or a draw from its
distribution), kept while some branch has it next. Every emitted token is the target's choice,
drawn once per token in plain decoding's order, so a seeded stochastic run equals plain's too.
The winning branch's cells stay; the others are removed; if the winner was not the first branch
in the batch, its cells are re-decoded with the next step so the cache stays in position order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from engine.events import Event, StepDone
from engine.strategies.common import Runtime, begin_run
from engine.strategies.lookup import NgramCacheDrafter
from engine.strategies.suffix_automaton import SuffixMatcher

SOURCES = ("ngram", "ngram_alt", "suffix", "draft")
NGRAM_MIN, NGRAM_MAX = 1, 4
ALT_BRANCHES = 2  # the n-gram cache's 2nd and 3rd followers
ALT_MIN_COUNT = 2  # a follower seen once is no evidence of a second way
MIN_SUFFIX_MATCH = 2
# What a proposal's signal says about its chance before the run has verified any like it: a long
# suffix match or a frequent, dominant n-gram follower is usually right (llama-lookup's thresholds
# and SAM-Decoding's observation), a draft model's probability is roughly its acceptance. The prior
# weighs as much as PRIOR_WEIGHT verifications; the run's own outcomes take over from there.
PRIOR_WEIGHT = 4.0
SUFFIX_PRIOR = (0.35, 0.45, 0.6, 0.75, 0.85, 0.92)  # by match-length bucket: 2, 3-4, 5-8, 9-16, 17-32, 33+
DRAFT_PRIOR = (0.2, 0.45, 0.7, 0.85, 0.93)  # by the draft's probability: <.3, <.6, <.8, <.95, more
ALT_PRIOR = (0.08, 0.15, 0.25, 0.35)  # a 2nd or 3rd follower, by its share: <.15, <.3, <.45, more
# Sources of different families that propose the same token after the same path read the context
# in different ways (a sibling branch is the n-gram cache again, not a second opinion). Measured over
# the shipped prompts' plain outputs, a first token that both the cache and the suffix match proposed
# was right 90 % of the time, one that only one of them proposed 50 %: a token's bins are split by
# whether another family agreed. (Raising the prior of an agreed token did not pay: the short
# answers, where the prior decides, lost more than the long ones won.)
FAMILY = {"ngram": "ngram", "ngram_alt": "ngram", "suffix": "suffix", "draft": "draft"}


def signal_prior(source: str, signal: tuple) -> float:
    if source == "suffix":
        return SUFFIX_PRIOR[signal[0]]
    if source == "draft":
        return DRAFT_PRIOR[signal[0]]
    # n-gram size, follower share bucket (0-3), follower count bucket (0-3), follower rank (0 = most frequent)
    size, share, count, rank = signal
    if rank:
        return ALT_PRIOR[share]
    return min(0.9, 0.2 + 0.1 * (size - 1) + 0.12 * share + 0.05 * count)


# Without a profile, a decode of B tokens is assumed to cost 1 + COST_SLOPE·(B - 1) plain steps
# until the run has timed decodes of that size (measured on this CPU: T(8)/T(1) ≈ 1.3).
COST_SLOPE = 0.04
MIN_GAIN = 1.1  # a tree must beat a plain step by a margin: its prediction errs, a plain step cannot
SHAPE_CHANGE_PRIOR = 0.05  # the graph rebuild a tree step causes, in plain steps, until measured
MIN_REACH = 0.02  # candidates less likely than this to be reached are not worth a row
DRAFT_MIN_RATE = 0.6
DRAFT_PROBE_EVERY = 8


# ----------------------------------------------------------------------------- calibration
def _bucket(value: float, edges: Sequence[float]) -> int:
    for i, edge in enumerate(edges):
        if value < edge:
            return i
    return len(edges)


class Calibrator:
    """P(accepted | source, signal, position), learnt from the run's verifications."""

    def __init__(self) -> None:
        self.bins: dict[tuple, list[float]] = {}  # key -> [accepted, offered]
        self.by_source: dict[str, list[float]] = {s: [0.0, 0.0] for s in SOURCES}
        # predicted probability (in tenths) -> [sum predicted, accepted, offered]: calibration
        self.reliability = [[0.0, 0, 0] for _ in range(10)]

    def source_rate(self, source: str) -> float:
        """The share of the source's proposals the run has seen accepted (0.5 before any)."""
        acc, off = self.by_source[source]
        return (acc + 1.0) / (off + 2.0)

    @staticmethod
    def _key(source: str, signal: tuple, position: int, agreed: bool) -> tuple:
        # a sibling branch's tokens before and after its fork are the cache's best followers:
        # they share the n-gram branch's bins (only the fork's own token, rank > 0, has its own)
        if source == "ngram_alt" and signal[3] == 0:
            source = "ngram"
        return source, signal, min(position, 4), agreed

    def probability(self, source: str, signal: tuple, position: int, agreed: bool = False) -> float:
        """``agreed``: a source of another family proposed the same token after the same path."""
        acc, off = self.bins.get(self._key(source, signal, position, agreed), (0.0, 0.0))
        return (acc + PRIOR_WEIGHT * signal_prior(source, signal)) / (off + PRIOR_WEIGHT)

    def observe(self, source: str, signal: tuple, position: int, predicted: float, accepted: bool,
                agreed: bool = False) -> None:
        entry = self.bins.setdefault(self._key(source, signal, position, agreed), [0.0, 0.0])
        entry[0] += accepted
        entry[1] += 1
        src = self.by_source[source]
        src[0] += accepted
        src[1] += 1
        row = self.reliability[min(9, int(predicted * 10))]
        row[0] += predicted
        row[1] += accepted
        row[2] += 1

    def table(self) -> list[dict]:
        return [{"bin": f"{i / 10:.1f}-{(i + 1) / 10:.1f}", "n": n, "predicted": s / n, "observed": a / n}
                for i, (s, a, n) in enumerate(self.reliability) if n]


class StepCost:
    """Relative cost T(B)/T(1) of a decode of B tokens (all with logits): the profile's curve if
    there is one, else this run's own timings of that size, else a gentle linear prior.

    A run's timing of a size is the fastest of its last few decodes (other work on the machine only
    ever adds time), ignoring the first one (llama.cpp builds a graph for every new shape), and is
    trusted from the third.

    A tree step also costs the plain step after it a little: llama.cpp reuses a decode's graph
    only for the same batch shape, so coming back to one token rebuilds it (measured here: about
    0.5 ms on a 10 ms step). The run measures that too (a one-token decode after a larger one
    against one after another one-token decode) and charges it to the tree."""

    KEEP = 8
    TRUSTED = 3

    def __init__(self, curve=None) -> None:
        self.curve = curve
        self.seen: dict[int, list[float]] = {}  # B -> the last KEEP decode times, after the first
        self._first: set[int] = set()
        self._table: list[float] = []
        self._previous = 1
        self._plain_after: dict[bool, list[float]] = {False: [], True: []}  # after a tree step?

    def observe(self, n_tokens: int, seconds: float) -> None:
        if n_tokens == 1:
            times = self._plain_after[self._previous != 1]
            times.append(seconds)
            del times[: -self.KEEP]
        self._previous = n_tokens
        if n_tokens not in self._first:
            self._first.add(n_tokens)
            return
        times = self.seen.setdefault(n_tokens, [])
        times.append(seconds)
        del times[: -self.KEEP]

    def relative(self, n_tokens: int) -> float:
        if self.curve is not None:
            while len(self._table) <= n_tokens:  # the curve's values, worked out once per run
                b = len(self._table)
                self._table.append(self.curve.relative(b, b) if b else 0.0)
            return self._table[n_tokens]
        prior = 1.0 + COST_SLOPE * (n_tokens - 1)
        one, this = self.seen.get(1, []), self.seen.get(n_tokens, [])
        if n_tokens <= 1 or len(one) < self.TRUSTED or len(this) < self.TRUSTED:
            return prior
        return max(1.0, min(this) / min(one))

    def return_penalty(self) -> float:
        """What going back to one-token decodes after a tree step costs, in plain steps."""
        same, after = self._plain_after[False], self._plain_after[True]
        if len(same) < self.TRUSTED or len(after) < self.TRUSTED:
            return SHAPE_CHANGE_PRIOR
        return max(0.0, min(after) - min(same)) / min(same)


# ----------------------------------------------------------------------------- candidates
@dataclass
class Proposal:
    source: str
    tokens: list[int]
    signals: list[tuple]


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


class Sources:
    """The candidate sources of one run, kept up to date with the context. ``alternatives``
    adds the n-gram cache's sibling branches (a step whose tree has one sequence cannot use them)."""

    def __init__(self, prompt: Sequence[int], draft=None, alternatives: bool = True) -> None:
        self.ngrams = NgramCacheDrafter(NGRAM_MIN, NGRAM_MAX)
        self.ngrams.begin(prompt)
        self.suffix = SuffixMatcher(prompt)
        self.draft = draft  # a DraftModelDrafter, or None
        self.alternatives = alternatives

    def advance(self, context: Sequence[int]) -> None:
        self.suffix.extend(context[len(self.suffix.tokens):])

    def propose(self, context: Sequence[int], k: int, use_draft: bool) -> list[Proposal]:
        self.ngrams._count(context)
        ngram = self._ngram(context, k)
        out = [ngram, self._suffix(k)]
        if self.draft is not None and use_draft:
            out.append(self._draft(context, k))
        if self.alternatives:
            out.extend(self._ngram_alternatives(context, k, ngram))
        return [p for p in out if p.tokens]

    def _walk(self, seq: list[int], k: int, chance: float, tokens: list[int], signals: list[tuple]) -> None:
        """Extend ``tokens`` (and ``seq``) with the cache's confident followers, up to ``k`` tokens,
        while the chain's prior chance of being reached stays worth a row."""
        while len(tokens) < k:
            found = self.ngrams.confident(seq)
            if found is None:
                break
            size, entry = found
            share = entry.best_count / entry.total
            signal = (size, _bucket(share, (0.5, 0.67, 0.9)), _bucket(entry.total, (2, 4, 8)), 0)
            chance *= signal_prior("ngram", signal)
            if chance < MIN_REACH:  # deeper tokens could not be worth a row: stop walking
                break
            tokens.append(entry.best)
            signals.append(signal)
            seq.append(entry.best)

    def _ngram(self, context: Sequence[int], k: int) -> Proposal:
        tokens: list[int] = []
        signals: list[tuple] = []
        self._walk(list(context[max(0, len(context) - NGRAM_MAX):]), k, 1.0, tokens, signals)
        return Proposal("ngram", tokens, signals)

    def _ngram_alternatives(self, context: Sequence[int], k: int, main: Proposal) -> list[Proposal]:
        """Sibling branches of the n-gram branch: wherever along it (or right after it) the
        longest n-gram ending the text so far went another way often enough before, that other
        follower, then the cache's own continuation. The branch shares the n-gram branch's
        tokens up to there, so in the tree it forks off at that depth. The ALT_BRANCHES
        likeliest (by prior: the chance of reaching the fork times the follower's) are kept."""
        tail = list(context[max(0, len(context) - NGRAM_MAX):])
        forks = []  # (prior, depth, token, signal)
        reach = 1.0
        for depth in range(min(len(main.tokens), k - 1) + 1):
            seq = [*tail, *main.tokens[:depth]]
            taken = main.tokens[depth] if depth < len(main.tokens) else None
            # the longest n-gram ending here with another follower seen often enough
            for size in range(min(NGRAM_MAX, len(seq)), NGRAM_MIN - 1, -1):
                entry = self.ngrams.followers.get(tuple(seq[len(seq) - size:]))
                if entry is None or len(entry.counts) < 2:
                    continue
                others = sorted(((count, token) for token, count in entry.counts.items()
                                 if token != taken and count >= ALT_MIN_COUNT), reverse=True)
                for rank, (count, token) in enumerate(others[:ALT_BRANCHES], start=1):
                    signal = (size, _bucket(count / entry.total, (0.15, 0.3, 0.45)),
                              _bucket(entry.total, (2, 4, 8)), rank)
                    forks.append((reach * signal_prior("ngram_alt", signal), depth, token, signal))
                if others:
                    break
            if depth < len(main.tokens):
                reach *= signal_prior("ngram", main.signals[depth])
        out = []
        for prior, depth, token, signal in sorted(forks, reverse=True)[:ALT_BRANCHES]:
            if prior < MIN_REACH:
                break
            tokens, signals = [*main.tokens[:depth], token], [*main.signals[:depth], signal]
            self._walk([*tail, *tokens], k, prior, tokens, signals)
            out.append(Proposal("ngram_alt", tokens[:k], signals[:k]))
        return out

    def _suffix(self, k: int) -> Proposal:
        tokens, length = self.suffix.continuation(k, MIN_SUFFIX_MATCH)
        signal = (_bucket(length, (3, 5, 9, 17, 33)),)
        return Proposal("suffix", tokens, [signal] * len(tokens))

    def _draft(self, context: Sequence[int], k: int) -> Proposal:
        draft = self.draft.propose(context, k)
        probs = self.draft.last_probs
        return Proposal("draft", draft.tokens, [(_bucket(p, (0.3, 0.6, 0.8, 0.95)),) for p in probs])


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


# ----------------------------------------------------------------------------- the strategy
def run_auto(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    params = rt.config.speculative
    out, counters, memory, batch = rt.output, rt.counters, rt.memory, rt.batch
    calibrator = Calibrator()
    cost = StepCost(rt.cost_curve)
    draft = None
    if rt.draft is not None:
        from engine.strategies.speculative import DraftModelDrafter

        draft = DraftModelDrafter(rt.draft, rt.sampler, 0.0, rt.vocab.n_tokens, rt.vocab.is_eog, rt.cancel,
                                  rt.n_reused, keep_probs=True)
    sources = Sources(prompt, draft)
    n_seq = rt.config.n_sequences
    report = AutoReport()

    def prepare() -> None:
        if draft is not None:
            draft.begin(prompt)

    start = yield from begin_run(rt, prompt, prepare=prepare)
    if start is None:
        return
    token, n_past = start.token, start.n_past
    context = [*prompt, token]
    t_prev = rt.t_start
    step = 1
    redecode: list[int] = []  # accepted tokens whose cells were dropped to keep position order
    while not rt.should_stop(n_past, 1):
        sources.advance(context)
        room = min(params.k_max, rt.n_ctx - n_past - 1 - len(redecode), rt.n_batch - 1 - len(redecode),
                   rt.config.max_tokens - len(out.ids) - 1)
        t0 = time.perf_counter()
        # A draft model costs a decode per proposal: asked while it earns its keep, and every
        # DRAFT_PROBE_EVERY steps to find out whether it has started to.
        use_draft = calibrator.source_rate("draft") >= DRAFT_MIN_RATE or step % DRAFT_PROBE_EVERY == 1
        proposals = rt.guarded(lambda: sources.propose(context, max(0, room), use_draft)) if room > 0 else []
        if proposals is None:  # the draft model was stopped
            break
        proposals = proposals[:n_seq]
        nodes, gain = build_tree(proposals, calibrator, cost, max(0, room))
        t_plan = time.perf_counter() - t0
        counters.t_draft_s += t_plan

        # ---- the batch: re-decoded tokens, the input token, the tree --------------------------
        # The context lives in sequence 0; a step with several branches first copies it into the
        # others (and removes them after), so plain and one-branch steps pay nothing for the tree.
        branches = sorted(set().union(*(n.seqs for n in nodes))) if nodes else [0]
        for s in branches[1:]:
            memory.seq_cp(0, s, -1, -1)
        step_seqs = tuple(sorted({0, *branches}))
        batch.clear()
        for p, t in enumerate(redecode, start=n_past - len(redecode)):
            batch.add(t, p, step_seqs, False)
        redecode = []
        input_row = batch.add(token, n_past, step_seqs, True)
        for node in nodes:
            node.row = batch.add(node.token, n_past + node.depth, tuple(node.seqs), True)
        n_batch_tokens = batch.n_tokens
        t_decode = rt.decode()
        if t_decode is None:
            break
        cost.observe(n_batch_tokens, t_decode)

        # ---- verify: the target's token at each depth, following the nodes that have it --------
        emitted, proposers = [], []
        accepted_nodes: list[Node] = []
        verdicts: dict[int, str] = {}
        row, parent = input_row, -1
        while True:
            chosen = rt.sampler.sample(rt.logits(row))
            children = [i for i, n in enumerate(nodes) if n.parent == parent]
            match = next((i for i in children if nodes[i].token == chosen), None)
            for i in children:  # every child offered here was tested against the target's choice
                n = nodes[i]
                calibrator.observe(n.source, n.signal, n.depth - 1, n.p, i == match, n.agreed)
                report.offer(n, i == match)
                verdicts[n.row] = "accepted" if i == match else "rejected"
            if match is None:
                label, proposer = "sampled", "target"
            else:
                proposer = nodes[match].proposer
                label = "accepted_draft" if nodes[match].source == "draft" else "accepted_ngram"
                accepted_nodes.append(nodes[match])
            info = out.push(chosen, label)
            context.append(chosen)
            if info is not None:
                emitted.append(info)
                proposers.append(proposer)
            if match is None or out.done:
                break
            parent, row = match, nodes[match].row
        n_accepted = len(accepted_nodes)

        # ---- KV: sequence 0 keeps the accepted path; the other branches go -----------------------
        n_past_before = n_past
        n_past += 1 + n_accepted
        if nodes:  # even at the end: the cache must hold exactly the context for the next turn
            contiguous = all(n.row == input_row + 1 + j for j, n in enumerate(accepted_nodes))
            if n_accepted and not contiguous:
                # the path's cells sit after another branch's: re-decode it in position order
                memory.seq_rm(0, n_past - n_accepted, -1)
                redecode = [n.token for n in accepted_nodes]
            else:
                winner = accepted_nodes[-1].seqs[0] if n_accepted else 0
                if winner != 0:  # the path came from another branch: it replaces sequence 0's
                    memory.seq_rm(0, n_past_before + 1, -1)
                    memory.seq_cp(winner, 0, n_past_before + 1, n_past)
                memory.seq_rm(0, n_past, -1)
            for s in branches[1:]:
                memory.seq_rm(s, -1, -1)
        token = context[-1]
        if draft is not None:
            draft.settle(context)

        now = time.perf_counter()
        counters.record_step(len(emitted), len(nodes), n_accepted, t_decode)
        if nodes:
            counters.record_positions(max(n.depth for n in nodes), n_accepted)
        decision = report.decide(nodes)
        if emitted:
            roles = ["redecode"] * input_row + ["input"] + [n.source for n in nodes]
            yield rt.step_batch(step, roles, verdicts)
            yield StepDone(step, tuple(emitted), len(nodes), n_accepted, t_decode, now - t_prev,
                           {"auto": {"decision": decision, "k": len(nodes), "branches": len(branches) if nodes else 0,
                                     "depth": max((n.depth for n in nodes), default=0),
                                     "predicted_gain": round(gain, 3), "proposers": tuple(proposers)}})
        t_prev = now
        step += 1
    counters.extra["auto"] = report.as_dict(calibrator)


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

    def as_dict(self, calibrator: Calibrator) -> dict:
        return {"decisions": dict(sorted(self.decisions.items())),
                "sources": {s: {"offered": self.offered.get(s, 0), "accepted": self.accepted.get(s, 0)}
                            for s in SOURCES if self.offered.get(s)},
                "agreed": {"offered": self.agreed[0], "accepted": self.agreed[1]},
                "calibration": calibrator.table()}

"""Auto's planner: what a run sends each step, behind one name the loop (``auto.run``) asks.

The planner holds everything a run learns as it goes: the sources (``auto.sources``), the
calibration of their tokens, the step cost, the guard, hindsight and, where one drafts, the draft's
price. The loop tells it what happened (a plain step, a tree's decode, each verified node) and asks
it for the next plan; it never sees llama.cpp, so a test can drive it on the simulated machine.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from specdec_studio.engine.config import SpeculativeParams
from specdec_studio.engine.strategies.auto.calibration import Calibrator, StepCost
from specdec_studio.engine.strategies.auto.draft_price import DraftPrice
from specdec_studio.engine.strategies.auto.guard import Guard, Wary
from specdec_studio.engine.strategies.auto.hindsight import Hindsight, sent_lengths
from specdec_studio.engine.strategies.auto.priors import MIN_GAIN, WAKE_MATCH
from specdec_studio.engine.strategies.auto.report import AutoReport
from specdec_studio.engine.strategies.auto.sources import ContextIndex, Proposal, Sources
from specdec_studio.engine.strategies.auto.tree import Node, build_tree, could_pay, first_chances, support_of


@dataclass
class Plan:
    """A step's plan: the tree to verify (empty: a plain step), its predicted gain, and the draft
    model's proposal this step (judged against what the target emits, sent or not)."""

    nodes: list[Node] = field(default_factory=list)
    gain: float = 1.0
    drafted: list[int] = field(default_factory=list)


PLAIN = Plan()  # a step that does not plan sends nothing (never mutated)


class Planner:
    """Auto's choice, step by step, for a run or a slot of batch decoding: a tree of the sources'
    proposals that is expected to emit more tokens per unit of time than a plain step, or nothing.

    ``draft`` and ``price``: the one source that decodes (a draft model or an MTP head) and what its
    tokens cost; ``guarded(call)`` runs a call that decodes that draft, returning None where a
    Stop or a full cache ended it (the run then ends).

    ``paced`` (a run's): the guard decides which steps plan and how much a tree must beat a plain
    step by, cheap tests settle most steps, hindsight judges what was not sent, and a tree may have
    ``n_sequences`` branches. Unpaced (a batch slot's, ``auto.slot``): every step plans, and sends
    the one chain that promises the most tokens per step cost where it beats a plain step; its
    ``cost`` prices a decode inside the shared batch."""

    def __init__(self, prompt: Sequence[int], params: SpeculativeParams, cost_curve, index: ContextIndex | None,
                 *, n_sequences: int, memory=None, draft=None, price: DraftPrice | None = None,
                 draft_kind: str | None = None, guarded: Callable = lambda call: call(), paced: bool = True,
                 alternatives: bool = True, cost: StepCost | None = None) -> None:
        self.prompt, self.params, self.n_sequences, self.paced = prompt, params, n_sequences, paced
        self.draft, self.price, self.draft_kind, self.guarded = draft, price, draft_kind, guarded
        self.calibrator = Calibrator()
        self.cost = cost if cost is not None else StepCost(cost_curve)
        self.sources = Sources(prompt, draft, alternatives, memory=memory, index=index)
        self.report = AutoReport()
        self.guard = Guard()
        self.wary = Wary(self.cost, self.guard.trust)
        self.hindsight = Hindsight(self.calibrator)
        self.draft_read_prompt = False
        self.draft_steps = 0  # steps that asked the decoding source
        self.went_deep = False  # the last plan passed every test
        self.loop_steps = 0  # steps that proposed more than the profile's cap, round a loop
        # A plain step tells the cost model its decode's time, rests the guard, is counted, and
        # shows hindsight its token. Those are read only where a step plans in full or verifies,
        # and at the run's end, so they are told there, in order: a plain step then does little
        # more than plain decoding's, where each object Python touches right after a decode costs
        # about ten times what it does in a tight loop.
        self.idle_decodes: list[float] = []  # the one-token decode times not told yet
        self.unjudged: list[int] = []  # their tokens, where hindsight had proposals to judge

    # ---- what the loop tells it ---------------------------------------------------------------
    def prepare(self) -> None:
        """Before the prompt's decode: a draft that could not pay even as right as hoped is not
        asked, and reads the prompt only when it first is (its cache's record is checked then, as
        at any run's start)."""
        if self.draft is not None and self.price.may_pay(self.wary, self.params.k_max, MIN_GAIN):
            self.draft.begin(self.prompt)
            self.draft_read_prompt = True

    def plain_step(self, t_decode: float, token: int) -> None:
        """A plain step decoded in ``t_decode`` and emitted ``token`` (told later: see __init__)."""
        self.idle_decodes.append(t_decode)
        # hindsight keeps proposals only at a full plan, once it has seen every token before:
        # holding none now, it has none to judge this token against
        if self.hindsight.pending:
            self.unjudged.append(token)

    def hear_plain_steps(self) -> None:
        """Tell the cost model, the guard, the report and hindsight the plain steps not told yet."""
        if not self.idle_decodes:
            return
        for seconds in self.idle_decodes:
            self.cost.observe(1, seconds)
            self.guard.rest()
        self.report.decisions["plain"] = self.report.decisions.get("plain", 0) + len(self.idle_decodes)
        self.idle_decodes.clear()
        for token in self.unjudged:
            self.hindsight.see(token)
        self.unjudged.clear()

    def decoded(self, n_tokens: int, seconds: float) -> None:
        """A batch of ``n_tokens`` (a tree, or tokens decoded again) took ``seconds``."""
        self.cost.observe(n_tokens, seconds)

    def offered(self, node: Node, accepted: bool) -> None:
        """Verification tested ``node`` against the target's choice at its depth."""
        self.calibrator.observe(node.source, node.signal, node.depth - 1, node.p, accepted, node.agreed)
        self.report.offer(node, accepted)

    def emitted(self, token: int) -> None:
        """The target chose ``token`` on a verifying step: hindsight judges its pending proposals."""
        self.hindsight.see(token)

    def tree_verified(self, nodes: list[Node], n_batch_tokens: int, n_accepted: int, t_decode: float) -> str:
        """Judge the step's tree against the prediction the cost curve alone makes (did it pay?);
        returns the step's decision as the report names it."""
        if nodes:
            expected = 1.0 + sum(n.reach for n in nodes)
            predicted = expected / (self.cost.relative(n_batch_tokens) + self.cost.return_penalty())
            self.guard.judge(predicted, 1 + n_accepted, t_decode, self.cost)
        return self.report.decide(nodes)

    def settle_draft(self, context: Sequence[int], plan: Plan, n_known: int) -> None:
        """After a step: the draft drops what it cached past ``context``, and its proposal is judged
        token by token against what the target emitted after the first ``n_known`` tokens."""
        if self.draft is None:
            return
        self.draft.settle(context)
        for proposed, chosen in zip(plan.drafted, context[n_known:]):
            self.price.observe_outcome(proposed == chosen)
            if proposed != chosen:
                break

    # ---- what the loop asks ---------------------------------------------------------------------
    def plan(self, step: int, context: Sequence[int], room: int) -> Plan | None:
        """The step's plan, with ``room`` tokens left in the cache, the batch and the answer; None
        where the draft was stopped (the run ends). The sources are asked when the guard's turn
        comes, or at once where the answer starts to copy: a long repeat of earlier text (the
        suffix matcher follows the text only as far as that test needs: Sources.repeats)."""
        if not self.paced:
            return self._best_chain(context, room)
        if not (self.guard.plans(step) or self.sources.repeats(context, WAKE_MATCH)) or room <= 0:
            self.went_deep = False
            return PLAIN
        if self.price is None and not self.sources.proposes_anything(context):
            # what the tests below decide when no source proposes anything (most planning steps
            # of a chat answer), settled without them: nothing to send or to judge in hindsight
            self.went_deep = False
            self.guard.planned(step, hopeful=False)
            return PLAIN
        self.hear_plain_steps()
        self.sources.advance(context)
        # A step bets at most MAX_STEP_COST plain steps (priors), except round a loop: a text that
        # has written the same line again and again for m tokens has shown its next m, and greedy
        # decoding seldom leaves a loop, so the step may propose that many (up to --auto-k-max)
        priced_cap = self.cost.affordable_tokens(self.params.auto_k_max)
        suffix = self.sources.suffix
        loop_cap = min(self.params.auto_k_max, suffix.loop_length()) if suffix.match_length else 0
        room = min(max(priced_cap, loop_cap), room)
        if not self.wary.current(self.guard.trust):
            self.wary = Wary(self.cost, self.guard.trust)
        min_gain = self.guard.min_gain()
        # A draft model costs a decode per token it proposes: asked only for as many as can pay at
        # its price and measured acceptance (auto.draft_price), and rarely re-tried.
        draft_k = self.price.plan(step, self.wary, room, min_gain) if self.price is not None else 0
        self.draft_steps += draft_k > 0
        if draft_k > 0 and not self.draft_read_prompt:
            if self.guarded(lambda: self.draft.begin(self.prompt) or True) is None:  # stopped, or the cache is full
                return None
            self.draft_read_prompt = True
        chains, passed, n_tests, drafted = self._chains_that_pay(context, room, min_gain, draft_k)
        if chains is None:  # the draft model was stopped
            return None
        self.went_deep = passed == n_tests
        plan = Plan(drafted=drafted)
        if self.went_deep:
            plan.nodes, plan.gain = self._tree(context, room, min_gain, chains)
        if not plan.nodes:  # judged in hindsight instead, as the target's tokens come
            self.hindsight.keep(chains)
        self.guard.planned(step, hopeful=passed >= min(2, n_tests))
        self.loop_steps += len(plan.nodes) > priced_cap
        return plan

    def _best_chain(self, context: Sequence[int], room: int) -> Plan:
        """Unpaced: the one source's chain whose tokens promise the most emitted tokens per step
        cost, cut where that gain peaks; a plain step where none beats one."""
        best = Plan()
        if room > 0:
            self.sources.advance(context)
            for proposal in self.sources.propose(context, room):
                nodes, gain = build_tree([proposal], self.calibrator, self.cost, room)
                if gain > best.gain:
                    best = Plan(nodes, gain)
        self.report.decide(best.nodes)
        return best

    def _chains_that_pay(self, context: Sequence[int], room: int, min_gain: float,
                         draft_k: int) -> tuple[list[Proposal] | None, int, int, list[int]]:
        """The sources' chains, and how many of the planner's tests they passed (of how many).

        Cheap tests first: the sources' first token, then four, then all they propose; most steps
        of a chat stop after the first. A draft model proposes once, all its tokens (each costs a
        decode of the draft). While a copy goes on (the last plan passed every test), the sources
        are asked for all they propose at once: each cheaper test bounds the full one from above
        (tree.could_pay), so when the full one passes they all would, and when it fails they run
        on its first tokens (a source's proposal for fewer tokens is the first tokens of its longer
        one), the step going exactly as they decide. Chains None: the draft model was stopped."""
        sources, calibrator, wary, report = self.sources, self.calibrator, self.wary, self.report
        use_draft = draft_k > 0
        drafted: list[int] = []
        cuts = (room,) if use_draft else sorted({1, min(4, room), room})
        whole = sources.chains(context, room) if self.went_deep and not use_draft else None
        passed, considered, chains = 0, False, None
        if whole:
            considered = True
            report.consider(whole, first_chances(whole, calibrator), wary.first_chance_needed(room, min_gain))
            if could_pay(whole, calibrator, wary, room, min_gain):
                chains, passed = whole, len(cuts)
        for cut in cuts[passed:]:
            if use_draft:  # the draft model decodes: a Stop or a full context ends it
                chains = self._draft_chains(context, cut, draft_k, min_gain)
                if chains is not None:
                    drafted = next((p.tokens for p in chains if p.source == "draft"), [])
            elif whole is not None:
                chains = whole if cut == room else [first_tokens(p, cut) for p in whole]
            else:
                chains = sources.chains(context, cut)
            chances = None
            if chains and not considered:  # the step's first test: what each source offered, for the report
                considered = True
                chances = first_chances(chains, calibrator)
                report.consider(chains, chances, wary.first_chance_needed(room, min_gain))
            if chains is None or not could_pay(chains, calibrator, wary, room, min_gain,
                                               None if cut == room else cut, chances if cut == 1 else None):
                break
            passed += 1
        return chains, passed, len(cuts), drafted

    def _draft_chains(self, context: Sequence[int], cut: int, draft_k: int, min_gain: float) -> list[Proposal] | None:
        """The chains with the draft model's, which drafts only while its tokens can still pay."""
        price, wary = self.price, self.wary

        def stop(depth: int, reach: float) -> bool:
            return reach < price.min_reach(wary, depth, min_gain)

        chains = self.guarded(lambda: self.sources.chains(context, cut, draft_k, stop))
        if chains is not None:
            price.observe_decodes(self.draft.last_decode_times)
        return chains

    def _tree(self, context: Sequence[int], room: int, min_gain: float,
              chains: list[Proposal]) -> tuple[list[Node], float]:
        """The tree of the chains and their siblings that pays best; what it leaves out of each
        proposal, hindsight judges."""
        calibrator, wary = self.calibrator, self.wary
        siblings = self.sources.siblings(context, room, chains)
        if siblings:
            needed = wary.first_chance_needed(room, min_gain)
            self.report.consider(siblings, first_chances(siblings, calibrator), needed)
        proposals = (chains + siblings)[:self.n_sequences]
        support = support_of(proposals)  # the tree's and hindsight's, worked out once
        nodes, gain = build_tree(proposals, calibrator, wary, room, min_gain, support)
        if nodes:
            self.hindsight.keep(proposals, sent_lengths(proposals, nodes), support)
        return nodes, gain

    # ---- the run's end ----------------------------------------------------------------------------
    def figures(self) -> dict:
        """Auto's account of the run, for its stats."""
        if not self.paced:
            return self.report.as_dict(self.calibrator, self.sources.kinds())
        self.hear_plain_steps()
        auto = self.report.as_dict(self.calibrator, self.sources.kinds(), self.guard.trust)
        # the longest step the machine's profile allowed by the run's end (at most --auto-k-max)
        auto["step_tokens_max"] = self.cost.affordable_tokens(self.params.auto_k_max)
        auto["loop_steps"] = self.loop_steps  # steps that went past it round a loop
        if self.draft_kind is not None:  # what the decoding source was, how often it was asked, its price
            price = self.price
            verdict = price.verdict(self.wary, self.guard.min_gain(), self.draft_steps)
            auto["draft"] = {
                "source": self.draft_kind, "steps_asked": self.draft_steps, "tokens_judged": price.offered,
                "tokens_right": price.accepted, "token_cost": round(price.token_cost(self.cost), 4),
                "verdict": verdict}
            if not self.draft_steps:  # its price ruled it out before it proposed anything
                auto["sources"]["draft"]["ruled_out"] = verdict
        return auto


def first_tokens(proposal: Proposal, n: int) -> Proposal:
    """The proposal its source makes when asked for at most ``n`` tokens."""
    return Proposal(proposal.source, proposal.tokens[:n], proposal.signals[:n])

"""The Auto strategy's loop: plan a tree, decode it with the input token, verify, keep the
winning branch's cells in position order, learn."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

from specdec_studio.engine.events import Event, StepDone
from specdec_studio.engine.strategies.auto.calibration import Calibrator, StepCost
from specdec_studio.engine.strategies.auto.guard import Guard, Wary
from specdec_studio.engine.strategies.auto.hindsight import Hindsight, sent_lengths
from specdec_studio.engine.strategies.auto.draft_price import DraftPrice
from specdec_studio.engine.strategies.auto.priors import MIN_GAIN, WAKE_MATCH
from specdec_studio.engine.strategies.auto.report import AutoReport
from specdec_studio.engine.strategies.auto.sources import ContextIndex, Proposal, Sources
from specdec_studio.engine.strategies.auto.tree import Node, build_tree, could_pay, first_chances, support_of
from specdec_studio.engine.strategies.common import Runtime, begin_run


def run_auto(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    """Auto's one drafting source that decodes is the draft model where one is loaded, else the
    model's own MTP head where it has one (priced the same way: a decode per proposed token)."""
    k_max = rt.config.speculative.k_max
    if rt.draft is not None:
        from specdec_studio.engine.strategies.speculative import DraftModelDrafter

        draft = DraftModelDrafter(rt.draft, rt.sampler, 0.0, rt.vocab.n_tokens, rt.vocab.is_eog, rt.cancel,
                                  rt.n_reused, keep_probs=True)
        yield from _auto_loop(rt, prompt, draft, DraftPrice(rt.draft_token_cost, k_max), "draft model")
    elif rt.mtp is not None:
        from specdec_studio.engine.drafts.mtp import following
        from specdec_studio.engine.strategies.mtp import MtpDrafter

        rt.mtp.restart(rt.n_reused)
        draft = MtpDrafter(rt.mtp, rt.sampler, 0.0, rt.vocab.n_tokens, rt.vocab.is_eog, rt.cancel, keep_probs=True)
        with following(rt.mtp, rt.memory):
            yield from _auto_loop(rt, prompt, draft, DraftPrice(rt.draft_token_cost, k_max), "mtp head")
    else:
        yield from _auto_loop(rt, prompt, None, None, None)


def _auto_loop(rt: Runtime, prompt: Sequence[int], draft, price: DraftPrice | None,
               draft_kind: str | None) -> Iterator[Event]:
    params = rt.config.speculative
    out, counters, memory, batch = rt.output, rt.counters, rt.memory, rt.batch
    calibrator = Calibrator()
    cost = StepCost(rt.cost_curve)
    index = rt.kept.get("auto")
    if index is None:
        index = rt.kept["auto"] = ContextIndex()
    sources = Sources(prompt, draft, memory=rt.ngram_memory, index=index)
    # A recurrent state is one per sequence: no sibling branches there, one chain a step (the
    # session made the context with one sequence)
    n_seq = 1 if rt.memory.recurrent else rt.config.n_sequences
    report = AutoReport()
    guard = Guard()
    wary = Wary(cost, guard.trust)
    hindsight = Hindsight(calibrator)

    draft_read_prompt = False
    draft_steps = 0  # steps that asked the decoding source

    def prepare() -> None:
        # A draft that could not pay even as right as hoped is not asked: it reads the prompt only
        # when it first is (its cache's record is checked then, as at any run's start).
        nonlocal draft_read_prompt
        if draft is not None and price.may_pay(wary, params.k_max, MIN_GAIN):
            draft.begin(prompt)
            draft_read_prompt = True

    start = yield from begin_run(rt, prompt, prepare=prepare)
    if start is None:
        return
    token, n_past = start.token, start.n_past
    context = [*prompt, token]
    t_prev = rt.t_start
    step = 1
    redecode: list[int] = []  # accepted tokens whose cells were dropped to keep position order
    went_deep = False  # the last plan passed every test
    loop_steps = 0  # steps that proposed more than the profile's cap, round a loop
    # A plain step tells the cost model its decode's time, rests the guard, is counted, and shows
    # hindsight its token. Those are read only where a step plans in full or verifies, and at the
    # run's end, so they are told there, in order: a plain step then does little more than plain
    # decoding's, where each object Python touches right after a decode costs about ten times what
    # it does in a tight loop.
    idle_decodes: list[float] = []  # the one-token decode times not told yet
    unjudged: list[int] = []  # their tokens, where hindsight had proposals to judge

    def hear_plain_steps() -> None:
        if not idle_decodes:
            return
        for seconds in idle_decodes:
            cost.observe(1, seconds)
            guard.rest()
        report.decisions["plain"] = report.decisions.get("plain", 0) + len(idle_decodes)
        idle_decodes.clear()
        for t in unjudged:
            hindsight.see(t)
        unjudged.clear()

    while not rt.should_stop(n_past, 1):
        t0 = time.perf_counter()
        nodes, gain = [], 1.0
        drafted: list[int] = []  # the draft model's proposal this step, judged by what the target emits
        n_known = len(context)
        # The sources are asked when the guard's turn comes, or at once where the answer starts to
        # copy: a long repeat of earlier text (the suffix matcher follows the text only as far as
        # that test needs: Sources.repeats)
        room = 0
        if guard.plans(step) or sources.repeats(context, WAKE_MATCH):
            # the room left in the cache, the batch and the answer (the step's price caps it below)
            room = min(rt.n_ctx - n_past - 1 - len(redecode), rt.n_batch - 1 - len(redecode),
                       rt.config.max_tokens - len(out.ids) - 1)
        if room <= 0:
            went_deep = False
        elif price is None and not sources.proposes_anything(context):
            # what the tests below decide when no source proposes anything (most planning steps
            # of a chat answer), settled without them: nothing to send or to judge in hindsight
            went_deep = False
            guard.planned(step, hopeful=False)
        else:
            hear_plain_steps()
            sources.advance(context)
            # A step bets at most MAX_STEP_COST plain steps (priors), except round a loop: a text
            # that has written the same line again and again for m tokens has shown its next m, and
            # greedy decoding seldom leaves a loop, so the step may propose that many (up to
            # --auto-k-max). The bet grows with the evidence where a batch that long costs less per
            # token: on the code prompt's closing loop, steps of 15, 23 and 47 tokens, +1.6 % at 1
            # and at 2 threads
            priced_cap = cost.affordable_tokens(params.auto_k_max)
            loop_cap = min(params.auto_k_max, sources.suffix.loop_length()) if sources.suffix.match_length else 0
            room = min(max(priced_cap, loop_cap), room)
            if not wary.current(guard.trust):
                wary = Wary(cost, guard.trust)
            min_gain = guard.min_gain()
            # A draft model costs a decode per token it proposes: asked only for as many as can
            # pay at its price and measured acceptance (auto.draft_price), and rarely re-tried.
            draft_k = price.plan(step, wary, room, min_gain) if price is not None else 0
            use_draft = draft_k > 0
            draft_steps += use_draft
            if use_draft and not draft_read_prompt:
                if rt.guarded(lambda: draft.begin(prompt) or True) is None:  # stopped, or the cache is full
                    break
                draft_read_prompt = True
            # Cheap tests first: the sources' first token, then four, then all they propose; most
            # steps of a chat stop after the first. A draft model proposes once, all its tokens
            # (each costs a decode of the draft). While a copy goes on (the last plan passed every
            # test), the sources are asked for all they propose at once: each cheaper test bounds
            # the full one from above (tree.could_pay), so when the full one passes they all would,
            # and when it fails they run on its first tokens (a source's proposal for fewer tokens
            # is the first tokens of its longer one), the step going exactly as they decide.
            cuts = (room,) if use_draft else sorted({1, min(4, room), room})
            whole = sources.chains(context, room) if went_deep and not use_draft else None
            passed, considered = 0, False
            if whole:
                considered = True
                report.consider(whole, first_chances(whole, calibrator), wary.first_chance_needed(room, min_gain))
                if could_pay(whole, calibrator, wary, room, min_gain):
                    chains, passed = whole, len(cuts)
            for cut in cuts[passed:]:
                if use_draft:  # the draft model decodes: a Stop or a full context ends it
                    stop = lambda depth, reach: reach < price.min_reach(wary, depth, min_gain)  # noqa: E731, B023 - asked within this step
                    chains = rt.guarded(lambda: sources.chains(context, cut, draft_k, stop))  # noqa: B023 - called at once
                    if chains is not None:
                        price.observe_decodes(draft.last_decode_times)
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
                if chains is None or not could_pay(
                    chains,
                    calibrator,
                    wary,
                    room,
                    min_gain,
                    None if cut == room else cut,
                    chances if cut == 1 else None,
                ):
                    break
                passed += 1
            went_deep = passed == len(cuts)
            if went_deep:
                siblings = sources.siblings(context, room, chains)
                if siblings:
                    report.consider(
                        siblings, first_chances(siblings, calibrator), wary.first_chance_needed(room, min_gain)
                    )
                proposals = (chains + siblings)[:n_seq]
                support = support_of(proposals)  # the tree's and hindsight's, worked out once
                nodes, gain = build_tree(proposals, calibrator, wary, room, min_gain, support)
                if nodes:  # what the tree leaves out of each proposal, hindsight judges
                    hindsight.keep(proposals, sent_lengths(proposals, nodes), support)
            if chains is None:  # the draft model was stopped
                break
            if not nodes:  # judged in hindsight instead, as the target's tokens come
                hindsight.keep(chains)
            guard.planned(step, hopeful=passed >= min(2, len(cuts)))
            loop_steps += len(nodes) > priced_cap
        t_plan = time.perf_counter() - t0
        counters.t_draft_s += t_plan

        if not nodes and not redecode:  # a plain step, at what a step of plain decoding costs
            batch.clear()
            batch.add(token, n_past, (0,), True)
            t_decode = rt.decode()
            if t_decode is None:
                break
            idle_decodes.append(t_decode)
            n_past += 1
            logits = rt.logits(0)
            token = rt.sampler.sample(logits)
            info = out.push(token, "sampled", rt.explainer.explain(logits, token) if rt.explainer else None)
            context.append(token)
            # hindsight keeps proposals only at a full plan, once it has seen every token before:
            # holding none now, it has none to judge this token against
            if hindsight.pending:
                unjudged.append(token)
            if draft is not None:
                draft.settle(context)
                judge_draft(price, drafted, context[n_known:])
            now = time.perf_counter()
            counters.record_step(1 if info else 0, 0, 0, t_decode)
            if info is not None:
                if rt.observed:
                    yield rt.step_batch(step, ("input",))
                yield StepDone(step, (info,), 0, 0, t_decode, now - t_prev,
                               {"auto": {"decision": "plain", "k": 0, "branches": 0, "depth": 0,
                                         "predicted_gain": 1.0, "proposers": ("target",)}})
            t_prev = now
            step += 1
            continue

        # ---- the batch: re-decoded tokens, the input token, the tree --------------------------
        hear_plain_steps()  # (re-decoding without a plan too: the step's timing and judgement read them)
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
        memory.prepare_rollback(0, n_past, len(nodes))  # a recurrent state may have to drop them
        t_decode = rt.decode()
        if t_decode is None:
            break
        cost.observe(n_batch_tokens, t_decode)

        # ---- verify: the target's token at each depth, following the nodes that have it --------
        emitted, proposers = [], []
        accepted_nodes: list[Node] = []
        verdicts: dict[int, str] = {}
        row, parent = input_row, -1
        # greedy and unexplained: every row's argmax in one numpy call (the input token's row and the
        # tree's follow each other in the batch, all with logits), not a view and an argmax per token
        targets = (rt.argmax_rows(input_row, 1 + len(nodes)).tolist()
                   if rt.sampler.greedy and rt.explainer is None else None)
        children_of: dict[int, list[int]] = {}
        for i, n in enumerate(nodes):
            children_of.setdefault(n.parent, []).append(i)
        while True:
            if targets is not None:
                logits, chosen = None, targets[row - input_row]
            else:
                logits = rt.logits(row)
                chosen = rt.sampler.sample(logits)
            children = children_of.get(parent, ())
            match = None
            for i in children:  # siblings hold different tokens: at most one is the target's
                if nodes[i].token == chosen:
                    match = i
                    break
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
            why = None
            if rt.explainer is not None:  # the child that matched, or the first child offered here
                shown = nodes[match] if match is not None else (nodes[children[0]] if children else None)
                why = rt.explainer.explain(logits, chosen, proposed=shown.token if shown else -1,
                                           proposer=shown.proposer if shown else "", accepted=match is not None)
            info = out.push(chosen, label, why)
            context.append(chosen)
            hindsight.see(chosen)
            if info is not None:
                emitted.append(info)
                proposers.append(proposer)
            if match is None or out.done:
                break
            parent, row = match, nodes[match].row
        n_accepted = len(accepted_nodes)
        if nodes:  # did the tree pay? judged against the prediction the cost curve alone makes
            expected = 1.0 + sum(n.reach for n in nodes)
            guard.judge(expected / (cost.relative(n_batch_tokens) + cost.return_penalty()), 1 + n_accepted,
                        t_decode, cost)

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
            judge_draft(price, drafted, context[n_known:])

        now = time.perf_counter()
        counters.record_step(len(emitted), len(nodes), n_accepted, t_decode)
        if nodes:
            counters.record_positions(max(n.depth for n in nodes), n_accepted)
        decision = report.decide(nodes)
        if emitted:
            if rt.observed:
                roles = ["redecode"] * input_row + ["input"] + [n.source for n in nodes]
                yield rt.step_batch(step, roles, verdicts)
            yield StepDone(step, tuple(emitted), len(nodes), n_accepted, t_decode, now - t_prev,
                           {"auto": {"decision": decision, "k": len(nodes), "branches": len(branches) if nodes else 0,
                                     "depth": max((n.depth for n in nodes), default=0),
                                     "predicted_gain": round(gain, 3), "proposers": tuple(proposers)}})
        t_prev = now
        step += 1
    hear_plain_steps()
    counters.extra["auto"] = report.as_dict(calibrator, guard.trust, draft=draft_kind is not None,
                                            memory=rt.ngram_memory is not None)
    # the longest step the machine's profile allowed by the run's end (at most --auto-k-max)
    counters.extra["auto"]["step_tokens_max"] = cost.affordable_tokens(params.auto_k_max)
    counters.extra["auto"]["loop_steps"] = loop_steps  # steps that went past it round a loop
    if draft_kind is not None:  # what the decoding source was, how often it was asked, and its price
        verdict = price.verdict(wary, guard.min_gain(), draft_steps)
        counters.extra["auto"]["draft"] = {
            "source": draft_kind, "steps_asked": draft_steps, "tokens_judged": price.offered,
            "tokens_right": price.accepted, "token_cost": round(price.token_cost(cost), 4), "verdict": verdict}
        if not draft_steps:  # its price ruled it out before it proposed anything
            counters.extra["auto"]["sources"]["draft"]["ruled_out"] = verdict


def first_tokens(proposal: Proposal, n: int) -> Proposal:
    """The proposal its source makes when asked for at most ``n`` tokens."""
    return Proposal(proposal.source, proposal.tokens[:n], proposal.signals[:n])


def judge_draft(price: DraftPrice, drafted: Sequence[int], emitted: Sequence[int]) -> None:
    """Each draft token up to its first miss against the tokens the target chose there, whether
    or not the tree sent it (the draft's acceptance, as speculation would have seen it)."""
    for proposed, chosen in zip(drafted, emitted):
        price.observe_outcome(proposed == chosen)
        if proposed != chosen:
            break

"""The Auto strategy's loop, in the shape of llama.cpp's ``speculative-simple.cpp``: plan, batch,
decode, verify, KV, report. What to send is the planner's (``auto.planner``); the loop only runs
the step it is given."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from specdec_studio.engine.events import AutoStep, Event, StepDone
from specdec_studio.engine.strategies.auto.draft_price import DraftPrice
from specdec_studio.engine.strategies.auto.planner import Planner
from specdec_studio.engine.strategies.auto.sources import ContextIndex
from specdec_studio.engine.strategies.auto.tree import Node
from specdec_studio.engine.strategies.common import Runtime, begin_run

PLAIN_STEP = AutoStep("plain", proposers=("target",))


def run_auto(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    """Auto's one drafting source that decodes is the draft model where one is loaded, else the
    model's own MTP head where it has one (priced the same way: a decode per proposed token)."""
    if rt.draft is not None:
        from specdec_studio.engine.strategies.speculative import DraftModelDrafter  # it imports verify: Auto's own

        draft = DraftModelDrafter(rt.draft, rt.sampler, 0.0, rt.vocab.n_tokens, rt.vocab.is_eog, rt.cancel,
                                  rt.n_reused, keep_probs=True)
        yield from _auto_loop(rt, prompt, _planner(rt, prompt, draft, "draft model"))
    elif rt.mtp is not None:
        from specdec_studio.engine.drafts.mtp import following  # only for a model with an MTP head
        from specdec_studio.engine.strategies.mtp import MtpDrafter

        rt.mtp.restart(rt.n_reused)
        draft = MtpDrafter(rt.mtp, rt.sampler, 0.0, rt.vocab.n_tokens, rt.vocab.is_eog, rt.cancel, keep_probs=True)
        with following(rt.mtp, rt.memory):
            yield from _auto_loop(rt, prompt, _planner(rt, prompt, draft, "mtp head"))
    else:
        yield from _auto_loop(rt, prompt, _planner(rt, prompt, None, None))


def _planner(rt: Runtime, prompt: Sequence[int], draft, draft_kind: str | None) -> Planner:
    """The run's planner; a decoding draft is priced per token it proposes (auto.draft_price)."""
    price = DraftPrice(rt.draft_token_cost, rt.config.speculative.k_max) if draft is not None else None
    index = rt.kept.get("auto")  # the context's index, kept from the session's last run
    if index is None:
        index = rt.kept["auto"] = ContextIndex()
    # A recurrent state is one per sequence: no sibling branches there, one chain a step (the
    # session made the context with one sequence)
    n_sequences = 1 if rt.memory.recurrent else rt.config.n_sequences
    return Planner(prompt, rt.config.speculative, rt.cost_curve, index, n_sequences=n_sequences,
                   memory=rt.ngram_memory, draft=draft, price=price, draft_kind=draft_kind, guarded=rt.guarded)


def _auto_loop(rt: Runtime, prompt: Sequence[int], planner: Planner) -> Iterator[Event]:
    out, counters, memory, batch = rt.output, rt.counters, rt.memory, rt.batch
    start = yield from begin_run(rt, prompt, prepare=planner.prepare)
    if start is None:
        return
    token, n_past = start.token, start.n_past
    context = [*prompt, token]
    t_prev = rt.t_start
    step = 1
    redecode: list[int] = []  # accepted tokens whose cells were dropped to keep position order
    while not rt.should_stop(n_past, 1):
        # ---- plan: the room left in the cache, the batch and the answer caps the step ----------
        t0 = rt.clock()
        n_known = len(context)
        room = min(rt.n_ctx - n_past - 1 - len(redecode), rt.n_batch - 1 - len(redecode),
                   rt.config.max_tokens - len(out.ids) - 1)
        plan = planner.plan(step, context, room)
        if plan is None:  # the draft model was stopped
            break
        nodes = plan.nodes
        counters.t_draft_s += rt.clock() - t0

        if not nodes and not redecode:  # ---- a plain step, at what a step of plain decoding costs
            batch.clear()
            batch.add(token, n_past, (0,), True)
            t_decode = rt.decode()
            if t_decode is None:
                break
            n_past += 1
            logits = rt.logits(0)
            token = rt.sampler.sample(logits)
            info = out.push(token, "sampled", rt.explainer.explain(logits, token) if rt.explainer else None)
            context.append(token)
            planner.plain_step(t_decode, token)
            planner.settle_draft(context, plan, n_known)
            now = rt.clock()
            counters.record_step(1 if info else 0, 0, 0, t_decode)
            if info is not None:
                if rt.observed:
                    yield rt.step_batch(step, ("input",))
                yield StepDone(step, (info,), 0, 0, t_decode, now - t_prev, auto=PLAIN_STEP)
            t_prev = now
            step += 1
            continue

        # ---- batch: re-decoded tokens, the input token, the tree ------------------------------
        planner.hear_plain_steps()  # (re-decoding without a plan too: the step's timing and judgement read them)
        # The context lives in sequence 0; a step with several branches first copies it into the
        # others (and removes them after), so plain and one-branch steps pay nothing for the tree.
        branches = sorted(set().union(*(n.seqs for n in nodes))) if nodes else [0]
        for s in branches[1:]:
            memory.seq_cp(0, s, -1, -1)
        step_seqs = tuple(sorted({0, *branches}))
        batch.clear()
        for p, t in enumerate(redecode, start=n_past - len(redecode)):
            batch.add(t, p, step_seqs, False)
        input_row = batch.add(token, n_past, step_seqs, True)
        for node in nodes:
            node.row = batch.add(node.token, n_past + node.depth, tuple(node.seqs), True)
        n_batch_tokens = batch.n_tokens

        # ---- decode ---------------------------------------------------------------------------
        memory.prepare_rollback(0, n_past, len(nodes))  # a recurrent state may have to drop them
        t_decode = rt.decode()
        if t_decode is None:
            break
        planner.decoded(n_batch_tokens, t_decode)

        # ---- verify: the target's token at each depth, following the nodes that have it ---------
        emitted, proposers, accepted, verdicts = _verify(rt, planner, nodes, input_row, context)
        decision = planner.tree_verified(nodes, n_batch_tokens, len(accepted), t_decode)

        # ---- KV: sequence 0 keeps the accepted path; the other branches go ---------------------
        n_past_before, n_past = n_past, n_past + 1 + len(accepted)
        redecode = _keep_accepted_path(memory, nodes, accepted, branches, input_row, n_past_before) if nodes else []
        token = context[-1]
        planner.settle_draft(context, plan, n_known)

        # ---- report ---------------------------------------------------------------------------
        now = rt.clock()
        counters.record_step(len(emitted), len(nodes), len(accepted), t_decode)
        if nodes:
            counters.record_positions(max(n.depth for n in nodes), len(accepted))
        if emitted:
            if rt.observed:
                roles = ["redecode"] * input_row + ["input"] + [n.source for n in nodes]
                yield rt.step_batch(step, roles, verdicts)
            auto = AutoStep(decision, len(nodes), len(branches) if nodes else 0,
                            max((n.depth for n in nodes), default=0), round(plan.gain, 3), tuple(proposers))
            yield StepDone(step, tuple(emitted), len(nodes), len(accepted), t_decode, now - t_prev, auto=auto)
        t_prev = now
        step += 1
    counters.extra["auto"] = planner.figures()


def _verify(rt: Runtime, planner: Planner, nodes: list[Node], input_row: int,
            context: list[int]) -> tuple[list, list[str], list[Node], dict[int, str]]:
    """Walk the tree from the input token's row: the target's token at each depth (argmax, or a
    draw from its distribution, as plain decoding makes it), kept while a child holds it.
    Returns the emitted tokens, who proposed each, the accepted nodes and each row's verdict."""
    emitted, proposers, accepted = [], [], []
    verdicts: dict[int, str] = {}
    # greedy and unexplained: every row's argmax in one numpy call (the input token's row and the
    # tree's follow each other in the batch, all with logits), not a view and an argmax per token
    targets = (rt.argmax_rows(input_row, 1 + len(nodes)).tolist()
               if rt.sampler.greedy and rt.explainer is None else None)
    children_of: dict[int, list[int]] = {}
    for i, n in enumerate(nodes):
        children_of.setdefault(n.parent, []).append(i)
    row, parent = input_row, -1
    while True:
        if targets is not None:
            logits, chosen = None, targets[row - input_row]
        else:
            logits = rt.logits(row)
            chosen = rt.sampler.sample(logits)
        children = children_of.get(parent, ())
        # siblings hold different tokens: at most one is the target's
        match = next((i for i in children if nodes[i].token == chosen), None)
        for i in children:  # every child offered here was tested against the target's choice
            planner.offered(nodes[i], i == match)
            verdicts[nodes[i].row] = "accepted" if i == match else "rejected"
        if match is None:
            label, proposer = "sampled", "target"
        else:
            proposer = nodes[match].proposer
            label = "accepted_draft" if nodes[match].source == "draft" else "accepted_ngram"
            accepted.append(nodes[match])
        why = None
        if rt.explainer is not None:  # the child that matched, or the first child offered here
            shown = nodes[match] if match is not None else (nodes[children[0]] if children else None)
            why = rt.explainer.explain(logits, chosen, proposed=shown.token if shown else -1,
                                       proposer=shown.proposer if shown else "", accepted=match is not None)
        info = rt.output.push(chosen, label, why)
        context.append(chosen)
        planner.emitted(chosen)
        if info is not None:
            emitted.append(info)
            proposers.append(proposer)
        if match is None or rt.output.done:
            return emitted, proposers, accepted, verdicts
        parent, row = match, nodes[match].row


def _keep_accepted_path(memory, nodes: list[Node], accepted: list[Node], branches: list[int], input_row: int,
                        n_past_before: int) -> list[int]:
    """Leave sequence 0 holding exactly the context (even at the run's end: the next turn reads
    it) and drop the other branches. Returns the accepted tokens to decode again with the next
    step, where the path's cells sat after another branch's (the cache stays in position order)."""
    n_past = n_past_before + 1 + len(accepted)
    redecode: list[int] = []
    contiguous = all(n.row == input_row + 1 + j for j, n in enumerate(accepted))
    if accepted and not contiguous:
        memory.seq_rm(0, n_past - len(accepted), -1)
        redecode = [n.token for n in accepted]
    else:
        winner = accepted[-1].seqs[0] if accepted else 0
        if winner != 0:  # the path came from another branch: it replaces sequence 0's
            memory.seq_rm(0, n_past_before + 1, -1)
            memory.seq_cp(winner, 0, n_past_before + 1, n_past)
        memory.seq_rm(0, n_past, -1)
    for s in branches[1:]:
        memory.seq_rm(s, -1, -1)
    return redecode

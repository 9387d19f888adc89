"""Auto's plain steps and its guard, without a model: the planner's cheap tests never turn away a
tree the full planner would send, the guard's trust follows what trees realise and makes the
planner warier, the sources are asked less often while nothing could pay, and the calibration
learns from proposals it did not send."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_studio.engine.strategies.auto import Calibrator, Proposal, StepCost, build_tree
from specdec_studio.engine.strategies.auto.guard import Guard, Wary
from specdec_studio.engine.strategies.auto.hindsight import Hindsight, sent_lengths
from specdec_studio.engine.strategies.auto.priors import (
    CHAIN_DECAY,
    GUARD_START_TRUST,
    IDLE_STRETCH,
    LONG_MATCH_BUCKET,
    MAX_STEP_COST,
    PLAN_INTERVAL_MAX,
    PRIOR_MAX,
    UNPRICED_STEP_TOKENS,
    WAKE_MATCH,
)
from specdec_studio.engine.strategies.auto.tree import could_pay
from specdec_studio.engine.tuning.cost_model import CostCurve

FLAT = CostCurve(sizes=(1, 2, 64), t_all_logits=(0.010, 0.0102, 0.0126), t_last_logit=(0.010, 0.0101, 0.012))
SIGNALS = {"ngram": st.tuples(st.integers(1, 4), st.integers(0, 3), st.integers(0, 3), st.just(0)),
           "ngram_alt": st.tuples(st.integers(1, 4), st.integers(0, 3), st.integers(0, 3), st.integers(0, 2)),
           "suffix": st.tuples(st.integers(0, 5)),
           "draft": st.tuples(st.integers(0, 4))}


@st.composite
def proposal(draw) -> Proposal:
    source = draw(st.sampled_from(sorted(SIGNALS)))
    n = draw(st.integers(1, 10))
    tokens = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))  # few tokens: branches share prefixes
    return Proposal(source, tokens, draw(st.lists(SIGNALS[source], min_size=n, max_size=n)))


@st.composite
def calibrated(draw) -> Calibrator:
    calibrator = Calibrator()
    for _ in range(draw(st.integers(0, 60))):
        source = draw(st.sampled_from(sorted(SIGNALS)))
        calibrator.observe(source, draw(SIGNALS[source]), draw(st.integers(0, 5)), 0.5, draw(st.booleans()),
                           draw(st.booleans()))
    return calibrator


@settings(max_examples=300, deadline=None)
@given(proposals=st.lists(proposal(), min_size=1, max_size=3), calibrator=calibrated(),
       room=st.integers(1, 16), flat=st.booleans(), trust=st.floats(0.3, 1.0))
def test_the_cheap_tests_never_turn_away_a_tree_the_planner_would_send(proposals, calibrator, room, flat, trust):
    cost = Wary(StepCost(FLAT if flat else None), trust)
    nodes, gain = build_tree(proposals, calibrator, cost, room)
    if not nodes:
        return
    assert could_pay(proposals, calibrator, cost, room)
    for cut in (1, 4):  # the proposals as the run first asks for them: at most ``cut`` tokens each
        short = [Proposal(p.source, p.tokens[:cut], p.signals[:cut]) for p in proposals]
        assert could_pay(short, calibrator, cost, room, cut=cut), (cut, gain)


@st.composite
def long_proposals(draw) -> list[Proposal]:
    """Proposals of up to 40 tokens over a few ids, the way a loop's chains share long prefixes."""
    out = []
    for _ in range(draw(st.integers(1, 4))):
        source = draw(st.sampled_from(sorted(SIGNALS)))
        n = draw(st.integers(1, 40))
        tokens = draw(st.lists(st.integers(0, 2), min_size=n, max_size=n))
        out.append(Proposal(source, tokens, draw(st.lists(SIGNALS[source], min_size=n, max_size=n))))
    return out


@settings(max_examples=200, deadline=None)
@given(proposals=long_proposals(), calibrator=calibrated(), room=st.integers(1, 48), flat=st.booleans(),
       cut=st.sampled_from([None, 4]))
def test_the_planners_shortcuts_answer_as_the_long_way_round(proposals, calibrator, room, flat, cut):
    """could_pay's early answer (a bound that already beats the gain stays beaten), the trie walk
    that finds each token's support and the tree walk that finds what a tree sent of each proposal
    give what their definitions give: paths of every length, compared whole."""
    from unittest import mock

    from specdec_studio.engine.strategies.auto import tree
    from specdec_studio.engine.strategies.sources.base import FAMILY

    cost = Wary(StepCost(FLAT if flat else None), 1.0)
    with mock.patch.object(tree, "EARLY_ANSWER_DEPTHS", frozenset()):
        slow = could_pay(proposals, calibrator, cost, room, cut=cut)
    assert could_pay(proposals, calibrator, cost, room, cut=cut) == slow

    families: dict[tuple[int, ...], set[str]] = {}
    for prop in proposals:
        for i in range(len(prop.tokens)):
            families.setdefault(tuple(prop.tokens[: i + 1]), set()).add(FAMILY[prop.source])
    assert tree.support_of(proposals) == [
        [tuple(sorted(families[tuple(p.tokens[: i + 1])])) for i in range(len(p.tokens))] for p in proposals
    ]

    nodes, _ = build_tree(proposals, calibrator, cost, room, min_gain=0.0)
    paths: list[tuple[int, ...]] = []
    for node in nodes:
        paths.append((*paths[node.parent], node.token) if node.parent >= 0 else (node.token,))
    held = set(paths)
    lengths = [next((n for n in range(len(p.tokens)) if tuple(p.tokens[: n + 1]) not in held), len(p.tokens))
               for p in proposals]
    assert sent_lengths(proposals, nodes) == lengths


def _tree_the_long_way(proposals, calibrator, cost, room, min_gain):
    """build_tree as defined: every step, every branch's next token priced afresh and the
    likeliest taken; then every branch follows the tree as far as it holds its tokens."""
    from specdec_studio.engine.strategies.auto import tree
    from specdec_studio.engine.strategies.auto.priors import MIN_REACH

    support = tree.support_of(proposals)
    trie, rows, taken, frontier = {}, [], {}, [[b, 0, -1] for b in range(len(proposals))]
    expected, best_gain, best_size = 1.0, 1.0, 0
    while len(rows) < room:
        pick = None
        for fi, (b, i, parent) in enumerate(frontier):
            prop = proposals[b]
            if i >= len(prop.tokens):
                continue
            p = calibrator.probability(prop.source, prop.signals[i], i, len(support[b][i]) > 1)
            p = min(p, max(0.0, 1.0 - taken.get(parent, 0.0)))
            reach = p if parent < 0 else rows[parent][3] * p
            if pick is None or reach > pick[1]:
                pick = (fi, reach, p)
        if pick is None or pick[1] < MIN_REACH:
            break
        fi, reach, p = pick
        b, i, parent = frontier[fi]
        trie[parent, proposals[b].tokens[i]] = len(rows)
        taken[parent] = taken.get(parent, 0.0) + p
        rows.append((b, i, parent, reach, p))
        expected += reach
        gain = expected / (cost.relative(len(rows) + 1) + cost.return_penalty())
        if gain > best_gain:
            best_gain, best_size = gain, len(rows)
        for entry in frontier:
            b, i, parent = entry
            while i < len(proposals[b].tokens) and (parent, proposals[b].tokens[i]) in trie:
                i, parent = i + 1, trie[parent, proposals[b].tokens[i]]
            entry[1], entry[2] = i, parent
    if best_gain <= min_gain:
        return [], 1.0
    nodes = [tree.Node(proposals[b].tokens[i], i + 1, parent, proposals[b].source, proposals[b].signals[i], p, reach,
                       support[b][i]) for b, i, parent, reach, p in rows[:best_size]]
    return tree._in_batch_order(nodes), best_gain


@settings(max_examples=300, deadline=None)
@given(proposals=long_proposals(), calibrator=calibrated(), room=st.integers(1, 48), flat=st.booleans(),
       min_gain=st.sampled_from([0.0, 1.1]))
def test_the_tree_is_the_one_its_definition_builds(proposals, calibrator, room, flat, min_gain):
    """build_tree prices again only the branches a new node moved or capped: the same nodes, in the
    same order, with the same chances and branches, as pricing every branch at every node."""
    cost = Wary(StepCost(FLAT if flat else None), 1.0)
    nodes, gain = build_tree(proposals, calibrator, cost, room, min_gain)
    want, want_gain = _tree_the_long_way(proposals, calibrator, cost, room, min_gain)
    assert gain == want_gain
    assert [vars(n) for n in nodes] == [vars(n) for n in want]


@st.composite
def looping_text(draw) -> list[int]:
    """A short line written again and again, a few of its tokens changed: long confident n-gram
    chains with second followers along them."""
    line = draw(st.lists(st.integers(0, 5), min_size=2, max_size=12))
    text = line * draw(st.integers(1, 40))
    for _ in range(draw(st.integers(0, 6))):
        text[draw(st.integers(0, len(text) - 1))] = draw(st.integers(0, 5))
    return text


@settings(max_examples=150, deadline=None)
@given(text=looping_text(), k=st.integers(1, 64))
def test_the_sibling_search_stops_only_where_no_fork_could_be_kept(text, k):
    """Past the reach at which a fork's prior is under MIN_REACH whatever its follower, the search
    for sibling branches stops: what it returns is what the search to the chain's end returns."""
    from unittest import mock

    from specdec_studio.engine.strategies.auto import sources
    from specdec_studio.engine.strategies.sources import ngram_cache

    found = sources.Sources(text)
    chains = found.chains(text, k)
    with mock.patch.object(ngram_cache, "FORK_REACH_MIN", 0.0):
        everywhere = found.siblings(text, k, chains)
    assert found.siblings(text, k, chains) == everywhere


def _fork_the_long_way(self, path, end, taken):
    """NgramCacheSource._fork as defined: every n-gram size ending there, longest first, that was followed
    by two tokens or more."""
    from specdec_studio.engine.strategies.auto.priors import ALT_MIN_COUNT, NGRAM_MAX, NGRAM_MIN

    for size in range(min(NGRAM_MAX, end), NGRAM_MIN - 1, -1):
        entry = self.ngrams.followers_of(tuple(path[end - size:end]))
        if entry is not None and len(entry.counts) > 1:  # an n-gram that went two ways, or more
            others = sorted(((count, token) for token, count in entry.counts.items()
                             if token != taken and count >= ALT_MIN_COUNT), reverse=True)
            if others:
                return size, entry, others
    return None


@settings(max_examples=150, deadline=None)
@given(text=looping_text(), k=st.integers(1, 64))
def test_a_fork_the_last_token_rules_out_is_not_looked_for_at_longer_ngrams(text, k):
    """Where the text's last token has only ever been followed one way, the sibling search looks no
    further: searching every n-gram size finds the same siblings, and the same fork everywhere."""
    from unittest import mock

    from specdec_studio.engine.strategies.auto import sources
    from specdec_studio.engine.strategies.sources.ngram_cache import NgramCacheSource

    found = sources.Sources(text)
    ngram = found.named("ngram")
    chains = found.chains(text, k)
    path = [*text[-4:], *(chains[0].tokens if chains and chains[0].source == "ngram" else [])]
    for end in range(len(path) + 1):
        for taken in (None, *set(path)):
            assert ngram._fork(path, end, taken) == _fork_the_long_way(ngram, path, end, taken)
    with mock.patch.object(NgramCacheSource, "_fork", _fork_the_long_way):
        want = found.siblings(text, k, chains)
    assert found.siblings(text, k, chains) == want


def test_trust_falls_while_trees_do_not_pay_and_comes_back_when_they_do():
    cost = StepCost()
    for _ in range(4):
        cost.observe(1, 0.010)  # a plain decode takes 10 ms
    guard = Guard()
    assert guard.trust == GUARD_START_TRUST  # conservative before the run's first tree
    for _ in range(10):  # predicted 1.5x, but 2 tokens in 30 ms: 0.67x a plain step's rate
        guard.judge(1.5, 2, 0.030, cost)
    low = guard.trust
    assert low < 0.6
    for _ in range(30):  # then trees of 4 tokens in 20 ms: 2x, better than predicted
        guard.judge(1.5, 4, 0.020, cost)
    assert guard.trust == 1.0


def test_trust_lost_long_ago_fades_back_over_plain_steps_and_good_trust_stays():
    cost = StepCost()
    for _ in range(4):
        cost.observe(1, 0.010)
    guard = Guard()
    guard.judge(1.5, 1, 0.030, cost)  # the run's first tree lost: 1 token in three plain steps' time
    lost = guard.trust
    assert lost < 0.7
    guard.rest()
    assert lost < guard.trust < GUARD_START_TRUST  # one plain step: a little of it comes back
    for _ in range(60):
        guard.rest()
    assert abs(guard.trust - GUARD_START_TRUST) < 0.02  # a long while after: the run's start again
    for _ in range(30):  # trees that paid: trust above the start, which plain steps leave alone
        guard.judge(1.5, 4, 0.020, cost)
    high = guard.trust
    for _ in range(60):
        guard.rest()
    assert guard.trust == high > GUARD_START_TRUST


def test_trees_that_cost_what_they_were_priced_at_keep_full_trust_on_a_jittery_machine():
    """Plain steps of 9 and 11 ms, trees of twice a plain step's time give or take the same 10 %:
    judged against the fastest plain step, they would all look ~10 % slower than priced."""
    cost = StepCost()
    for _ in range(4):
        cost.observe(1, 0.009)
        cost.observe(1, 0.011)
    guard = Guard()
    predicted = 3 / (2.0 + cost.return_penalty())
    for t_decode in (0.018, 0.022) * 10:
        guard.judge(predicted, 3, t_decode, cost)
    assert guard.trust > 0.99  # what is left of the cautious start (0.80 weighed at 0.9^20)


def test_a_wary_planner_sends_shallower_trees_and_fewer():
    calibrator = Calibrator()
    for _ in range(40):  # a source right 80 % of the time at every depth
        for position in range(6):
            calibrator.observe("suffix", (3,), position, 0.8, _ < 32)
    proposal = [Proposal("suffix", list(range(10, 20)), [(3,)] * 10)]
    cost = StepCost()  # the gentle prior: extra rows are cheap
    trusting, _ = build_tree(proposal, calibrator, Wary(cost, 1.0), room=10)
    wary, _ = build_tree(proposal, calibrator, Wary(cost, 0.5), room=10)
    assert 0 < len(wary) < len(trusting)
    assert build_tree(proposal, calibrator, Wary(cost, 0.05), room=10) == ([], 1.0)


def test_the_sources_are_asked_less_often_while_nothing_could_pay():
    guard = Guard()
    asked = []
    hopeful_at = None
    for step in range(1, 200):
        if guard.plans(step):
            asked.append(step)
            if hopeful_at is None and step >= 150:
                hopeful_at = step
            guard.planned(step, hopeful=step == hopeful_at)
    gaps = [b - a for a, b in zip(asked, asked[1:])]
    assert gaps[: IDLE_STRETCH - 1] == [1] * (IDLE_STRETCH - 1)  # every step for the first failures
    assert max(gaps) == PLAN_INTERVAL_MAX
    # a hopeful plan: every step again
    assert all(s in asked for s in range(hopeful_at + 1, hopeful_at + 1 + IDLE_STRETCH))


def test_a_long_repeat_asks_the_sources_at_once():
    guard = Guard()
    for step in range(1, 100):
        if guard.plans(step):
            guard.planned(step, hopeful=False)
    waiting = next(step for step in range(100, 100 + PLAN_INTERVAL_MAX) if not guard.plans(step))
    assert not guard.plans(waiting, WAKE_MATCH - 1)
    assert guard.plans(waiting, WAKE_MATCH)  # the answer copies: no waiting for the turn


def test_a_proposal_not_sent_is_judged_as_the_target_tokens_come():
    calibrator = Calibrator()
    hindsight = Hindsight(calibrator)
    ngram = Proposal("ngram", [5, 6, 7], [(3, 2, 1, 0)] * 3)
    suffix = Proposal("suffix", [5, 9], [(2,)] * 2)
    hindsight.keep([ngram, suffix])
    for token in (5, 6, 8, 1):  # the target chose 5, 6, then not 7
        hindsight.see(token)
    bins = calibrator.bins
    # the first token both families proposed; after it they differ
    assert bins[("ngram", (3, 2, 1, 0), 0, True)] == [1.0, 1.0]
    assert bins[("suffix", (2,), 0, True)] == [1.0, 1.0]
    assert bins[("suffix", (2,), 1, False)] == [0.0, 1.0]  # 9 was not the target's choice: the suffix ends
    assert bins[("ngram", (3, 2, 1, 0), 1, False)] == [1.0, 1.0]
    assert bins[("ngram", (3, 2, 1, 0), 2, False)] == [0.0, 1.0]
    assert not hindsight.pending  # nothing judged twice
    assert calibrator.table() == []  # never sent, never predicted: not in the reliability table


def test_what_the_first_positions_learnt_carries_down_the_chain():
    calibrator = Calibrator()
    signal = (2, 0, 0, 0)
    untouched = calibrator.probability("ngram", signal, 3)
    for _ in range(30):  # only first tokens judged, all right
        calibrator.observe("ngram", signal, 0, None, True)
    assert calibrator.probability("ngram", signal, 0) > 0.9
    assert calibrator.probability("ngram", signal, 3) > untouched + 0.2  # no data there: it leans on position 0
    for _ in range(30):  # then the third position turns out wrong
        calibrator.observe("ngram", signal, 2, None, False)
    assert calibrator.probability("ngram", signal, 2) < 0.2
    assert calibrator.probability("ngram", signal, 3) < calibrator.probability("ngram", signal, 1)


def test_what_a_tree_left_out_of_a_proposal_is_judged_in_hindsight_and_nothing_twice():
    calibrator = Calibrator()
    ngram = Proposal("ngram", [5, 6, 7, 8], [(4, 3, 1, 0)] * 4)
    suffix = Proposal("suffix", [5, 9], [(2,)] * 2)
    # a tree holding 5 -> 6 (the n-gram chain's first two tokens) and 5 -> 9 (the suffix's both)
    nodes, _ = build_tree([ngram, suffix], calibrator, StepCost(), 2, min_gain=0.0)
    paths = {(n.token,) if n.parent < 0 else (nodes[n.parent].token, n.token) for n in nodes}
    assert paths == {(5,), (5, 6)}
    assert sent_lengths([ngram, suffix], nodes) == [2, 1]
    hindsight = Hindsight(calibrator)
    hindsight.keep([ngram, suffix], sent_lengths([ngram, suffix], nodes))
    for token in (5, 6, 7, 1):  # verification judged 5 and 6; then the target chose 7, then not 8
        hindsight.see(token)
    bins = calibrator.bins
    assert bins == {("ngram", (4, 3, 1, 0), 2, False): [1.0, 1.0], ("ngram", (4, 3, 1, 0), 3, False): [0.0, 1.0],
                    ("suffix", (2,), 1, False): [0.0, 1.0]}
    assert not hindsight.pending


def test_a_longer_suffix_match_is_believed_at_least_as_much_as_a_shorter_one():
    calibrator = Calibrator()
    for _ in range(20):  # matches of 3-4 tokens turn out right every time
        calibrator.observe("suffix", (1,), 0, None, True)
    short = calibrator.probability("suffix", (1,), 0)
    assert short > 0.9
    for bucket in range(2, 6):  # longer matches, never judged yet, lean on the shorter ones
        assert calibrator.probability("suffix", (bucket,), 0) >= short
    for _ in range(20):  # until their own outcomes say otherwise
        calibrator.observe("suffix", (3,), 0, None, False)
    assert calibrator.probability("suffix", (3,), 0) < 0.3


def test_a_long_suffix_matchs_deeper_tokens_are_not_discounted_until_judged():
    """A chain is discounted by CHAIN_DECAY a position until its deeper tokens are judged, except
    along a suffix match of LONG_MATCH_BUCKET's length: a chain right so far has only made it longer."""
    fresh = Calibrator()
    long, shorter = (LONG_MATCH_BUCKET,), (LONG_MATCH_BUCKET - 1,)
    first = fresh.probability("suffix", long, 0)
    for position in range(1, 8):
        assert fresh.probability("suffix", long, position) == pytest.approx(first)
        assert fresh.probability("suffix", long, position, agreed=True) == pytest.approx(
            fresh.probability("suffix", long, 0, agreed=True))
    assert fresh.probability("suffix", shorter, 3) == pytest.approx(
        CHAIN_DECAY ** 3 * fresh.probability("suffix", shorter, 0))
    assert fresh.probability("ngram", (4, 3, 3, 0), 2) < fresh.probability("ngram", (4, 3, 3, 0), 0)
    for _ in range(20):  # the run's own outcomes deep in such a chain still rule
        fresh.observe("suffix", long, 4, None, False)
    assert fresh.probability("suffix", long, 4) < 0.3 < fresh.probability("suffix", long, 3)


def test_a_line_written_a_third_time_is_believed_like_a_long_match():
    """A text going round a loop (its suffix match reaches back LOOP_SURE_ROUNDS periods) proposes
    its next round with a long match's signal, whatever the match's length; once round, or a copy
    of earlier text as long, keeps its own length's."""
    from specdec_studio.engine.strategies.auto import sources
    from specdec_studio.engine.strategies.auto.priors import LOOP_SURE_ROUNDS

    line = [7, 3, 9, 4, 1, 8, 2]  # a 7-token line
    for rounds, want in ((2, 2), (LOOP_SURE_ROUNDS + 1, LONG_MATCH_BUCKET)):  # matches of 7 and 14 tokens
        text = [5, 6] + line * rounds
        suffix = sources.Sources(text).named("suffix").propose(text, 20)
        assert suffix.tokens == (line * 3)[:20]  # round and round the line
        assert set(suffix.signals) == {(want,)}
    copied = [5, 6] + line * 2 + [0] + line * 2  # 14 tokens copied from earlier, not a loop
    suffix = sources.Sources(copied).named("suffix").propose(copied, 4)
    assert suffix.tokens == [0, *line[:3]] and set(suffix.signals) == {(3,)}


def test_a_source_that_beats_its_priors_starts_its_other_bins_higher_and_one_that_trails_lower():
    copying, echoing, fresh = Calibrator(), Calibrator(), Calibrator()
    short, long = (1,), (4,)  # suffix matches of 3-4 tokens, and of 17-32
    for _ in range(20):
        copying.observe("suffix", short, 0, None, True)  # right far more often than its prior (0.45)
        echoing.observe("suffix", short, 0, None, False)
    prior = fresh.probability("suffix", long, 0)
    assert copying.probability("suffix", long, 0) > prior + 0.05
    assert echoing.probability("suffix", long, 0) < prior - 0.2
    assert copying._signal_prior("suffix", long, False) == PRIOR_MAX  # scaled, but never a certainty
    # another source, or the same one where another family agreed, keeps its own scale
    assert copying.probability("ngram", (3, 2, 1, 0), 0) == fresh.probability("ngram", (3, 2, 1, 0), 0)
    assert copying.probability("suffix", long, 0, agreed=True) == fresh.probability("suffix", long, 0, agreed=True)


def _scaled_curve(relative: dict[int, float], t1: float = 0.008) -> CostCurve:
    sizes = tuple(sorted(relative))
    times = tuple(t1 * relative[b] for b in sizes)
    return CostCurve(sizes, times, times)


def test_a_step_proposes_as_many_tokens_as_its_decode_affords():
    from tests.auto_plan import SHARED_PROFILES, load_curve

    # the shipped CPU profiles: a 17-token decode costs ~8.5 plain steps, 16 proposed tokens
    for name in ("smooth", "bumpy"):
        cost = StepCost(load_curve(SHARED_PROFILES / f"smollm2-q4_1-{name}.json"))
        assert cost.affordable_tokens(64) == 16
        assert cost.relative(17) <= MAX_STEP_COST < cost.relative(18)
    # a batch that costs little more than a token (a GPU): the whole ceiling
    assert StepCost(FLAT).affordable_tokens(64) == 64
    # every token of a batch as dear as a decode of its own (the dearest shape the fit allows): a
    # step of 8 tokens is the most that stays within MAX_STEP_COST, so 7 proposed
    linear = StepCost(_scaled_curve({1: 1.0, 2: 2.0, 4: 4.0, 8: 8.0, 16: 16.0}))
    assert linear.affordable_tokens(64) == 7
    assert StepCost(FLAT).affordable_tokens(5) == 5  # never above the ceiling asked
    # without a profile the run cannot price a long step before making one
    assert StepCost().affordable_tokens(64) == UNPRICED_STEP_TOKENS


def test_the_affordable_length_follows_the_runs_correction_of_the_profile():
    curve = _scaled_curve({1: 1.0, 8: 4.5, 16: 8.0, 32: 16.0})
    cost = StepCost(curve)
    before = cost.affordable_tokens(64)
    t1 = 0.008
    for _ in range(StepCost.TRUSTED + 1):  # this machine: batches a third cheaper than the profile says
        cost.observe(1, t1)
        cost.observe(9, t1 * (1 + (4.5 - 1) * 2 / 3))
    assert cost.scale < 0.7
    assert cost.affordable_tokens(64) > before


def test_runs_share_a_curves_prices_until_their_own_clock_rescales_them():
    from specdec_studio.engine.strategies.auto.calibration import CurvePrices

    curve = _scaled_curve({1: 1.0, 8: 4.5, 16: 8.0, 32: 16.0})
    first, second = StepCost(curve), StepCost(_scaled_curve({1: 1.0, 8: 4.5, 16: 8.0, 32: 16.0}))
    assert first._table is second._table  # equal curves (a profile read again) share one table
    fitted = curve.fitted()
    # the values a run worked out for itself before: 1 + scale·(T(B)/T(1) - 1), scale 1, past the table too
    for b in (1, 2, 17, CurvePrices.SIZES - 1, CurvePrices.SIZES, 200):
        assert first.relative(b) == 1.0 + 1.0 * (fitted.relative(b, b) - 1.0)
    before = first.affordable_tokens(64)
    t1 = 0.008
    for _ in range(StepCost.TRUSTED + 1):  # this run's machine: batches a third cheaper than the profile says
        first.observe(1, t1)
        first.observe(9, t1 * (1 + (4.5 - 1) * 2 / 3))
    assert first.scale < 0.7 and first.affordable_tokens(64) > before
    assert first.relative(9) == 1.0 + first.scale * (fitted.relative(9, 9) - 1.0)
    # the other run's prices are untouched by it
    assert second.scale == 1.0 and second.affordable_tokens(64) == before
    assert second.relative(9) == 1.0 + 1.0 * (fitted.relative(9, 9) - 1.0)

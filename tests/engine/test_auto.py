"""Auto mode: lossless on every prompt category, the target's distribution kept, the KV mirror
right on tree steps, plain steps where nothing repeats, and its decisions reported."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.sampling import SamplingParams
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies.auto import Calibrator, Proposal, Sources, StepCost, build_tree
from specdec_studio.engine.tuning.cost_model import CostCurve
from specdec_studio.engine.tuning.prompts import CATEGORIES, shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens
from tests.conftest import CODE_PROMPT, N_THREADS, PROSE_PROMPT
from tests.engine.lossless import assert_lossless
from tests.engine.test_speculative import SEED_COUNTS, _two_sample_p_value


# A machine where verifying more tokens is nearly free (a GPU, a wide CPU): Auto then builds trees,
# which these tests must see whatever this machine's own batch-cost profile says.
FLAT = CostCurve(sizes=(1, 2, 64), t_all_logits=(0.010, 0.0102, 0.0126), t_last_logit=(0.010, 0.0101, 0.012))


@pytest.fixture(scope="module")
def verified(smollm_path, smollm_drafts):
    """SmolLM2 with the KV mirror checked against llama.cpp's dump before every decode, priced
    with a flat batch-cost curve."""
    with Session(smollm_path, n_ctx=2048, n_threads=N_THREADS, verify_kv=True) as session:
        session.cost_curve = lambda: FLAT
        yield session


def _final(events) -> tuple[RunFinished, list]:
    seen = list(events)
    return seen[-1], seen


# every other category in the regular run (the ones with code and repetition among them), all with -m slow
EVERY_OTHER = sorted(CATEGORIES)[1::2]


@pytest.mark.parametrize("categories", [pytest.param(EVERY_OTHER, id="half"),
                                        pytest.param(sorted(CATEGORIES), id="all", marks=pytest.mark.slow)])
def test_greedy_auto_equals_plain_on_every_category(verified, exactness_probe, categories):
    deviation = exactness_probe(Path(verified.model.info.path))["max_abs_diff"]
    prompts = {p.category: p for p in shipped()}
    assert set(prompts) == set(CATEGORIES)
    tree_steps = checked = 0
    verified.ensure_sequences(RunConfig(mode="auto").n_sequences)  # so that a run keeps the last one's cells
    for category, prompt in sorted((c, prompts[c]) for c in categories):
        tokens = prompt_tokens(verified, prompt, chat=True)
        plain, _ = _final(verified.run(RunConfig(max_tokens=32), tokens))
        before = verified.memory.verifier.n_checked
        # Auto continues from the prompt's cells plain left, as a chat's next turn does
        auto, seen = _final(verified.run(RunConfig(mode="auto", max_tokens=32), tokens, reuse_prefix=True))
        assert auto.stats["n_prompt_reused"] == len(tokens) - 1
        checked += verified.memory.verifier.n_checked - before
        assert_lossless(verified, tokens, plain.token_ids, auto.token_ids, deviation, f"auto on {category}")
        decisions = auto.stats["auto"]["decisions"]
        tree_steps += sum(n for d, n in decisions.items() if d.startswith("tree:"))
        assert sum(decisions.values()) == auto.stats["steps"] - 1  # every step after the first decided
    assert tree_steps > 0  # several sources were verified together in one batch (tree steps)
    assert checked > 10 * len(categories)  # llama.cpp's dump matched the mirror on every decode


def test_auto_drafts_on_repetitive_text_and_reports_each_decision(verified):
    final, seen = _final(verified.run(RunConfig(mode="auto", max_tokens=96), verified.tokenize_prompt(CODE_PROMPT)))
    report = final.stats["auto"]
    # How many tokens a step emits here depends on the run's own clock: the flat curve prices a tree
    # far cheaper than this CPU decodes it (with the KV check's dump on every decode), and the
    # guard, which compares the two, sends fewer trees the slower the machine is that moment
    # (measured: 2.46 to 2.74 tokens a step in 8 runs, 1.68 in two clean-clone runs after the whole
    # suite). A test checks correctness, not speed (tests/bench/auto.py measures that): accepted
    # proposals made many steps emit more than one token.
    assert final.stats["n_accept"] >= 16 and final.stats["tokens_per_step"] > 1.2, final.stats
    assert report["sources"] and all(v["offered"] >= v["accepted"] for v in report["sources"].values())
    assert set(report["sources"]) == {"ngram", "ngram_alt", "suffix"}  # no draft loaded: not a source
    for source, entry in report["sources"].items():
        # a source that proposed but was never sent says why; one that was sent, or never proposed, does not
        assert ("ruled_out" in entry) == (entry["proposed"] > 0 and entry["offered"] == 0), (source, entry)
    steps = [e for e in seen if isinstance(e, StepDone) and e.auto is not None]
    for e in steps:
        info = e.auto
        assert info.decision == "plain" or info.k > 0
        assert len(info.proposers) == len(e.tokens)
        accepted = [p for p in info.proposers if p != "target"]
        assert len(accepted) == e.n_accepted or e is steps[-1]
    assert report["calibration"] and all(0.0 <= row["observed"] <= 1.0 for row in report["calibration"])


def test_text_without_repetition_gets_plain_steps(verified):
    # prose that does not repeat itself: the sources have (almost) nothing to propose
    final, _ = _final(verified.run(RunConfig(mode="auto", max_tokens=32), verified.tokenize_prompt(PROSE_PROMPT)))
    decisions = final.stats["auto"]["decisions"]
    assert decisions.get("plain", 0) >= 0.8 * sum(decisions.values()), decisions


def test_where_verifying_costs_as_much_as_it_saves_auto_makes_plain_steps(verified):
    steep = CostCurve(sizes=(1, 2, 64), t_all_logits=(0.010, 0.019, 0.5), t_last_logit=(0.010, 0.018, 0.45))
    verified.cost_curve = lambda: steep
    try:
        final, _ = _final(verified.run(RunConfig(mode="auto", max_tokens=48), verified.tokenize_prompt(CODE_PROMPT)))
    finally:
        verified.cost_curve = lambda: FLAT
    decisions = final.stats["auto"]["decisions"]
    assert decisions.get("plain", 0) >= 0.8 * sum(decisions.values()), decisions


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_seeded_sampling_equals_plain_token_for_token(verified, seed):
    # Auto draws the target's token once per emitted token, in plain's order: the same seed gives
    # the same text, whatever was drafted
    prompt = verified.tokenize_prompt(CODE_PROMPT)
    sampling = SamplingParams(temperature=0.8, seed=seed)
    plain, _ = _final(verified.run(RunConfig(max_tokens=48, sampling=sampling), prompt))
    auto, _ = _final(verified.run(RunConfig(mode="auto", max_tokens=48, sampling=sampling), prompt))
    assert auto.token_ids == plain.token_ids and auto.stats["n_drafted"] > 0


@pytest.fixture(scope="module")
def flat(smollm_path):
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS) as session:
        session.cost_curve = lambda: FLAT
        yield session


@pytest.mark.parametrize("n_seeds", SEED_COUNTS)
def test_stochastic_auto_matches_plain_sampling(flat, n_seeds):
    smollm_session = flat
    prompt = smollm_session.tokenize_prompt("The cat sat on the mat. The dog sat on the log. The cat sat on the mat. "
                                            "The dog sat on")
    runs: dict[str, list[list[int]]] = {"plain": [], "auto": []}
    n_drafted = 0
    smollm_session.ensure_sequences(RunConfig(mode="auto").n_sequences)
    for seed in range(n_seeds):
        for mode in runs:
            # a fresh seed stream per mode so the two samples are independent; every run starts
            # from the prompt's cells the first one made (the same logits, decoded once)
            sampling = SamplingParams(temperature=0.8, seed=seed + (0 if mode == "plain" else 10_000))
            final, _ = _final(smollm_session.run(RunConfig(mode=mode, max_tokens=4, sampling=sampling), prompt,
                                                 reuse_prefix=True))
            assert final.stats["n_prompt_reused"] == (len(prompt) - 1 if seed or mode != "plain" else 0)
            runs[mode].append(list(final.token_ids) + [-1] * (4 - len(final.token_ids)))
            n_drafted += final.stats["n_drafted"] if mode == "auto" else 0
    assert n_drafted > n_seeds
    for position in (1, 2, 3):
        p_value = _two_sample_p_value([r[position] for r in runs["plain"]], [r[position] for r in runs["auto"]])
        assert p_value > 0.001, (position, p_value)


@pytest.mark.parametrize("read_prompt", ["at the start", "when first asked"])
def test_auto_with_a_draft_model_stays_lossless(smollm_path, smollm_drafts, exactness_probe, monkeypatch, read_prompt):
    from specdec_studio.engine.strategies.auto.draft_price import DraftPrice

    deviation = exactness_probe(Path(smollm_path))["max_abs_diff"]
    # priced as on a machine where the draft is cheap (a GPU), so that Auto drafts with it here too
    monkeypatch.setattr(DraftPrice, "token_cost", lambda self, cost: 0.05)
    if read_prompt == "when first asked":  # judged out at the start: the draft reads the prompt mid-run
        monkeypatch.setattr(DraftPrice, "may_pay", lambda self, cost, room, min_gain: False)
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS, verify_kv=True,
                 draft_path=smollm_drafts["default-q3_k_m"]) as session:
        tokens = session.tokenize_prompt(CODE_PROMPT)
        plain, _ = _final(session.run(RunConfig(max_tokens=64), tokens))
        session.cost_curve = lambda: FLAT
        auto, _ = _final(session.run(RunConfig(mode="auto", max_tokens=64), tokens))
        assert_lossless(session, tokens, plain.token_ids, auto.token_ids, deviation, "auto with a draft")
        assert auto.stats["auto"]["sources"]["draft"]["offered"] > 0


def test_the_tree_shares_a_common_prefix_and_cuts_where_gain_peaks():
    calibrator = Calibrator()
    for _ in range(20):  # the suffix source has been right, the n-gram source has not
        calibrator.observe("suffix", (1,), 0, 0.5, True)
        calibrator.observe("ngram", (1, 0, 0, 0), 0, 0.5, False)
    proposals = [Proposal("suffix", [5, 6, 7, 8], [(1,)] * 4), Proposal("ngram", [5, 6, 9], [(1, 0, 0, 0)] * 3)]
    nodes, gain = build_tree(proposals, calibrator, StepCost(), room=8)
    tokens = [n.token for n in nodes]
    assert tokens[:2] == [5, 6]  # the shared prefix appears once
    assert tokens.count(5) == 1 and tokens.count(6) == 1
    assert nodes[0].seqs == sorted(nodes[0].seqs) and set(nodes[0].seqs) >= {0}
    assert gain > 1.0
    # a step that cannot pay is a plain step
    hopeless = Calibrator()
    for _ in range(50):
        hopeless.observe("ngram", (1, 0, 0, 0), 0, 0.5, False)
    assert build_tree([Proposal("ngram", [1, 2], [(1, 0, 0, 0)] * 2)], hopeless, StepCost(), room=8) == ([], 1.0)


@pytest.mark.parametrize("right_until", [1, 2, 3])
def test_the_tree_is_cut_where_its_gain_peaks(right_until):
    """A source that has always been right for its first ``right_until`` tokens and always wrong
    after: the chain is cut exactly there (a deeper token costs a row and earns nothing), and the
    gain reported is the expected tokens per step over the step's cost at that depth."""
    calibrator = Calibrator()
    for _ in range(200):
        for position in range(5):
            calibrator.observe("suffix", (5,), position, 0.5, position < right_until)
    cost = StepCost()
    nodes, gain = build_tree([Proposal("suffix", [11, 12, 13, 14, 15], [(5,)] * 5)], calibrator, cost, room=8)
    assert [n.token for n in nodes] == [11, 12, 13][:right_until]
    expected = 1.0  # the target's own token
    reach = 1.0
    for n in nodes:
        reach *= n.p
        expected += reach
    assert gain == pytest.approx(expected / (cost.relative(1 + right_until) + cost.return_penalty()), rel=0.05)


def test_a_token_two_source_families_propose_is_calibrated_apart():
    calibrator = Calibrator()
    for _ in range(20):  # alone the n-gram cache has been wrong; agreeing with the suffix match, right
        calibrator.observe("ngram", (2, 3, 1, 0), 0, 0.5, False)
        calibrator.observe("ngram", (2, 3, 1, 0), 0, 0.5, True, agreed=True)
    assert calibrator.probability("ngram", (2, 3, 1, 0), 0, agreed=True) > 0.8
    assert calibrator.probability("ngram", (2, 3, 1, 0), 0) < 0.2
    ngram = Proposal("ngram", [5, 6, 7], [(2, 3, 1, 0)] * 3)
    suffix = Proposal("suffix", [5, 6, 9], [(1,)] * 3)
    sibling = Proposal("ngram_alt", [5, 8], [(2, 3, 1, 0), (2, 1, 1, 1)])
    nodes, _ = build_tree([ngram, suffix, sibling], calibrator, StepCost(FLAT), room=8)
    by_path = {(n.depth, n.token): n for n in nodes}
    assert by_path[(1, 5)].agreed and by_path[(2, 6)].proposer == "ngram+suffix"
    # past the fork the sources differ; a sibling branch is the n-gram cache again, no second opinion
    assert not any(n.agreed for n in nodes if n.depth == 3 or n.token == 8)
    assert by_path[(1, 5)].p > 0.8


def test_cli_json_reports_sources_and_decisions():
    import json
    import subprocess
    import sys

    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "specdec_studio.engine.cli",
            "run",
            "--mode",
            "auto",
            "-p",
            CODE_PROMPT,
            "-n",
            "48",
            "-t",
            str(N_THREADS),
            "--json",
            "--no-predict",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    stats = json.loads(done.stdout)["stats"]
    assert sum(stats["auto"]["decisions"].values()) == stats["steps"] - 1
    assert set(stats["auto"]) == {"trust", "decisions", "sources", "agreed", "calibration", "step_tokens_max",
                                  "loop_steps"}
    # the longest step the profile allowed: within --auto-k-max, and no step proposed more (48 tokens
    # of this answer hold no loop, the one thing that may go past it)
    assert 1 <= stats["auto"]["step_tokens_max"] <= 64
    assert stats["auto"]["loop_steps"] == 0
    assert len(stats["accept_per_position"]) <= stats["auto"]["step_tokens_max"]


def test_round_a_loop_a_step_goes_past_the_priced_cap(verified, exactness_probe):
    # a CPU-like curve: a step may bet no more than 9 tokens (MAX_STEP_COST plain steps), yet a
    # batch of 64 costs under half a plain step a token
    cpu_like = CostCurve(sizes=(1, 2, 8, 16, 64), t_all_logits=(0.010, 0.0185, 0.072, 0.12, 0.30),
                         t_last_logit=(0.010, 0.018, 0.07, 0.115, 0.28))
    verified.cost_curve = lambda: cpu_like
    try:
        prompt = verified.tokenize_prompt("running_stats.variance()\n" * 12)  # the model goes on round it
        plain, _ = _final(verified.run(RunConfig(max_tokens=96), prompt))
        auto, seen = _final(verified.run(RunConfig(mode="auto", max_tokens=96), prompt))
    finally:
        verified.cost_curve = lambda: FLAT
    deviation = exactness_probe(Path(verified.model.info.path))["max_abs_diff"]
    assert_lossless(verified, prompt, plain.token_ids, auto.token_ids, deviation, "auto round a loop")
    cap = auto.stats["auto"]["step_tokens_max"]
    longest = max(e.n_drafted for e in seen if isinstance(e, StepDone))
    assert cap < 16 and longest > cap and auto.stats["auto"]["loop_steps"] > 0, (cap, longest)


def test_auto_validates_its_draft_limit():
    with pytest.raises(Exception, match="k_min <= k_max"):
        RunConfig(mode="auto", speculative=SpeculativeParams(k_min=5, k_max=2)).validate()


def test_the_ngram_cache_offers_its_other_followers_as_sibling_branches():
    # after "1 2" came 3 three times and 4 twice; the longer n-grams before it never repeat
    context = [7, 1, 2, 3, 8, 1, 2, 3, 6, 1, 2, 4, 0, 1, 2, 4, 5, 1, 2, 3, 9, 1, 2]
    proposals = {p.source: p for p in Sources(context).propose(context, 4)}
    assert proposals["ngram"].tokens[0] == 3
    alternative = proposals["ngram_alt"]
    assert alternative.tokens[:2] == [4, 5]  # the 2nd follower, then the cache's own continuation
    assert alternative.signals[0][3] == 1  # its rank among the followers
    nodes, _ = build_tree([proposals["ngram"], alternative], Calibrator(), StepCost(FLAT), room=8)
    roots = [n for n in nodes if n.parent == -1]
    assert {n.token for n in roots} == {3, 4} and len({s for n in nodes for s in n.seqs}) == 2
    # a slot of a batch has one sequence: no siblings there
    assert "ngram_alt" not in {p.source for p in Sources(context, alternatives=False).propose(context, 4)}


def test_sibling_branches_are_verified_losslessly_with_the_cache_checked(verified, exactness_probe):
    deviation = exactness_probe(Path(verified.model.info.path))["max_abs_diff"]
    # a list whose items go several ways: the cache's second followers are worth branches before
    # the answer settles into a loop (where the suffix match alone carries the step)
    prompt = verified.tokenize_prompt(
        "blue sky, blue sea, blue sky, blue ink, blue sea, blue sky, blue ink, blue sea, blue"
    )
    plain, _ = _final(verified.run(RunConfig(max_tokens=40), prompt))
    verifier = verified.memory.verifier
    before = verifier.n_checked
    auto, seen = _final(verified.run(RunConfig(mode="auto", max_tokens=40), prompt))
    if verified.memory.verifier is not verifier:  # the context was made again with Auto's sequences
        before = 0
    assert_lossless(verified, prompt, plain.token_ids, auto.token_ids, deviation, "auto with n-gram siblings")
    assert auto.stats["auto"]["sources"]["ngram_alt"]["offered"] > 0
    branched = [e for e in seen if isinstance(e, StepDone) and e.auto is not None and e.auto.branches >= 2]
    assert branched  # some steps verified several branches in one batch
    assert verified.memory.verifier.n_checked - before >= auto.stats["steps"] - 1


def test_a_pause_between_steps_is_not_a_steps_time(verified):
    """A demo's pause (or a chat's save) runs off the generation clock (``Session.off_the_clock``):
    no Auto step's ``t_step_s``, plain or tree, may include it. Auto read ``time.perf_counter()``
    where the other strategies read ``Runtime.clock()`` (issue 78)."""
    pause_s = 0.15
    decisions, step_times = set(), []
    for event in verified.run(RunConfig(mode="auto", max_tokens=24), verified.tokenize_prompt(CODE_PROMPT)):
        if isinstance(event, StepDone) and event.step > 0:
            decisions.add(event.auto.decision == "plain")
            step_times.append(event.t_step_s)
        if isinstance(event, StepDone):
            with verified.off_the_clock():  # the consumer holds the run between two steps
                time.sleep(pause_s)
    assert decisions == {True, False}, "both a plain step and a tree step are timed"
    assert max(step_times) < pause_s, step_times

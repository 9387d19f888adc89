"""Explanations of generated tokens on real runs: what they say about the target is what plain
decoding chose, what they say about verification reproduces its decisions, and they survive a trace
file (an older trace, without them, still loads)."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.events import Explanation, KvSnapshot, StepDone
from specdec_studio.engine.strategies.explain import TOP_N, Explainer, top_indices, verdict
from specdec_studio.engine.records import trace
from specdec_studio.engine.records.trace import TraceRecorder
from specdec_studio.engine.sampling import SamplingParams
from tests.conftest import CODE_PROMPT

N_TOKENS = 40
GREEDY = {
    "plain": RunConfig(max_tokens=N_TOKENS),
    "lookahead": RunConfig(mode="lookahead", max_tokens=N_TOKENS, lookahead=LookaheadParams(4, 3, 4)),
    "lookup-cache": RunConfig(mode="lookup", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=4)),
    "lookup-latest": RunConfig(mode="lookup", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=4, lookup="latest")),
    "speculative": RunConfig(mode="speculative", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=4)),
    "auto": RunConfig(mode="auto", max_tokens=N_TOKENS),
}


@given(st.one_of(st.integers(1, 8000), st.integers(40000, 160000)), st.integers(1, 1000), st.integers(0, 2**32 - 1))
@settings(max_examples=80, deadline=None)
def test_top_indices_are_the_largest_first_ties_to_the_lower_index(size, spread, seed):
    """Sizes on both sides of the column search's threshold (3,840 values) and of real
    vocabularies (49k, 152k), from all-tied values (spread 1) to nearly distinct ones."""
    values = np.random.default_rng(seed).integers(0, spread, size).astype(np.float32)
    expected = np.lexsort((np.arange(values.size), -values.astype(np.float64)))[:TOP_N]
    assert top_indices(values).tolist() == expected.tolist()
    assert top_indices(values)[0] == np.argmax(values)


@given(st.sampled_from([49152, 152064]), st.floats(0.5, 8.0), st.floats(-90.0, 90.0), st.floats(0.0, 25.0),
       st.integers(0, 2**32 - 1))
@settings(max_examples=40, deadline=None)
def test_greedy_probabilities_are_the_softmax_to_the_digits_shown(size, spread, offset, lead, seed):
    """The explanation's softmax (a float32 sum of 2^(x·log2 e)) against float64's, for logits
    centred anywhere from -90 to 90 (past ±60 it shifts by the largest) with a leader up to 25 above
    the rest: every top probability within 2e-5 of itself, far inside the 4 digits a person reads."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(size) * spread + offset).astype(np.float32)
    logits[rng.integers(size)] += np.float32(lead)
    explainer = Explainer(lambda token: b"t", greedy=True)
    ids, probs = explainer.target_probs(logits)
    exact = np.exp(logits.astype(np.float64) - float(logits.max()))
    exact /= exact.sum()
    np.testing.assert_allclose(probs.at(ids), exact[ids], rtol=2e-5)
    assert [probs[t] for t in ids] == pytest.approx(exact[ids].tolist(), rel=2e-5)


def _tokens(session, config: RunConfig) -> list:
    out = []
    for event in session.run(config, session.tokenize_prompt(CODE_PROMPT)):
        if isinstance(event, StepDone):
            out.extend(event.tokens)
    return out


@pytest.fixture(scope="module")
def explained(smollm_session, smollm_drafts):
    session = smollm_session
    session.load_draft(smollm_drafts["default-q2_k"])  # a weak draft: rejections to explain
    plain = [t.id for t in _tokens(session, GREEDY["plain"])]
    runs = {name: _tokens(session, RunConfig(**{**config.__dict__, "explain": True}))
            for name, config in GREEDY.items()}
    return plain, runs


@pytest.mark.parametrize("name", list(GREEDY))
def test_greedy_explanations_name_the_token_plain_decoding_chose(explained, name):
    plain, runs = explained
    tokens = runs[name]
    assert [t.id for t in tokens] == plain  # below 512 cells SmolLM2's kernels are batch-invariant
    for i, t in enumerate(tokens):
        why = t.why
        assert why is not None and len(why.top) == TOP_N
        assert why.top[0][0] == plain[i] == t.id, f"token {i}: the explained argmax is not plain's token"
        probs = [p for _, _, p in why.top]
        assert probs == sorted(probs, reverse=True) and 0 < sum(probs) <= 1.0005
        assert why.p_chosen == why.top[0][2] and not why.sampled
        # the verdict agrees with the token's colour, and an accepted proposal is the token itself
        if t.source in ("accepted_draft", "accepted_ngram"):
            assert why.accepted and why.proposed == t.id
        else:
            assert not why.accepted
        if why.proposed >= 0 and not why.accepted:
            assert why.proposed != t.id  # a rejected proposal: what replaced it is this token
    if name != "plain":
        assert any(t.why.accepted for t in tokens), "nothing accepted: the run explains nothing of interest"


def test_a_draft_models_explanations_hold_its_own_top_tokens_and_rejections(explained):
    _, runs = explained
    proposed = [t.why for t in runs["speculative"] if t.why.proposed >= 0]
    assert proposed and all(w.proposer == "draft" and len(w.proposer_top) == TOP_N for w in proposed)
    # greedy drafting proposes the draft's argmax
    assert all(w.proposer_top[0][0] == w.proposed for w in proposed)
    assert any(not w.accepted for w in proposed), "the q2_k draft had no rejection on this prompt"


@pytest.mark.parametrize("name", ["lookup-cache", "lookup-latest", "lookahead"])
def test_an_ngram_proposal_names_the_text_it_continued(explained, name):
    _, runs = explained
    proposed = [t.why for t in runs[name] if t.why.proposed >= 0]
    assert proposed and all(w.matched for w in proposed)
    if name.startswith("lookup"):  # the matched n-gram occurred earlier in the context
        context = CODE_PROMPT + "".join(t.text for t in runs[name])
        assert all(context.count(w.matched) >= 2 for w in proposed)


@pytest.mark.parametrize("mode", ["speculative", "lookup"])
def test_sampled_explanations_reproduce_every_accept_decision(smollm_session, smollm_drafts, mode):
    session = smollm_session
    session.load_draft(smollm_drafts["default-q3_k_m"])
    config = RunConfig(mode=mode, max_tokens=64, speculative=SpeculativeParams(k=4), explain=True,
                       sampling=SamplingParams(temperature=0.8, seed=7))
    decided = [t for t in _tokens(session, config) if t.why.proposed >= 0]
    assert decided and {t.why.accepted for t in decided} == {True, False}
    for t in decided:
        w = t.why
        assert w.sampled and w.p is not None and w.q is not None
        if w.draw is None:  # q was 0: no draw, rejected
            assert w.q == 0 and not w.accepted
        else:
            assert (w.draw * w.q < w.p) == w.accepted  # the rule, from the recorded numbers alone
        # a rejected proposal is never its own replacement: the residual max(0, p - q) is 0 there
        assert (t.id == w.proposed) == w.accepted
        if mode == "lookup":
            assert w.q == 1.0  # a point mass: accepted with probability p


@pytest.fixture
def window_runs(smollm_session):
    """``smollm_session`` set as the window sets it (app.jobs.models), then back as it was."""
    session = smollm_session
    saved = session.explain_in_background, session.step_snapshots, session.run_ahead
    session.explain_in_background, session.step_snapshots = True, True
    yield session
    session.explain_in_background, session.step_snapshots, session.run_ahead = saved


BACKGROUND_CASES = {
    **{name: GREEDY[name] for name in ("plain", "lookahead", "lookup-cache", "speculative", "auto")},
    "sampled lookup": RunConfig(mode="lookup", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=4),
                                sampling=SamplingParams(temperature=0.8, seed=11)),
    "sampled speculative": RunConfig(mode="speculative", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=4),
                                     sampling=SamplingParams(temperature=0.8, seed=11)),
}


# greedy speculation's under -m slow: sampled speculation's runs the same drafter and adds the draws
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name == "speculative" else name
                                  for name in BACKGROUND_CASES])
def test_explanations_made_on_their_own_thread_are_the_ones_made_in_line(window_runs, smollm_drafts, name):
    """The window's runs explain on a thread of their own while the next step decodes: every event
    leaves the run with its explanations done, and they are the ones the run makes in line (Auto's
    on a machine that keeps time: its plans follow the clock). The machine is the shipped smooth
    profile's, not one measured in the test session: on a profile measured while the machine was
    busy Auto may rightly send nothing in 40 tokens (it did in 4 of 8 runs, before and after
    2026-12-05's changes to Auto alike), and this test needs proposals to explain."""
    from tests.auto_plan import SHARED_PROFILES, load_curve, simulated_machine

    session = window_runs
    config = dataclasses.replace(BACKGROUND_CASES[name], explain=True)
    if config.mode == "speculative":
        session.load_draft(smollm_drafts["default-q3_k_m"])
    curve = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    made = {}
    for background in (False, True):
        session.explain_in_background = background
        with simulated_machine(session, curve, curve):
            events = list(session.run(config, session.tokenize_prompt(CODE_PROMPT)))
        steps = [e for e in events if isinstance(e, StepDone)]
        assert all(isinstance(t.why, Explanation) for e in steps for t in e.tokens)
        made[background] = [(e.step, t.id, t.source, t.why) for e in steps for t in e.tokens]
    assert made[True] == made[False]
    assert any(why.proposed >= 0 for *_, why in made[True]) or name == "plain"


def test_each_steps_kv_picture_follows_its_step_while_the_next_step_decodes(window_runs):
    """With explanations made beside the run, a step's events leave after the next step decoded; its
    KV picture is taken when the step ends (engine.runner), so it is the picture a consumer took
    at the step itself before."""
    session = window_runs
    config = RunConfig(mode="lookup", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=4), explain=True)
    prompt = session.tokenize_prompt(CODE_PROMPT)
    session.explain_in_background, session.step_snapshots = False, False
    taken = {}
    for event in session.run(config, prompt):
        if isinstance(event, StepDone):
            taken[event.step] = session.kv_snapshot(event.step, config.n_sequences)
    session.explain_in_background, session.step_snapshots = True, True
    events = list(session.run(config, prompt))
    followed = {}
    for before, event in zip(events, events[1:]):
        if isinstance(before, StepDone):
            assert isinstance(event, KvSnapshot) and event.step == before.step
            followed[event.step] = event
    assert followed.keys() == taken.keys() and len(taken) > 5
    for step, mine in followed.items():
        theirs = taken[step]
        assert (mine.used, mine.seq_pos_max) == (theirs.used, theirs.seq_pos_max), f"step {step}"
        np.testing.assert_array_equal(mine.seq_of_cell, theirs.seq_of_cell)
        np.testing.assert_array_equal(mine.pos_of_cell, theirs.pos_of_cell)


@pytest.mark.parametrize("held", [False, True])
def test_a_held_run_decodes_no_step_ahead_of_the_one_it_shows(window_runs, held):
    """Plain decoding with explanations made beside it: each step's tokens reach the consumer after
    the next step decoded, unless the run is held (a demo paused between steps), when the cache the
    consumer sees holds exactly the tokens shown."""
    session = window_runs
    session.run_ahead = (lambda: False) if held else None
    prompt = session.tokenize_prompt(CODE_PROMPT)
    shown, ahead = 0, []
    for event in session.run(RunConfig(max_tokens=12, explain=True), prompt):
        if isinstance(event, StepDone):
            shown += len(event.tokens)
            # the cache holds the prompt and every token shown but the newest (decoded next)
            ahead.append(session.target.memory.pos_max(0) + 1 - (len(prompt) + shown - 1))
    if held:
        assert set(ahead) == {0}
    else:  # its explanations are handed over as the next step decodes: it leaves after that decode
        assert len(ahead) > 2 and min(ahead[:-1]) >= 1 and ahead[-1] == 0


def test_stop_and_a_failed_explanation_end_a_run_explained_beside_it_cleanly(window_runs, monkeypatch):
    """Stop while explanations are made beside the run: it ends cancelled, every token it shows
    explained. An explanation that fails fails the run where its events would leave, as one made in
    line does; the session's next run is whole."""
    from specdec_studio.engine.events import RunFinished
    from specdec_studio.engine.strategies.explain import Explainer

    session = window_runs
    config = RunConfig(mode="lookup", max_tokens=200, speculative=SpeculativeParams(k=4), explain=True)
    prompt = session.tokenize_prompt(CODE_PROMPT)
    steps, finished = [], None
    for event in session.run(config, prompt):
        if isinstance(event, StepDone):
            steps.append(event)
            if len(steps) == 5:
                session.cancel()
        finished = event
    assert isinstance(finished, RunFinished) and finished.finish_reason == "cancelled"
    assert all(isinstance(t.why, Explanation) for e in steps for t in e.tokens)
    assert len(steps) <= 7  # the step in flight at the Stop, and the one whose explanations it held

    real = Explainer._explain
    calls = []

    def failing(self, *args):
        calls.append(1)
        if len(calls) == 9:
            raise RuntimeError("an explanation that fails")
        return real(self, *args)

    with monkeypatch.context() as patched:
        patched.setattr(Explainer, "_explain", failing)
        with pytest.raises(RuntimeError, match="an explanation that fails"):
            list(session.run(config, prompt))
    done = list(session.run(dataclasses.replace(config, max_tokens=16), prompt))
    assert done[-1].finish_reason == "length" and len(done[-1].token_ids) == 16


def test_a_decode_leaves_a_core_only_where_llama_cpps_threads_are_fewer_than_the_cores(smollm_session, monkeypatch):
    """The window makes explanations beside the decode only where a core is free of it (measured:
    where llama.cpp's threads take every core, a thread beside them costs the decode as much)."""
    import os

    from specdec_studio.engine.models.devices import decode_leaves_a_core

    session = smollm_session
    threads = max(session.n_threads, session.n_threads_batch)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(threads)))
    assert not decode_leaves_a_core(session.model, threads)
    monkeypatch.setattr(os, "sched_getaffinity", lambda _pid: set(range(threads + 1)))
    assert decode_leaves_a_core(session.model, threads)


def test_explanations_survive_a_trace_and_an_old_trace_still_loads(smollm_session, tmp_path):
    config = RunConfig(mode="lookup", max_tokens=24, speculative=SpeculativeParams(k=4), explain=True)
    recorder = TraceRecorder()
    for event in smollm_session.run(config, smollm_session.tokenize_prompt(CODE_PROMPT)):
        recorder.add(event)
    path = tmp_path / "run.jsonl"
    trace.save(recorder.trace(), path)
    loaded = trace.load(path)
    steps = lambda t: [e for _, e in t.events if isinstance(e, StepDone)]  # noqa: E731
    assert [s.tokens for s in steps(loaded)] == [s.tokens for s in steps(recorder.trace())]
    assert all(tok.why is not None for s in steps(loaded) for tok in s.tokens)

    # the same run as version 1 wrote it: no explanations, and it loads, explaining nothing
    lines = path.read_text(encoding="utf-8").splitlines()
    header = json.loads(lines[0])
    header["version"] = 1
    old = [json.dumps(header)]
    for line in lines[1:]:
        record = json.loads(line)
        if record["type"] == "StepDone":
            record["data"]["tokens"] = [row[:3] for row in record["data"]["tokens"]]
        old.append(json.dumps(record))
    old_path = tmp_path / "old.jsonl"
    old_path.write_text("\n".join(old) + "\n", encoding="utf-8")
    old_trace = trace.load(old_path)
    assert [[t.id for t in s.tokens] for s in steps(old_trace)] == [[t.id for t in s.tokens] for s in steps(loaded)]
    assert all(tok.why is None for s in steps(old_trace) for tok in s.tokens)


def test_a_damaged_explanation_is_a_damaged_trace(smollm_session, tmp_path):
    config = RunConfig(max_tokens=4, explain=True)
    recorder = TraceRecorder()
    for event in smollm_session.run(config, smollm_session.tokenize_prompt(CODE_PROMPT)):
        recorder.add(event)
    path = tmp_path / "run.jsonl"
    trace.save(recorder.trace(), path)
    text = path.read_text(encoding="utf-8")
    assert '"top": [[' in text
    damaged = text.replace('"top": [[', '"top": [["x", ', 1)
    path.write_text(damaged, encoding="utf-8")
    with pytest.raises(trace.TraceError, match="corrupted at line"):
        trace.load(path)


def test_each_verdict_names_its_rule_and_numbers():
    top = ((5, " the", 0.61), (6, " a", 0.2))
    greedy = Explanation(top, 0.61, " the", 6, " a", "draft", False, ((6, " a", 0.48),))
    assert verdict(greedy) == ("Greedy: the target's argmax was ' the' (p 0.61); the draft model proposed ' a' "
                               "(q 0.48): rejected; ' the' replaced it.")
    rule = Explanation(top, 0.61, " the", 6, " a", "draft", False, ((6, " a", 0.48),), "", True, 0.2, 0.48, 0.52)
    assert "min(1, p/q) = min(1, 0.200/0.480) = 0.42; drew 0.52: rejected" in verdict(rule)
    assert "took its place" in verdict(rule, rejected_ghost=True)
    matched = Explanation(top, 0.61, " the", 5, " the", "lookahead", True, (), "", True, 0.61, None, None)
    assert "the target drew ' the' (p 0.61)" in verdict(matched) and verdict(matched).endswith("accepted.")
    assert (
        verdict(Explanation(top, 0.61, " the")) == "Nothing was proposed here: the target's argmax was ' the' (p 0.61)."
    )

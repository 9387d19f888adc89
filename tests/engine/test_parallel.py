"""Batch decoding of many prompts: every prompt's output equals its single run, a finished prompt
keeps only its verified cells and the next prompt that starts the same way reuses them (the KV
mirror still equal to llama.cpp's dump), Stop ends every prompt."""

from __future__ import annotations

import pytest

from specdec_studio.engine.tuning import probe
from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.parallel import BatchFinished, BatchJob, JobFinished, JobStarted, JobStep, run_batch
from specdec_studio.engine.session import Session
from tests.conftest import CODE_PROMPT, N_THREADS, PROSE_PROMPT
from tests.engine.lossless import assert_lossless

PROMPTS = [  # six prompts of different lengths
    "The capital of France is",
    CODE_PROMPT,
    PROSE_PROMPT,
    "List three colours:\n1.",
    "def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\ndef mul(a, b):\n",
    "Once upon a time, in a small village by the sea, there lived an old fisherman who",
]
N_TOKENS = 24


@pytest.fixture(scope="module")
def session(smollm_path, smollm_drafts):
    with Session(smollm_path, n_ctx=2048, n_threads=N_THREADS, draft_path=smollm_drafts["default-q3_k_m"],
                 verify_kv=True) as s:
        yield s


def _jobs(session) -> list[BatchJob]:
    return [BatchJob(f"p{i}", tuple(session.tokenize_prompt(p))) for i, p in enumerate(PROMPTS)]


def _single(session, config, tokens) -> tuple[int, ...]:
    final = [e for e in session.run(config, list(tokens)) if isinstance(e, RunFinished)][0]
    return final.token_ids


def _batch(session, config, jobs, parallel) -> list:
    return list(run_batch(session, config, jobs, parallel))


CONFIGS = {
    "plain": RunConfig(max_tokens=N_TOKENS),
    "lookup": RunConfig(mode="lookup", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=3)),
    "speculative": RunConfig(mode="speculative", max_tokens=N_TOKENS, speculative=SpeculativeParams(k=3)),
    "auto": RunConfig(mode="auto", max_tokens=N_TOKENS),
}


@pytest.fixture(scope="module")
def single_outputs(session) -> dict[str, list[tuple[int, ...]]]:
    jobs = _jobs(session)
    plain = [_single(session, CONFIGS["plain"], job.tokens) for job in jobs]
    return {"plain": plain}


@pytest.fixture(scope="module")
def shared_cache_deviation(session, single_outputs) -> float:
    """How far a prompt's logits move when its cells share the cache with another prompt's
    (measured, per prompt, at the end of its single run's output)."""
    jobs = _jobs(session)
    worst = 0.0
    for job, out in zip(jobs, single_outputs["plain"]):
        others = [j.tokens for j in jobs if j is not job][:2]
        worst = max(worst, probe.shared_cache_deviation(session, [*job.tokens, *out[:-1]], others))
    return worst


# one slot (the single run's very cells) and four (three for speculation) sharing the cache; two
# slots share it too, and run under -m slow, as do the drafting modes in one slot (their tokens are
# checked in four, and one slot's cells are plain's, checked exactly here)
SLOTS_AND_MODES = [pytest.param(parallel, mode, id=f"{parallel}-{mode}",
                                marks=pytest.mark.slow if parallel == 2 or (parallel == 1 and mode != "plain") else ())
                   for parallel in (1, 2, 4) for mode in CONFIGS]


@pytest.mark.parametrize("parallel, mode", SLOTS_AND_MODES)
def test_every_prompt_equals_its_single_run(session, single_outputs, shared_cache_deviation, mode, parallel):
    if mode == "speculative" and parallel == 4:
        parallel = 3  # the draft context's sequences grow too; 3 keeps the run short
    jobs = _jobs(session)
    events = _batch(session, CONFIGS[mode], jobs, parallel)
    finished = {e.job_id: e for e in events if isinstance(e, JobFinished)}
    assert set(finished) == {job.id for job in jobs}
    for job, expected in zip(jobs, single_outputs["plain"]):
        got = finished[job.id]
        assert got.finish_reason in ("length", "stop")
        if parallel == 1:  # one sequence: the very cells and kernels of the single run
            assert got.token_ids == expected, (mode, parallel, job.id)
        else:  # a near-tie may flip where sharing the cache moved the logits more than plain's margin
            assert_lossless(session, job.tokens, expected, got.token_ids, shared_cache_deviation,
                            f"{mode} P={parallel} {job.id}")
        # the streamed steps add up to the final text
        steps = [e for e in events if isinstance(e, JobStep) and e.job_id == job.id]
        assert "".join(t.text for s in steps for t in s.tokens) == got.text
    # at most `parallel` prompts at once, in distinct sequences
    started = [e for e in events if isinstance(e, JobStarted)]
    assert {e.slot for e in started} == set(range(min(parallel, len(jobs))))
    summary = events[-1]
    assert isinstance(summary, BatchFinished)
    assert summary.stats["n_predict"] == sum(len(e.token_ids) for e in finished.values())
    if parallel > 1:
        assert summary.stats["mean_batch_tokens"] > 1.0  # slots really shared decodes
    assert session.memory.verifier.n_checked > 0  # the mirror was checked against llama.cpp's dump
    if mode == "auto":  # each prompt's figures carry Auto's decisions
        assert all("decisions" in e.stats["auto"] for e in finished.values())
        assert any(s.n_accepted for s in events if isinstance(s, JobStep))


def test_a_finished_prompt_keeps_only_its_verified_cells(session):
    jobs = _jobs(session)[:3]
    jobs[0] = BatchJob(jobs[0].id, jobs[0].tokens, max_tokens=3)  # ends long before the others
    run = run_batch(session, CONFIGS["lookup"], jobs, 3)
    mirror = session.memory.mirror
    kept_while_others_ran = False
    for event in run:
        if isinstance(event, JobFinished) and event.job_id == jobs[0].id:
            assert event.token_ids and len(event.token_ids) == 3
            # its prompt and its first two tokens (the third was sampled, never decoded): no draft's cell
            assert mirror.base.seq_pos_max(event.slot) == len(jobs[0].tokens) + 1
            others = [s for s in range(3) if s != event.slot]
            kept_while_others_ran = all(mirror.base.seq_pos_max(s) >= 0 for s in others)
    assert kept_while_others_ran
    # a queue longer than the slots: the freed slot takes the next prompt
    events = _batch(session, CONFIGS["plain"], [BatchJob(f"q{i}", j.tokens, max_tokens=4 + 6 * i)
                                                for i, j in enumerate(_jobs(session))], 2)
    starts = [e for e in events if isinstance(e, JobStarted)]
    assert len(starts) == 6 and {e.slot for e in starts} == {0, 1}


def test_a_prompt_goes_to_the_slot_holding_its_start_and_decodes_only_the_rest(session, shared_cache_deviation):
    """A chat's next turn resends the conversation: of two free slots, it takes the one whose cells
    hold its start (not the first free one), decodes only the rest, and answers as its single run."""
    first, second = _jobs(session)[:2]
    follow_up = BatchJob("next", second.tokens + tuple(session.tokenize_prompt(" And then")))
    jobs = [BatchJob(first.id, first.tokens, max_tokens=3), BatchJob(second.id, second.tokens, max_tokens=3),
            follow_up]
    events = _batch(session, CONFIGS["plain"], jobs, 2)
    started = {e.job_id: e.slot for e in events if isinstance(e, JobStarted)}
    assert started[first.id] == 0 and started[second.id] == 1 and started["next"] == 1
    finished = {e.job_id: e for e in events if isinstance(e, JobFinished)}
    assert finished["next"].stats["n_prompt_cached"] == len(second.tokens)
    assert finished[first.id].stats["n_prompt_cached"] == 0
    alone = _single(session, CONFIGS["plain"], follow_up.tokens)
    # the other slot's cells share the cache, as in every batch of two
    assert_lossless(session, follow_up.tokens, alone, finished["next"].token_ids, shared_cache_deviation,
                    "reused prefix")


def test_stop_ends_every_prompt(session):
    jobs = _jobs(session)
    session.cancel_flag.clear()
    finished = []
    for event in run_batch(session, CONFIGS["plain"], jobs, 2):
        if isinstance(event, JobStep) and event.step == 2:
            session.cancel()
        if isinstance(event, JobFinished):
            finished.append(event)
    session.cancel_flag.clear()
    assert {e.job_id for e in finished} == {j.id for j in jobs}
    assert all(e.finish_reason == "cancelled" for e in finished)
    assert sum(1 for e in finished if e.token_ids) == 2  # the two running; the queued never started


def test_a_prompt_too_long_for_its_slot_is_reported_not_run(session):
    long = BatchJob("long", tuple(session.tokenize_prompt(CODE_PROMPT * 20)))
    events = _batch(session, CONFIGS["plain"], [long, _jobs(session)[0]], 4)
    finished = {e.job_id: e for e in events if isinstance(e, JobFinished)}
    assert finished["long"].finish_reason == "error" and "cells" in finished["long"].stats["error"]
    assert finished["p0"].finish_reason == "length"


def test_cli_batch_writes_one_line_per_prompt_in_input_order(smollm_path, tmp_path, capsys):
    import json

    from specdec_studio.engine.cli import main

    prompts = tmp_path / "in.jsonl"
    prompts.write_text("".join(json.dumps({"id": f"x{i}", "prompt": p}) + "\n" for i, p in enumerate(PROMPTS[:3]))
                       + json.dumps({"id": "short", "prompt": PROMPTS[3], "max_tokens": 2}) + "\n")
    out = tmp_path / "out.jsonl"
    assert main(["batch", "-m", str(smollm_path), "-f", str(prompts), "--parallel", "2", "--mode", "lookup",
                 "-n", "12", "-o", str(out), "-t", str(N_THREADS)]) == 0
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [line["id"] for line in lines] == ["x0", "x1", "x2", "short"]
    assert all(set(line) == {"id", "text", "token_ids", "finish_reason", "stats"} for line in lines)
    assert [len(line["token_ids"]) for line in lines] == [12, 12, 12, 2]
    assert "4 prompts, 2 at a time" in capsys.readouterr().err
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": 1}\n')
    assert main(["batch", "-m", str(smollm_path), "-f", str(bad)]) == 2
    assert "needs an \"id\" and a \"prompt\"" in capsys.readouterr().err


# 26 s a mode here: under -m slow. The regular run checks batches of 1 to 4 prompts in every mode
# (test_every_prompt_equals_its_single_run) and every strategy past 512 cells on one sequence
# (test_long_context.py); this one adds two long prompts sharing the cache past 512 cells.
@pytest.mark.slow
@pytest.mark.parametrize("mode", ["plain", "lookup"])
def test_past_512_cells_every_flip_is_a_near_tie(session, mode):
    """Two long prompts share the cache past 512 cells, where llama.cpp's attention sums in
    another order for a single row (plain) than for several (a batch): any token that differs from
    the single run must sit where plain's top-2 margin is below the deviation measured there."""
    long_prompts = [CODE_PROMPT * 9, (PROSE_PROMPT + " ") * 40]  # 630 and about 560 tokens
    jobs = [BatchJob(f"long{i}", tuple(session.tokenize_prompt(p))) for i, p in enumerate(long_prompts)]
    assert all(len(j.tokens) > 512 for j in jobs)
    expected = [_single(session, CONFIGS["plain"], j.tokens) for j in jobs]
    deviation = max(probe.shared_cache_deviation(session, [*j.tokens, *out[:-1]], [other.tokens])
                    for j, out, other in zip(jobs, expected, jobs[::-1]))
    events = _batch(session, CONFIGS[mode], jobs, 2)
    finished = {e.job_id: e for e in events if isinstance(e, JobFinished)}
    for job, single in zip(jobs, expected):
        assert finished[job.id].finish_reason == "length"
        assert_lossless(session, job.tokens, single, finished[job.id].token_ids, deviation,
                        f"{mode} P=2 past 512 cells {job.id}")


def test_a_slot_starting_a_prompt_keeps_the_other_slots_drafts(session, smollm_path, smollm_drafts):
    """The draft context is shared by the slots: a slot that takes the next prompt clears only its
    own sequence. With the target drafting for itself every slot's drafts stay (nearly) always
    right; a slot whose draft cache had been emptied under it would draft from nothing."""
    session.load_draft(smollm_path)
    checked_restart = False
    try:
        jobs = _jobs(session)
        # p0 ends first, so slot 0 takes p4 while the three other slots are mid-run
        jobs[0] = BatchJob(jobs[0].id, jobs[0].tokens, max_tokens=3)
        events = []
        for event in run_batch(session, CONFIGS["speculative"], jobs, 4):
            events.append(event)
            if isinstance(event, JobStep) and event.job_id == jobs[4].id and event.step == 0:
                # slot 0 has just decoded p4's prompt into the draft: the other slots' draft cells
                # are still there, and the draft's mirror still says what llama.cpp holds
                draft_memory = session.draft.memory
                for seq in range(4):
                    assert draft_memory.mirror.base.seq_pos_max(seq) == draft_memory.pos_max(seq), seq
                    assert draft_memory.pos_max(seq) >= 0, f"slot {seq}'s draft cache was emptied"
                checked_restart = True
    finally:
        session.load_draft(smollm_drafts["default-q3_k_m"])
    assert checked_restart  # slot 0 really took another prompt while the others ran
    finished = {e.job_id: e for e in events if isinstance(e, JobFinished)}
    for job_id, event in finished.items():
        s = event.stats
        if s["n_drafted"] >= 6:
            # the same model on both sides: only a near-tie flipped by the shared cache can miss
            assert s["n_accept"] >= 0.8 * s["n_drafted"], (job_id, s["n_accept"], s["n_drafted"])
    assert session.memory.verifier.n_checked > 0  # the target's mirror was checked on every decode

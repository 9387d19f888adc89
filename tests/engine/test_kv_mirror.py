"""The KV mirror equals llama.cpp's own dump (LLAMA_KV_CACHE_DEBUG=3) before every decode."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.events import KvSnapshot, RunFinished, StepDone
from specdec_studio.engine.kv.debug import KvMirrorMismatch
from specdec_studio.engine.memory import NoKvSlot
from specdec_studio.engine.session import Session
from tests.conftest import CODE_PROMPT, N_THREADS, PROSE_PROMPT


def _run_checked(session: Session, config: RunConfig, prompt: str) -> tuple[RunFinished, list[KvSnapshot]]:
    run = session.run(config, session.tokenize_prompt(prompt))  # may re-create the context
    before = session.memory.verifier.n_checked
    events = list(run)
    steps = [e for e in events if isinstance(e, StepDone)]
    assert session.memory.verifier.n_checked - before >= len(steps) > 0
    return events[-1], [e for e in events if isinstance(e, KvSnapshot)]


@pytest.fixture(scope="module")
def verified_smollm(smollm_path):
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS, verify_kv=True) as session:
        yield session


@pytest.mark.parametrize(
    "config",
    [
        RunConfig(max_tokens=40),
        RunConfig(mode="lookahead", max_tokens=40, lookahead=LookaheadParams(15, 5, 15)),  # ~120 cells a step
        # the reference layout's wide window under -m slow (its 4-3-4 window is checked regularly),
        # and the ordered layout's narrow one (its wide one is)
        pytest.param(RunConfig(mode="lookahead", max_tokens=60, lookahead=LookaheadParams(15, 5, 15, ordered_kv=False)),
                     marks=pytest.mark.slow),
        pytest.param(RunConfig(mode="lookahead", max_tokens=60, lookahead=LookaheadParams(4, 3, 4)),
                     marks=pytest.mark.slow),
        RunConfig(mode="lookahead", max_tokens=60, lookahead=LookaheadParams(4, 3, 4, ordered_kv=False)),
        RunConfig(mode="lookup", max_tokens=60, speculative=SpeculativeParams(k=4)),
    ],
    ids=["plain", "lookahead-15-5-15", "lookahead-15-5-15-reference", "lookahead-4-3-4",
         "lookahead-4-3-4-reference", "lookup"],
)
def test_mirror_matches_llama_cpp_during_runs(verified_smollm, config):
    final, snapshots = _run_checked(verified_smollm, config, CODE_PROMPT)
    assert final.finish_reason in ("length", "stop")
    last = snapshots[-1]
    n_seq = config.n_sequences
    # the arrays end at the last used cell; the cells past them are free
    assert last.cache_cells == verified_smollm.memory.mirror.base.size > last.width
    assert last.seq_of_cell.shape == (n_seq, last.width) and last.pos_of_cell[-1] >= 0
    full = last.padded()
    assert full.seq_of_cell.shape == (n_seq, last.cache_cells) and not full.kept[:, last.width:].any()
    assert (full.pos_of_cell[last.width:] == -1).all() and (full.written_step[last.width:] == -1).all()
    assert last.seq_of_cell.flags["C_CONTIGUOUS"] and last.seq_of_cell.dtype == bool
    assert last.used == int(np.count_nonzero(last.pos_of_cell >= 0))
    # the snapshot shows the cache as the last decode left it; the live mirror equals llama.cpp
    live_min, live_max = verified_smollm.memory.mirror.base.seq_ranges()
    for s in range(n_seq):
        assert live_max[s] == verified_smollm.memory.pos_max(s)
        assert live_min[s] == verified_smollm.memory.pos_min(s)
        assert last.seq_pos_max[s] >= live_max[s]


def test_reference_layout_fragments_the_cache(verified_smollm):
    """llama-lookahead's KV management leaves holes between steps; ordered cells leave none."""
    holes = {}
    for ordered in (False, True):
        config = RunConfig(mode="lookahead", max_tokens=60, lookahead=LookaheadParams(4, 3, 4, ordered_kv=ordered))
        run = verified_smollm.run(config, verified_smollm.tokenize_prompt(CODE_PROMPT))
        seen = []
        for item in run:
            if isinstance(item, StepDone):  # lookahead reports a step after tidying the cache
                seen.append(verified_smollm.memory.mirror.base.fragmentation()[0])
        holes[ordered] = max(seen)
    assert holes[False] > 0
    assert holes[True] == 0


def test_mirror_matches_for_speculation_on_both_models(smollm_path):
    with Session(smollm_path, n_ctx=512, n_threads=N_THREADS, verify_kv=True, draft_path=smollm_path) as session:
        _run_checked(session, RunConfig(mode="speculative", max_tokens=48, speculative=SpeculativeParams(k=4)),
                     CODE_PROMPT)
        assert session.draft.memory.verifier.n_checked > 10


def test_mirror_matches_for_an_iswa_model(gemma_path):
    with Session(gemma_path, n_ctx=512, n_threads=N_THREADS, verify_kv=True) as session:
        assert len(session.memory.mirror.caches) == 2  # Gemma-3: a full cache and a sliding-window one
        _run_checked(session, RunConfig(mode="lookahead", max_tokens=40, lookahead=LookaheadParams(4, 3, 4)),
                     PROSE_PROMPT)
        _run_checked(session, RunConfig(max_tokens=20), PROSE_PROMPT)


def test_mirror_matches_over_a_three_turn_chat(verified_smollm):
    from specdec_studio.engine.chat.turns import Chat

    chat = Chat(verified_smollm)
    for text in ("Name a colour.", "Name a fruit of that colour.", "And a vegetable?"):
        before = verified_smollm.memory.verifier.n_checked
        events = list(chat.send(RunConfig(max_tokens=24), text))
        assert any(isinstance(e, RunFinished) for e in events)
        assert verified_smollm.memory.verifier.n_checked > before
    assert len(chat.conversation.messages) == 6


def test_a_wrong_mirror_is_reported_with_the_cell(verified_smollm):
    events = verified_smollm.run(RunConfig(max_tokens=8), verified_smollm.tokenize_prompt(PROSE_PROMPT))
    with pytest.raises(KvMirrorMismatch, match="cell 3: the mirror has '.', llama.cpp has '0'"):
        for event in events:
            if isinstance(event, StepDone):
                verified_smollm.memory.mirror.base.pos[3] = -1  # corrupt the mirror on purpose
                verified_smollm.memory.mirror.base.seqs[3] = False
    verified_smollm.memory.clear()


# ----------------------------------------------------------------------------- property test
N_CELLS = 256
N_SEQ = 4

op = st.one_of(
    st.tuples(st.just("decode"), st.sets(st.integers(0, N_SEQ - 1), min_size=1, max_size=N_SEQ),
              st.integers(1, 40), st.integers(0, 3), st.booleans()),
    st.tuples(st.just("seq_rm"), st.integers(-1, N_SEQ - 1), st.integers(-1, 60), st.integers(-1, 80)),
    st.tuples(st.just("seq_cp"), st.integers(0, N_SEQ - 1), st.integers(0, N_SEQ - 1), st.integers(-1, 40),
              st.integers(-1, 80)),
    st.tuples(st.just("seq_keep"), st.integers(0, N_SEQ - 1)),
    st.tuples(st.just("seq_add"), st.integers(0, N_SEQ - 1), st.integers(-1, 40), st.integers(-1, 80),
              st.integers(-8, 8)),
    st.tuples(st.just("clear")),
)


@pytest.fixture(scope="module")
def small_session(smollm_path):
    with Session(smollm_path, n_ctx=N_CELLS, n_batch=N_CELLS, n_threads=N_THREADS, verify_kv=True) as session:
        session._make_context(N_SEQ)
        yield session


def _execute(session: Session, action: tuple, rng: np.random.Generator) -> None:
    memory, batch = session.memory, session.batch
    kind = action[0]
    if kind == "decode":
        _, seqs, n_tokens, extra_group, fill = action
        seqs = sorted(seqs)
        ranges = [(memory.pos_min(s), memory.pos_max(s)) for s in seqs]
        if len(set(ranges)) > 1:  # sequences decoded together must be coupled (same range)
            seqs = seqs[:1]
        start = memory.pos_max(seqs[0]) + 1
        batch.clear()
        if memory.mirror.base.used > N_CELLS - 16:
            event("cache nearly full")
        if fill:  # nearly fill the cache so that some decodes fail for lack of space
            # sometimes exactly what is free, sometimes a little less, sometimes a little more
            n_tokens = min(batch.capacity, max(1, N_CELLS - memory.mirror.base.used + int(rng.integers(-6, 4))))
        for i in range(n_tokens):
            batch.add(int(rng.integers(0, 1000)), start + i, seqs, i == n_tokens - 1)
        others = [s for s in range(N_SEQ) if s not in seqs and memory.pos_max(s) < 0]
        if extra_group and others and batch.n_tokens + extra_group <= batch.capacity:
            for i in range(extra_group):  # a second, independent sequence in the same batch
                batch.add(int(rng.integers(0, 1000)), i, (others[0],), False)
        before = memory.mirror.base.copy()
        try:
            memory.decode(batch)
            event("decode placed")
        except NoKvSlot:
            event("decode refused: no slot (mirror unchanged)")
            after = memory.mirror.base
            assert np.array_equal(before.pos, after.pos) and np.array_equal(before.seqs, after.seqs)
            assert before.head == after.head
    elif kind == "seq_rm":
        memory.seq_rm(action[1], action[2], action[3])
    elif kind == "seq_cp":
        memory.seq_cp(action[1], action[2], action[3], action[4])
    elif kind == "seq_keep":
        memory.seq_keep(action[1])
    elif kind == "seq_add":
        memory.seq_add(action[1], action[2], action[3], action[4])
    elif kind == "clear":
        memory.clear()
    pos_min, pos_max = memory.mirror.base.seq_ranges()
    for s in range(N_SEQ):
        assert (pos_min[s], pos_max[s]) == (memory.pos_min(s), memory.pos_max(s)), (action, s)
    # the count of used cells is kept by each call, not recounted: it must still be the count, and
    # the holes and free runs worked out from it must be those of the cells themselves
    cells = memory.mirror.base
    assert cells.used == int(np.count_nonzero(cells.pos >= 0)), action
    # the memory calls look below the bound only: no cell at or past it may be in use
    assert not (cells.pos[cells.bound:] >= 0).any() and not cells.seqs[cells.bound:].any(), action
    assert cells.fragmentation() == _fragmentation_cell_by_cell(cells.pos), action


def _fragmentation_cell_by_cell(pos: np.ndarray) -> tuple[int, int]:
    """(empty cells below the last used one, longest run of empty cells), one cell at a time."""
    used = [i for i, p in enumerate(pos) if p >= 0]
    top = used[-1] + 1 if used else 0
    holes = sum(1 for p in pos[:top] if p < 0)
    largest = run = 0
    for p in pos:
        run = run + 1 if p < 0 else 0
        largest = max(largest, run)
    return holes, largest


@pytest.mark.parametrize("n_programs", [pytest.param(30, id="30-programs"),
                                        pytest.param(300, id="300-programs", marks=pytest.mark.slow)])
def test_random_programs_keep_mirror_and_llama_cpp_equal(small_session, n_programs):
    # the regular run checks the same programs every time (its time and its cases stay put); -m slow
    # draws new ones each run
    @settings(max_examples=n_programs, deadline=None, database=None, derandomize=n_programs == 30,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(program=st.lists(op, min_size=1, max_size=10), seed=st.integers(0, 2**16))
    def check(program, seed):
        _check_program(small_session, program, seed)

    check()


def _check_program(small_session, program, seed) -> None:
    rng = np.random.default_rng(seed)
    small_session.memory.clear()
    checked = small_session.memory.verifier.n_checked
    for action in program:
        _execute(small_session, action, rng)
    # a final decode checks the state the program left against llama.cpp's dump
    small_session.batch.clear()
    small_session.memory.clear()
    small_session.batch.add(1, 0, (0,), True)
    small_session.memory.decode(small_session.batch)
    assert small_session.memory.verifier.n_checked > checked

"""The run's KV pictures kept as keyframes and changes: every step rebuilt exactly as it was added,
in memory that grows with the run rather than with its square."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_studio.engine.events import KvSnapshot, RecurrentState
from specdec_studio.engine.records.kv_history import KEYFRAME_EVERY, KvChange, KvHistory

N_CELLS = 48


def _snapshot(rng: np.random.Generator, previous: KvSnapshot | None, step: int, n_seq: int, width: int) -> KvSnapshot:
    """The step after ``previous``: its cells resized to ``width``, then a few of them changed in
    one array or another alone (a kept picture's removal, a written step, a position, a sequence)."""
    pos = np.full(width, -1, dtype=np.int32)
    seqs = np.zeros((n_seq, width), dtype=bool)
    kept = np.zeros((n_seq, width), dtype=bool)
    written = np.full(width, -1, dtype=np.int32)
    if previous is not None and previous.seq_of_cell.shape[0] == n_seq:
        common = min(previous.width, width)
        pos[:common], seqs[:, :common] = previous.pos_of_cell[:common], previous.seq_of_cell[:, :common]
        kept[:, :common] = previous.kept[:, :common]
        if previous.written_step is not None:
            written[:common] = previous.written_step[:common]
    for array in (pos, written, seqs, kept):
        if width and rng.random() < 0.5:
            cells = rng.integers(0, width, int(rng.integers(1, 4)))
            if array.ndim == 2:
                array[rng.integers(0, n_seq), cells] ^= True
            else:
                array[cells] = rng.integers(-1, 500, cells.size)
    with_kept = rng.random() < 0.7
    return KvSnapshot(step, seqs, pos, int((pos >= 0).sum()), int(rng.integers(0, 5)), int(rng.integers(0, 40)),
                      tuple(rng.integers(-1, 9, n_seq).tolist()), tuple(rng.integers(-1, 9, n_seq).tolist()),
                      kept if with_kept else None, written if rng.random() < 0.9 else None,
                      (RecurrentState(0, step, 1, 2, -1),) if step % 3 == 0 else (), N_CELLS)


def _same(a: KvSnapshot, b: KvSnapshot) -> bool:
    def equal(x, y) -> bool:
        return (x is None) == (y is None) and (x is None or (x.shape == y.shape and np.array_equal(x, y)))

    return ((a.step, a.used, a.holes, a.largest_free_run, a.seq_pos_min, a.seq_pos_max, a.states, a.cache_cells)
            == (b.step, b.used, b.holes, b.largest_free_run, b.seq_pos_min, b.seq_pos_max, b.states, b.cache_cells)
            and equal(a.seq_of_cell, b.seq_of_cell) and equal(a.pos_of_cell, b.pos_of_cell)
            and equal(a.kept_seq_of_cell, b.kept_seq_of_cell) and equal(a.written_step, b.written_step))


@settings(max_examples=60, deadline=None, derandomize=True)
@given(seed=st.integers(0, 2**16), n_steps=st.integers(1, 3 * KEYFRAME_EVERY + 5), n_seq=st.integers(1, 9),
       seq_counts=st.booleans(), whole_bytes=st.sampled_from([0, 2000]))
def test_every_step_is_rebuilt_as_it_was_added(seed, n_steps, n_seq, seq_counts, whole_bytes):
    """Changes from the first step on, or after a few whole pictures (a run past the budget)."""
    rng = np.random.default_rng(seed)
    history = KvHistory(whole_bytes)
    added = []
    width = int(rng.integers(0, N_CELLS + 1))
    for step in range(n_steps):
        # widths that grow, shrink and jump; now and then another sequence count (a new keyframe)
        width = (
            int(np.clip(width + rng.integers(-6, 9), 0, N_CELLS))
            if rng.random() < 0.9
            else int(rng.integers(0, N_CELLS + 1))
        )
        seqs_now = n_seq + (1 if seq_counts and rng.random() < 0.1 else 0)
        snap = _snapshot(rng, added[-1] if added else None, step, seqs_now, width)
        history.add(snap)
        added.append(snap)
    assert len(history) == n_steps and history.steps == list(range(n_steps))
    for snap in reversed(added):  # from the newest back: each one rebuilt from its own keyframe
        assert _same(history.get(snap.step), snap), snap.step
    assert history.get(n_steps) is None and history.before(0) is None
    assert _same(history.before(n_steps), added[-1])


def test_a_long_run_keeps_changes_not_pictures():
    """A plain run's growth: each step adds one cell to sequence 0. Its pictures would take
    n²/2 cells; past its budget of whole pictures the history keeps a keyframe every KEYFRAME_EVERY
    steps and one cell a step."""
    history = KvHistory(whole_bytes=0)
    n = 4 * KEYFRAME_EVERY
    full = 0
    for step in range(n):
        width = 100 + step
        snap = KvSnapshot(step, np.ones((1, width), bool), np.arange(width, dtype=np.int32), width, 0, N_CELLS,
                          (0,), (width - 1,), None, np.where(np.arange(width) >= 100, np.arange(width) - 99, -1)
                          .astype(np.int32), (), 4096)
        full += snap.seq_of_cell.nbytes + snap.pos_of_cell.nbytes + snap.written_step.nbytes
        history.add(snap)
    changes = [e for e in history._entries if isinstance(e, KvChange)]
    assert len(changes) == n - n // KEYFRAME_EVERY and all(c.cells.tolist() == [c.width - 1] for c in changes)
    assert history.nbytes < full / 8
    assert history.get(n - 2).pos_of_cell.shape == (100 + n - 2,)

"""Every step's KV picture of a run, kept in memory that grows with the run, not with its square.

A run's snapshot (:class:`engine.events.KvSnapshot`) covers the cells in use, so a run of n tokens
that kept all n of them would hold n pictures of up to n cells each: a 16,000-token run in a
16,384-cell cache, about 1.2 GB of pictures for plain decoding and several times that for
lookahead's 31 sequences. Consecutive steps differ in a few cells (the batch's, and those
verification removed). So once the whole pictures take WHOLE_BYTES, the history keeps every
KEYFRAME_EVERY-th snapshot whole and each other one as the cells that differ from the step before
it (:class:`KvChange`); a step's picture is rebuilt from the whole one before it on demand (the
step inspector's two pictures, a replay).

What is added is never changed: a history handed to another thread (a finished trace) is read there
and written nowhere.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from specdec_studio.engine.events import KvSnapshot

KEYFRAME_EVERY = 32  # a rebuilt picture applies at most 31 changes; keyframes cost 1/32 of full pictures
# pictures are kept whole until they take this much: a run of a thousand or two tokens never pays
# for the changes (~50 us a step in a run, the compared arrays cold after a decode), a long one does
WHOLE_BYTES = 32 << 20


class KvChange(NamedTuple):
    """A snapshot as the cells that differ from the one before it in its history, and its figures.
    (A named tuple: made once a step, and several times cheaper to make than a frozen dataclass.)"""

    step: int
    used: int
    holes: int
    largest_free_run: int
    seq_pos_min: tuple[int, ...]
    seq_pos_max: tuple[int, ...]
    states: tuple
    n_cells: int
    has_kept: bool  # the snapshot had a kept picture of its own (kept_seq_of_cell not None)
    has_written: bool
    width: int  # the cells the snapshot's arrays cover
    cells: np.ndarray  # (k,) int: the cells below ``width`` whose content differs, ascending
    pos: np.ndarray  # (k,) int32
    written: np.ndarray  # (k,) int32
    seqs: np.ndarray  # (n_seq, k) bool: the sequences after the decode
    kept: np.ndarray  # (n_seq, k) bool: after verification

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for a in (self.cells, self.pos, self.written, self.seqs, self.kept))


def _nbytes(snap: KvSnapshot) -> int:
    return sum(a.nbytes for a in (snap.seq_of_cell, snap.pos_of_cell, snap.kept_seq_of_cell, snap.written_step)
               if a is not None)


def _written(snap: KvSnapshot) -> np.ndarray:
    """The snapshot's written steps (-1, before the run, where it has none)."""
    return snap.written_step if snap.written_step is not None else np.full(snap.width, -1, dtype=np.int32)


def _differ(a: np.ndarray, b: np.ndarray, common: int) -> np.ndarray:
    """Per cell below ``common``: whether the (n_seq, cells) tables ``a`` and ``b`` differ there."""
    if a.shape[0] == 1:  # one sequence (plain, prompt lookup, speculation): a flat comparison
        return a[0, :common] != b[0, :common]
    return (a[:, :common] != b[:, :common]).any(axis=0)


def _change(before: KvSnapshot, after: KvSnapshot) -> KvChange | None:
    """``after`` as a change from ``before``; None where it cannot be one (another sequence count).
    Run on the thread that records, once a step: a handful of numpy calls over the cells in use."""
    if before.seq_of_cell.shape[0] != after.seq_of_cell.shape[0]:
        return None
    written_b = _written(after)
    common = min(before.width, after.width)
    differs = before.pos_of_cell[:common] != after.pos_of_cell[:common]
    differs |= _written(before)[:common] != written_b[:common]
    differs |= _differ(before.seq_of_cell, after.seq_of_cell, common)
    if before.kept_seq_of_cell is not None or after.kept_seq_of_cell is not None:
        differs |= _differ(before.kept, after.kept, common)
    # every cell past the earlier width is new; past the later one, free (the arrays stop there)
    cells = np.flatnonzero(differs)
    if after.width > common:
        cells = np.concatenate([cells, np.arange(common, after.width)])
    return KvChange(after.step, after.used, after.holes, after.largest_free_run, after.seq_pos_min,
                    after.seq_pos_max, after.states, after.cache_cells, after.kept_seq_of_cell is not None,
                    after.written_step is not None, after.width, cells, after.pos_of_cell[cells], written_b[cells],
                    after.seq_of_cell[:, cells], after.kept[:, cells])


def _apply(base: KvSnapshot, change: KvChange) -> KvSnapshot:
    """The snapshot ``change`` describes, from the one before it (``base``, whole)."""
    width, common = change.width, min(base.width, change.width)
    n_seq = base.seq_of_cell.shape[0]
    pos = np.full(width, -1, dtype=np.int32)
    pos[:common] = base.pos_of_cell[:common]
    written = np.full(width, -1, dtype=np.int32)
    written[:common] = _written(base)[:common]
    seqs = np.zeros((n_seq, width), dtype=bool)
    seqs[:, :common] = base.seq_of_cell[:, :common]
    kept = np.zeros((n_seq, width), dtype=bool)
    kept[:, :common] = base.kept[:, :common]
    cells = change.cells
    pos[cells], written[cells] = change.pos, change.written
    seqs[:, cells], kept[:, cells] = change.seqs, change.kept
    return KvSnapshot(change.step, seqs, pos, change.used, change.holes, change.largest_free_run, change.seq_pos_min,
                      change.seq_pos_max, kept if change.has_kept else None, written if change.has_written else None,
                      change.states, change.n_cells)


class KvHistory:
    """The snapshots of one run by step, in the order they were added."""

    def __init__(self, whole_bytes: int | None = None) -> None:
        self._entries: list[KvSnapshot | KvChange] = []
        self._index: dict[int, int] = {}  # step -> entry
        self._last: KvSnapshot | None = None  # the newest snapshot, whole: the next change's base
        # what whole snapshots may still take before changes are kept
        self._whole_left = WHOLE_BYTES if whole_bytes is None else whole_bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, step: object) -> bool:
        return step in self._index

    @property
    def steps(self) -> list[int]:
        return sorted(self._index)

    @property
    def nbytes(self) -> int:
        """The memory the pictures take (the keyframes' arrays and the changes)."""
        return sum(e.nbytes if isinstance(e, KvChange) else _nbytes(e) for e in self._entries)

    def add(self, snap: KvSnapshot) -> int:
        """Keep ``snap``; returns its place for :meth:`at` (a step added again: ``get`` gives the later)."""
        entry: KvSnapshot | KvChange | None = None
        if self._whole_left > 0:
            self._whole_left -= _nbytes(snap)
        elif len(self._entries) % KEYFRAME_EVERY:
            entry = _change(self._last, snap)
        self._index[snap.step] = len(self._entries)
        self._entries.append(snap if entry is None else entry)
        self._last = snap
        return len(self._entries) - 1

    def at(self, place: int) -> KvSnapshot:
        """The snapshot :meth:`add` kept at ``place``, whole."""
        return self._rebuild(place)

    def get(self, step: int) -> KvSnapshot | None:
        """The snapshot of ``step``, whole; None if none was added."""
        i = self._index.get(step)
        return None if i is None else self._rebuild(i)

    def before(self, step: int) -> KvSnapshot | None:
        """The snapshot of the latest step before ``step``."""
        earlier = [s for s in self._index if s < step]
        return self.get(max(earlier)) if earlier else None

    def _rebuild(self, i: int) -> KvSnapshot:
        if i == len(self._entries) - 1 and self._last is not None:
            return self._last
        start = i
        while isinstance(self._entries[start], KvChange):
            start -= 1
        snap = self._entries[start]
        for entry in self._entries[start + 1 : i + 1]:
            snap = _apply(snap, entry)
        return snap

"""The KV map draws a snapshot whose arrays stop at the last used cell (as the engine sends them)
exactly as the same snapshot over every cell of the cache: the free tail empty, in every colouring."""

from __future__ import annotations

import numpy as np

from specdec_studio.app.widgets.kv_map import COLOURINGS, EMPTY, KvMapView, cell_image
from specdec_studio.engine.events import KvSnapshot


def _trimmed(n_cells: int = 64) -> KvSnapshot:
    """Three sequences over 12 cells of a 64-cell cache; cell 11 written this step and removed."""
    seqs = np.zeros((3, 12), dtype=bool)
    seqs[0, :10] = True
    seqs[1, 8:12] = True
    seqs[2, 11] = True
    kept = seqs.copy()
    kept[:, 11] = False
    pos = np.arange(12, dtype=np.int32)
    written = np.where(pos < 6, -1, 3).astype(np.int32)
    return KvSnapshot(4, seqs, pos, 12, 0, n_cells - 12, (0, 8, 11), (9, 11, 11), kept, written, n_cells=n_cells)


def test_a_trimmed_snapshot_draws_as_the_whole_cache():
    snap = _trimmed()
    full = snap.padded()
    assert (snap.width, snap.cache_cells) == (12, 64) and full.width == full.cache_cells == 64
    assert not full.seq_of_cell[:, 12:].any() and (full.pos_of_cell[12:] == -1).all()
    for colouring in COLOURINGS:
        image = cell_image(snap, colouring, window=1, n_prompt=6, sources=np.full(6, 200, np.uint8))
        assert image.shape == (3, 64) and (image[:, 12:] == EMPTY).all()
        assert np.array_equal(image, cell_image(full, colouring, window=1, n_prompt=6,
                                                sources=np.full(6, 200, np.uint8)))


def test_the_map_counts_the_cache_not_the_arrays(qtbot):
    view = KvMapView()
    qtbot.addWidget(view)
    view.show()
    view.begin_run(0, 6)
    view.set_snapshot(_trimmed())
    assert "3 sequences × 64 cells" in view.figures.text()
    assert "1 removed by verification" in view.figures.text()


def test_the_cells_after_verification_are_counted_on_what_it_kept(qtbot):
    """The step inspector's "before" picture: the previous step's cells once its verification
    freed the rejected ones, with the figures counted on those cells, not on the decode's."""
    after = _trimmed().after_verification()
    assert after.kept_seq_of_cell is None and after.width == 11 and after.cache_cells == 64
    assert (after.used, after.holes, after.largest_free_run) == (11, 0, 53)
    assert after.seq_pos_min == (0, 8, -1) and after.seq_pos_max == (9, 10, -1)
    # a hole: sequence 0 kept nothing at cells 2-4 (sequence 1 keeps none of them either)
    snap = _trimmed()
    kept = snap.kept_seq_of_cell.copy()
    kept[0, 2:5] = False
    holed = KvSnapshot(snap.step, snap.seq_of_cell, snap.pos_of_cell, 12, 0, 52, (), (), kept, snap.written_step,
                       n_cells=64).after_verification()
    assert (holed.used, holed.holes, holed.largest_free_run) == (8, 3, 53) and holed.pos_of_cell[3] == -1
    view = KvMapView()
    qtbot.addWidget(view)
    view.begin_run(0, 6)
    view.set_snapshot(holed)
    assert "used cells 8 · holes 3 · largest empty run 53" in view.figures.text()
    assert "removed by verification" not in view.figures.text()

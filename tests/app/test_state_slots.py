"""The KV map beside a recurrent state: cells and state slots on a hybrid model, the slots alone
on a recurrent one, nothing new on a KV cache; a rollback between two paints is still told."""

from __future__ import annotations

import numpy as np

from specdec_studio.app.widgets.kv_map import KvMapView
from specdec_studio.engine.events import KvSnapshot, RecurrentState


def _snapshot(step: int, states: tuple) -> KvSnapshot:
    seqs = np.zeros((1, 32), dtype=bool)
    seqs[0, :10] = True
    pos = np.where(seqs[0], np.arange(32), -1).astype(np.int32)
    return KvSnapshot(step, seqs, pos, 10, 0, 22, (0,), (9,), states=states)


def test_state_slots_follow_the_model_memory(qtbot):
    view = KvMapView()
    qtbot.addWidget(view)
    view.show()
    view.begin_run(0, 5)
    restored = (RecurrentState(0, 10, 0, 0, -1, "checkpoint", 3, 2),)
    view.set_memory_kind("recurrent")
    view.set_snapshot(_snapshot(4, restored))
    assert not view.plot_area.isVisible() and view.state_slots.isVisible()
    assert view.figures.text() == "step 4 · 1 recurrent state · seq 0 back 3: checkpoint restored, 2 re-decoded"
    # a later step painted without a rollback still names the last one, with its step
    view.state_slots.note_rollbacks((RecurrentState(0, 12, 0, 0, 10, "checkpoint", 1, 0),), 6)
    view.set_snapshot(_snapshot(7, (RecurrentState(0, 14, 0, 0, 12),)))
    assert view.state_slots.last_rollback[0] == "step 6: back 1: checkpoint restored, 0 re-decoded"
    assert view.figures.text().endswith("no rollback this step")
    picture = view.state_slots.grab().toImage()
    assert picture.width() > 0 and picture.height() == view.state_slots.height()

    view.set_memory_kind("hybrid")
    view.set_snapshot(_snapshot(8, (RecurrentState(0, 15, 1, 16, -1, "snapshot", 2),)))
    assert view.plot_area.isVisible() and view.state_slots.isVisible()
    assert "recurrent state: seq 0 back 2 by llama.cpp's snapshot" in view.figures.text()

    view.set_memory_kind("attention")
    view.set_snapshot(_snapshot(9, ()))
    assert view.plot_area.isVisible() and not view.state_slots.isVisible()
    assert "recurrent" not in view.figures.text()
    view.begin_run(0, 5)
    assert view.state_slots.last_rollback == {}

"""The Batch view, offscreen on the real default model: P lanes stream side by side, the KV map
shows P sequences, Stop ends every prompt and the window stays usable."""

from __future__ import annotations

from tests.app.conftest import TIMEOUT_MS


def test_batch_view_streams_every_slot_and_maps_p_sequences(window, qtbot):
    window.controls.set_values({"mode": "lookup", "k": 3, "max_tokens": 16})
    view = window.batch_view
    view.count.setValue(6)
    view.parallel.setValue(4)
    view.run_button.click()
    assert window.model.running
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    assert len(view.lanes) == 4
    assert view.finished.count() == 6
    assert all(lane.stream.generated_text() for lane in view.lanes)
    assert view.kv_map.snapshot is not None and view.kv_map.snapshot.seq_of_cell.shape[0] == 4
    assert "tokens/s together" in view.summary.text()
    # every prompt's tokens streamed into a lane, coloured by source; the slots drafted
    assert view.n_tokens == sum(int(view.finished.item(i).text().split(": ")[1].split()[0]) for i in range(6))
    sources = {meta[2] for lane in view.lanes for meta in lane.stream._token_meta}
    assert "sampled" in sources and sources <= {"sampled", "accepted_draft"}
    assert view.n_drafted > 0


def test_stop_ends_a_batch_and_the_window_runs_again(window, qtbot):
    window.controls.set_values({"mode": "plain", "max_tokens": 200})
    view = window.batch_view
    view.count.setValue(10)
    view.parallel.setValue(2)
    view.run_button.click()
    qtbot.waitUntil(lambda: any(lane.n_tokens > 3 for lane in view.lanes), timeout=TIMEOUT_MS)
    window.gate.stop()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    items = [view.finished.item(i).text() for i in range(view.finished.count())]
    assert len(items) == 10 and all("cancelled" in item for item in items)
    assert window.input.run.isEnabled() or window.controls.error is not None


def test_a_new_batchs_lanes_replace_the_old_ones_and_no_old_lane_floats_as_a_window(window, qtbot):
    """Old lanes are deleted: unparented, a lane was a top-level window of its own, and one stood
    over the window's corner after the Batch tab went from one batch's slots to a server's."""
    import shiboken6

    view = window.batch_view
    old = []
    for parallel in (4, 2, 3):
        old += view.lanes
        view._set_lanes(parallel)
    qtbot.waitUntil(lambda: not any(shiboken6.isValid(lane) for lane in old), timeout=TIMEOUT_MS)
    assert len(view.lanes) == 3 and all(lane.parent() is not None for lane in view.lanes)

"""Draft training from the app: the draft menu's entry, a progress bar with loss and ETA, Stop
ends it early (what was trained is kept and loaded as the draft), the window stays usable."""

from __future__ import annotations

import pytest

from specdec_studio.app.widgets.model_picker import TRAIN_DRAFT
from tests.app.conftest import TIMEOUT_MS


# About 28 s (it generates, measures and trains for real); the engine's side of training, its Stop
# included, runs in make test (tests/engine/test_distill.py), the window's under -m slow.
@pytest.mark.slow
def test_training_shows_progress_stops_and_loads_the_draft(window, qtbot, smollm_drafts, tmp_path, monkeypatch):
    # the draft menu offers training
    assert window.model_bar.draft.findData(TRAIN_DRAFT) >= 0
    out = tmp_path / "trained.gguf"
    # the draft cut to its first 10 blocks: a third of the training's cost, and the dialog's
    # "Keep layers" path (the cut start is measured as the "before")
    window.jobs.start_training({"draft": str(smollm_drafts["default-q2_k"]), "keep_layers": 10, "prompts": "shipped",
                           "count": 5, "n_tokens": 48, "steps": 400, "output": str(out)})
    assert window.model.running and not window.training_bar.isHidden()
    qtbot.waitUntil(lambda: window.training_bar.value() >= 2, timeout=TIMEOUT_MS)
    assert "loss" in window.training_bar.format() and "ETA" in window.training_bar.format()
    window.gate.stop()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    assert window.training_bar.isHidden()
    qtbot.waitUntil(lambda: window.model.models.draft_path == str(out) and not window.model.machine.busy,
                    timeout=TIMEOUT_MS)
    message = window.statusBar().currentMessage()
    assert "Draft trained (stopped early)" in message and "greedy agreement" in message
    assert out.exists() and window.model_bar.draft.currentData() == str(out)
    assert (tmp_path / "trained.start-10-layers.gguf").exists()
    assert window.input.run.isEnabled()

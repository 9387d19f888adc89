"""The Tune panel and the predicted speed-up, offscreen, on the real default model."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest

from specdec_studio.app import exports
from specdec_studio.app.qt import QtCore, Qt
from specdec_studio.engine.models import catalog
from specdec_studio.engine.paths import cache_root
from specdec_studio.engine.tuning.probe import LONG_CONTEXT_CELLS
from specdec_studio.engine.records import report
from specdec_studio.engine.tuning import cost_model
from tests.conftest import CODE_PROMPT, SMOLLM_N_CTX, seed_profile

TIMEOUT_MS = 180_000


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory, smollm_profile):
    """Sweeps are kept per model in the cache: a fresh one for this module, so no sweep made
    elsewhere reopens here. It starts with the session's profile of the default model (the
    windows' setting is the one it was measured at), which the remeasure test measures anew."""
    cache = tmp_path_factory.mktemp("cache")
    seed_profile(smollm_profile, cache)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECDEC_MODELS", str(catalog.cache_dir()))
        mp.setenv("SPECDEC_CACHE", str(cache))
        yield
    # the exactness probe the window measured is the session's too (tests/conftest.py exactness_probe)
    session_cache = cache_root()
    for measured in (cache / "exactness").glob("*.json"):
        (session_cache / "exactness").mkdir(parents=True, exist_ok=True)
        shutil.copyfile(measured, session_cache / "exactness" / measured.name)


@pytest.fixture
def window(open_window, module_cache):
    return open_window(n_ctx=SMOLLM_N_CTX, wait_for_profile=True)


def _tiny_sweep(window) -> None:
    tune = window.tune
    tune.mode.setCurrentIndex(tune.mode.findData("lookahead"))
    tune.axis_edits["W"].setText("1,2")
    tune.axis_edits["N"].setText("2")
    tune.axis_edits["G"].setText("0,1")
    tune.set_categories(["code_editing", "maths"])
    tune.per_category.setValue(1)
    tune.tokens.setValue(24)


@pytest.mark.slow  # a whole sweep in the window (~45 s with its set-up); the engine's sweep is in make test
def test_tune_panel_sweeps_fills_the_heatmap_and_applies_the_best(window, qtbot):
    _tiny_sweep(window)
    filled = []
    original = window.tune.on_cell

    def record(event):
        original(event)
        image = window.tune.heatmap.image.image
        filled.append(int(np.count_nonzero(image)))

    window.tune.on_cell = record
    window.tune.request_sweep()
    assert window.model.running and window.tune.sweeping
    assert not window.input.run.isEnabled()  # no run while the sweep measures
    qtbot.waitUntil(lambda: not window.tune.sweeping, timeout=TIMEOUT_MS)
    window.drain_events()
    assert not window.model.running
    assert window.tune.progress.value() == window.tune.progress.maximum()
    # the heatmap filled in as cells were measured, and every cell is filled at the end
    assert filled == sorted(filled) and filled[-1] == 4 and len(filled) == 4
    image = window.tune.heatmap.image.image
    assert image.shape == (2, 2) and np.all(image > 0)
    result = window.tune.results["lookahead"]
    assert len(result["cells"]) == 4 and all(math.isfinite(c["predicted"]) for c in result["cells"])

    # hovering a cell describes it
    heatmap = window.tune.heatmap
    scene_pos = heatmap.plotItem.vb.mapViewToScene(QtCore.QPointF(1, 0))
    heatmap._on_move(scene_pos)
    assert "W=2" in window.tune.hover.text() and "measured" in window.tune.hover.text()

    # a click on a cell sets the run controls, marked pending
    window.controls.mark_applied()
    view_pos = heatmap.mapFromScene(scene_pos)
    qtbot.mouseClick(heatmap.viewport(), Qt.LeftButton, pos=view_pos)
    values = window.controls.values()
    assert (values["mode"], values["W"], values["N"], values["G"]) == ("lookahead", 2, 2, 0)
    assert "W" in window.controls.pending() or "mode" in window.controls.pending()

    # Apply best picks the fastest lossless cell
    best = window.tune.best()
    window.tune.apply_best.click()
    values = window.controls.values()
    assert (values["W"], values["N"], values["G"]) == (best["setting"]["W"], best["setting"]["N"], best["setting"]["G"])
    assert best["measured"] == max(c["measured"] for c in result["cells"] if c["lossless"] or not any(
        x["lossless"] for x in result["cells"]))


def test_sweep_results_reopen_with_the_model(window, qtbot, tmp_path):
    _tiny_sweep(window)
    window.tune.mode.setCurrentIndex(window.tune.mode.findData("lookup"))
    window.tune.axis_edits["k"].setText("0,2")
    window.tune.request_sweep()
    qtbot.waitUntil(lambda: not window.tune.sweeping, timeout=TIMEOUT_MS)
    window.drain_events()
    ks = sorted(c["setting"]["k"] for c in window.tune.results["lookup"]["cells"])
    assert ks == [0, 2]
    window.tune.results.clear()
    window.models.load_model("default")
    qtbot.waitUntil(lambda: "lookup" in window.tune.results, timeout=TIMEOUT_MS)
    assert sorted(c["setting"]["k"] for c in window.tune.results["lookup"]["cells"]) == [0, 2]
    window.tune.apply_best.click()
    assert window.controls.values()["mode"] in ("lookup", "plain")


def test_speedup_is_predicted_until_a_baseline_is_measured(window, qtbot):
    window.input.chat_mode.setChecked(False)
    window.controls.set_values({"mode": "lookup", "k": 4, "max_tokens": 48})
    window.input.set_text(CODE_PROMPT)
    window.runs.start_run()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    predicted = window.stats.values["predicted"].text()
    assert predicted.endswith("×") and float(predicted[:-1]) > 0
    assert window.stats.values["speed-up"].text() == "≈" + predicted
    # the speed-up curve beside the figures and in the Tune tab, with the run on it
    stats, curve = window.model.run.last_finished.stats, window.stats.speedup_plot
    assert curve.curves is not None and curve.curves.ks == tuple(range(1, 9)) and not curve.curves.with_draft
    point = curve.run_point
    assert point is not None and point.k == 4 and point.measured_against == "profile"
    assert point.speedup == pytest.approx(stats["tokens_per_second"] * window.stats.t_plain_s)
    expected_share = (cost_model.expected_tokens_per_step(point.alpha, 4) - 1) / 4
    assert expected_share == pytest.approx(stats["n_accept"] / stats["n_drafted"], abs=1e-6)
    assert window.tune.speedup_plot.run_point is point and len(window.tune.speedup_plot.k_curves) == 8
    window.tuning.measure_baseline()
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    measured = window.stats.values["speed-up"].text()
    assert not measured.startswith("≈") and float(measured[:-1]) > 0
    assert window.stats.values["predicted"].text() == predicted
    # once plain is measured the point is placed against it, and the report carries the curve
    assert curve.run_point.measured_against == "baseline"
    assert curve.run_point.speedup == pytest.approx(float(measured[:-1]), abs=0.006)
    figures = json.loads(report.figures_json(window.model.run.last_trace, exports.speedup(window)))
    assert figures["speedup_curve"]["run"]["measured_against"] == "baseline"
    assert len(figures["speedup_curve"]["speedup"]) == 8
    assert "speed-up curve" in exports.pictures(window)


def test_the_draft_model_sweep_names_the_loaded_drafts_break_even(window, qtbot):
    tune = window.tune
    tune.mode.setCurrentIndex(tune.mode.findData("speculative"))
    assert tune.draft_break_even.isHidden()  # no draft loaded: nothing to price
    # the default model drafting for itself: its profile (the module's) prices both sides
    window.models.choose_draft(str(catalog.resolve("default")))
    qtbot.waitUntil(lambda: window.model.tuning.profiles["draft"] is not None, timeout=TIMEOUT_MS)
    window.drain_events()
    words = tune.draft_break_even.text()
    assert not tune.draft_break_even.isHidden()
    # the curves price the draft's decodes too: a draft as dear as the target never pays
    assert tune.speedup_plot.curves.with_draft and tune.speedup_plot.curves.break_even == (None,) * 8
    assert float(tune.speedup_plot.curves.speedups.max()) < 1.0
    assert words.startswith(f"With {catalog.resolve('default').name}: a ") and "-token verification costs" in words
    # a draft that costs what the target does cannot pay at any k, on any machine
    assert "cannot pay here" in words
    assert words.endswith("Acceptance each draft length needs to pay here: " + ", ".join(
        f"k = {k}: never" for k in (1, 2, 3, 4, 5, 8)) + ".")
    # its sentence follows the run controls' k
    window.controls.set_values({"k": 5})
    assert (
        "a 6-token verification costs" in tune.draft_break_even.text()
        and "drafting 5 cannot pay" in tune.draft_break_even.text()
    )
    tune.mode.setCurrentIndex(tune.mode.findData("lookahead"))
    assert tune.draft_break_even.isHidden()
    window.models.choose_draft(None)
    qtbot.waitUntil(lambda: window.model.tuning.profiles["draft"] is None, timeout=TIMEOUT_MS)
    window.drain_events()
    tune.mode.setCurrentIndex(tune.mode.findData("speculative"))
    assert tune.draft_break_even.isHidden() and tune.draft_break_even.text() == ""


@pytest.mark.slow  # measures a whole profile again in the window; the engine's profile tests stay in make test
def test_profile_tab_plots_the_curve_and_remeasures(window, qtbot, monkeypatch):
    from specdec_studio.engine.tuning import profile

    # fewer timed rounds than a real profile (5 and 3): the window's part is under test here, the
    # measurement's in tests/engine/test_tuning.py, and half the rounds halve its 25 s
    monkeypatch.setattr(profile, "ROUNDS_SMALL", 2)
    monkeypatch.setattr(profile, "ROUNDS_LARGE", 1)
    curves = window.profile_plot.plotItem.listDataItems()
    assert len(curves) >= 3  # reference line, all-logits and last-row curves
    before = window.model.tuning.profiles["target"]["measured_at"]
    window.tuning.remeasure_profile()
    assert window.model.profiling and not window.remeasure_button.isEnabled()
    qtbot.waitUntil(lambda: not window.model.profiling, timeout=TIMEOUT_MS)
    window.drain_events()
    assert window.model.tuning.profiles["target"]["measured_at"] > before


def test_stop_ends_a_sweep_and_keeps_what_was_measured(window, qtbot):
    _tiny_sweep(window)
    window.tune.axis_edits["W"].setText("1,2,3,4")
    window.tune.request_sweep()
    qtbot.waitUntil(lambda: window.tune.progress.value() >= 2, timeout=TIMEOUT_MS)
    window.tune.stop_button.click()
    qtbot.waitUntil(lambda: not window.tune.sweeping, timeout=TIMEOUT_MS)
    window.drain_events()
    assert window.tune.eta.text().startswith("stopped"), window.tune.eta.text()
    assert not window.model.running and window.input.run.isEnabled()
    assert len(window.tune.results["lookahead"]["cells"]) < 8


def test_exactness_is_checked_and_explained(window, qtbot):
    window.tuning.check_exactness()
    assert window.model.running
    qtbot.waitUntil(lambda: not window.model.running, timeout=TIMEOUT_MS)
    window.drain_events()
    text = window.exactness_label.text()
    assert text.startswith("Exactness: ") and ("Exact:" in text or "near-tie" in text)
    assert f"after {LONG_CONTEXT_CELLS} cells" in window.exactness_label.toolTip()

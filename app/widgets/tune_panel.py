"""The Tune panel: sweep settings against plain on chosen prompts and apply the winner.

Pick a mode, the values of each axis and the prompt categories; the sweep runs on the engine
thread (progress, ETA, Stop) and the heatmap (lookahead: W×G per N) or the k curve (prompt lookup,
draft model) fills in as settings are measured. Hover shows measured and predicted speed-up,
tokens per step and acceptance; a click on a cell puts that setting into the run controls (marked
pending); "Apply best" does so for the fastest lossless setting. The latest sweep of each mode is
kept per model and reopens with it.
"""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtWidgets, Qt, Signal
from specdec_studio.app.widgets.speedup_plot import SpeedupPlot
from specdec_studio.app.widgets.sweep_view import SpeedupCurve, SpeedupHeatmap
from specdec_studio.engine.config import LOOKUP_SOURCES
from specdec_studio.engine.strategies import registry

SHORT_CATEGORY_LABELS = {
    "chat": "chat", "code_generation": "code", "code_editing": "code edit", "summarisation": "summary",
    "translation": "translation", "maths": "maths", "qa_passage": "QA", "rag": "RAG",
    "extraction": "JSON", "creative": "creative",
}
MODES = [("lookahead", "Lookahead (W × N × G)"), ("lookup", "Prompt lookup (k)"), ("speculative", "Draft model (k)")]


class TunePanel(QtWidgets.QWidget):
    sweep_requested = Signal(object)  # engine.tuning.sweep.SweepSpec
    stop_requested = Signal()
    setting_chosen = Signal(str, dict)  # mode, setting (W/N/G or k/lookup/adaptive)

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        from specdec_studio.engine.tuning import prompts, sweep

        self.results: dict[str, dict] = {}  # mode -> latest result (partial while running)
        self.sweeping = False  # a sweep's progress is shown (the window's activity says what works)
        # what the window's activity allows (app/model/activity.py decides; set_allowed applies it)
        self.allowed = {"run": False, "stop": False, "mode": True}

        form = QtWidgets.QGridLayout()
        self.mode = QtWidgets.QComboBox()
        for key, label in MODES:
            self.mode.addItem(label, key)
        form.addWidget(QtWidgets.QLabel("Sweep"), 0, 0)
        form.addWidget(self.mode, 0, 1, 1, 3)

        defaults = sweep.DEFAULT_AXES
        self.axis_edits: dict[str, QtWidgets.QLineEdit] = {}
        self.wng_row = QtWidgets.QWidget()
        wl = QtWidgets.QHBoxLayout(self.wng_row)
        wl.setContentsMargins(0, 0, 0, 0)
        for name in ("W", "N", "G"):
            edit = QtWidgets.QLineEdit(",".join(str(v) for v in defaults["lookahead"][name]))
            edit.setToolTip(f"{name} values: a list (1,2,4) or a range (1..4)")
            self.axis_edits[name] = edit
            wl.addWidget(QtWidgets.QLabel(name))
            wl.addWidget(edit, 1)
        form.addWidget(self.wng_row, 1, 0, 1, 4)
        self.axis_edits["k"] = QtWidgets.QLineEdit("0..10")
        self.axis_edits["k"].setToolTip("draft lengths: a list or a range; 0 runs plain decoding (the noise floor)")
        self.policy_checks = {key: QtWidgets.QCheckBox(key) for key in LOOKUP_SOURCES}
        self.policy_checks["cache"].setChecked(True)
        self.adaptive_checks = {key: QtWidgets.QCheckBox(key) for key in ("off", "tutorial", "heuristic")}
        self.adaptive_checks["off"].setChecked(True)
        self.k_row = QtWidgets.QWidget()
        kl = QtWidgets.QHBoxLayout(self.k_row)
        kl.setContentsMargins(0, 0, 0, 0)
        kl.addWidget(QtWidgets.QLabel("k"))
        kl.addWidget(self.axis_edits["k"], 1)
        self.policy_box = QtWidgets.QWidget()
        pl = QtWidgets.QHBoxLayout(self.policy_box)
        pl.setContentsMargins(0, 0, 0, 0)
        pl.addWidget(QtWidgets.QLabel("lookup"))
        for check in self.policy_checks.values():
            pl.addWidget(check)
        kl.addWidget(self.policy_box)
        kl.addWidget(QtWidgets.QLabel("adaptive"))
        for check in self.adaptive_checks.values():
            kl.addWidget(check)
        form.addWidget(self.k_row, 2, 0, 1, 4)

        self.category_checks: dict[str, QtWidgets.QCheckBox] = {}
        categories = QtWidgets.QWidget()
        cl = QtWidgets.QGridLayout(categories)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.setVerticalSpacing(0)
        for i, (key, label) in enumerate(prompts.CATEGORIES.items()):
            check = QtWidgets.QCheckBox(SHORT_CATEGORY_LABELS.get(key, key))
            check.setToolTip(f"{label}: {len(prompts.shipped([key]))} prompts in resources/prompts/{key}.jsonl")
            check.setChecked(key in sweep.DEFAULT_CATEGORIES)
            cl.addWidget(check, i // 4, i % 4)
            self.category_checks[key] = check
        form.addWidget(QtWidgets.QLabel("Prompts"), 3, 0, Qt.AlignTop)
        form.addWidget(categories, 3, 1, 1, 3)
        self.per_category = QtWidgets.QSpinBox()
        self.per_category.setRange(1, 7)
        self.per_category.setValue(1)
        self.per_category.setToolTip("prompts taken from each checked category")
        self.tokens = QtWidgets.QSpinBox()
        self.tokens.setRange(8, 1024)
        self.tokens.setValue(sweep.DEFAULT_MAX_TOKENS)
        self.tokens.setToolTip("tokens generated per run")
        row = QtWidgets.QHBoxLayout()
        row.addWidget(QtWidgets.QLabel("per category"))
        row.addWidget(self.per_category)
        row.addWidget(QtWidgets.QLabel("tokens"))
        row.addWidget(self.tokens)
        row.addStretch(1)
        form.addLayout(row, 4, 0, 1, 4)

        self.run_button = QtWidgets.QPushButton("Run sweep")
        self.stop_button = QtWidgets.QPushButton("Stop")
        self.progress = QtWidgets.QProgressBar()
        self.progress.setTextVisible(True)
        self.eta = QtWidgets.QLabel("")
        controls = QtWidgets.QHBoxLayout()
        controls.addWidget(self.run_button)
        controls.addWidget(self.stop_button)
        controls.addWidget(self.progress, 1)
        self.error = QtWidgets.QLabel("")
        self.error.setWordWrap(True)
        self.error.setStyleSheet("color: #c0392b;")

        self.n_choice = QtWidgets.QComboBox()
        self.n_choice.setToolTip("the heatmap shows one n-gram size N at a time")
        self.heatmap = SpeedupHeatmap()
        self.curve = SpeedupCurve()
        self.plots = QtWidgets.QStackedWidget()
        self.plots.addWidget(self.heatmap)
        self.plots.addWidget(self.curve)
        self.hover = QtWidgets.QLabel("Hover a cell or point for its figures; click it to use that setting.")
        self.hover.setWordWrap(True)
        self.hover.setMinimumHeight(4 * self.hover.fontMetrics().lineSpacing())
        self.hover.setAlignment(QtCore.Qt.AlignTop | QtCore.Qt.AlignLeft)
        self.best_label = QtWidgets.QLabel("")
        # the loaded draft model's break-even, from the two measured profiles (draft-model sweeps)
        self.draft_break_even = QtWidgets.QLabel("")
        self.draft_break_even.setWordWrap(True)
        self.draft_break_even.setToolTip("From the batch-cost profiles of the target and the draft: what a "
                                         "verification and a draft token cost here, and the acceptance each "
                                         "draft length k needs to beat plain decoding")
        self.apply_best = QtWidgets.QPushButton("Apply best")
        self.apply_best.setToolTip("Put the fastest lossless setting of this sweep into the run controls")
        view_row = QtWidgets.QHBoxLayout()
        self.n_label = QtWidgets.QLabel("N")
        view_row.addWidget(self.n_label)
        view_row.addWidget(self.n_choice)
        view_row.addWidget(self.best_label, 1)
        view_row.addWidget(self.apply_best)

        layout = QtWidgets.QVBoxLayout(self)
        layout.addLayout(form)
        layout.addLayout(controls)
        layout.addWidget(self.eta)
        layout.addWidget(self.error)
        layout.addWidget(self.draft_break_even)
        # what an acceptance buys at each k on this machine, with the last run's point on it
        self.speedup_plot = SpeedupPlot()
        self.speedup_plot.setMinimumHeight(150)
        layout.addWidget(self.speedup_plot)
        layout.addLayout(view_row)
        layout.addWidget(self.plots, 1)
        layout.addWidget(self.hover)

        self.mode.currentIndexChanged.connect(self._on_mode)
        self.run_button.clicked.connect(self.request_sweep)
        self.stop_button.clicked.connect(self.stop_requested)
        self.apply_best.clicked.connect(self.choose_best)
        self.n_choice.currentIndexChanged.connect(self._redraw)
        for plot in (self.heatmap, self.curve):
            plot.cell_clicked.connect(self._on_cell_clicked)
            plot.cell_hovered.connect(self.hover.setText)
        self._on_mode()

    # ------------------------------------------------------------------ spec
    def current_mode(self) -> str:
        return self.mode.currentData()

    def spec(self):
        """The sweep the controls describe; raises a SpecDecError naming what is wrong."""
        from specdec_studio.engine.errors import ConfigError
        from specdec_studio.engine.tuning import prompts, sweep

        mode = self.current_mode()
        if self._sweeps_a_grid():
            axes = {name: sweep.parse_values(self.axis_edits[name].text()) for name in ("N", "W", "G")}
        else:
            axes = {"k": sweep.parse_values(self.axis_edits["k"].text()),
                    "adaptive": tuple(k for k, c in self.adaptive_checks.items() if c.isChecked())}
            if mode == "lookup":
                axes["lookup"] = tuple(k for k, c in self.policy_checks.items() if c.isChecked())
        categories = self.checked_categories()
        if not categories:
            raise ConfigError("check at least one prompt category")
        spec = sweep.SweepSpec(mode, axes, tuple(prompts.shipped(categories, self.per_category.value())),
                               self.tokens.value())
        spec.validate()
        return spec

    def checked_categories(self) -> list[str]:
        return [key for key, check in self.category_checks.items() if check.isChecked()]

    def set_categories(self, keys) -> None:
        for key, check in self.category_checks.items():
            check.setChecked(key in keys)

    def request_sweep(self) -> None:
        from specdec_studio.engine.errors import SpecDecError

        if not self.allowed["run"]:
            return
        try:
            spec = self.spec()
        except SpecDecError as exc:
            self.error.setText(str(exc))
            return
        self.error.setText("")
        self.sweep_requested.emit(spec)

    # ------------------------------------------------------------------ engine events
    def on_requested(self) -> None:
        """The window accepted the sweep; it waits in the engine's queue until SweepStarted."""
        self.sweeping = True
        self.progress.setRange(0, 0)  # busy until the first run tells the total
        self.eta.setText("starting…")
        self._update_enabled()

    def on_started(self, event) -> None:
        self.sweeping = True
        mode = event.spec["mode"]
        self.results[mode] = {"spec": event.spec, "settings": list(event.settings), "cells": [], "best": None}
        self._select_mode(mode)
        self.progress.setRange(0, event.n_runs)
        self.progress.setValue(0)
        self.eta.setText("")
        self._update_enabled()
        self._redraw()

    def on_progress(self, event) -> None:
        self.progress.setValue(event.done)
        self.progress.setFormat("%v/%m runs")
        self.eta.setText(f"ETA {_duration(event.eta_s)} · last: {event.label}")

    def on_cell(self, event) -> None:
        from specdec_studio.engine.tuning import sweep

        mode = self.current_mode()
        result = self.results.get(mode)
        if result is None:
            return
        result["cells"].append(event.to_dict())
        best = sweep.best_cell(result["cells"])
        result["best"] = best["index"] if best else None
        self._redraw()

    def on_finished(self, event) -> None:
        self.sweeping = False
        self.results[event.result["spec"]["mode"]] = event.result
        self.progress.setValue(self.progress.maximum() if not event.cancelled else self.progress.value())
        self.eta.setText(("stopped after " if event.cancelled else "done in ") + _duration(event.result["t_sweep_s"]))
        self._update_enabled()
        self._redraw()

    def on_failed(self) -> None:
        if self.sweeping:
            self.sweeping = False
            self.eta.setText("failed")
            self._update_enabled()

    def set_saved(self, results) -> None:
        """Sweeps kept for the model just loaded (they replace whatever the panel showed)."""
        self.results = {r["spec"]["mode"]: r for r in results}
        self._redraw()

    # ------------------------------------------------------------------ choosing
    def best(self) -> dict | None:
        from specdec_studio.engine.tuning import sweep

        result = self.results.get(self.current_mode())
        return sweep.best_cell(result["cells"]) if result else None

    def choose_best(self) -> None:
        best = self.best()
        if best is not None:
            self._on_cell_clicked(dict(best["setting"]))

    def _on_cell_clicked(self, setting: dict) -> None:
        self.setting_chosen.emit(self.current_mode(), setting)

    # ------------------------------------------------------------------ drawing
    def _select_mode(self, mode: str) -> None:
        i = self.mode.findData(mode)
        if i >= 0 and i != self.mode.currentIndex():
            self.mode.setCurrentIndex(i)

    def _sweeps_a_grid(self) -> bool:
        """The mode's sweep is lookahead's W × N × G grid (else a k curve)."""
        return registry.mode(self.current_mode()).settings == "lookahead"

    def _sweeps_a_draft(self) -> bool:
        return registry.mode(self.current_mode()).needs == "draft"

    def _on_mode(self, *_args) -> None:
        lookahead = self._sweeps_a_grid()
        self.wng_row.setVisible(lookahead)
        self.k_row.setVisible(not lookahead)
        self.policy_box.setVisible(self.current_mode() == "lookup")
        self.n_choice.setVisible(lookahead)
        self.n_label.setVisible(lookahead)
        self.plots.setCurrentWidget(self.heatmap if lookahead else self.curve)
        self.draft_break_even.setVisible(self._sweeps_a_draft() and bool(self.draft_break_even.text()))
        self._redraw()

    def set_draft_break_even(self, words: str | None) -> None:
        """The loaded draft's break-even in words, shown with draft-model sweeps; None hides it
        (no draft, or a profile not measured)."""
        self.draft_break_even.setText(words or "")
        self.draft_break_even.setVisible(self._sweeps_a_draft() and bool(words))

    def _redraw(self, *_args) -> None:
        from specdec_studio.engine.tuning import sweep

        mode = self.current_mode()
        result = self.results.get(mode)
        best = self.best()
        self.apply_best.setEnabled(best is not None and self.allowed["mode"])
        if best is not None:
            predicted = f", predicted {best['predicted']:.2f}×" if best.get("predicted") is not None else ""
            self.best_label.setText(f"best: {sweep.setting_label(best['setting'])} — "
                                    f"{best['measured']:.2f}× plain{predicted}")
        else:
            self.best_label.setText("no results yet for this mode" if result is None else "")
        if result is None:
            if self._sweeps_a_grid():
                self.heatmap.clear_result()
            else:
                self.curve.set_result({"spec": {}, "cells": []})
            return
        if self._sweeps_a_grid():
            n_values = list(result["spec"]["axes"]["N"])
            wanted = self.n_choice.currentData()
            self.n_choice.blockSignals(True)
            self.n_choice.clear()
            for n in n_values:
                self.n_choice.addItem(str(n), n)
            if best is not None and wanted not in n_values:
                wanted = best["setting"]["N"]
            self.n_choice.setCurrentIndex(max(0, self.n_choice.findData(wanted)))
            self.n_choice.blockSignals(False)
            self.heatmap.set_result(result, self.n_choice.currentData())
        else:
            self.curve.set_result(result)

    def set_background(self, colour) -> None:
        for plot in (self.heatmap, self.curve):
            plot.setBackground(colour)
        self.speedup_plot.set_background(colour)

    def set_allowed(self, *, run: bool, stop: bool, mode: bool) -> None:
        """What the window's activity allows: Run sweep, Stop, the mode choice and Apply best."""
        self.allowed = {"run": run, "stop": stop, "mode": mode}
        self._update_enabled()

    def _update_enabled(self) -> None:
        self.run_button.setEnabled(self.allowed["run"])
        self.stop_button.setEnabled(self.allowed["stop"])
        self.mode.setEnabled(self.allowed["mode"])
        self.apply_best.setEnabled(self.best() is not None and self.allowed["mode"])


def _duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    return f"{seconds // 60}:{seconds % 60:02d}" if seconds >= 60 else f"{seconds} s"

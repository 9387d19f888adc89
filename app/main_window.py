"""The main window: model bar, run controls, the live token stream, the KV-cache map and figures.

The engine runs on :class:`app.engine_worker.EngineWorker`; this window only drains its events
from a QTimer (~30 Hz) and paints the newest state, so the engine's speed never depends on the
window. Settings (geometry, models, parameters, theme) persist with QSettings.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from app.engine_worker import (BaselineDone, DraftLoaded, EngineWorker, ExactnessReady, LoadFailed, LoadStarted,
                               ModelLoaded, ProfileProgress, ProfileReady, ProfileStarted, RunRequested, SavedSweeps)
from app.qt import QtCore, QtGui, QtWidgets, Qt
from app.theme import THEMES, apply_theme
from app.widgets.chat import ChatInput
from app.widgets.controls import ControlsPanel
from app.widgets.kv_map import KvMapView
from app.widgets.model_picker import ModelBar
from app.widgets.stats_panel import StatsPanel
from app.widgets.sweep_view import ProfilePlot
from app.widgets.token_stream import SOURCE_COLOURS, SOURCE_LABELS, TokenStream
from app.widgets.tune_panel import TunePanel
from engine.config import DEFAULT_N_CTX

PAINT_INTERVAL_MS = 33  # ~30 Hz: the window never repaints per token
# The plots and the KV map cost far more to paint than text, and on a 2-core machine every
# millisecond the GUI paints is taken from llama.cpp's threads: they refresh at ~8 Hz.
FIGURES_INTERVAL_S = 0.125
MAX_RECENT = 8


@dataclass
class Turn:
    """One exchange as shown: the user's text and the answer's coloured tokens and figures."""

    user: str
    chat: bool
    mode: str = "plain"
    runs: list[tuple[str, str, int, int, float]] = field(default_factory=list)  # text, source, step, id, acc
    stats: dict | None = None
    finish: str | None = None
    text: str = ""


class MainWindow(QtWidgets.QMainWindow):
    def __init__(self, model: str | None = None, *, autoload: bool = True,
                 settings: QtCore.QSettings | None = None) -> None:
        super().__init__()
        self.setWindowTitle("SpecDec Studio")
        self.settings = settings or QtCore.QSettings()
        self.worker = EngineWorker(self)
        self.worker.start()
        self.model_loaded = False
        self.model_path: str | None = None
        self.draft_path: str | None = None
        self.has_chat_template = False
        self.running = False
        self.turns: list[Turn] = []
        self.baselines: dict[tuple, float] = {}
        self.last_run_key: tuple | None = None
        self.last_run_config = None  # the config the last run used: its baseline repeats it
        self.last_finished = None
        self.last_run_mode = "plain"
        self.sweeping = False
        self.profiling = False  # a batch-cost profile is being measured (Stop skips it)
        self.checking_exactness = False
        self.profiles: dict[str, dict | None] = {"target": None, "draft": None}
        self._pending_rejected: dict[int, tuple] = {}
        self._latest_snapshot = None
        self._figures_painted_at = 0.0
        self._run_started_at = 0.0
        self._build()
        self._restore_settings()
        self._paint_timer = QtCore.QTimer(self)
        self._paint_timer.setInterval(PAINT_INTERVAL_MS)
        self._paint_timer.timeout.connect(self.drain_events)
        self._paint_timer.start()
        if autoload:
            wanted = model or self.settings.value("last_model", "default")
            self.load_model(wanted)

    # ------------------------------------------------------------------ layout
    def _build(self) -> None:
        self.model_bar = ModelBar()
        self.model_bar.load_requested.connect(self.load_model)
        self.model_bar.draft_requested.connect(self.choose_draft)
        self.model_bar.fetch_requested.connect(self.fetch_default)

        self.controls = ControlsPanel()
        self.controls.changed.connect(self._update_buttons)
        controls_scroll = QtWidgets.QScrollArea()
        controls_scroll.setWidget(self.controls)
        controls_scroll.setWidgetResizable(True)
        controls_scroll.setMinimumWidth(340)
        controls_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarAlwaysOff)

        self.stream = TokenStream()
        self.input = ChatInput()
        self.input.submit.connect(self.start_run)
        self.input.stop.clicked.connect(self.stop_run)
        self.input.regenerate.clicked.connect(self.regenerate)
        self.input.edit_last.clicked.connect(self.edit_last)
        self.input.clear.clicked.connect(self.clear_conversation)
        self.input.show_rejected.toggled.connect(self._toggle_rejected)
        self.input.mark_steps.toggled.connect(self._toggle_steps)
        self.error_label = QtWidgets.QLabel("")
        self.error_label.setStyleSheet("color: #c0392b; font-weight: 600;")
        self.error_label.setWordWrap(True)

        legend = QtWidgets.QHBoxLayout()
        for source in ("sampled", "accepted_ngram", "accepted_draft", "rejected"):
            swatch = QtWidgets.QLabel(SOURCE_LABELS[source])
            colour = SOURCE_COLOURS[source]
            style = f"color: {colour};" if colour else ""
            if source == "rejected":
                style += " text-decoration: line-through;"
            if source.startswith("accepted"):
                style += " font-weight: 600;"
            swatch.setStyleSheet(style)
            legend.addWidget(swatch)
        legend.addStretch(1)

        centre = QtWidgets.QWidget()
        cl = QtWidgets.QVBoxLayout(centre)
        cl.setContentsMargins(0, 0, 0, 0)
        cl.addLayout(legend)
        cl.addWidget(self.stream, 1)
        cl.addWidget(self.error_label)
        cl.addWidget(self.input)

        self.kv_map = KvMapView()
        self.stats = StatsPanel()
        self.stats.baseline_button.clicked.connect(self.measure_baseline)
        live = QtWidgets.QSplitter(Qt.Vertical)
        live.addWidget(self._titled("KV cache cells", self.kv_map))
        live.addWidget(self._titled("Figures", self.stats))
        live.setSizes([360, 360])

        self.tune = TunePanel()
        self.tune.sweep_requested.connect(self.start_sweep)
        self.tune.stop_requested.connect(self.stop_run)
        self.tune.setting_chosen.connect(self.apply_setting)
        self.profile_plot = ProfilePlot()
        self.profile_label = QtWidgets.QLabel("No batch-cost profile yet: it is measured once per model, "
                                              "context size and thread count.")
        self.profile_label.setWordWrap(True)
        self.remeasure_button = QtWidgets.QPushButton("Re-measure profile")
        self.remeasure_button.setToolTip("Time one decode of 1 to 128 tokens again on this machine (about 20 s)")
        self.remeasure_button.clicked.connect(self.remeasure_profile)
        self.exactness_label = QtWidgets.QLabel("Exactness: not checked on this machine yet.")
        self.exactness_label.setWordWrap(True)
        self.exactness_button = QtWidgets.QPushButton("Check exactness")
        self.exactness_button.setToolTip("Decode a text alone and in batches, in a short and a long context "
                                         "(past 512 cells), and compare the logits (about 10 s)")
        self.exactness_button.clicked.connect(self.check_exactness)
        profile_page = QtWidgets.QWidget()
        pl = QtWidgets.QVBoxLayout(profile_page)
        pl.addWidget(self.profile_plot, 1)
        pl.addWidget(self.profile_label)
        pl.addWidget(self.remeasure_button)
        pl.addWidget(self.exactness_label)
        pl.addWidget(self.exactness_button)

        right = QtWidgets.QTabWidget()
        right.addTab(live, "Live")
        right.addTab(self.tune, "Tune")
        right.addTab(profile_page, "Profile")
        self.right_tabs = right

        self.splitter = QtWidgets.QSplitter(Qt.Horizontal)
        self.splitter.addWidget(controls_scroll)
        self.splitter.addWidget(centre)
        self.splitter.addWidget(right)
        self.splitter.setSizes([340, 620, 520])

        root = QtWidgets.QWidget()
        rl = QtWidgets.QVBoxLayout(root)
        rl.addWidget(self.model_bar)
        rl.addWidget(self.splitter, 1)
        self.setCentralWidget(root)

        self.run_action = QtGui.QAction("Run", self, shortcut=QtGui.QKeySequence("Ctrl+Return"),
                                        triggered=self.start_run)
        self.stop_action = QtGui.QAction("Stop", self, shortcut=QtGui.QKeySequence(Qt.Key_Escape),
                                         triggered=self.stop_run)
        for action in (self.run_action, self.stop_action):
            action.setShortcutContext(Qt.ApplicationShortcut)
            self.addAction(action)
        edit_menu = self.menuBar().addMenu("&Edit")
        edit_menu.addAction("Copy conversation as text", self.copy_text)
        edit_menu.addAction("Copy conversation as HTML (with colours)", self.copy_html)
        view_menu = self.menuBar().addMenu("&View")
        theme_menu = view_menu.addMenu("Theme")
        self._theme_group = QtGui.QActionGroup(self)
        for theme in THEMES:
            action = theme_menu.addAction(theme.capitalize(), lambda t=theme: self.set_theme(t))
            action.setCheckable(True)
            action.setData(theme)
            self._theme_group.addAction(action)
        self.statusBar().showMessage("Starting…")
        self._update_buttons()

    @staticmethod
    def _titled(title: str, widget: QtWidgets.QWidget) -> QtWidgets.QWidget:
        box = QtWidgets.QGroupBox(title)
        layout = QtWidgets.QVBoxLayout(box)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(widget)
        return box

    # ------------------------------------------------------------------ settings
    def _restore_settings(self) -> None:
        geometry = self.settings.value("geometry")
        if geometry is not None:
            self.restoreGeometry(geometry)
        else:
            self.resize(1480, 900)
        params = self.settings.value("params")
        if isinstance(params, dict):
            self.controls.set_values(params)
        self.model_bar.threads.setValue(int(self.settings.value("threads", _default_threads())))
        self.model_bar.ctx.setValue(int(self.settings.value("n_ctx", DEFAULT_N_CTX)))
        self.input.chat_mode.setChecked(self.settings.value("chat", "true") in (True, "true"))
        self.set_theme(str(self.settings.value("theme", "system")))

    def save_settings(self) -> None:
        s = self.settings
        s.setValue("geometry", self.saveGeometry())
        s.setValue("params", self.controls.values())
        s.setValue("threads", self.model_bar.threads.value())
        s.setValue("n_ctx", self.model_bar.ctx.value())
        s.setValue("chat", self.input.chat_mode.isChecked())
        if self.model_path:
            s.setValue("last_model", self.model_path)
        s.setValue("last_draft", self.draft_path or "")
        s.sync()

    def set_theme(self, theme: str) -> None:
        if theme not in THEMES:
            theme = "system"
        app = QtWidgets.QApplication.instance()
        apply_theme(app, theme)
        for action in self._theme_group.actions():
            action.setChecked(action.data() == theme)
        base = self.palette().color(QtGui.QPalette.Base)
        self.kv_map.set_background(base)
        self.stats.set_background(base)
        self.tune.set_background(base)
        self.profile_plot.setBackground(base)
        self.settings.setValue("theme", theme)
        self._render_all()

    def _recent_models(self) -> list[str]:
        recent = self.settings.value("recent_models", [])
        return [recent] if isinstance(recent, str) else list(recent or [])

    # ------------------------------------------------------------------ models
    def load_model(self, path: str) -> None:
        self.model_loaded = False
        self._update_buttons()
        self.worker.load_model(path, n_ctx=self.model_bar.ctx.value(), n_threads=self.model_bar.threads.value(),
                               n_gpu_layers=self.model_bar.gpu_layers.value(),
                               profile=self.settings.value("auto_profile", "true") in (True, "true"))

    def fetch_default(self) -> None:
        self.worker.fetch_and_load("default", n_ctx=self.model_bar.ctx.value(),
                                   n_threads=self.model_bar.threads.value())

    def choose_draft(self, path: str | None) -> None:
        self.worker.load_draft(path)

    # ------------------------------------------------------------------ runs
    def run_key(self, text: str, config) -> tuple:
        return (self.model_path, text, bool(self.input.chat_mode.isChecked()), config.max_tokens,
                config.sampling.temperature, config.sampling.seed)

    def _valid_config(self):
        """The next run's config, or None (with the reason shown) if the controls are invalid."""
        error = self.controls.error
        if error:
            self.error_label.setText(error)
            return None
        self.error_label.setText("")
        return self.controls.config()

    def _launch(self, turn: Turn, config, text: str, *, regenerate: bool = False) -> None:
        self.turns.append(turn)
        self.last_run_key = self.run_key(turn.user, config)
        self.last_run_config = config
        self._begin_run()
        self._render_all()
        self.worker.start_run(config, text, chat=turn.chat, regenerate=regenerate)

    def start_run(self) -> None:
        if self.running or not self.model_loaded:
            return
        text = self.input.text()
        if not text.strip():
            self.error_label.setText("Type a message or a prompt first.")
            return
        config = self._valid_config()
        if config is None:
            return
        chat = self.input.chat_mode.isChecked() and self.has_chat_template
        if chat:
            self.input.set_text("")
        else:
            self.turns = [t for t in self.turns if t.chat]  # a completion replaces the last completion
        self._launch(Turn(user=text, chat=chat, mode=config.mode), config, text)

    def regenerate(self) -> None:
        if self.running or not self.turns or not self.turns[-1].chat or self.turns[-1].finish is None:
            return
        config = self._valid_config()
        if config is None:
            return
        last = self.turns.pop()
        self._launch(Turn(user=last.user, chat=True, mode=config.mode), config, "", regenerate=True)

    def edit_last(self) -> None:
        if self.running or not self.turns:
            return
        last = self.turns.pop()
        if last.chat and last.finish is not None:
            self.worker.edit_history("pop")
        self.input.set_text(last.user)
        self._render_all()
        self._update_buttons()

    def clear_conversation(self) -> None:
        if self.running:
            return
        self.turns.clear()
        self.worker.edit_history("clear")
        self._render_all()
        self.stats.reset()
        self._update_buttons()

    def _begin_run(self) -> None:
        self.controls.mark_applied()  # the config just built from these values is the run's
        self.running = True
        self._pending_rejected.clear()
        self.stats.reset()
        self._run_started_at = time.perf_counter()
        self.statusBar().showMessage("Running…")
        self._update_buttons()

    def stop_run(self) -> None:
        if self.running or self.profiling:
            self.worker.stop()
            self.statusBar().showMessage("Stopping…")

    # ------------------------------------------------------------------ tuning
    def start_sweep(self, spec) -> None:
        if self.running or not self.model_loaded:
            return
        if spec.mode == "speculative" and not self.draft_path:
            self.tune.error.setText("A draft-model sweep needs a draft model: choose one in the model bar.")
            return
        self.running = self.sweeping = True
        self.tune.on_requested()
        self.statusBar().showMessage("Sweeping… (Stop ends it after the current run)")
        self._update_buttons()
        self.worker.start_sweep(spec)

    def apply_setting(self, mode: str, setting: dict) -> None:
        """Put a sweep's setting into the run controls; they mark what changed as pending."""
        values = {"mode": mode, **{k: v for k, v in setting.items() if k in ("W", "N", "G", "lookup", "adaptive")}}
        if "k" in setting:
            if int(setting["k"]) == 0:
                values = {"mode": "plain"}
            else:
                values["k"] = int(setting["k"])
        self.controls.set_values(values)
        self.statusBar().showMessage("Run controls set to " + ", ".join(f"{k} {v}" for k, v in values.items())
                                     + " — applies to the next run")

    def remeasure_profile(self) -> None:
        if self.running or self.profiling or not self.model_loaded:
            return
        self.profiling = True
        self._update_buttons()
        self.worker.measure_profile(remeasure=True)

    def check_exactness(self) -> None:
        if self.running or not self.model_loaded:
            return
        self.running = self.checking_exactness = True
        self._update_buttons()
        self.statusBar().showMessage("Checking whether batching changes this model's logits…")
        self.worker.probe_exactness()

    def predicted_speedup(self, stats: dict, mode: str) -> float | None:
        """The cost model's speed-up for a finished run, from the profile and the run's counters."""
        from engine.tuning import cost_model
        from engine.tuning.profile import BatchCostProfile

        if self.profiles["target"] is None:
            return None
        curve = BatchCostProfile.from_dict(self.profiles["target"]).curve
        draft = self.profiles["draft"]
        draft_curve = BatchCostProfile.from_dict(draft).curve if draft is not None else None
        if mode == "speculative" and draft_curve is None:
            return None
        return cost_model.predict_from_stats(stats, curve, mode=mode, draft_curve=draft_curve)

    def measure_baseline(self) -> None:
        if self.running or self.last_run_key is None or not self.model_loaded:
            return
        from engine.config import RunConfig

        # the baseline of the last run: its token budget and sampling, whatever the controls say now,
        # so that it is stored under the key of the run it measures
        config = self.last_run_config
        self.running = True
        self._update_buttons()
        self.statusBar().showMessage("Measuring the plain baseline…")
        self.worker.run_baseline(RunConfig(mode="plain", max_tokens=config.max_tokens, sampling=config.sampling),
                                 self.last_run_key)

    # ------------------------------------------------------------------ rendering
    def _toggle_rejected(self, on: bool) -> None:
        self.stream.show_rejected = on
        self._render_all()

    def _toggle_steps(self, on: bool) -> None:
        self.stream.mark_steps = on
        self._render_all()

    def _render_turn_start(self, turn: Turn) -> None:
        if self.stream.document().characterCount() > 1:
            self.stream.append_text("\n\n", "meta", 0)
        self.stream.append_text(("You: " if turn.chat else "") + turn.user, "user" if turn.chat else "prompt", 0)
        self.stream.append_text("\n" if turn.chat else "", "meta", 0)

    def _render_run(self, text: str, source: str, step: int, token_id: int, acceptance: float) -> None:
        if source == "rejected" and not self.stream.show_rejected:
            return
        self.stream.append_text(text, source, step, token_id, acceptance)

    def _render_turn_end(self, turn: Turn) -> None:
        if turn.stats is None:
            return
        s = turn.stats
        line = f"\n[{turn.mode} · {s['n_predict']} tokens · {s['tokens_per_second']:.1f} tok/s · " \
               f"{s['tokens_per_step']:.2f} tokens/step"
        if s["n_drafted"]:
            line += f" · accepted {s['n_accept']}/{s['n_drafted']}"
        line += f" · {turn.finish}]"
        self.stream.append_text(line, "meta", 0)

    def _render_all(self) -> None:
        if not hasattr(self, "stream"):
            return
        self.stream.clear_stream()
        for turn in self.turns:
            self._render_turn_start(turn)
            for run in turn.runs:
                self._render_run(*run)
            self._render_turn_end(turn)
        self.stream.scroll_to_end()

    # ------------------------------------------------------------------ events
    def drain_events(self) -> None:
        from engine.events import KvSnapshot, RejectedDraft, RunFailed, RunFinished, RunWarning, StepDone

        events = self.worker.drain()
        if not events:
            return
        for event in events:
            if isinstance(event, StepDone):
                self._on_step(event)
            elif isinstance(event, RejectedDraft):
                self._pending_rejected[event.step] = event.texts
            elif isinstance(event, KvSnapshot):
                self._latest_snapshot = event
            elif isinstance(event, RunRequested):
                self.last_run_mode = event.config.mode
                la = event.config.lookahead
                self.kv_map.set_roles(la.W if event.config.mode == "lookahead" else 0)
            elif isinstance(event, RunFinished):
                self._on_finished(event)
            elif isinstance(event, RunWarning):
                self.kv_map.figures.setText("KV map stopped for this run: " + event.message)
                self.statusBar().showMessage("Warning: " + event.message)
            elif isinstance(event, RunFailed):
                self.tune.on_failed()
                self.sweeping = self.profiling = self.checking_exactness = False
                self._on_failed(event.message)
            elif self._on_tuning_event(event):
                pass
            elif isinstance(event, BaselineDone):
                self.running = False
                self.baselines[event.key] = event.tokens_per_second
                if self.last_finished is not None and event.key == self.last_run_key:
                    self.stats.set_speedup(self.last_finished.stats["tokens_per_second"], event.tokens_per_second)
                self.statusBar().showMessage(f"Plain baseline: {event.tokens_per_second:.1f} tok/s")
            else:
                self._on_model_event(event)
        now = time.perf_counter()
        if not self.running or now - self._figures_painted_at >= FIGURES_INTERVAL_S:
            self._figures_painted_at = now
            if self._latest_snapshot is not None:  # only the newest picture is painted
                self.kv_map.set_snapshot(self._latest_snapshot)
                self._latest_snapshot = None
            self.stats.refresh()
        self.stream.scroll_to_end()
        self._update_buttons()

    def _on_step(self, event) -> None:
        if not self.turns:
            return
        turn = self.turns[-1]
        acceptance = event.n_accepted / event.n_drafted if event.n_drafted else 0.0
        rejected = self._pending_rejected.pop(event.step, ())
        runs = [(t.text, t.source, event.step, t.id, acceptance) for t in event.tokens]
        if rejected:  # the drafts were tried where the target's own token now stands
            ghosts = [(text, "rejected", event.step, -1, acceptance) for text in rejected]
            runs = runs[:-1] + ghosts + runs[-1:]
        for run in runs:
            turn.runs.append(run)
            self._render_run(*run)
        self.stats.add_step(event, time.perf_counter() - self._run_started_at)

    def _on_finished(self, event) -> None:
        self.running = False
        self.last_finished = event
        if self.turns:
            turn = self.turns[-1]
            turn.stats, turn.finish, turn.text = event.stats, event.finish_reason, event.text
            self._render_turn_end(turn)
        self.stats.refresh()
        self.stats.finish(event.stats, self.baselines.get(self.last_run_key),
                          self.predicted_speedup(event.stats, self.last_run_mode))
        self.statusBar().showMessage(
            f"Finished: {event.finish_reason} · {event.stats['n_predict']} tokens at "
            f"{event.stats['tokens_per_second']:.1f} tok/s"
        )

    def _on_failed(self, message: str) -> None:
        self.running = False
        self.error_label.setText(message)
        self.statusBar().showMessage("Run failed — " + message)
        if self.turns and not self.turns[-1].runs and self.turns[-1].finish is None:
            failed = self.turns.pop()  # nothing was generated: give the text back to edit
            if not self.input.text().strip():
                self.input.set_text(failed.user)
            self._render_all()

    def _on_tuning_event(self, event) -> bool:
        """Profile and sweep events; False if ``event`` is neither."""
        from engine.tuning import sweep

        if isinstance(event, ProfileStarted):
            self.profiling = self.profiling or event.measuring
            if event.measuring:
                self.statusBar().showMessage(f"Measuring the {event.what}'s batch-cost profile (once for this "
                                             "model, context and thread count; Stop skips it)…")
        elif isinstance(event, ProfileProgress):
            self.statusBar().showMessage(f"Measuring the {event.what}'s batch-cost profile… "
                                         f"{100 * event.fraction:.0f}%")
        elif isinstance(event, ProfileReady):
            self.profiles = {"target": event.target, "draft": event.draft}
            self.profile_plot.set_profiles(event.target, event.draft)
            if event.target is not None:
                c = event.target
                self.profile_label.setText(
                    f"{c['model_name']}: one decode of B tokens costs T(B)/T(1) = "
                    + ", ".join(f"{r:.1f} (B={b})" for b, r in zip(c["sizes"], c["relative_all_logits"])
                                if b in (2, 4, 8, 16, 32, 128))
                    + f". Measured in {c['t_measure_s']:.0f} s; a step wins when it emits more tokens than it costs.")
            self.profiling = False
            self.statusBar().showMessage(event.message or "Batch-cost profile ready")
            if self.last_finished is not None and self.turns and self.turns[-1].stats is not None:
                self.stats.finish(self.last_finished.stats, self.baselines.get(self.last_run_key),
                                  self.predicted_speedup(self.last_finished.stats, self.last_run_mode))
        elif isinstance(event, SavedSweeps):
            self.tune.set_saved(event.results)
        elif isinstance(event, ExactnessReady):
            self.exactness_label.setText("Exactness: " + event.note)
            self.exactness_label.setToolTip(
                "Largest logit difference, batched against one token at a time: "
                + ", ".join(f"B={b}: {v:.3f}" for b, v in event.result["max_abs_diff_by_batch"].items())
                + f"; past {event.result['long_context']['n_cells']} cells: "
                + ", ".join(f"B={b}: {v:.3f}" for b, v in event.result["long_context"]["max_abs_diff_by_batch"].items()))
            if self.checking_exactness:
                self.running = self.checking_exactness = False
                self.statusBar().showMessage("Exactness checked")
        elif isinstance(event, sweep.SweepStarted):
            self.tune.on_started(event)
        elif isinstance(event, sweep.SweepProgress):
            self.tune.on_progress(event)
        elif isinstance(event, sweep.SweepCell):
            self.tune.on_cell(event)
        elif isinstance(event, sweep.SweepFinished):
            self.tune.on_finished(event)
            self.running = self.sweeping = False
            best = sweep.best_cell(event.result["cells"])
            self.statusBar().showMessage(
                ("Sweep stopped" if event.cancelled else "Sweep done")
                + (f": best {sweep.setting_label(best['setting'])} at {best['measured']:.2f}× plain" if best else ""))
        else:
            return False
        return True

    def _on_model_event(self, event) -> None:
        from engine import catalog

        if isinstance(event, LoadStarted):
            self.statusBar().showMessage({"download": "Downloading", "draft": "Loading draft"}.get(event.what, "Loading")
                                         + f" {Path(event.path).name}…")
        elif isinstance(event, ModelLoaded):
            self.model_loaded = True
            self.model_path = event.path
            self.draft_path = None
            self.has_chat_template = event.has_chat_template
            self.controls.set_draft_loaded(False)
            recent = [event.path] + [p for p in self._recent_models() if p != event.path]
            self.settings.setValue("recent_models", recent[:MAX_RECENT])
            self.settings.setValue("last_model", event.path)
            self.model_bar.set_models([str(p) for p in catalog.cached_models()], recent, event.path)
            self.model_bar.set_draft_candidates(list(event.draft_candidates), None)
            last_draft = str(self.settings.value("last_draft", "") or "")
            if last_draft and (last_draft, None) in event.draft_candidates:
                self.choose_draft(last_draft)  # a restored speculative mode can run at once
            self.model_bar.set_gpu_available(event.gpu_offload)
            info = event.info
            self.setWindowTitle(f"SpecDec Studio — {Path(event.path).name}")
            self.input.chat_mode.setEnabled(event.has_chat_template)
            if not event.has_chat_template:
                self.input.chat_mode.setChecked(False)
            notice = "" if event.has_chat_template else " — no chat template: completion mode"
            if event.template_problem:
                notice = " — " + event.template_problem
            self.statusBar().showMessage(
                f"Loaded {info['arch']} · {info['n_params'] / 1e6:.0f}M params · {info['quant']} · "
                f"vocab {info['n_vocab']} · context {event.n_ctx} · {event.n_threads} threads{notice}"
            )
            self.error_label.setText("")
        elif isinstance(event, DraftLoaded):
            self.draft_path = event.path
            self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(event.path or ""), 0))
            self.controls.set_draft_loaded(event.path is not None)
            self.statusBar().showMessage(f"Draft: {Path(event.path).name}" if event.path else "No draft model")
        elif isinstance(event, LoadFailed):
            self.error_label.setText(event.message)
            if event.what == "draft":
                self.model_bar.draft.setCurrentIndex(max(self.model_bar.draft.findData(self.draft_path or ""), 0))
            else:
                self.model_loaded = event.previous_model_kept
                if not self.model_loaded:
                    self.model_bar.set_models([str(p) for p in catalog.cached_models()], self._recent_models(), None)
            self.statusBar().showMessage("Could not load the " + ("draft" if event.what == "draft" else "model")
                                         + (" — the previous model stays loaded" if event.previous_model_kept else ""))

    def _update_buttons(self) -> None:
        idle = self.model_loaded and not self.running
        valid = self.controls.error is None
        self.input.run.setEnabled(idle and valid)
        self.run_action.setEnabled(idle and valid)
        self.input.stop.setEnabled(self.running or self.profiling)
        has_answer = bool(self.turns) and self.turns[-1].chat and self.turns[-1].finish is not None
        self.input.regenerate.setEnabled(idle and has_answer)
        self.input.edit_last.setEnabled(idle and bool(self.turns))
        self.input.clear.setEnabled(not self.running and bool(self.turns))
        self.stats.baseline_button.setEnabled(idle and self.last_finished is not None)
        self.model_bar.setEnabled(not self.running)
        self.tune.set_model_ready(idle)
        self.remeasure_button.setEnabled(idle and not self.profiling)
        self.exactness_button.setEnabled(idle)

    # ------------------------------------------------------------------ clipboard
    def copy_text(self) -> None:
        QtWidgets.QApplication.clipboard().setText(self.stream.toPlainText())

    def copy_html(self) -> None:
        mime = QtCore.QMimeData()
        mime.setHtml(self.stream.toHtml())
        mime.setText(self.stream.toPlainText())
        QtWidgets.QApplication.clipboard().setMimeData(mime)

    def closeEvent(self, event: QtGui.QCloseEvent) -> None:
        self.save_settings()
        self._paint_timer.stop()
        self.worker.shutdown()
        super().closeEvent(event)


def _default_threads() -> int:
    import os

    return max(1, min(8, os.cpu_count() or 1))

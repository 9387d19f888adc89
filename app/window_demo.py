"""The window's demo behaviour: pause and single steps, replayed traces, run exports and
presentation mode. A mixin of :class:`app.main_window.MainWindow`: it uses the window's widgets
and worker, and keeps the window's own module to layout and the engine's events."""

from __future__ import annotations

import html
from pathlib import Path

from specdec_studio.app.model.activity import Activity, Trigger
from specdec_studio.app.qt import QtGui, QtWidgets
from specdec_studio.app.theme import apply_theme
from specdec_studio.app.transcript import Turn
from specdec_studio.app.widgets.token_stream import PRESENTATION_COLOURS, SOURCE_COLOURS, SOURCE_LABELS


class DemoMixin:
    # ------------------------------------------------------------------ demo: pause, step, replay, race
    def set_paused(self, paused: bool) -> None:
        """Hold the run (live or replayed) after its current step, or let it run on."""
        self.paused = paused
        if self.replaying:
            self.player.set_paused(paused)
        elif paused:
            self.worker.pause()
        else:
            self.worker.resume()
            self.inspector.paused_run = False
            if self.activity is Activity.PAUSED:
                self.machine.apply(Trigger.RESUME)
        self.inspector.set_paused(paused)
        if paused:
            self.right_tabs.setCurrentWidget(self.inspector_page)
        self._update_buttons()

    def toggle_pause(self) -> None:
        """Space: run if idle, else pause or resume."""
        if self.activity not in (Activity.RUNNING, Activity.PAUSED, Activity.REPLAYING):
            self.start_run(reuse_last_prompt=True)
            return
        self.set_paused(not self.paused)

    def _step_engine(self) -> None:
        """One more decode of the paused run (or one more step of the replay)."""
        if self.activity is Activity.REPLAYING:
            self.set_paused(True)
            self.player.step()
        elif self.activity in (Activity.RUNNING, Activity.PAUSED):
            if not self.paused:
                self.set_paused(True)
            self.worker.step_once()
            if self.activity is Activity.PAUSED:
                self.machine.apply(Trigger.RESUME)  # one step, then held again

    def step_forward(self) -> None:
        self.right_tabs.setCurrentWidget(self.inspector_page)
        self.inspector.forward()

    def step_back(self) -> None:
        self.right_tabs.setCurrentWidget(self.inspector_page)
        self.inspector.back()

    def reset_demo(self) -> None:
        """R: stop what runs, and clear the stream, the figures and the inspector."""
        if self.machine.busy:
            self.stop_run()
        if self.replaying:
            self.close_replay()
        self.set_paused(False)
        self.completion = None
        self.live = None
        self.record.clear()
        self.inspector.set_record(self.record)
        self.stats.reset()
        self.decisions.clear()
        if self._chat_shown() and not self.running:
            self.new_conversation()
        self._render_all()
        self.statusBar().showMessage("Reset")

    def choose_mode(self, mode: str) -> None:
        self.controls.set_values({"mode": mode})
        self.statusBar().showMessage(f"Mode: {mode} (the next run)")

    # ------------------------------------------------------------------ traces
    def _fill_demo_menu(self) -> None:
        from specdec_studio.engine.records import demo_traces

        self.demo_menu.clear()
        shipped = demo_traces.shipped()
        for path in shipped:
            self.demo_menu.addAction(demo_traces.label(path), lambda p=str(path): self.open_trace(p))

    def open_trace_dialog(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self, "Open a recorded run", "", "Traces (*.jsonl)")
        if path:
            self.open_trace(path)

    def open_trace(self, path: str) -> bool:
        """Load a trace and play it into the window; a bad file changes nothing on screen."""
        from specdec_studio.engine.records.trace import TraceError, load

        if not self._ready_for(Trigger.REPLAY):
            return False
        try:
            trace = load(path)
        except TraceError as exc:
            self.error_label.setText(str(exc)[0].upper() + str(exc)[1:] + ".")
            return False
        self.error_label.setText("")
        self.play_trace(trace)
        return True

    def play_trace(self, trace) -> None:
        if not self._ready_for(Trigger.REPLAY):
            return
        started = trace.events[0][1]
        self.player.stop()
        self.start_job(Trigger.REPLAY, lambda: None)
        self.replaying = True
        self.last_trace = trace
        self.centre_tabs.setCurrentIndex(0)
        turn = Turn(user=started.prompt_text, chat=False, mode=trace.config.get("mode", "plain"))
        self.live = self.completion = turn
        self._pending_rejected.clear()
        self.stats.reset()
        self._render_all()
        model = trace.header.get("model", {})
        # the trace's words are data: escaped, never read as rich text
        mode, name = str(trace.config.get("mode", "?")), str(model.get("name", "a model"))
        created = str(trace.header.get("created", ""))[:10]
        self.replay_label.setText(f"<b>Replaying a recorded {html.escape(mode)} run</b> of {html.escape(name)} "
                                  f"({html.escape(created)}) — no model needed")
        self.replay_bar.setVisible(True)
        self.player.play([trace], self.replay_speed.currentData(), paused=self.paused)
        self._update_buttons()

    def _replay_finished(self) -> None:
        if self.activity is Activity.REPLAYING:
            self.machine.apply(Trigger.ENDED)
        self.statusBar().showMessage("Replay finished: Restart plays it again")
        self._update_buttons()

    def close_replay(self) -> None:
        self.player.stop()
        if self.activity is Activity.REPLAYING:
            self.machine.apply(Trigger.STOP)
        self.replaying = False
        self.replay_bar.setVisible(False)
        self._render_all()
        self._update_buttons()

    def save_trace_dialog(self) -> None:
        if self.last_trace is None:
            self.statusBar().showMessage("No finished run to save yet")
            return
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Save the run's trace", "run.jsonl", "Traces (*.jsonl)")
        if path:
            self.save_trace(path)

    def save_trace(self, path: str) -> None:
        from specdec_studio.engine.records import trace

        try:
            trace.save(self.last_trace, path)
        except OSError as exc:
            self.error_label.setText(f"Could not write {path}: {exc.strerror or exc}.")
            return
        self.statusBar().showMessage(f"Trace saved to {path}")

    # ------------------------------------------------------------------ exports
    EXPORTS = {"report": ("Report", "html"), "transcript": ("Transcript", "html"), "figures": ("Figures", "json"),
               "kv_png": ("KV map", "png"), "plots_png": ("Plots", "png")}

    def export_dialog(self, kind: str) -> None:
        title, suffix = self.EXPORTS[kind]
        if self.last_trace is None and kind in ("report", "transcript", "figures"):
            self.statusBar().showMessage("No finished run to export yet")
            return
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, f"Export {title.lower()}", f"run-{kind}.{suffix}",
                                                        f"{title} (*.{suffix})")
        if path:
            self.export_run(kind, path)

    def export_video_dialog(self) -> None:
        """The shown run (a replay, or the last run) as a video: what to make, where, then its
        progress with Stop."""
        from specdec_studio.app.widgets.video_dialog import VideoDialog

        if self.last_trace is None or self.last_trace.finished is None:
            self.statusBar().showMessage("No finished run to export yet")
            return
        dialog = VideoDialog(self.replay_speed.currentData(), self)
        if dialog.exec() != QtWidgets.QDialog.Accepted:
            return
        size, speed, suffix, fps = dialog.choice()
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export video", f"run{suffix}", f"Video (*{suffix})")
        if path:
            self.export_video(Path(path).with_suffix(suffix), size, speed, fps)

    def export_video(self, path: Path, size: tuple[int, int], speed: float, fps: int) -> Path | None:
        """Write the shown run's video with a progress dialog whose Stop leaves no file; returns
        the file, or None if it was stopped or could not be written (the reason in the window)."""
        from specdec_studio.app.video_export import VideoError, VideoSpec, export_video

        progress = QtWidgets.QProgressDialog("Making the video…", "Stop", 0, 100, self)
        progress.setWindowTitle("Export video")
        progress.setMinimumDuration(0)
        progress.setValue(0)

        def advance(frame: int, n_frames: int) -> None:
            progress.setMaximum(n_frames)
            progress.setValue(frame)
            progress.setLabelText(f"Making the video… frame {frame} of {n_frames}")

        try:
            written = export_video(self.last_trace, VideoSpec(path, size, speed, fps), type(self), advance,
                                   progress.wasCanceled)
        except (VideoError, OSError) as exc:
            self.error_label.setText(f"Could not export the video: {getattr(exc, 'strerror', None) or exc}.")
            return None
        finally:
            progress.close()
        if written is None:
            self.statusBar().showMessage("Video export stopped: no file written")
            return None
        self.statusBar().showMessage(f"Video written to {written.path}: {written.seconds:.1f} s, "
                                     f"{written.size_bytes / 1e6:.1f} MB, made in {written.wall_s:.1f} s")
        return written.path

    def export_run(self, kind: str, path: str) -> list[str]:
        """Write one export of the shown run; returns the files written."""
        from specdec_studio.app import exports

        try:
            written = exports.write(self, kind, Path(path))
        except (OSError, ValueError) as exc:
            self.error_label.setText(f"Could not export to {path}: {getattr(exc, 'strerror', None) or exc}.")
            return []
        self.statusBar().showMessage("Exported " + ", ".join(str(p) for p in written))
        return [str(p) for p in written]

    # ------------------------------------------------------------------ presentation
    def toggle_presentation(self) -> None:
        self.set_presentation(not self.presenting)

    def set_presentation(self, on: bool) -> None:
        """Full screen, large type, high contrast, tuning hidden, keyboard-driven."""
        self.presenting = on
        self.presentation_action.setChecked(on)
        for widget in (self.splitter.widget(0), self.model_bar, self.input):
            widget.setVisible(not on)
        for index, name in enumerate(("Live", "Inspect", "Tune", "Profile")):
            self.right_tabs.setTabVisible(index, not on or name in ("Live", "Inspect"))
        for action, key in self.presentation_keys:
            action.setShortcut(QtGui.QKeySequence(key) if on else QtGui.QKeySequence())
            if action not in self.actions():
                self.addAction(action)
        self._update_buttons()  # the number keys choose the mode in presentation mode only
        if on:
            self._geometry_before = self.saveGeometry()
            self._splitter_before = self.splitter.saveState()
            apply_theme(QtWidgets.QApplication.instance(), "dark")
            self.stream.colours = PRESENTATION_COLOURS
            self._style_legend(PRESENTATION_COLOURS)
            for view in (self.kv_map, self.inspector.kv_before, self.inspector.kv_after):
                view.set_token_colours(PRESENTATION_COLOURS)
            self.showFullScreen()
            width = self.width()
            self.splitter.setSizes([0, int(width * 0.55), int(width * 0.45)])  # the stream and the inspector
            self.stream.setFocus()
            self.statusBar().showMessage("Presentation: space run/pause · → step · ← back · R reset · "
                                         "1–5 mode · F11 leave")
        else:
            self.showNormal()
            if getattr(self, "_geometry_before", None) is not None:
                self.restoreGeometry(self._geometry_before)
                self.splitter.restoreState(self._splitter_before)
            self.stream.colours = SOURCE_COLOURS
            self._style_legend(SOURCE_COLOURS)
            for view in (self.kv_map, self.inspector.kv_before, self.inspector.kv_after):
                view.set_token_colours(SOURCE_COLOURS)
            self.set_theme(str(self.settings.value("theme", "system")))
        base = QtWidgets.QApplication.palette().color(QtGui.QPalette.Base)  # the window's follows by event
        self.kv_map.set_background(base)
        self.inspector.set_background(base)
        self.stats.set_background(base)
        self.tune.set_background(base)
        self._scale_fonts()
        self._render_all()

    def _style_legend(self, colours: dict) -> None:
        parts = []
        for source in ("sampled", "accepted_ngram", "accepted_draft", "rejected"):
            colour = colours[source]
            style = f"color: {colour};" if colour else ""
            if source == "rejected":
                style += " text-decoration: line-through;"
            if source.startswith("accepted"):
                style += " font-weight: 600;"
            parts.append(f"<span style='{style}'>{SOURCE_LABELS[source]}</span>")
        self.legend.setText(" &nbsp;&nbsp; ".join(parts))

    def _scale_fonts(self) -> None:
        """Presentation type grows with the window (about 1 point per 55 pixels of width)."""
        scale = max(1.0, min(3.0, self.width() / 1280)) if self.presenting else 1.0
        base = QtWidgets.QApplication.instance().font()
        font = QtGui.QFont(base)
        font.setPointSizeF(base.pointSizeF() * (1.25 * scale if self.presenting else 1.0))
        self.centralWidget().setFont(font)
        self.statusBar().setFont(font)
        QtWidgets.QToolTip.setFont(font)  # a token's explanation reads from the back of the room too
        stream_font = self.stream.font()
        stream_font.setPointSizeF(11 * (1.6 * scale if self.presenting else 1.0))
        self.stream.setFont(stream_font)
        self.race.set_font_scale(1.6 * scale if self.presenting else 1.0)
        self.inspector.picture.set_scale(1.4 * scale if self.presenting else 1.0)

    def resizeEvent(self, event: QtGui.QResizeEvent) -> None:
        super().resizeEvent(event)
        if self.presenting:
            self._scale_fonts()

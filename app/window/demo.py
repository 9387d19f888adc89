"""The window's demo behaviour: the hold (pause) and single steps, replayed traces, saved traces,
run exports and videos. Writes the demo slice."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path

from specdec_studio.app import exports
from specdec_studio.app.model.activity import Activity, Trigger
from specdec_studio.app.model.turn import Turn
from specdec_studio.app.qt import QtWidgets
from specdec_studio.app.replay import TracePlayer
from specdec_studio.app.video_export import FORMATS as VIDEO_FORMATS
from specdec_studio.app.video_export import VideoError, VideoSpec, export_video
from specdec_studio.app.widgets.video_dialog import VideoDialog
from specdec_studio.app.window.controller import Controller
from specdec_studio.app.worker.messages import Paused
from specdec_studio.engine.records import demo_traces
from specdec_studio.engine.records import trace as traces

# export kind -> (its title, its file suffix)
EXPORTS = {"report": ("Report", "html"), "transcript": ("Transcript", "html"), "figures": ("Figures", "json"),
           "kv_png": ("KV map", "png"), "plots_png": ("Plots", "png")}


class DemoController(Controller):
    def __init__(self, window) -> None:
        super().__init__(window)
        self.player = TracePlayer(window)
        self.player.events.connect(lambda _lane, events: window.handle_events(events))
        self.player.finished.connect(self._replay_finished)

    def handlers(self) -> dict[type, Callable]:
        return {Paused: self._on_paused}

    # ------------------------------------------------------------------ the hold and single steps
    def set_paused(self, paused: bool) -> None:
        """Hold the run (live or replayed) after its current step, or let it run on."""
        window = self.window
        self.model.demo.update(hold=paused)
        if self.model.demo.replay_shown:
            self.player.set_paused(paused)
        elif paused:
            window.worker.pause()
        else:
            window.worker.resume()
            window.inspector.paused_run = False
            if self.model.activity is Activity.PAUSED:
                window.gate.apply(Trigger.RESUME)
        window.inspector.set_paused(paused)
        if paused:
            window.right_tabs.setCurrentWidget(window.inspector_page)

    def toggle_pause(self) -> None:
        """Space: run if idle, else pause or resume."""
        if self.model.activity not in (Activity.RUNNING, Activity.PAUSED, Activity.REPLAYING):
            self.window.runs.start_run(reuse_last_prompt=True)
            return
        self.set_paused(not self.model.demo.hold)

    def step_engine(self) -> None:
        """One more decode of the paused run (or one more step of the replay)."""
        activity = self.model.activity
        if activity is Activity.REPLAYING:
            self.set_paused(True)
            self.player.step()
        elif activity in (Activity.RUNNING, Activity.PAUSED):
            if not self.model.demo.hold:
                self.set_paused(True)
            self.window.worker.step_once()
            if self.model.activity is Activity.PAUSED:
                self.window.gate.apply(Trigger.RESUME)  # one step, then held again

    def step_forward(self) -> None:
        self.window.right_tabs.setCurrentWidget(self.window.inspector_page)
        self.window.inspector.forward()

    def step_back(self) -> None:
        self.window.right_tabs.setCurrentWidget(self.window.inspector_page)
        self.window.inspector.back()

    def reset(self) -> None:
        """R: stop what runs, and clear the stream, the figures and the inspector."""
        window = self.window
        if self.model.machine.busy:
            window.gate.stop()
        if self.model.demo.replay_shown:
            self.close_replay()
        self.set_paused(False)
        window.runs.clear_shown()
        if window.chat.shown() and not self.model.running:
            window.chat.new_conversation()
        window.runs.render()
        self.say("Reset")

    def choose_mode(self, mode: str) -> None:
        self.window.controls.set_values({"mode": mode})
        self.say(f"Mode: {mode} (the next run)")

    def _on_paused(self, event: Paused) -> None:
        window = self.window
        window.gate.engine_trigger(Trigger.HELD)
        window.inspector.paused_run = True
        window.inspector.refresh()
        self.say(f"Paused after step {event.step}: Step decodes one more, Resume runs on")

    # ------------------------------------------------------------------ traces
    def fill_demo_menu(self) -> None:
        menu = self.window.demo_menu
        menu.clear()
        for path in demo_traces.shipped():
            menu.addAction(demo_traces.label(path), lambda p=str(path): self.open_trace(p))

    def open_trace_dialog(self) -> None:
        path, _ = QtWidgets.QFileDialog.getOpenFileName(self.window, "Open a recorded run", "", "Traces (*.jsonl)")
        if path:
            self.open_trace(path)

    def open_trace(self, path: str) -> bool:
        """Load a trace and play it into the window; a bad file changes nothing on screen."""
        window = self.window
        if not window.gate.ready_for(Trigger.REPLAY):
            return False
        try:
            trace = traces.load(path)
        except traces.TraceError as exc:
            window.error_label.setText(str(exc)[0].upper() + str(exc)[1:] + ".")
            return False
        window.error_label.setText("")
        self.play_trace(trace)
        return True

    def play_trace(self, trace) -> None:
        window = self.window
        if not window.gate.ready_for(Trigger.REPLAY):
            return
        started = trace.events[0][1]
        self.player.stop()
        window.gate.start_job(Trigger.REPLAY, lambda: None)
        self.model.demo.update(replay_shown=True)
        window.centre_tabs.setCurrentIndex(0)
        window.runs.show_replay(trace, Turn(user=started.prompt_text, chat=False,
                                            mode=trace.config.get("mode", "plain")))
        model = trace.header.get("model", {})
        # the trace's words are data: escaped, never read as rich text
        mode, name = str(trace.config.get("mode", "?")), str(model.get("name", "a model"))
        created = str(trace.header.get("created", ""))[:10]
        window.replay_label.setText(f"<b>Replaying a recorded {html.escape(mode)} run</b> of {html.escape(name)} "
                                    f"({html.escape(created)}) — no model needed")
        window.replay_bar.setVisible(True)
        self.player.play([trace], window.replay_speed.currentData(), paused=self.model.demo.hold)

    def replay_again(self) -> None:
        trace = self.model.run.last_trace
        if trace is not None:
            self.play_trace(trace)

    def _replay_finished(self) -> None:
        if self.model.activity is Activity.REPLAYING:
            self.window.gate.apply(Trigger.ENDED)
        self.say("Replay finished: Restart plays it again")

    def stop_replay(self) -> None:
        """Stop: the replay ends where it is, still on screen."""
        self.player.stop()
        self.window.gate.apply(Trigger.STOP)
        self.say("Replay stopped: Restart plays it again")

    def close_replay(self) -> None:
        self.player.stop()
        if self.model.activity is Activity.REPLAYING:
            self.window.gate.apply(Trigger.STOP)
        self.model.demo.update(replay_shown=False)
        self.window.replay_bar.setVisible(False)
        self.window.runs.render()

    def save_trace_dialog(self) -> None:
        if self.model.run.last_trace is None:
            self.say("No finished run to save yet")
            return
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self.window, "Save the run's trace", "run.jsonl",
                                                        "Traces (*.jsonl)")
        if path:
            self.save_trace(path)

    def save_trace(self, path: str) -> None:
        try:
            traces.save(self.model.run.last_trace, path)
        except OSError as exc:
            self.window.error_label.setText(f"Could not write {path}: {exc.strerror or exc}.")
            return
        self.say(f"Trace saved to {path}")

    # ------------------------------------------------------------------ exports
    def export_dialog(self, kind: str) -> None:
        title, suffix = EXPORTS[kind]
        if self.model.run.last_trace is None and kind in ("report", "transcript", "figures"):
            self.say("No finished run to export yet")
            return
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self.window, f"Export {title.lower()}",
                                                        f"run-{kind}.{suffix}", f"{title} (*.{suffix})")
        if path:
            self.export_run(kind, path)

    def export_video_dialog(self) -> None:
        """The shown run (a replay, or the last run) as a video: what to make, where, then its
        progress with Stop."""
        trace = self.model.run.last_trace
        if trace is None or trace.finished is None:
            self.say("No finished run to export yet")
            return
        dialog = VideoDialog(self.window.replay_speed.currentData(), self.window)
        if dialog.exec() != QtWidgets.QDialog.Accepted:
            return
        size, speed, suffix, fps = dialog.choice()
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self.window, "Export video", f"run{suffix}",
                                                        f"Video (*{suffix})")
        if not path:
            return
        chosen = Path(path)
        if chosen.suffix.lower() not in VIDEO_FORMATS:
            # the chosen format's suffix is added, never put in place of another: the file written
            # is the one confirmed, or one asked about here
            chosen = chosen.with_name(chosen.name + suffix)
            if chosen.exists() and QtWidgets.QMessageBox.question(
                    self.window, "Export video", f"{chosen.name} already exists. Replace it?") \
                    != QtWidgets.QMessageBox.Yes:
                return
        self.export_video(chosen, size, speed, fps)

    def export_video(self, path: Path, size: tuple[int, int], speed: float, fps: int) -> Path | None:
        """Write the shown run's video with a progress dialog whose Stop leaves no file; returns
        the file, or None if it was stopped or could not be written (the reason in the window)."""
        window = self.window
        progress = QtWidgets.QProgressDialog("Making the video…", "Stop", 0, 100, window)
        progress.setWindowTitle("Export video")
        progress.setMinimumDuration(0)
        progress.setValue(0)

        def advance(frame: int, n_frames: int) -> None:
            progress.setMaximum(n_frames)
            progress.setValue(frame)
            progress.setLabelText(f"Making the video… frame {frame} of {n_frames}")

        try:
            written = export_video(self.model.run.last_trace, VideoSpec(path, size, speed, fps), type(window),
                                   advance, progress.wasCanceled)
        except (VideoError, OSError) as exc:
            window.error_label.setText(f"Could not export the video: {getattr(exc, 'strerror', None) or exc}.")
            return None
        finally:
            progress.close()
        if written is None:
            self.say("Video export stopped: no file written")
            return None
        self.say(f"Video written to {written.path}: {written.seconds:.1f} s, {written.size_bytes / 1e6:.1f} MB, "
                 f"made in {written.wall_s:.1f} s")
        return written.path

    def export_run(self, kind: str, path: str) -> list[str]:
        """Write one export of the shown run; returns the files written."""
        try:
            written = exports.write(self.window, kind, Path(path))
        except (OSError, ValueError) as exc:
            self.window.error_label.setText(f"Could not export to {path}: {getattr(exc, 'strerror', None) or exc}.")
            return []
        self.say("Exported " + ", ".join(str(p) for p in written))
        return [str(p) for p in written]

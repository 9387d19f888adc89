"""Tuning from the window: sweeps, the batch-cost profile, the exactness check, the weight-format
comparison, the plain baseline and the predicted speed-up. Writes the tuning slice."""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from types import MappingProxyType

from specdec_studio.app.model.activity import Trigger
from specdec_studio.app.qt import Qt
from specdec_studio.app.window.controller import Controller
from specdec_studio.app.worker.messages import (ExactnessReady, FormatsCompared, FormatSpeedsMeasured, FormatsProgress,
                                                ProfileProgress, ProfileReady, ProfileStarted, SavedSweeps)
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.strategies import registry
from specdec_studio.engine.tuning import cost_model, sweep
from specdec_studio.engine.tuning.formats import FORMATS, SPEED_FORMATS
from specdec_studio.engine.tuning.profile import curve_of
from specdec_studio.engine.tuning.speedup_curve import speedup_curves


class TuningController(Controller):
    _break_even_shown_for: tuple | None = None  # (k, target profile, draft profile) of the Tune tab's line

    def handlers(self) -> dict[type, Callable]:
        tune = self.window.tune
        return {
            ProfileStarted: self._on_profile_started, ProfileProgress: self._on_profile_progress,
            ProfileReady: self._on_profile_ready, SavedSweeps: lambda event: tune.set_saved(event.results),
            FormatsProgress: lambda event: self.say("Weight formats: " + event.message),
            FormatsCompared: self._on_formats_compared, FormatSpeedsMeasured: self._on_format_speeds,
            ExactnessReady: self._on_exactness, sweep.SweepStarted: tune.on_started,
            sweep.SweepProgress: tune.on_progress, sweep.SweepCell: tune.on_cell,
            sweep.SweepFinished: self._on_sweep_finished,
        }

    def _curves(self):
        profiles = self.model.tuning.profiles
        return curve_of(profiles["target"]), curve_of(profiles["draft"])

    # ------------------------------------------------------------------ jobs
    def start_sweep(self, spec) -> None:
        window = self.window
        if registry.mode(spec.mode).needs == "draft" and not self.model.models.draft_path:
            window.tune.error.setText("A draft-model sweep needs a draft model: choose one in the model bar.")
            return
        if window.gate.start_job(Trigger.SWEEP, lambda: window.worker.start_sweep(spec)):
            window.tune.on_requested()
            self.say("Sweeping… (Stop ends it after the current run)")

    def apply_setting(self, mode: str, setting: dict) -> None:
        """Put a sweep's setting into the run controls; they mark what changed as pending."""
        values = {"mode": mode, **{k: v for k, v in setting.items() if k in ("W", "N", "G", "lookup", "adaptive")}}
        if "k" in setting:
            if int(setting["k"]) == 0:
                values = {"mode": "plain"}
            else:
                values["k"] = int(setting["k"])
        self.window.controls.set_values(values)
        self.say("Run controls set to " + ", ".join(f"{k} {v}" for k, v in values.items())
                 + " — applies to the next run")

    def remeasure_profile(self) -> None:
        window = self.window
        window.gate.start_job(Trigger.REMEASURE, lambda: window.worker.measure_profile(remeasure=True))

    def check_exactness(self) -> None:
        if self.window.gate.start_job(Trigger.PROBE, self.window.worker.probe_exactness):
            self.say("Checking whether batching changes this model's logits…")

    def compare_formats(self, formats: tuple[str, ...] | None = None) -> None:
        """Measure the loaded model against copies in ``formats`` (the button: every format offered)."""
        window = self.window
        if window.gate.start_job(Trigger.COMPARE, lambda: window.worker.compare_formats(tuple(formats or FORMATS)),
                                 kind="formats"):
            self.say("Comparing weight formats (Stop ends it)…")

    def measure_format_speeds(self, formats: tuple[str, ...] | None = None) -> None:
        """The best mode on the original file and on each copy (the compared copies, else
        SPEED_FORMATS), against plain on the same file and on the original."""
        window = self.window
        formats = formats or self.model.tuning.compared_formats or SPEED_FORMATS
        if window.gate.start_job(Trigger.COMPARE, lambda: window.worker.measure_format_speeds(tuple(formats)),
                                 kind="format_speeds"):
            self.say("Measuring each mode on each weight format (Stop ends it)…")

    def load_chosen_copy(self) -> None:
        path = self.window.copy_choice.currentData()
        if path:
            self.window.models.load_model(path)

    def measure_baseline(self) -> None:
        run, window = self.model.run, self.window
        if run.last_run_key is None:
            self.say("No finished run to measure the plain baseline of yet.")
            return
        # the baseline of the last run: its token budget and sampling, whatever the controls say now,
        # so that it is stored under the key of the run it measures
        config = run.last_run_config
        plain = RunConfig(mode="plain", max_tokens=config.max_tokens, sampling=config.sampling)
        key = run.last_run_key
        if window.gate.start_job(Trigger.RUN, lambda: window.worker.run_baseline(plain, key), kind="baseline"):
            self.say("Measuring the plain baseline…")

    # ------------------------------------------------------------------ predictions from the profiles
    def predicted_speedup(self, stats: dict, mode: str) -> float | None:
        """The cost model's speed-up for a finished run, from the profile and the run's counters."""
        curve, draft_curve = self._curves()
        if curve is None:
            return None
        if registry.mode(mode).needs == "draft" and draft_curve is None:
            return None
        return cost_model.predict_from_stats(stats, curve, mode=mode, draft_curve=draft_curve)

    def break_even_words(self, config) -> str | None:
        """For a speculative run with both profiles measured: the draft's break-even in words."""
        curve, draft_curve = self._curves()
        if config.mode_entry.needs != "draft" or curve is None or draft_curve is None:
            return None
        return cost_model.draft_break_even_words(curve, draft_curve, config.speculative.k)

    def draft_break_even_summary(self, k: int) -> str | None:
        """The loaded draft's break-even at ``k`` in words and for every usual k, from the two
        profiles; None without a draft or either profile."""
        curve, draft_curve = self._curves()
        if curve is None or draft_curve is None:
            return None
        words = cost_model.draft_break_even_words(curve, draft_curve, k)
        table = cost_model.draft_break_even_table_words(curve, draft_curve)
        return (f"With {self.model.tuning.profiles['draft']['model_name']}: {words}. "
                f"Acceptance each draft length needs to pay here: {table}.")

    def update_draft_break_even(self) -> None:
        """The Tune tab's break-even line for the loaded pair at the run controls' k: worked out
        again only when k or a profile changed (every control's change calls this, a slider drag
        many times a second)."""
        profiles = self.model.tuning.profiles
        k, target, draft = int(self.window.controls.values()["k"]), profiles["target"], profiles["draft"]
        shown = self._break_even_shown_for
        if shown is not None and shown[0] == k and shown[1] is target and shown[2] is draft:
            return
        self._break_even_shown_for = (k, target, draft)
        self.window.tune.set_draft_break_even(self.draft_break_even_summary(k))

    def update_speedup_curves(self) -> None:
        """The speed-up curves of the Live and Tune tabs, from the profiles just measured or read:
        the target's, and the loaded draft's (whose decodes each step pays for)."""
        curve, draft_curve = self._curves()
        curves = speedup_curves(curve, draft_curve) if curve is not None else None
        stats = self.window.stats
        stats.t_plain_s = curve.t_plain_s if curve is not None else None
        for plot in (stats.speedup_plot, self.window.tune.speedup_plot):
            plot.set_curves(curves)

    # ------------------------------------------------------------------ the engine's reports
    def _on_profile_started(self, event: ProfileStarted) -> None:
        if event.measuring:
            self.window.gate.engine_trigger(Trigger.MEASURING)  # a load goes on to measure its profile
            self.say(f"Measuring the {event.what}'s batch-cost profile (once for this model, context and thread "
                     "count; Stop skips it)…")

    def _on_profile_progress(self, event: ProfileProgress) -> None:
        self.say(f"Measuring the {event.what}'s batch-cost profile… {100 * event.fraction:.0f}%")

    def _on_profile_ready(self, event: ProfileReady) -> None:
        window, run = self.window, self.model.run
        self.model.tuning.update(profiles=MappingProxyType({"target": event.target, "draft": event.draft}))
        self.update_draft_break_even()
        self.update_speedup_curves()
        window.profile_plot.set_profiles(event.target, event.draft)
        if event.target is not None:
            c = event.target
            window.profile_label.setText(
                f"{c['model_name']}: one decode of B tokens costs T(B)/T(1) = "
                + ", ".join(f"{r:.1f} (B={b})" for b, r in zip(c["sizes"], c["relative_all_logits"])
                            if b in (2, 4, 8, 16, 32, 128))
                + f". Measured in {c['t_measure_s']:.0f} s; a step wins when it emits more tokens than it costs.")
        if event.message or self.model.profiling:  # a profile read from the cache leaves the status line be
            self.say(event.message or "Batch-cost profile ready")
        if run.last_finished is not None and run.live is not None and run.live.stats is not None:
            window.stats.finish(run.last_finished.stats, run.baselines.get(run.last_run_key),
                                self.predicted_speedup(run.last_finished.stats, run.last_run_mode))

    def _on_exactness(self, event: ExactnessReady) -> None:
        label, result = self.window.exactness_label, event.result
        long = result["long_context"]
        onset = long.get("deviation_from_cells")
        label.setText("Exactness: " + event.note)
        label.setToolTip(
            "Largest logit difference, batched against one token at a time: "
            + ", ".join(f"B={b}: {v:.3f}" for b, v in result["max_abs_diff_by_batch"].items())
            + f"; after {long['n_cells']} cells" + (f" (they start to differ from {onset} cells)" if onset else "")
            + ": " + ", ".join(f"B={b}: {v:.3f}" for b, v in long["max_abs_diff_by_batch"].items()))
        if self.model.checking_exactness:
            self.say("Exactness checked")

    def _on_sweep_finished(self, event) -> None:
        self.window.tune.on_finished(event)
        best = sweep.best_cell(event.result["cells"])
        self.say(("Sweep stopped" if event.cancelled else "Sweep done")
                 + (f": best {sweep.setting_label(best['setting'])} at {best['measured']:.2f}× plain" if best else ""))

    def _on_format_speeds(self, event: FormatSpeedsMeasured) -> None:
        if not event.stopped:
            original = event.files[0]
            rows = []
            for f in event.files:
                best = next((m for m in f["modes"] if m["mode"] == f["best"]), None)
                if best is None:
                    cells = "<td colspan=4>no mode stayed lossless</td>"
                else:
                    predicted = "–" if best["predicted"] is None else f"{best['predicted']:.2f}×"
                    cells = (f"<td>{html.escape(best['mode'])}</td><td align=right>{best['vs_plain']:.2f}×</td>"
                             f"<td align=right>{predicted}</td><td align=right><b>{best['vs_original']:.2f}×</b></td>")
                rows.append(f"<tr><td>{f['format']}</td><td align=right>{f['plain_tokens_per_second']:.0f}</td>"
                            f"<td align=right>{f['plain_vs_original']:.2f}×</td>{cells}</tr>")
            self.window.format_speed_label.setText(
                f"<p>Each file's best mode, measured side by side (one prompt of each category); "
                f"speed-ups over plain on the same file and over plain on the original "
                f"{html.escape(Path(original['path']).name)}:</p>"
                "<table cellspacing=4><tr><th>file</th><th>plain tok/s</th><th>plain × orig.</th><th>best mode</th>"
                f"<th>× plain</th><th>predicted</th><th>× orig. plain</th></tr>{''.join(rows)}</table>"
                f"<p>{html.escape(event.sentence)}</p>")
            self.window.format_speed_label.show()
        self.say(event.sentence)

    def _on_formats_compared(self, event: FormatsCompared) -> None:
        copy_choice = self.window.copy_choice
        copy_choice.clear()
        compared, copies = self.model.tuning.compared_formats, ()
        if not event.stopped:
            original = event.figures[0]
            rows = "".join(
                f"<tr><td>{f['format']}</td><td align=right>{f['size_bytes'] / 1e6:.0f} MB</td>"
                f"<td align=right>{1e3 * f['t1_s']:.2f} ms</td><td align=right>{original['t1_s'] / f['t1_s']:.2f}×</td>"
                f"<td align=right>{f['relative_all'][3]:.2f}</td><td align=right>{f['deviation']:.3f}</td>"
                f"<td align=right>{_agreement_text(f)}</td></tr>"
                for f in event.figures
            )
            self.window.formats_label.setText(
                f"<p>Measured here on {html.escape(Path(original['path']).name)} and its copies:</p>"
                "<table cellspacing=4><tr><th>format</th><th>size</th><th>T(1)</th><th>speed</th><th>T(4)/T(1)</th>"
                f"<th>deviation</th><th>agreement</th></tr>{rows}</table><p>{html.escape(event.sentence)}</p>")
            compared = tuple(f["format"] for f in event.figures[1:])
            copies = tuple(f["path"] for f in event.figures[1:])
            for f in event.figures[1:]:
                label = f"{f['format']} copy" + (" (recommended)" if f["path"] == event.recommended else "")
                copy_choice.addItem(label, f["path"])
                copy_choice.setItemData(copy_choice.count() - 1, f["path"], Qt.ToolTipRole)
            if event.recommended is not None:
                copy_choice.setCurrentIndex(copy_choice.findData(event.recommended))
        self.model.tuning.update(compared_formats=compared, copies=copies)
        self.say(event.sentence if event.stopped else "Weight formats compared")


def _agreement_text(figures: dict) -> str:
    """A format copy's greedy agreement with the original, as the formats table shows it."""
    return "original" if figures["agreement"] is None else f"{100 * figures['agreement']:.1f} %"

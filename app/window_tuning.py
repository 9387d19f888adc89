"""Tuning from the window: sweeps, the batch-cost profile, the exactness check, the weight-format
comparison, the plain baseline and the predicted speed-up. A mixin of
:class:`app.main_window.MainWindow`."""

from __future__ import annotations

import html

from specdec_studio.app.model.activity import Trigger
from specdec_studio.app.qt import Qt
from specdec_studio.app.worker.messages import (ExactnessReady, FormatsCompared, FormatSpeedsMeasured, FormatsProgress,
                                                ProfileProgress, ProfileReady, ProfileStarted, SavedSweeps)
from specdec_studio.engine.strategies import registry


class TuningMixin:
    def start_sweep(self, spec) -> None:
        if registry.mode(spec.mode).needs == "draft" and not self.draft_path:
            self.tune.error.setText("A draft-model sweep needs a draft model: choose one in the model bar.")
            return
        if self.start_job(Trigger.SWEEP, lambda: self.worker.start_sweep(spec)):
            self.tune.on_requested()
            self.statusBar().showMessage("Sweeping… (Stop ends it after the current run)")

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
        self.start_job(Trigger.REMEASURE, lambda: self.worker.measure_profile(remeasure=True))

    def check_exactness(self) -> None:
        if self.start_job(Trigger.PROBE, self.worker.probe_exactness):
            self.statusBar().showMessage("Checking whether batching changes this model's logits…")

    def compare_formats(self, formats: tuple[str, ...] | None = None) -> None:
        """Measure the loaded model against copies in ``formats`` (the button: every format offered)."""
        from specdec_studio.engine.tuning.formats import FORMATS

        if self.start_job(Trigger.COMPARE, lambda: self.worker.compare_formats(tuple(formats or FORMATS)),
                          kind="formats"):
            self.statusBar().showMessage("Comparing weight formats (Stop ends it)…")

    def measure_format_speeds(self, formats: tuple[str, ...] | None = None) -> None:
        """The best mode on the original file and on each copy (the compared copies, else
        SPEED_FORMATS), against plain on the same file and on the original."""
        if formats is None:
            from specdec_studio.engine.tuning.formats import SPEED_FORMATS

            formats = self.compared_formats or SPEED_FORMATS
        if self.start_job(Trigger.COMPARE, lambda: self.worker.measure_format_speeds(tuple(formats)),
                          kind="format_speeds"):
            self.statusBar().showMessage("Measuring each mode on each weight format (Stop ends it)…")

    def _show_format_speeds(self, event: FormatSpeedsMeasured) -> None:
        from pathlib import Path

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
            self.format_speed_label.setText(
                f"<p>Each file's best mode, measured side by side (one prompt of each category); "
                f"speed-ups over plain on the same file and over plain on the original "
                f"{html.escape(Path(original['path']).name)}:</p>"
                "<table cellspacing=4><tr><th>file</th><th>plain tok/s</th><th>plain × orig.</th><th>best mode</th>"
                f"<th>× plain</th><th>predicted</th><th>× orig. plain</th></tr>{''.join(rows)}</table>"
                f"<p>{html.escape(event.sentence)}</p>")
            self.format_speed_label.show()
        self._update_buttons()
        self.statusBar().showMessage(event.sentence)

    def load_chosen_copy(self) -> None:
        path = self.copy_choice.currentData()
        if path:
            self.load_model(path)

    def _show_formats(self, event: FormatsCompared) -> None:
        from pathlib import Path

        self.copy_choice.clear()
        if not event.stopped:
            original = event.figures[0]
            rows = "".join(
                f"<tr><td>{f['format']}</td><td align=right>{f['size_bytes'] / 1e6:.0f} MB</td>"
                f"<td align=right>{1e3 * f['t1_s']:.2f} ms</td><td align=right>{original['t1_s'] / f['t1_s']:.2f}×</td>"
                f"<td align=right>{f['relative_all'][3]:.2f}</td><td align=right>{f['deviation']:.3f}</td>"
                f"<td align=right>{_agreement_text(f)}</td></tr>"
                for f in event.figures
            )
            self.formats_label.setText(
                f"<p>Measured here on {html.escape(Path(original['path']).name)} and its copies:</p>"
                "<table cellspacing=4><tr><th>format</th><th>size</th><th>T(1)</th><th>speed</th><th>T(4)/T(1)</th>"
                f"<th>deviation</th><th>agreement</th></tr>{rows}</table><p>{html.escape(event.sentence)}</p>")
            self.compared_formats = tuple(f["format"] for f in event.figures[1:])
            for f in event.figures[1:]:
                label = f"{f['format']} copy" + (" (recommended)" if f["path"] == event.recommended else "")
                self.copy_choice.addItem(label, f["path"])
                self.copy_choice.setItemData(self.copy_choice.count() - 1, f["path"], Qt.ToolTipRole)
            if event.recommended is not None:
                self.copy_choice.setCurrentIndex(self.copy_choice.findData(event.recommended))
        self._update_buttons()
        self.statusBar().showMessage(event.sentence if event.stopped else "Weight formats compared")

    def predicted_speedup(self, stats: dict, mode: str) -> float | None:
        """The cost model's speed-up for a finished run, from the profile and the run's counters."""
        from specdec_studio.engine.tuning import cost_model
        from specdec_studio.engine.tuning.profile import curve_of

        curve, draft_curve = curve_of(self.profiles["target"]), curve_of(self.profiles["draft"])
        if curve is None:
            return None
        if registry.mode(mode).needs == "draft" and draft_curve is None:
            return None
        return cost_model.predict_from_stats(stats, curve, mode=mode, draft_curve=draft_curve)

    def break_even_words(self, config) -> str | None:
        """For a speculative run with both profiles measured: the draft's break-even in words."""
        from specdec_studio.engine.tuning import cost_model
        from specdec_studio.engine.tuning.profile import curve_of

        curve, draft_curve = curve_of(self.profiles["target"]), curve_of(self.profiles["draft"])
        if config.mode_entry.needs != "draft" or curve is None or draft_curve is None:
            return None
        return cost_model.draft_break_even_words(curve, draft_curve, config.speculative.k)

    def draft_break_even_summary(self, k: int) -> str | None:
        """The loaded draft's break-even at ``k`` in words and for every usual k, from the two
        profiles; None without a draft or either profile."""
        from specdec_studio.engine.tuning import cost_model
        from specdec_studio.engine.tuning.profile import curve_of

        curve, draft_curve = curve_of(self.profiles["target"]), curve_of(self.profiles["draft"])
        if curve is None or draft_curve is None:
            return None
        words = cost_model.draft_break_even_words(curve, draft_curve, k)
        table = cost_model.draft_break_even_table_words(curve, draft_curve)
        return (f"With {self.profiles['draft']['model_name']}: {words}. "
                f"Acceptance each draft length needs to pay here: {table}.")

    def update_draft_break_even(self) -> None:
        """The Tune tab's break-even line for the loaded pair at the run controls' k: worked out
        again only when k or a profile changed (every control's change calls this, a slider drag
        many times a second)."""
        k, target, draft = int(self.controls.values()["k"]), self.profiles["target"], self.profiles["draft"]
        shown = self._break_even_shown_for
        if shown is not None and shown[0] == k and shown[1] is target and shown[2] is draft:
            return
        self._break_even_shown_for = (k, target, draft)
        self.tune.set_draft_break_even(self.draft_break_even_summary(k))

    def update_speedup_curves(self) -> None:
        """The speed-up curves of the Live and Tune tabs, from the profiles just measured or read:
        the target's, and the loaded draft's (whose decodes each step pays for)."""
        from specdec_studio.engine.tuning.profile import curve_of
        from specdec_studio.engine.tuning.speedup_curve import speedup_curves

        curve, draft_curve = curve_of(self.profiles["target"]), curve_of(self.profiles["draft"])
        curves = speedup_curves(curve, draft_curve) if curve is not None else None
        self.stats.t_plain_s = curve.t_plain_s if curve is not None else None
        for plot in (self.stats.speedup_plot, self.tune.speedup_plot):
            plot.set_curves(curves)

    def measure_baseline(self) -> None:
        if self.last_run_key is None:
            self.statusBar().showMessage("No finished run to measure the plain baseline of yet.")
            return
        from specdec_studio.engine.config import RunConfig

        # the baseline of the last run: its token budget and sampling, whatever the controls say now,
        # so that it is stored under the key of the run it measures
        config = self.last_run_config
        plain = RunConfig(mode="plain", max_tokens=config.max_tokens, sampling=config.sampling)
        key = self.last_run_key
        if self.start_job(Trigger.RUN, lambda: self.worker.run_baseline(plain, key), kind="baseline"):
            self.statusBar().showMessage("Measuring the plain baseline…")

    def _on_tuning_event(self, event) -> bool:
        """Profile and sweep events; False if ``event`` is neither."""
        from specdec_studio.engine.tuning import sweep

        if isinstance(event, ProfileStarted):
            if event.measuring:
                self._engine_trigger(Trigger.MEASURING)  # a load goes on to measure its profile
                self.statusBar().showMessage(f"Measuring the {event.what}'s batch-cost profile (once for this "
                                             "model, context and thread count; Stop skips it)…")
        elif isinstance(event, ProfileProgress):
            self.statusBar().showMessage(f"Measuring the {event.what}'s batch-cost profile… "
                                         f"{100 * event.fraction:.0f}%")
        elif isinstance(event, ProfileReady):
            self.profiles = {"target": event.target, "draft": event.draft}
            self.update_draft_break_even()
            self.update_speedup_curves()
            self.profile_plot.set_profiles(event.target, event.draft)
            if event.target is not None:
                c = event.target
                self.profile_label.setText(
                    f"{c['model_name']}: one decode of B tokens costs T(B)/T(1) = "
                    + ", ".join(f"{r:.1f} (B={b})" for b, r in zip(c["sizes"], c["relative_all_logits"])
                                if b in (2, 4, 8, 16, 32, 128))
                    + f". Measured in {c['t_measure_s']:.0f} s; a step wins when it emits more tokens than it costs.")
            if event.message or self.profiling:  # a profile read from the cache leaves the status line be
                self.statusBar().showMessage(event.message or "Batch-cost profile ready")
            if self.last_finished is not None and self.live is not None and self.live.stats is not None:
                self.stats.finish(self.last_finished.stats, self.baselines.get(self.last_run_key),
                                  self.predicted_speedup(self.last_finished.stats, self.last_run_mode))
        elif isinstance(event, SavedSweeps):
            self.tune.set_saved(event.results)
        elif isinstance(event, FormatsProgress):
            self.statusBar().showMessage("Weight formats: " + event.message)
        elif isinstance(event, FormatsCompared):
            self._show_formats(event)
        elif isinstance(event, FormatSpeedsMeasured):
            self._show_format_speeds(event)
        elif isinstance(event, ExactnessReady):
            self.exactness_label.setText("Exactness: " + event.note)
            self.exactness_label.setToolTip(
                "Largest logit difference, batched against one token at a time: "
                + ", ".join(f"B={b}: {v:.3f}" for b, v in event.result["max_abs_diff_by_batch"].items())
                + f"; past {event.result['long_context']['n_cells']} cells: "
                + ", ".join(f"B={b}: {v:.3f}" for b, v in event.result["long_context"]["max_abs_diff_by_batch"].items())
            )
            if self.checking_exactness:
                self.statusBar().showMessage("Exactness checked")
        elif isinstance(event, sweep.SweepStarted):
            self.tune.on_started(event)
        elif isinstance(event, sweep.SweepProgress):
            self.tune.on_progress(event)
        elif isinstance(event, sweep.SweepCell):
            self.tune.on_cell(event)
        elif isinstance(event, sweep.SweepFinished):
            self.tune.on_finished(event)
            best = sweep.best_cell(event.result["cells"])
            self.statusBar().showMessage(
                ("Sweep stopped" if event.cancelled else "Sweep done")
                + (f": best {sweep.setting_label(best['setting'])} at {best['measured']:.2f}× plain" if best else ""))
        else:
            return False
        return True


def _agreement_text(figures: dict) -> str:
    """A format copy's greedy agreement with the original, as the formats table shows it."""
    return "original" if figures["agreement"] is None else f"{100 * figures['agreement']:.1f} %"

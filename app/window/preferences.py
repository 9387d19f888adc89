"""What the window keeps between sessions (QSettings): geometry, panels, the run controls, the
model bar's numbers, the view switches and the theme."""

from __future__ import annotations

from specdec_studio.app.qt import QtGui, QtWidgets
from specdec_studio.app.theme import THEMES, apply_theme
from specdec_studio.app.window.controller import Controller
from specdec_studio.engine.config import DEFAULT_N_CTX, default_threads


def _flag(value, default: bool) -> bool:
    """A switch as QSettings hands it back: a bool, or the text of one from an ini file."""
    return default if value is None else value in (True, "true")


class Preferences(Controller):
    def restore(self) -> None:
        window, settings = self.window, self.window.settings
        geometry = settings.value("geometry")
        if geometry is not None:
            window.restoreGeometry(geometry)
        else:
            window.resize(1480, 900)
        window.fit_to_screen()
        splitter = settings.value("splitter")
        if splitter is not None:
            window.splitter.restoreState(splitter)
            for index in (0, 2):
                window.splitter.widget(index).setVisible(window.splitter.sizes()[index] > 0)
            window.sync_side_panel_actions()
        params = settings.value("params")
        if isinstance(params, dict):
            window.controls.set_values(params)
        bar = window.model_bar
        bar.threads.setValue(int(settings.value("threads", default_threads())))
        bar.ctx.setValue(int(settings.value("n_ctx", DEFAULT_N_CTX)))
        bar.gpu_layers.setValue(int(settings.value("gpu_layers", 0)))
        bar.draft_gpu_layers.setValue(int(settings.value("draft_gpu_layers", 0)))
        window.input.chat_mode.setChecked(_flag(settings.value("chat"), True))
        window.input.show_tokens.setChecked(_flag(settings.value("show_tokens"), False))
        window.explain_action.setChecked(_flag(settings.value("explain_tokens"), True))
        self.set_theme(str(settings.value("theme", "system")))

    def save(self) -> None:
        window, s = self.window, self.window.settings
        s.setValue("geometry", window.saveGeometry())
        s.setValue("splitter", window.splitter.saveState())
        s.setValue("params", window.controls.values())
        s.setValue("threads", window.model_bar.threads.value())
        s.setValue("n_ctx", window.model_bar.ctx.value())
        s.setValue("gpu_layers", window.model_bar.gpu_layers.value())
        s.setValue("draft_gpu_layers", window.model_bar.draft_gpu_layers.value())
        s.setValue("chat", window.input.chat_mode.isChecked())
        s.setValue("show_tokens", window.input.show_tokens.isChecked())
        s.setValue("explain_tokens", window.explain_action.isChecked())
        models = self.model.models
        if models.path:
            s.setValue("last_model", models.path)
        s.setValue("last_draft", models.draft_path or "")
        s.sync()

    def set_theme(self, theme: str) -> None:
        window = self.window
        if theme not in THEMES:
            theme = "system"
        apply_theme(QtWidgets.QApplication.instance(), theme)
        for action in window.theme_group.actions():
            action.setChecked(action.data() == theme)
        self.paint_backgrounds()
        window.settings.setValue("theme", theme)
        window.runs.render()

    def paint_backgrounds(self) -> None:
        """The plots' backgrounds follow the palette (the widgets' own follow it by Qt's event)."""
        window = self.window
        base = QtWidgets.QApplication.palette().color(QtGui.QPalette.Base)
        for view in (window.kv_map, window.inspector, window.stats, window.tune):
            view.set_background(base)
        window.profile_plot.setBackground(base)

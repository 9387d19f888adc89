"""The controls' enabled states, derived from the model: a subscriber of the window's model (its
activity and its slices) and of the two widgets whose state is a fact too (the run controls'
validity, the chat switch). No job refreshes the controls by hand."""

from __future__ import annotations

from specdec_studio.app.model.activity import Facts, allowed_controls
from specdec_studio.app.window.controller import Controller


class ControlsState(Controller):
    def __init__(self, window) -> None:
        super().__init__(window)
        self.model.subscribe(lambda _changed, _names: self.refresh())
        window.controls.changed.connect(self.refresh)
        window.input.chat_mode.toggled.connect(lambda _on: self.refresh())
        self.refresh()

    def facts(self) -> Facts:
        """What the window knows besides its activity that a control depends on."""
        model, chat = self.model, self.window.chat
        conversation = model.chat.conversation
        return Facts(model_loaded=model.models.loaded, controls_valid=self.window.controls.error is None,
                     chat_has_message=chat.last_user_index() is not None and chat.shown(),
                     conversation_has_messages=conversation is not None and bool(conversation.messages),
                     has_finished_run=model.run.last_finished is not None, has_copies=bool(model.tuning.copies),
                     has_chat_template=model.models.has_chat_template, presenting=model.presentation.on)

    def refresh(self) -> None:
        """Every control's enabled state, from the activity table (app/model/activity.py) alone."""
        window = self.window
        allowed = allowed_controls(self.model.activity, self.facts(), stopping=self.model.machine.stopping)
        for widget in (window.input.run, window.run_action):
            widget.setEnabled(allowed["run"])
        for widget in (window.input.stop, window.stop_action):
            widget.setEnabled(allowed["stop"])
        window.input.regenerate.setEnabled(allowed["regenerate"])
        window.input.edit_last.setEnabled(allowed["edit_last"])
        window.input.clear.setEnabled(allowed["clear"])
        window.input.chat_mode.setEnabled(allowed["chat_mode"])
        window.sidebar.set_busy(not allowed["conversations"])
        window.stats.baseline_button.setEnabled(allowed["baseline"])
        window.model_bar.setEnabled(allowed["model_bar"])
        window.controls.setEnabled(allowed["sliders"])
        window.tune.set_allowed(run=allowed["tune_run"], stop=allowed["tune_stop"], mode=allowed["tune_mode"])
        window.remeasure_button.setEnabled(allowed["remeasure"])
        window.exactness_button.setEnabled(allowed["exactness"])
        window.formats_button.setEnabled(allowed["formats"])
        window.format_speed_button.setEnabled(allowed["format_speeds"])
        window.load_copy_button.setEnabled(allowed["load_copy"])
        window.race.start_button.setEnabled(allowed["race"])
        window.batch_view.run_button.setEnabled(allowed["batch"])
        window.batch_view.serve_button.setEnabled(allowed["batch"])
        window.demo_menu.setEnabled(allowed["replay"] and bool(window.demo_menu.actions()))
        window.open_trace_action.setEnabled(allowed["replay"])
        for action in window.mode_actions:
            action.setEnabled(allowed["mode_keys"])

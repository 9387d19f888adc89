"""The chat in the window: regenerate, edit, new conversations, the system message, exports, and
the conversation the engine sends. A mixin of :class:`app.main_window.MainWindow`."""

from __future__ import annotations

from pathlib import Path
from specdec_studio.app.model.activity import DOING, allowed_controls
from specdec_studio.app.qt import QtWidgets
from specdec_studio.app.transcript import Turn


class ChatMixin:
    def _chat_shown(self) -> bool:
        """The stream shows the conversation (not a completion, nor a replayed trace)."""
        return self.input.chat_mode.isChecked() and self.has_chat_template and not self.replaying

    def _last_user_index(self) -> int | None:
        if self.conversation is None:
            return None
        return max((i for i, m in enumerate(self.conversation.messages) if m.role == "user"), default=None)

    def regenerate(self) -> None:
        index = self._last_user_index()
        if self.running or index is None or not self._chat_shown():
            return
        config = self._valid_config(explain=True)
        if config is None:
            return
        user = self.conversation.messages[index].content
        self._launch(Turn(user=user, chat=True, mode=config.mode), config, "", regenerate=True)
        self.input.focus()

    def edit_last(self) -> None:
        """Put the last message back in the box: Run replaces it (and the answers after it)."""
        index = self._last_user_index()
        if self.running or index is None:
            return
        self.editing_index = index
        self.input.set_text(self.conversation.messages[index].content)
        self.statusBar().showMessage("Editing your last message: Run replaces it and the answer after it")
        self._update_buttons()
        self.input.focus()

    def new_conversation(self) -> None:
        self._conversation_action("new")
        self.stats.reset()
        self.input.focus()

    def _conversation_action(self, action: str, conv_id: str = "") -> None:
        if not allowed_controls(self.activity, self._facts())["conversations"]:  # it would wait behind the job
            self.statusBar().showMessage(f"Cannot change conversations while {DOING[self.activity]}: "
                                         "wait for it to end or press Stop.")
            return
        self.editing_index = None
        self.worker.conversation(action, conv_id)

    def edit_system_message(self) -> None:
        current = ""
        if self.conversation is not None and self.conversation.messages and \
                self.conversation.messages[0].role == "system":
            current = self.conversation.messages[0].content
        text, ok = QtWidgets.QInputDialog.getMultiLineText(
            self, "System message", "Instructions the model sees before the conversation (empty: none):", current)
        if ok and not self.running:
            self.worker.conversation("system", text=text)

    def export_conversation(self, kind: str) -> None:
        if self.conversation is None or not self.conversation.messages:
            self.statusBar().showMessage("Nothing to export yet")
            return
        suffix = {"markdown": "md", "html": "html"}[kind]
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in self.conversation.title).strip() or "chat"
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self, "Export conversation", f"{name}.{suffix}",
                                                        f"{kind.capitalize()} (*.{suffix})")
        if path:
            self.write_export(kind, path)

    def write_export(self, kind: str, path: str) -> None:
        from specdec_studio.engine.chat import transcript

        text = (
            transcript.to_markdown(self.conversation) if kind == "markdown" else transcript.to_html(self.conversation)
        )
        try:
            Path(path).write_text(text, encoding="utf-8")
        except OSError as exc:
            self.error_label.setText(f"Could not write {path}: {exc.strerror or exc}")
            return
        self.statusBar().showMessage(f"Exported to {path}")

    def _on_conversation(self, event) -> None:
        """The engine's conversation changed: it is what the stream shows."""
        self.conversation = event.view
        if event.note:
            self.statusBar().showMessage(event.note[0].upper() + event.note[1:])
            self.conversation_note.setText(event.note[0].upper() + event.note[1:])
        elif not self.running:
            self.conversation_note.setText("")
        if self._chat_shown() and not (self.running and self.live is not None and self.live.runs):
            self._render_all()  # mid-run the streamed tokens stay; the final view redraws them

"""The chat in the window: regenerate, edit, conversations (new, open, rename, delete, search), the
system message, exports, and the conversation the engine sends. Writes the chat slice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from specdec_studio.app.model.activity import DOING, allowed_controls
from specdec_studio.app.model.turn import Turn
from specdec_studio.app.qt import QtWidgets
from specdec_studio.app.window.controller import Controller
from specdec_studio.app.worker.messages import ConversationList
from specdec_studio.engine.chat import transcript
from specdec_studio.engine.chat.turns import ConversationChanged
from specdec_studio.engine.jsonfile import write_text


class ChatController(Controller):
    def handlers(self) -> dict[type, Callable]:
        return {ConversationChanged: self._on_conversation, ConversationList: self._on_conversation_list}

    def shown(self) -> bool:
        """The stream shows the conversation (not a completion, nor a replayed trace)."""
        return self.can_chat() and not self.model.demo.replay_shown

    def can_chat(self) -> bool:
        """The chat switch is on and the model has a template to chat with."""
        return self.window.input.chat_mode.isChecked() and self.model.models.has_chat_template

    def last_user_index(self) -> int | None:
        conversation = self.model.chat.conversation
        if conversation is None:
            return None
        return max((i for i, m in enumerate(conversation.messages) if m.role == "user"), default=None)

    def take_editing_index(self) -> int | None:
        """The message the next Run replaces (None: a new message); the edit is then under way."""
        index = self.model.chat.editing_index
        self.model.chat.update(editing_index=None)
        return index

    def regenerate(self) -> None:
        index = self.last_user_index()
        if self.model.running or index is None or not self.shown():
            return
        runs = self.window.runs
        config = runs.valid_config(explain=True)
        if config is None:
            return
        user = self.model.chat.conversation.messages[index].content
        runs.launch(Turn(user=user, chat=True, mode=config.mode), config, "", regenerate=True)
        self.window.input.focus()

    def edit_last(self) -> None:
        """Put the last message back in the box: Run replaces it (and the answers after it)."""
        index = self.last_user_index()
        if self.model.running or index is None:
            return
        self.model.chat.update(editing_index=index)
        self.window.input.set_text(self.model.chat.conversation.messages[index].content)
        self.say("Editing your last message: Run replaces it and the answer after it")
        self.window.input.focus()

    def new_conversation(self) -> None:
        self.act("new")
        self.window.stats.reset()
        self.window.input.focus()

    def act(self, action: str, conv_id: str = "", text: str = "") -> None:
        """A conversation request to the engine: new, open, delete (rename and search go at once)."""
        if not allowed_controls(self.model.activity, self.window.controls_state.facts())["conversations"]:
            # it would wait behind the job
            self.say(f"Cannot change conversations while {DOING[self.model.activity]}: "
                     "wait for it to end or press Stop.")
            return
        self.model.chat.update(editing_index=None)
        self.window.worker.conversation(action, conv_id, text)

    def rename(self, conv_id: str, title: str) -> None:
        self.window.worker.conversation("rename", conv_id, title)

    def search(self, text: str) -> None:
        self.window.worker.conversation("list", text=text)

    def edit_system_message(self) -> None:
        conversation = self.model.chat.conversation
        current = ""
        if conversation is not None and conversation.messages and conversation.messages[0].role == "system":
            current = conversation.messages[0].content
        text, ok = QtWidgets.QInputDialog.getMultiLineText(
            self.window, "System message", "Instructions the model sees before the conversation (empty: none):",
            current)
        if ok and not self.model.running:
            self.window.worker.conversation("system", text=text)

    def export_dialog(self, kind: str) -> None:
        conversation = self.model.chat.conversation
        if conversation is None or not conversation.messages:
            self.say("Nothing to export yet")
            return
        suffix = {"markdown": "md", "html": "html"}[kind]
        name = "".join(c if c.isalnum() or c in " -_" else "_" for c in conversation.title).strip() or "chat"
        path, _ = QtWidgets.QFileDialog.getSaveFileName(self.window, "Export conversation", f"{name}.{suffix}",
                                                        f"{kind.capitalize()} (*.{suffix})")
        if path:
            self.write_export(kind, path)

    def write_export(self, kind: str, path: str) -> None:
        conversation = self.model.chat.conversation
        text = transcript.to_markdown(conversation) if kind == "markdown" else transcript.to_html(conversation)
        try:
            write_text(Path(path), text, shared=True)
        except OSError as exc:
            self.window.error_label.setText(f"Could not write {path}: {exc.strerror or exc}")
            return
        self.say(f"Exported to {path}")

    def _on_conversation(self, event: ConversationChanged) -> None:
        """The engine's conversation changed: it is what the stream shows."""
        self.model.chat.update(conversation=event.view)
        window, running, live = self.window, self.model.running, self.model.run.live
        if event.note:
            note = event.note[0].upper() + event.note[1:]
            self.say(note)
            window.conversation_note.setText(note)
        elif not running:
            window.conversation_note.setText("")
        if self.shown() and not (running and live is not None and live.runs):
            window.runs.render()  # mid-run the streamed tokens stay; the final view redraws them

    def _on_conversation_list(self, event: ConversationList) -> None:
        self.window.sidebar.set_items(event.items, event.current)
        if event.damaged:
            n = len(event.damaged)
            self.say(f"Skipped {n} damaged conversation file{'s' if n > 1 else ''} in the data folder: "
                     + ", ".join(event.damaged[:3]) + ("…" if n > 3 else ""))

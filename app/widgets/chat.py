"""The message box and the buttons that act on the conversation."""

from __future__ import annotations

from specdec_studio.app.qt import QtCore, QtGui, QtWidgets, Signal


class ChatInput(QtWidgets.QWidget):
    submit = Signal()

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.edit = QtWidgets.QPlainTextEdit()
        self.edit.setPlaceholderText("Message or prompt — Ctrl+Enter runs, Esc stops")
        self.edit.setMaximumHeight(96)
        self.chat_mode = QtWidgets.QCheckBox("Chat")
        self.chat_mode.setToolTip("Use the model's chat template; off = plain completion of the text")
        self.run = QtWidgets.QPushButton("Run")
        self.run.setDefault(True)
        self.stop = QtWidgets.QPushButton("Stop")
        self.regenerate = QtWidgets.QPushButton("Regenerate")
        self.edit_last = QtWidgets.QPushButton("Edit last")
        self.clear = QtWidgets.QPushButton("New chat")
        self.show_rejected = QtWidgets.QCheckBox("Show rejected drafts")
        self.mark_steps = QtWidgets.QCheckBox("Mark steps")
        self.show_tokens = QtWidgets.QCheckBox("Show tokens")
        self.show_tokens.setToolTip("Show finished answers as their tokens (steps, accepted and rejected drafts) "
                                    "instead of rendered Markdown")
        # two rows, so that the message box fits a laptop screen beside the side panels
        options = QtWidgets.QHBoxLayout()
        for w in (self.chat_mode, self.show_tokens, self.show_rejected, self.mark_steps):
            options.addWidget(w)
        options.addStretch(1)
        buttons = QtWidgets.QHBoxLayout()
        buttons.addStretch(1)
        for w in (self.regenerate, self.edit_last, self.clear, self.stop, self.run):
            buttons.addWidget(w)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.edit)
        layout.addLayout(options)
        layout.addLayout(buttons)
        self.run.clicked.connect(self.submit.emit)
        self.edit.installEventFilter(self)

    def eventFilter(self, watched, event) -> bool:
        """Ctrl+Enter in the box runs, whether or not the window manager made the window active
        (the window's own shortcut needs an active window; the box only needs the keyboard)."""
        if (watched is self.edit and event.type() == QtCore.QEvent.KeyPress
                and event.key() in (QtCore.Qt.Key_Return, QtCore.Qt.Key_Enter)
                and event.modifiers() & QtCore.Qt.ControlModifier):
            self.submit.emit()
            return True
        return super().eventFilter(watched, event)

    def text(self) -> str:
        return self.edit.toPlainText()

    def focus(self) -> None:
        """Put the keyboard in the message box, where the user types next."""
        self.edit.setFocus(QtCore.Qt.OtherFocusReason)

    def set_text(self, text: str) -> None:
        self.edit.setPlainText(text)
        self.edit.moveCursor(QtGui.QTextCursor.End)

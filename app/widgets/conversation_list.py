"""The sidebar of saved conversations: search, open, new, rename, delete, export."""

from __future__ import annotations

import time

from specdec_studio.app.qt import QtCore, QtWidgets, Signal

ID_ROLE = QtCore.Qt.UserRole


class ConversationSidebar(QtWidgets.QWidget):
    new_requested = Signal()
    open_requested = Signal(str)
    rename_requested = Signal(str, str)
    delete_requested = Signal(str)
    search_changed = Signal(str)
    export_requested = Signal(str)  # "markdown" or "html"

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.search = QtWidgets.QLineEdit()
        self.search.setPlaceholderText("Search conversations")
        self.search.setClearButtonEnabled(True)
        self.list = QtWidgets.QListWidget()
        self.list.setToolTip("Double-click to rename")
        self.new_button = QtWidgets.QPushButton("New")
        self.rename_button = QtWidgets.QPushButton("Rename")
        self.delete_button = QtWidgets.QPushButton("Delete")
        self.export_button = QtWidgets.QToolButton()
        self.export_button.setText("Export")
        self.export_button.setPopupMode(QtWidgets.QToolButton.InstantPopup)
        menu = QtWidgets.QMenu(self.export_button)
        menu.addAction("Markdown…", lambda: self.export_requested.emit("markdown"))
        menu.addAction("HTML with token colours…", lambda: self.export_requested.emit("html"))
        self.export_button.setMenu(menu)
        buttons = QtWidgets.QHBoxLayout()
        for w in (self.new_button, self.rename_button, self.delete_button, self.export_button):
            buttons.addWidget(w)
        layout = QtWidgets.QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.addWidget(self.search)
        layout.addWidget(self.list, 1)
        layout.addLayout(buttons)
        self.current_id = ""
        self._search_timer = QtCore.QTimer(self, singleShot=True, interval=200)
        self._search_timer.timeout.connect(lambda: self.search_changed.emit(self.search.text()))
        self.search.textChanged.connect(lambda _t: self._search_timer.start())
        self.new_button.clicked.connect(self.new_requested.emit)
        self.rename_button.clicked.connect(self._rename_selected)
        self.delete_button.clicked.connect(self._delete_selected)
        self.list.itemActivated.connect(self._open_item)
        self.list.itemClicked.connect(self._open_item)
        self.list.itemDoubleClicked.connect(lambda _item: self._rename_selected())

    def set_items(self, items, current: str) -> None:
        """``items``: conversation summaries (id, title, updated, n_messages), newest first."""
        self.current_id = current
        self.list.blockSignals(True)
        self.list.clear()
        for s in items:
            when = time.strftime("%d %b %H:%M", time.localtime(s.updated))
            item = QtWidgets.QListWidgetItem(f"{s.title}\n{when} · {s.n_messages} messages")
            item.setData(ID_ROLE, s.id)
            item.setToolTip(s.title)
            self.list.addItem(item)
            if s.id == current:
                item.setSelected(True)
                self.list.setCurrentItem(item)
        self.list.blockSignals(False)
        self._update_buttons()

    def set_busy(self, busy: bool) -> None:
        """While a run writes the conversation, the list cannot switch away from it."""
        for w in (self.list, self.new_button, self.rename_button, self.delete_button):
            w.setEnabled(not busy)

    def _selected_id(self) -> str:
        item = self.list.currentItem()
        return item.data(ID_ROLE) if item is not None else ""

    def _update_buttons(self) -> None:
        has = bool(self._selected_id())
        self.rename_button.setEnabled(has)
        self.delete_button.setEnabled(has)

    def _open_item(self, item: QtWidgets.QListWidgetItem) -> None:
        conv_id = item.data(ID_ROLE)
        self._update_buttons()
        if conv_id and conv_id != self.current_id:
            self.open_requested.emit(conv_id)

    def _rename_selected(self) -> None:
        item = self.list.currentItem()
        if item is None:
            return
        title, ok = QtWidgets.QInputDialog.getText(self, "Rename conversation", "Title:",
                                                   text=item.toolTip())
        if ok and title.strip():
            self.rename_requested.emit(item.data(ID_ROLE), title.strip())

    def _delete_selected(self) -> None:
        item = self.list.currentItem()
        if item is None:
            return
        answer = QtWidgets.QMessageBox.question(self, "Delete conversation",
                                                f"Delete “{item.toolTip()}”? This cannot be undone.")
        if answer == QtWidgets.QMessageBox.Yes:
            self.delete_requested.emit(item.data(ID_ROLE))

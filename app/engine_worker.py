"""The engine thread: owns the :class:`engine.session.Session` and runs commands from a queue.

llama.cpp contexts are used from one thread only, so the session is created, used and closed here.
Events are appended to a deque that the window drains from a QTimer at a fixed rate: decoding
speed never depends on how fast the window paints. ``stop()`` sets the session's cancel flag
directly (a thread busy in a decode loop has no event loop to deliver a slot call).
"""

from __future__ import annotations

import collections
import queue
import threading
import traceback
from dataclasses import dataclass

from app.qt import QtCore, Signal


@dataclass(frozen=True)
class ModelLoaded:
    path: str
    info: dict
    has_chat_template: bool
    n_ctx: int
    n_threads: int


@dataclass(frozen=True)
class LoadFailed:
    message: str
    previous_model_kept: bool = False


@dataclass(frozen=True)
class LoadStarted:
    path: str


@dataclass(frozen=True)
class _Load:
    path: str
    n_ctx: int
    n_threads: int | None


@dataclass(frozen=True)
class _Run:
    config: object
    text: str
    chat: bool
    regenerate: bool = False


_QUIT = object()


class EngineWorker(QtCore.QThread):
    """Runs engine commands one at a time on its own thread."""

    events_ready = Signal()  # a hint that the deque is non-empty; the window drains on its timer

    def __init__(self, parent: QtCore.QObject | None = None) -> None:
        super().__init__(parent)
        self._commands: queue.Queue = queue.Queue()
        self._events: collections.deque = collections.deque()
        self._session_lock = threading.Lock()
        self._session = None
        self.busy = False

    # ------------------------------------------------------------------ called from the GUI thread
    def load_model(self, path: str, n_ctx: int = 4096, n_threads: int | None = None) -> None:
        self._commands.put(_Load(path, n_ctx, n_threads))

    def start_run(self, config, text: str, *, chat: bool, regenerate: bool = False) -> None:
        self._commands.put(_Run(config, text, chat, regenerate))

    def stop(self) -> None:
        with self._session_lock:
            if self._session is not None:
                self._session.cancel()

    def clear_history(self) -> None:
        self._commands.put("clear_history")

    def shutdown(self) -> None:
        self.stop()
        self._commands.put(_QUIT)
        self.wait()

    def drain(self) -> list:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    # ------------------------------------------------------------------ engine thread
    def _emit(self, event: object) -> None:
        self._events.append(event)
        self.events_ready.emit()

    def run(self) -> None:  # QThread entry point
        while True:
            command = self._commands.get()
            if command is _QUIT:
                break
            try:
                if isinstance(command, _Load):
                    self._load(command)
                elif isinstance(command, _Run):
                    self._run(command)
                elif command == "clear_history" and self._session is not None:
                    self._session.history.clear()
            except Exception as exc:  # noqa: BLE001 - the window must survive anything
                from engine.errors import SpecDecError
                from engine.events import RunFailed

                message = str(exc) if isinstance(exc, SpecDecError) else f"internal error: {exc!r}"
                if not isinstance(exc, SpecDecError):
                    traceback.print_exc()
                if isinstance(command, _Load):
                    self._emit(LoadFailed(message, previous_model_kept=self._session is not None))
                else:
                    self._emit(RunFailed(message))
            finally:
                self.busy = False
        self._close_session()

    def _close_session(self) -> None:
        with self._session_lock:
            session, self._session = self._session, None
        if session is not None:
            session.close()

    def _load(self, command: _Load) -> None:
        from engine import catalog
        from engine.session import Session

        self._emit(LoadStarted(command.path))
        path = catalog.resolve(command.path)
        # Load the new model before closing the old one: a bad file leaves the old one usable.
        session = Session(path, n_ctx=command.n_ctx, n_threads=command.n_threads)
        self._close_session()
        with self._session_lock:
            self._session = session
        self._emit(ModelLoaded(str(path), session.model.info.summary(), session.has_chat_template,
                               session.n_ctx, session.n_threads))

    def _run(self, command: _Run) -> None:
        from engine.errors import SpecDecError

        session = self._session
        if session is None:
            raise SpecDecError("no model is loaded; open a model first")
        self.busy = True
        if command.chat:
            if command.regenerate and session.history:
                last_user = session.history[-2].content
                del session.history[-2:]
                events = session.chat(command.config, last_user)
            else:
                events = session.chat(command.config, command.text)
        else:
            events = session.run(command.config, session.tokenize_prompt(command.text), prompt_text=command.text)
        for event in events:
            self._emit(event)

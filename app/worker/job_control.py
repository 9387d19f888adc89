"""How a job is stopped and paused: one Stop flag per job, and the gate a run waits at between
steps when the demo pauses it."""

from __future__ import annotations

import threading


class StepGate:
    """Lets a run pause between steps and go on one decode at a time.

    The engine thread calls :meth:`wait` after each step; it returns at once unless paused, in
    which case it blocks until the GUI resumes, grants one step, or Stop is pressed."""

    def __init__(self, cancel: threading.Event) -> None:
        self._cond = threading.Condition()
        self._cancel = cancel  # the running job's Stop flag (the worker sets it for each job)
        self.paused = False
        self._grants = 0

    def watch(self, cancel: threading.Event) -> None:
        """The Stop flag of the job that runs next (engine thread)."""
        with self._cond:
            self._cancel = cancel

    def pause(self) -> None:
        with self._cond:
            self.paused = True
            self._grants = 0

    def resume(self) -> None:
        with self._cond:
            self.paused = False
            self._cond.notify_all()

    def step(self) -> None:
        """One more step, then wait again."""
        with self._cond:
            self.paused = True
            self._grants += 1
            self._cond.notify_all()

    def wake(self) -> None:
        """Stop was pressed: let the waiting run see it."""
        with self._cond:
            self._cond.notify_all()

    def wait(self, on_pause=None) -> None:
        with self._cond:
            if not self.paused or self._cancel.is_set():
                return
            if self._grants:
                self._grants -= 1
                return
            if on_pause is not None:
                on_pause()
            while self.paused and not self._grants and not self._cancel.is_set():
                self._cond.wait(0.1)
            if self._grants:
                self._grants -= 1


class JobTokens:
    """One Stop flag per job the window asks for.

    Stop sets the flag of every job asked for before it (the one running and those still queued);
    a job asked for after it gets a fresh flag, so nothing the window does next (another model, a
    draft restored after a load) can undo a Stop that is still ending a job."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._live: list[threading.Event] = []

    def issue(self) -> threading.Event:
        token = threading.Event()
        with self._lock:
            self._live.append(token)
        return token

    def stop_all(self) -> None:
        with self._lock:
            for token in self._live:
                token.set()

    def retire(self, token: threading.Event) -> None:
        with self._lock:
            if token in self._live:
                self._live.remove(token)

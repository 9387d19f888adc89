"""The requests a server decodes, queued for the batch loop's free slots (engine.parallel's Inbox),
bounded: a full queue refuses a request at once instead of keeping its client waiting."""

from __future__ import annotations

import threading
from collections import deque

from specdec_studio.engine.parallel import BatchJob


class JobQueue:
    """Prompts that arrive while the batch runs (a server's requests), from any thread, at most
    ``bound`` waiting or decoding at once; :meth:`close` lets the loop end once every slot is free."""

    def __init__(self, bound: int) -> None:
        self.bound = bound
        self._jobs: deque[BatchJob] = deque()
        self._changed = threading.Condition()
        self._closed = False
        self._in_flight = 0  # submitted and not finished (the consumer of JobFinished counts them down)

    def submit(self, job: BatchJob) -> bool:
        """Queue ``job``; False (nothing queued) where ``bound`` jobs are waiting or decoding."""
        with self._changed:
            if self._closed or self._in_flight >= self.bound:
                return False
            self._in_flight += 1
            self._jobs.append(job)
            self._changed.notify()
            return True

    def finished(self) -> None:
        """A submitted job's JobFinished was handled: its place is free."""
        with self._changed:
            self._in_flight -= 1

    @property
    def in_flight(self) -> int:
        return self._in_flight

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    @property
    def open(self) -> bool:
        return not self._closed

    def take(self) -> BatchJob | None:
        with self._changed:
            return self._jobs.popleft() if self._jobs else None

    def wait(self, timeout_s: float) -> None:
        with self._changed:
            if not self._jobs and not self._closed:
                self._changed.wait(timeout_s)

"""Events from the engine thread to the HTTP loop's requests, with one wake-up of the loop per
burst: a step of P slots yields P events at once, and waking the loop for each (a write to its
self-pipe, then a turn of the loop while llama.cpp's threads decode the next step on the same
cores) costs more than handing all of them over together."""

from __future__ import annotations

import asyncio
import threading
from collections import deque


class Mailbox:
    """Hands ``(queue, item)`` pairs posted from any thread to their asyncio queues on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._pending: deque[tuple[asyncio.Queue, object]] = deque()
        self._lock = threading.Lock()
        self._wake_asked = False

    def post(self, queue: asyncio.Queue, item: object) -> None:
        """Put ``item`` on ``queue`` soon; wakes the loop only if no hand-over is already asked."""
        with self._lock:
            self._pending.append((queue, item))
            if self._wake_asked:
                return
            self._wake_asked = True
        try:
            self.loop.call_soon_threadsafe(self._deliver)
        except RuntimeError:  # the loop has closed: nobody is waiting for these any more
            pass

    def _deliver(self) -> None:
        with self._lock:
            pending, self._pending = self._pending, deque()
            self._wake_asked = False
        for queue, item in pending:
            queue.put_nowait(item)

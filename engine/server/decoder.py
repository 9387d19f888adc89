"""The server's one engine thread: it opens the model, then runs engine.parallel's batch loop over the
request queue for as long as the server lives, every request in a slot of its own with its own
drafting; each request's events go to the sink it was submitted with (from this thread: a sink
hands them to its own loop). llama.cpp's context is used from this thread only."""

from __future__ import annotations

import threading
from collections.abc import Callable

from specdec_studio.engine import parallel
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.server.job_queue import JobQueue

Sink = Callable[[object], None]


class Decoder:
    """``open_session()`` (called on the engine thread) makes the Session; ``config``: the slots'
    settings (a request may choose another mode they can run); ``parallel``: slots; ``queue_bound``:
    requests waiting or decoding at most."""

    def __init__(self, open_session: Callable[[], object], config: RunConfig, parallel_slots: int,
                 queue_bound: int) -> None:
        self.open_session, self.config, self.parallel = open_session, config, parallel_slots
        self.queue = JobQueue(queue_bound)
        self.session = None
        self.failed: str | None = None  # why the model could not be opened or the loop ended
        self.ready = threading.Event()  # the session is open (or failed to open)
        self._sinks: dict[str, Sink] = {}
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="specdec-serve", daemon=True)

    def start(self) -> None:
        """Open the model on the engine thread and wait for it; a SpecDecError if it cannot open."""
        self._thread.start()
        self.ready.wait()
        if self.failed is not None:
            raise SpecDecError(self.failed)

    def submit(self, job: parallel.BatchJob, sink: Sink) -> bool:
        """Queue ``job``; its events go to ``sink``. False where the queue is full (nothing queued)."""
        with self._lock:
            self._sinks[job.id] = sink
        if self.queue.submit(job):
            return True
        with self._lock:
            del self._sinks[job.id]
        return False

    def close(self) -> None:
        """End the loop (requests in flight end as stopped) and close the model."""
        self.queue.close()
        if self.session is not None:
            self.session.cancel()
        if self._thread.is_alive():
            self._thread.join(30)

    @property
    def slot_cells(self) -> int:
        """The cells each slot has: a request's prompt and answer must fit in them."""
        return self.session.n_ctx // self.parallel

    def _serve(self) -> None:
        try:
            self.session = self.open_session()
            events = parallel.run_batch(self.session, self.config, self.queue, self.parallel)
        except SpecDecError as exc:
            self.failed = str(exc)
            self.ready.set()
            return
        self.ready.set()
        try:
            for event in events:
                job_id = getattr(event, "job_id", None)
                if job_id is None:
                    continue
                with self._lock:
                    sink = self._sinks.get(job_id)
                    if isinstance(event, parallel.JobFinished):
                        self._sinks.pop(job_id, None)
                if sink is not None:
                    sink(event)
                if isinstance(event, parallel.JobFinished):
                    self.queue.finished()
        except SpecDecError as exc:  # a decode llama.cpp refused: every request in flight hears it
            self.failed = str(exc)
            with self._lock:
                sinks, self._sinks = list(self._sinks.values()), {}
            for sink in sinks:
                sink(exc)
        finally:
            self.session.close()

"""The engine side of a server: the request queue, engine.parallel's batch loop over it, and the
routing of each request's events to the sink it was submitted with (from the engine thread: a sink
hands them to its own loop). llama.cpp's context is used from the engine thread only: ``specdec
serve``'s own (:class:`Decoder`), or the window's engine thread (app/worker/jobs/serve.py)."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable, Iterator

from specdec_studio.engine import parallel
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.server.job_queue import JobQueue

Sink = Callable[[object], None]


class Router:
    """What the HTTP side sees of the engine: the session (to tokenise requests), the slots' config
    (a request may choose another mode they can run), the bounded queue, and each request's sink."""

    def __init__(self, session, config: RunConfig, parallel_slots: int, queue_bound: int) -> None:
        self.session, self.config, self.parallel = session, config, parallel_slots
        self.queue = JobQueue(queue_bound)
        self._sinks: dict[str, Sink] = {}
        self._stopped: set[str] = set()  # requests the operator stopped (the window's Stop of one)
        self._lock = threading.Lock()

    @property
    def slot_cells(self) -> int:
        """The cells each slot has: a request's prompt and answer must fit in them."""
        return self.session.slot_cells(self.parallel)

    def submit(self, job: parallel.BatchJob, sink: Sink) -> bool:
        """Queue ``job``; its events go to ``sink``. False where the queue is full (nothing queued)."""
        job_id, client_gone = job.id, job.cancelled
        job = dataclasses.replace(job, cancelled=lambda: job_id in self._stopped or bool(client_gone and client_gone()))
        with self._lock:
            self._sinks[job.id] = sink
        if self.queue.submit(job):
            return True
        with self._lock:
            del self._sinks[job.id]
        return False

    def stop_request(self, job_id: str) -> bool:
        """End the request ``job_id`` at the loop's next step, as a client that went away ends it (its
        client gets what was decoded and a finish); from any thread. False if it is not in flight."""
        with self._lock:
            if job_id not in self._sinks:
                return False
            self._stopped.add(job_id)
            return True

    def decode(self) -> Iterator[object]:
        """The batch loop over the queue (its settings checked now: a ConfigError), to be run on the
        engine thread until the queue is closed or the session's Stop is set; every event is routed,
        then yielded (a window draws them too). A failure reaches every request in flight."""
        return self._routed(parallel.run_batch(self.session, self.config, self.queue, self.parallel))

    def _routed(self, events: Iterator[object]) -> Iterator[object]:
        try:
            for event in events:
                self._route(event)
                yield event
        except SpecDecError as exc:
            with self._lock:
                sinks, self._sinks = list(self._sinks.values()), {}
            for sink in sinks:
                sink(exc)
            raise

    def _route(self, event: object) -> None:
        job_id = getattr(event, "job_id", None)
        if job_id is None:
            return
        finished = isinstance(event, parallel.JobFinished)
        with self._lock:
            sink = self._sinks.pop(job_id, None) if finished else self._sinks.get(job_id)
            if finished:
                self._stopped.discard(job_id)
        if sink is not None:
            sink(event)
        if finished:
            self.queue.finished()

    def close(self) -> None:
        """No more requests: the loop ends once its slots are free."""
        self.queue.close()


class Decoder:
    """``specdec serve``'s engine thread: it opens the model (``open_session()``, called there),
    then runs the :class:`Router`'s loop for as long as the server lives."""

    def __init__(self, open_session: Callable[[], object], config: RunConfig, parallel_slots: int,
                 queue_bound: int) -> None:
        self.open_session, self.config, self.parallel_slots, self.queue_bound = (
            open_session, config, parallel_slots, queue_bound)
        self.router: Router | None = None
        self.failed: str | None = None  # why the model could not be opened or the loop ended
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="specdec-serve", daemon=True)

    def start(self) -> Router:
        """Open the model on the engine thread and wait for it; a SpecDecError if it cannot open."""
        self._thread.start()
        self._ready.wait()
        if self.router is None:
            raise SpecDecError(self.failed or "the engine thread ended before the model opened")
        return self.router

    def close(self) -> None:
        """End the loop (requests in flight end as stopped) and close the model."""
        if self.router is not None:
            self.router.close()
            self.router.session.cancel()
        if self._thread.is_alive():
            self._thread.join(30)

    def _serve(self) -> None:
        try:
            session = self.open_session()
        except SpecDecError as exc:
            self.failed = str(exc)
            self._ready.set()
            return
        try:
            self.router = Router(session, self.config, self.parallel_slots, self.queue_bound)
            events = self.router.decode()
            self._ready.set()
            for _event in events:
                pass
        except SpecDecError as exc:
            self.failed = str(exc)
        finally:
            self._ready.set()
            session.close()

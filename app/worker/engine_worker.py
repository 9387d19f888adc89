"""The engine thread: owns the :class:`engine.session.Session` and runs the window's jobs from a
queue, one at a time.

llama.cpp contexts are used from one thread only, so the session is created, used and closed here.
Reports are appended to a deque that the window drains from a QTimer at a fixed rate: decoding
speed never depends on how fast the window paints. ``stop()`` sets the running job's Stop flag
directly (a thread busy in a decode loop has no event loop to deliver a slot call). The jobs are
functions in ``app/worker/jobs/`` (the table ``JOBS``); the requests and reports, ``app/worker/messages.py``.
"""

from __future__ import annotations

import collections
import queue
import sys
import threading
import traceback

from specdec_studio.app.worker import messages as m
from specdec_studio.app.worker.job_control import StepGate
from specdec_studio.app.worker.jobs import JOBS
from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.engine.config import DEFAULT_N_CTX

_QUIT = object()
# Between two decodes the engine thread needs the GIL for a millisecond or two; with the default
# 5 ms switch interval it can wait that long behind the GUI thread's painting.
GIL_SWITCH_INTERVAL_S = 0.0005
SHUTDOWN_WAIT_S = 3.0


class EngineWorker:
    """Runs engine jobs one at a time on its own thread.

    A plain Python thread: it needs no event loop, since the window polls the event deque.
    """

    def __init__(self, parent: object | None = None) -> None:
        self._thread = threading.Thread(target=self.run, name="specdec-engine", daemon=True)
        self._commands: queue.Queue = queue.Queue()
        self._events: collections.deque = collections.deque()
        # the engine thread's (the GUI thread touches only its Stop tokens and step gate); reports go
        # through _emit, looked up at each call
        self._state = WorkerState(emit=lambda event: self._emit(event))
        self._next_job = 0  # the id of the last job queued (GUI thread only)

    @property
    def gate(self) -> StepGate:
        """Where a paused run waits between steps (the demo's pause and step)."""
        return self._state.gate

    # ------------------------------------------------------------------ called from the GUI thread
    def load_model(self, path: str, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None, n_gpu_layers: int = 0,
                   *, profile: bool = True, rpc_servers: tuple[str, ...] = ()) -> int:
        """Load a model (its layers on ``rpc_servers`` where given); with ``profile``, measure its
        batch-cost profile next if none is cached."""
        return self._submit(m.LoadRequest(path, n_ctx, n_threads, n_gpu_layers, profile, tuple(rpc_servers)))

    def measure_profile(self, remeasure: bool = True) -> int:
        return self._submit(m.ProfileRequest(remeasure))

    def start_sweep(self, spec) -> int:
        return self._submit(m.SweepRequest(spec))

    def probe_exactness(self) -> int:
        return self._submit(m.ProbeRequest())

    def compare_formats(self, formats: tuple[str, ...]) -> int:
        return self._submit(m.FormatsRequest(formats))

    def measure_format_speeds(self, formats: tuple[str, ...]) -> int:
        return self._submit(m.FormatSpeedRequest(formats))

    def _submit(self, job: object) -> int:
        """Queue a job the user asked for, with its own Stop flag: an earlier Stop does not apply
        to it, and a later one does (whether it is running or still waiting). Returns the job's
        id: the engine thread's JobTaken and JobEnded reports name it."""
        self._next_job += 1
        self._commands.put((job, self._state.tokens.issue(), self._next_job))
        return self._next_job

    def load_draft(self, path: str | None, n_gpu_layers: int = 0) -> int:
        return self._submit(m.DraftRequest(path, n_gpu_layers))

    def fetch_and_load(self, key: str, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None,
                       *, as_draft: bool = False, n_gpu_layers: int = 0) -> int:
        """Download a known model, then load it (as the draft with ``as_draft``); Stop ends it."""
        return self._submit(m.FetchRequest(key, n_ctx, n_threads, as_draft, n_gpu_layers))

    def start_run(self, config, text: str, *, chat: bool, regenerate: bool = False,
                  edit_index: int | None = None) -> int:
        return self._submit(m.RunRequest(config, text, chat, regenerate, edit_index))

    def run_baseline(self, config, key: tuple) -> int:
        return self._submit(m.BaselineRequest(config, key))

    def conversation(self, action: str, conv_id: str = "", text: str = "") -> int:
        """Act on conversations: "start" (open the last one), "new", "open", "rename", "delete",
        "list" (search with ``text``) or "system" (set the system message to ``text``)."""
        return self._submit(m.ConversationRequest(action, conv_id, text))

    def stop(self) -> None:
        """Stop the job running now and any the window queued before this call."""
        self._state.tokens.stop_all()
        self._state.gate.wake()

    def stop_request(self, job_id: str) -> None:
        """While the window serves: end one request (its client gets what was decoded), the server
        goes on. Thread-safe, as :meth:`stop` is."""
        router = self._state.router
        if router is not None:
            router.stop_request(job_id)

    def pause(self) -> None:
        """Hold the running (or next) run after its current step."""
        self._state.gate.pause()

    def resume(self) -> None:
        self._state.gate.resume()

    def step_once(self) -> None:
        """Let a paused run decode one more step."""
        self._state.gate.step()

    def run_batch(self, config, source: str, count: int, parallel: int, *, chat: bool) -> int:
        """Decode ``count`` prompts from ``source``, ``parallel`` at a time in one context."""
        return self._submit(m.BatchRequest(config, source, count, parallel, chat))

    def serve(self, config, port: int, parallel: int, queue: int) -> int:
        """Serve the loaded model over the OpenAI API on 127.0.0.1:``port`` until Stop."""
        return self._submit(m.ServeRequest(config, port, parallel, queue))

    def train_draft(self, spec: dict) -> int:
        """Distil a draft for the loaded target (engine/drafts/distill.py), then load it as the draft."""
        return self._submit(m.DistillRequest(spec))

    def race(self, config, text: str, *, chat: bool) -> int:
        """Plain, then ``config``, on the same prompt, one after the other (never both at once)."""
        return self._submit(m.RaceRequest(config, text, chat))

    def start(self) -> None:
        sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
        self._thread.start()

    def shutdown(self, timeout_s: float = SHUTDOWN_WAIT_S) -> bool:
        """Stop, let the engine thread close its session, and wait at most ``timeout_s``.

        A download or a model load cannot be interrupted; the window closes anyway and the
        thread (a daemon) ends with the process. Returns whether the thread ended in time."""
        self.stop()
        self._commands.put(_QUIT)
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def drain(self) -> list:
        out = []
        while self._events:
            out.append(self._events.popleft())
        return out

    # ------------------------------------------------------------------ engine thread
    def _emit(self, event: object) -> None:
        self._events.append(event)

    def run(self) -> None:  # the thread's body
        from specdec_studio.engine.errors import SpecDecError

        state = self._state
        while True:
            item = self._commands.get()
            if item is _QUIT:
                break
            command, token, job = item
            state.begin_job(token)
            state.emit(m.JobTaken(job, type(command).__name__))
            outcome, message = "done", ""
            try:
                JOBS[type(command)](state, command)
            except Exception as exc:  # noqa: BLE001 - the window must survive anything
                message = str(exc) if isinstance(exc, SpecDecError) else f"internal error: {exc!r}"
                outcome = "stopped" if token.is_set() else "failed"
                if not isinstance(exc, SpecDecError):
                    traceback.print_exc()
                as_draft = isinstance(command, m.DraftRequest) or getattr(command, "as_draft", False)
                if isinstance(command, (m.LoadRequest, m.FetchRequest, m.DraftRequest)):
                    state.emit(m.LoadFailed(message, previous_model_kept=state.session is not None,
                                            what="draft" if as_draft else "model"))
            finally:
                state.tokens.retire(token)
            if outcome == "done" and token.is_set():
                outcome = "stopped"
            state.emit(m.JobEnded(job, type(command).__name__, outcome, message))
        state.close_session()

"""The engine in a child process, for a model whose layers live on llama.cpp RPC servers.

llama.cpp's RPC client ends the whole process when a server stops answering
(:mod:`engine.models.rpc`). Run in the window's process, that would close the window and
whatever the user had in it. So a model on RPC servers is loaded and run by an
:class:`app.engine_worker.EngineWorker` inside a child process, and the window talks to it through
:class:`EngineProcess`, which has the worker's interface:

- requests and the Stop/pause/step calls go, in the order they were made, down one pipe (a Stop
  reaches every job queued before it, as on the thread);
- the child forwards its events in batches, pickled one by one (an event that cannot cross is
  reported, not lost silently), up another pipe. Each end of a pipe lives in one process only, so a
  child that dies mid-message is an end of file to the window, never a read that waits forever;
- when the child dies, its last words (the one sentence :func:`engine.models.rpc.on_lost_server`
  wrote) end the running job as failed, the window learns that the model is gone
  (``LoadFailed``), and a fresh child waits for the next load. The chat's history was saved after
  every turn and stays on screen. Of the run in flight, the answer keeps what the stream showed:
  the window follows it (:class:`engine.chat.turns.AnswerInProgress`) and the fresh child writes
  it into the saved conversation, marked interrupted.

A server that stalls rather than dies (a laptop's network dropped, a machine suspended) keeps the
step in flight waiting for ever: llama.cpp's RPC client has no time limit, and its abort callback is
checked by the CPU backend only, so the child cannot honour a Stop mid-step. The window can: a Stop
the child has not answered within :meth:`EngineProcess.stop_grace_s` of silence ends the child,
which costs what a lost server costs (the model, not the chat). Its servers are then greeted
afresh, all at once and off the window's thread (:func:`engine.models.rpc.silent`): freed of their
client, the healthy ones answer at once, so the sentence names the server that does not. While a
job runs and the child says nothing for longer than a step could explain,
:class:`app.worker_messages.EngineQuiet` tells the window so, once a second, so a user is never left
looking at a frozen run without a word.
"""

from __future__ import annotations

import multiprocessing
import pickle
import sys
import threading
import time

from specdec_studio.app.worker import messages as m
from specdec_studio.app.worker.engine_worker import SHUTDOWN_WAIT_S, EngineWorker
from specdec_studio.engine.chat.turns import AnswerInProgress, ConversationChanged
from specdec_studio.engine.events import StepDone
from specdec_studio.engine.models import rpc

FORWARD_INTERVAL_S = 0.004  # the child's event batches: the window drains at ~60 Hz anyway
# A Stop ends the child once it has been silent this long since the Stop (or its last word after
# it), or STOP_GRACE_STEPS of its slowest step so far where steps are slower: a healthy step ends
# well within that, and a Stop is honoured between steps (measured on two local servers, a plain
# run with one server stopped by SIGSTOP: the Stop went unanswered for 20 s, and was answered
# 0.03 s after the server was let go on).
STOP_GRACE_S = 5.0
STOP_GRACE_STEPS = 3
QUIET_NOTICE_S = 10.0  # silence in a running job worth a word to the window (or QUIET_NOTICE_STEPS steps)
QUIET_NOTICE_STEPS = 5
_CALLS = ("stop", "pause", "resume", "step_once", "stop_request")


def _child_main(inbox, outbox, last_words) -> None:
    """The child: a worker thread running jobs, this thread reading the inbox, one forwarding events.
    ``inbox``: the parent's requests and calls; ``outbox``: batches of pickled events;
    ``last_words``: the sentence of a lost server (all three one-way pipe ends)."""
    from specdec_studio.engine.models import rpc

    rpc.on_lost_server(report=last_words.send)
    worker = EngineWorker()
    worker.start()
    done = threading.Event()

    def forward() -> None:
        while not done.is_set() or worker._events:
            events = worker.drain()
            if not events:
                time.sleep(FORWARD_INTERVAL_S)
                continue
            blobs = []
            for event in events:
                try:
                    blobs.append(pickle.dumps(event, protocol=pickle.HIGHEST_PROTOCOL))
                except Exception as exc:  # noqa: BLE001 - report it, keep the rest flowing
                    print(f"specdec-engine: an event could not reach the window: {exc!r}", file=sys.stderr)
            outbox.send(blobs)

    forwarder = threading.Thread(target=forward, name="specdec-forward", daemon=True)
    forwarder.start()
    while True:
        try:
            item = inbox.recv()
        except EOFError:  # the window is gone
            item = None
        if item is None:
            break
        kind, payload, job_id = item
        if kind == "job":
            worker._commands.put((payload, worker._state.tokens.issue(), job_id))
        elif kind == "call" and payload in _CALLS:
            getattr(worker, payload)(*([job_id] if payload == "stop_request" else []))
    worker.shutdown()
    done.set()
    forwarder.join(SHUTDOWN_WAIT_S)


class EngineProcess(EngineWorker):
    """:class:`EngineWorker`'s interface over an engine in a child process (see the module)."""

    def __init__(self, parent: object | None = None) -> None:
        super().__init__(parent)
        self._mp = multiprocessing.get_context("spawn")  # no fork of a process with Qt's threads
        self._closing = False
        # the saved conversation the window shows (its id, None while it has no message): a fresh
        # child opens it again, so the next message goes on with its history
        self._shown_conversation: str | None = None
        self._spawn()

    def _spawn(self) -> None:
        child_inbox, self._inbox = self._mp.Pipe(duplex=False)
        self._outbox, child_outbox = self._mp.Pipe(duplex=False)
        self._last_words, child_last_words = self._mp.Pipe(duplex=False)
        self._child_ends = (child_inbox, child_outbox, child_last_words)  # closed here once the child has them
        self._child = self._mp.Process(target=_child_main, args=self._child_ends, name="specdec-engine", daemon=True)
        self._running: tuple[int, str] | None = None  # (job id, request name) the child took last
        self._queued: dict[int, str] = {}  # job id -> request name, sent but not taken up yet
        self._lost = False
        self._answer = AnswerInProgress()  # the chat answer the child is writing, as streamed
        self._heard_at = time.monotonic()  # when the child last sent anything
        self._stop_asked_at: float | None = None  # a Stop sent while a job ran, not answered yet
        self._slowest_step_s = 0.0  # the longest step this child has reported
        self._quiet_said = 0  # whole seconds of the current silence already told to the window
        self._servers: list[str] = []  # every RPC server this child was asked to load onto
        self._ending: _StalledEnd | None = None  # the child ended for a Stop: its servers being greeted

    def _send(self, item) -> None:
        try:
            self._inbox.send(item)
        except OSError:  # the child is gone: drain() tells the window
            pass

    # ------------------------------------------------------------------ the worker's interface
    def _submit(self, job: object) -> int:
        for server in getattr(job, "rpc_servers", ()):
            if server not in self._servers:
                self._servers.append(server)
        self._next_job += 1
        self._queued[self._next_job] = type(job).__name__
        self._send(("job", job, self._next_job))
        return self._next_job

    def stop(self) -> None:
        self._send(("call", "stop", 0))
        if self._stop_asked_at is None and (self._running is not None or self._queued):
            self._stop_asked_at = time.monotonic()

    def stop_grace_s(self) -> float:
        """How long a Stop may go unanswered, in silence, before the child is ended."""
        return max(STOP_GRACE_S, STOP_GRACE_STEPS * self._slowest_step_s)

    def quiet_notice_s(self) -> float:
        """How long a running job's silence goes before the window is told of it."""
        return max(QUIET_NOTICE_S, QUIET_NOTICE_STEPS * self._slowest_step_s)

    def stop_request(self, job_id: str) -> None:
        self._send(("call", "stop_request", job_id))

    def pause(self) -> None:
        self._send(("call", "pause", 0))

    def resume(self) -> None:
        self._send(("call", "resume", 0))

    def step_once(self) -> None:
        self._send(("call", "step_once", 0))

    def start(self) -> None:
        self._child.start()
        for end in self._child_ends:  # the child's now: a dead child is an end of file here
            end.close()

    def shutdown(self, timeout_s: float = SHUTDOWN_WAIT_S) -> bool:
        self._closing = True
        if self._child.is_alive():
            self._send(("call", "stop", 0))
            self._send(None)
            self._child.join(timeout_s)
        if self._child.is_alive():
            self._child.kill()
            self._child.join(1.0)
            return False
        return True

    def drain(self) -> list:
        out = []
        while not self._lost:
            try:
                if not self._outbox.poll():
                    break
                blobs = self._outbox.recv()
            except (EOFError, OSError):  # the child died, maybe in the middle of a batch
                self._lost = True
                break
            self._heard_at = time.monotonic()
            self._quiet_said = 0
            for blob in blobs:
                event = pickle.loads(blob)
                self._follow(event)
                out.append(event)
        if self._closing or self._child.pid is None:
            return out
        if self._ending is not None:  # ended for a Stop: reported once its servers are greeted
            if not self._ending.done.is_set():
                return out
            ending, self._ending = self._ending, None
            out.extend(self._child_lost(ending.sentence()))
        elif self._lost or not self._child.is_alive():
            self._child.join(2.0)
            out.extend(self._child_lost())
        elif self._running is not None:
            out.extend(self._watch_silence())
        return out

    def _watch_silence(self) -> list:
        """A running job's silence: past a Stop's grace, the child is ended (see the module); before
        that, the window hears of a long one once a second."""
        now = time.monotonic()
        if self._stop_asked_at is not None:
            grace = self.stop_grace_s()
            if now - max(self._stop_asked_at, self._heard_at) > grace:
                what = "the model's load onto them" if self._running[1] in m.LOAD_REQUESTS else "the step in flight"
                self._child.kill()
                self._child.join(2.0)
                self._ending = _StalledEnd(what, grace, tuple(self._servers))
                return []
        quiet = now - self._heard_at
        if quiet > self.quiet_notice_s() and int(quiet) > self._quiet_said:
            self._quiet_said = int(quiet)
            return [m.EngineQuiet(self._quiet_said, self._stop_asked_at is not None, self.stop_grace_s())]
        return []

    @property
    def alive(self) -> bool:
        return self._child.is_alive()

    # ------------------------------------------------------------------ the child's fate
    def _follow(self, event: object) -> None:
        if isinstance(event, m.JobTaken):
            self._queued.pop(event.job, None)
            self._running = (event.job, event.request)
            self._answer = AnswerInProgress()  # whatever answer came before, its engine settled it
        elif isinstance(event, m.JobEnded) and self._running and self._running[0] == event.job:
            self._running = None
            self._stop_asked_at = None  # answered: the jobs queued before it end as stopped at once
        else:
            if isinstance(event, StepDone):
                self._slowest_step_s = max(self._slowest_step_s, event.t_step_s)
            elif isinstance(event, ConversationChanged):
                self._shown_conversation = event.view.id if event.view.messages else None
            self._answer.follow(event)

    def _child_lost(self, ended_by_stop: str = "") -> list:
        """The reports a window needs when the child died: the job in flight failed with the child's
        last sentence, the model is gone, the jobs still queued never ran; then a fresh child.
        ``ended_by_stop``: the window ended the child for a Stop it could not honour (the sentence
        why); the job in flight was stopped, not failed."""
        sentence = ended_by_stop
        try:
            if not sentence and self._last_words.poll():
                sentence = self._last_words.recv()
        except (EOFError, OSError):
            pass
        if not sentence:
            sentence = f"the engine process ended unexpectedly (exit code {self._child.exitcode})"
        sentence = sentence.rstrip(".") + "; the model was unloaded and the chat kept: load the model again " \
                                          "(here or on other servers) to go on"
        events: list = [m.LoadFailed(sentence, previous_model_kept=False)]
        if self._running is not None:
            job, request = self._running
            events.append(m.JobEnded(job, request, "stopped" if ended_by_stop else "failed", sentence))
        for job, request in self._queued.items():
            events.append(m.JobEnded(job, request, "stopped", "the engine process ended before it ran"))
        if self._child.is_alive():  # it closed its pipe but lingers: it is no engine of ours any more
            self._child.kill()
        for end in (self._inbox, self._outbox, self._last_words):
            end.close()
        cut_short = self._answer.interrupted() if self._running is not None else None
        self._spawn()
        self.start()
        if cut_short is not None:  # the fresh child writes what the stream showed after the last save
            conv_id, pieces = cut_short
            self._submit(m.ConversationRequest("interrupted", conv_id, pieces=tuple(tuple(p) for p in pieces)))
        elif self._shown_conversation is not None:  # and opens the conversation on screen
            self._submit(m.ConversationRequest("open", self._shown_conversation))
        return events


class _StalledEnd:
    """A child ended for a Stop its RPC servers kept it from answering: which of them still say
    nothing, asked on a thread of its own (each is given :data:`engine.models.rpc.SILENCE_PROBE_S`)."""

    def __init__(self, what: str, grace_s: float, servers: tuple[str, ...]) -> None:
        self.what, self.grace_s = what, grace_s
        self.silent: tuple[str, ...] = ()
        self.done = threading.Event()

        def greet() -> None:
            try:
                self.silent = rpc.silent(servers)
            finally:
                self.done.set()

        threading.Thread(target=greet, name="specdec-rpc-greet", daemon=True).start()

    def sentence(self) -> str:
        start = f"The RPC servers had not finished {self.what} {self.grace_s:.0f} s after Stop"
        if not self.silent:
            return f"{start}, so the engine process was ended (every server answers again now)"
        one = len(self.silent) == 1
        names = " and ".join(self.silent)
        return (f"{start}, and the server{'' if one else 's'} at {names} {'does' if one else 'do'} not "
                f"answer now, so the engine process was ended")

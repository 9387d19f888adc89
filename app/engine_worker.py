"""The engine thread: owns the :class:`engine.session.Session` and runs commands from a queue.

llama.cpp contexts are used from one thread only, so the session is created, used and closed here.
Events are appended to a deque that the window drains from a QTimer at a fixed rate: decoding
speed never depends on how fast the window paints. ``stop()`` sets the session's cancel flag
directly (a thread busy in a decode loop has no event loop to deliver a slot call).
"""

from __future__ import annotations

import collections
import queue
import sys
import threading
import traceback
from dataclasses import dataclass

from engine.config import DEFAULT_N_CTX


# ------------------------------------------------------------------ what the worker reports
@dataclass(frozen=True)
class LoadStarted:
    path: str
    what: str = "model"


@dataclass(frozen=True)
class ModelLoaded:
    path: str
    info: dict
    has_chat_template: bool
    n_ctx: int
    n_threads: int
    gpu_offload: bool
    # (path, None if it can draft for this target, else why not)
    draft_candidates: tuple[tuple[str, str | None], ...] = ()
    template_problem: str | None = None  # why the model's chat template was refused


@dataclass(frozen=True)
class DraftLoaded:
    path: str | None
    info: dict | None


@dataclass(frozen=True)
class LoadFailed:
    message: str
    previous_model_kept: bool = False
    what: str = "model"


@dataclass(frozen=True)
class BaselineDone:
    key: tuple
    tokens_per_second: float


@dataclass(frozen=True)
class ProfileStarted:
    what: str  # "target" or "draft"
    measuring: bool  # False: read from the cache


@dataclass(frozen=True)
class ProfileProgress:
    what: str
    fraction: float


@dataclass(frozen=True)
class ProfileReady:
    """The batch-cost profiles of the loaded target and draft, as plain dicts (``to_dict``)."""

    target: dict | None
    draft: dict | None
    message: str = ""  # why a profile is missing (stopped), shown in the status bar


@dataclass(frozen=True)
class ExactnessReady:
    """The exactness probe of the loaded model and what it means for the user."""

    result: dict
    note: str


@dataclass(frozen=True)
class SavedSweeps:
    """The latest sweep of each mode kept for the loaded model (reopened with it)."""

    results: tuple[dict, ...]


@dataclass(frozen=True)
class RunRequested:
    """Echoed when a run really starts on the engine thread (the window clears pending marks)."""

    config: object
    user_text: str
    chat: bool


# ------------------------------------------------------------------ commands
@dataclass(frozen=True)
class _Load:
    path: str
    n_ctx: int
    n_threads: int | None
    n_gpu_layers: int
    profile: bool = True  # measure the batch-cost profile after loading if none is cached


@dataclass(frozen=True)
class _Draft:
    path: str | None


@dataclass(frozen=True)
class _Fetch:
    key: str
    n_ctx: int
    n_threads: int | None


@dataclass(frozen=True)
class _Run:
    config: object
    text: str
    chat: bool
    regenerate: bool = False
    edit_index: int | None = None  # chat: replace this user message with ``text`` and answer it


@dataclass(frozen=True)
class _Baseline:
    config: object
    key: tuple


@dataclass(frozen=True)
class _Profile:
    remeasure: bool


@dataclass(frozen=True)
class _Probe:
    pass


@dataclass(frozen=True)
class _Sweep:
    spec: object  # engine.tuning.sweep.SweepSpec


@dataclass(frozen=True)
class _Conversation:
    action: str  # "new", "open", "rename", "delete", "list", "system", "start"
    conv_id: str = ""
    text: str = ""  # a title, a system message or a search query


@dataclass(frozen=True)
class ConversationList:
    """The saved conversations (a search's matches when ``query``), newest first."""

    items: tuple  # engine.conversation_store.ConversationSummary
    current: str
    query: str = ""
    damaged: tuple[str, ...] = ()  # files skipped because they are not conversations


@dataclass(frozen=True)
class TraceReady:
    """A run ended: its recording, ready to save, replay or inspect."""

    trace: object  # engine.trace.Trace


@dataclass(frozen=True)
class Paused:
    """The run waits after ``step`` (``paused`` False: it runs freely again)."""

    step: int
    paused: bool


@dataclass(frozen=True)
class _Race:
    config: object
    text: str
    chat: bool


@dataclass(frozen=True)
class _Batch:
    config: object
    source: str  # "shipped" or a JSON-lines file of {"id", "prompt"} (or the prompt-set format)
    count: int
    parallel: int
    chat: bool


@dataclass(frozen=True)
class BatchKv:
    """The KV map of a batch: the P sequences sharing the cache."""

    snapshot: object


@dataclass(frozen=True)
class _Distill:
    spec: dict  # app.widgets.distill_dialog.DistillDialog.spec()


@dataclass(frozen=True)
class DistillDone:
    """A draft was trained (and is now loaded as the draft); its figures before and after."""

    path: str
    steps: int
    stopped: bool
    loss_first: float | None
    loss_last: float | None
    eval_losses: tuple[float, ...]
    t_train_s: float
    agreement_before: float | None  # None: a Stop ended the measurement
    agreement_after: float | None


@dataclass(frozen=True)
class RaceProgress:
    """A race's run is decoding: ``which`` is "plain" or the strategy's mode."""

    which: str
    n_tokens: int


@dataclass(frozen=True)
class RaceReady:
    """Both runs of a race, recorded one after the other, to be replayed on a common clock."""

    plain: object  # engine.trace.Trace
    strategy: object  # engine.trace.Trace


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


_QUIT = object()
GIL_SWITCH_INTERVAL_S = 0.0005
# The KV map's picture after every step: the step inspector shows any step's cells before and after,
# and a recorded run keeps them all. Copying the cells costs ~0.1 ms a step (1 % of a plain step
# here); the window paints only the newest picture, at its own rate.
SHUTDOWN_WAIT_S = 3.0


class EngineWorker:
    """Runs engine commands one at a time on its own thread.

    A plain Python thread: it needs no event loop, since the window polls the event deque.
    """

    def __init__(self, parent: object | None = None) -> None:
        self._thread = threading.Thread(target=self.run, name="specdec-engine", daemon=True)
        self._commands: queue.Queue = queue.Queue()
        self._events: collections.deque = collections.deque()
        self._session = None  # touched by the engine thread only; Stop goes through the job's token
        self._tokens = JobTokens()
        # The running job's Stop flag (engine thread only); the session and the step gate watch it.
        self._cancel = threading.Event()
        self.gate = StepGate(self._cancel)
        self._last_prompt_tokens: list[int] = []
        # The conversation lives here, on the engine thread; the window is sent views of it.
        self._conversation = None  # engine.conversation.Conversation
        self._chat = None  # engine.chat.Chat binding it to the current session
        self._store = None  # engine.conversation_store.ConversationStore
        self._profiles: dict[str, dict | None] = {"target": None, "draft": None}
        self._auto_profile = True

    # ------------------------------------------------------------------ called from the GUI thread
    def load_model(self, path: str, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None, n_gpu_layers: int = 0,
                   *, profile: bool = True) -> None:
        """Load a model; with ``profile``, measure its batch-cost profile next if none is cached."""
        self._submit(_Load(path, n_ctx, n_threads, n_gpu_layers, profile))

    def measure_profile(self, remeasure: bool = True) -> None:
        self._submit(_Profile(remeasure))

    def start_sweep(self, spec) -> None:
        self._submit(_Sweep(spec))

    def probe_exactness(self) -> None:
        self._submit(_Probe())

    def _submit(self, job: object) -> None:
        """Queue a job the user asked for, with its own Stop flag: an earlier Stop does not apply
        to it, and a later one does (whether it is running or still waiting)."""
        self._commands.put((job, self._tokens.issue()))

    def load_draft(self, path: str | None) -> None:
        self._submit(_Draft(path))

    def fetch_and_load(self, key: str, n_ctx: int = DEFAULT_N_CTX, n_threads: int | None = None) -> None:
        self._submit(_Fetch(key, n_ctx, n_threads))

    def start_run(self, config, text: str, *, chat: bool, regenerate: bool = False,
                  edit_index: int | None = None) -> None:
        self._submit(_Run(config, text, chat, regenerate, edit_index))

    def run_baseline(self, config, key: tuple) -> None:
        self._submit(_Baseline(config, key))

    def conversation(self, action: str, conv_id: str = "", text: str = "") -> None:
        """Act on conversations: "start" (open the last one), "new", "open", "rename", "delete",
        "list" (search with ``text``) or "system" (set the system message to ``text``)."""
        self._submit(_Conversation(action, conv_id, text))

    def stop(self) -> None:
        """Stop the job running now and any the window queued before this call."""
        self._tokens.stop_all()
        self.gate.wake()

    def pause(self) -> None:
        """Hold the running (or next) run after its current step."""
        self.gate.pause()

    def resume(self) -> None:
        self.gate.resume()

    def step_once(self) -> None:
        """Let a paused run decode one more step."""
        self.gate.step()

    def run_batch(self, config, source: str, count: int, parallel: int, *, chat: bool) -> None:
        """Decode ``count`` prompts from ``source``, ``parallel`` at a time in one context."""
        self._submit(_Batch(config, source, count, parallel, chat))

    def train_draft(self, spec: dict) -> None:
        """Distil a draft for the loaded target (engine/distill.py), then load it as the draft."""
        self._submit(_Distill(spec))

    def race(self, config, text: str, *, chat: bool) -> None:
        """Plain, then ``config``, on the same prompt, one after the other (never both at once)."""
        self._submit(_Race(config, text, chat))

    def start(self) -> None:
        # Between two decodes the engine thread needs the GIL for a millisecond or two; with the
        # default 5 ms switch interval it can wait that long behind the GUI thread's painting.
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
        from engine.errors import SpecDecError
        from engine.events import RunFailed

        while True:
            item = self._commands.get()
            if item is _QUIT:
                break
            command, token = item
            self._begin_job(token)
            try:
                self._dispatch(command)
            except Exception as exc:  # noqa: BLE001 - the window must survive anything
                message = str(exc) if isinstance(exc, SpecDecError) else f"internal error: {exc!r}"
                if not isinstance(exc, SpecDecError):
                    traceback.print_exc()
                if isinstance(command, (_Load, _Fetch)):
                    self._emit(LoadFailed(message, previous_model_kept=self._session is not None))
                elif isinstance(command, _Draft):
                    self._emit(LoadFailed(message, previous_model_kept=True, what="draft"))
                else:
                    self._emit(RunFailed(message))
            finally:
                self._tokens.retire(token)
        self._close_session()

    def _begin_job(self, token: threading.Event) -> None:
        """The job about to run watches ``token``: the session's runs and llama.cpp's abort
        callback, the step gate, and the jobs' own loops."""
        self._cancel = token
        self.gate.watch(token)
        if self._session is not None:
            self._session.use_cancel(token)

    def _dispatch(self, command) -> None:
        if isinstance(command, _Load):
            self._auto_profile = command.profile  # a Stop during this load's profile turns it off again
            self._load(command.path, command.n_ctx, command.n_threads, command.n_gpu_layers)
        elif isinstance(command, _Fetch):
            from engine import catalog

            self._emit(LoadStarted(command.key, what="download"))
            catalog.fetch(command.key, log=lambda _msg: None)
            self._load(command.key, command.n_ctx, command.n_threads, 0)
        elif isinstance(command, _Draft):
            self._draft(command.path)
        elif isinstance(command, _Run):
            self._run(command)
        elif isinstance(command, _Race):
            self._race(command)
        elif isinstance(command, _Batch):
            self._batch(command)
        elif isinstance(command, _Distill):
            self._distill(command.spec)
        elif isinstance(command, _Baseline):
            self._baseline(command)
        elif isinstance(command, _Profile):
            self._profile(measure=True, remeasure=command.remeasure)
        elif isinstance(command, _Sweep):
            self._sweep(command.spec)
        elif isinstance(command, _Probe):
            self._exactness(measure=True)
        elif isinstance(command, _Conversation):
            self._conversation_command(command)

    def _close_session(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            session.close()

    def _load(self, path: str, n_ctx: int, n_threads: int | None, n_gpu_layers: int) -> None:
        from engine import catalog
        from engine.models import draft_candidates
        from engine.native import supports_gpu_offload
        from engine.session import Session

        self._emit(LoadStarted(path))
        resolved = catalog.resolve(path)
        # Load the new model before closing the old one: a bad file leaves the old one usable.
        session = Session(resolved, n_ctx=n_ctx, n_threads=n_threads, n_gpu_layers=n_gpu_layers, cancel=self._cancel)
        self._close_session()
        self._session = session
        others = [p for p in catalog.cached_models() if p != resolved]
        candidates = [(str(resolved), None)] + [(str(p), why) for p, why in draft_candidates(session.model, others)]
        self._emit(ModelLoaded(str(resolved), session.model.info.summary(), session.has_chat_template,
                               session.n_ctx, session.n_threads, supports_gpu_offload(), tuple(candidates),
                               session.template_problem))
        self._rebind_conversation(session)
        self._profiles = {"target": None, "draft": None}
        self._emit_saved_sweeps(session)
        self._exactness(measure=False)
        self._profile_after_load()

    def _rebind_conversation(self, session) -> None:
        """A new model keeps the conversation: its ids are re-encoded for the model now, and the
        window says so."""
        self._chat = None
        if self._conversation is None or not self._conversation.messages or not session.has_chat_template:
            return
        self._require_chat()

    def _draft(self, path: str | None) -> None:
        session = self._require_session()
        if path is None:
            session.unload_draft()
            self._emit(DraftLoaded(None, None))
            self._profiles["draft"] = None
            self._emit(ProfileReady(self._profiles["target"], None))
            return
        self._emit(LoadStarted(path, what="draft"))
        info = session.load_draft(path)
        self._emit(DraftLoaded(path, info.summary()))
        self._profiles["draft"] = None
        self._profile_after_load()

    def _require_session(self):
        from engine.errors import SpecDecError

        if self._session is None:
            raise SpecDecError("no model is loaded; open a model first")
        return self._session

    def _run(self, command: _Run) -> None:
        from engine.events import RunFinished, StepDone
        from engine.trace import TraceRecorder

        session = self._require_session()
        if command.chat:
            chat = self._require_chat()
            if command.regenerate:
                events = chat.regenerate(command.config, fresh_cancel=False)
            elif command.edit_index is not None:
                events = chat.edit(command.edit_index, command.text, command.config, fresh_cancel=False)
            else:
                events = chat.send(command.config, command.text, fresh_cancel=False)
            user_text = chat.conversation.messages[-1].content
        else:
            user_text = command.text
            tokens = session.tokenize_prompt(user_text)
            events = session.run(command.config, tokens, prompt_text=user_text, fresh_cancel=False,
                                 reuse_prefix=True)
        self._last_prompt_tokens = list(session.last_prompt_tokens)
        self._emit(RunRequested(command.config, user_text, command.chat))
        finished = False
        recorder = TraceRecorder()
        try:
            for event in events:
                finished = finished or isinstance(event, RunFinished)
                self._emit(event)
                recorder.add(event)
                if isinstance(event, StepDone):
                    if session.memory.mirror_ok:  # the KV map's picture of this step
                        snapshot = session.kv_snapshot(event.step, command.config.n_sequences)
                        self._emit(snapshot)
                        recorder.add(snapshot)
                    self.gate.wait(on_pause=lambda step=event.step: self._emit(Paused(step, True)))
            recorded = recorder.trace()
            if recorded is not None and finished:
                self._emit(TraceReady(recorded))
        finally:
            # Whatever ended the loop (an exception here included), the run's generator is closed
            # now, so a chat turn marks its answer interrupted before the window is shown it.
            events.close()
            if command.chat:  # a failed turn keeps what it wrote (marked interrupted): show it
                self._conversation_store().set_last_opened(self._conversation.id)
                if finished:
                    self._emit_conversation_list()
                else:
                    self._show_conversation()

    def _race(self, command: _Race) -> None:
        """Record plain and the strategy one after the other on the same prompt; the window
        replays both on a common clock. Neither run reuses the other's cache, so both decode
        the whole prompt."""
        from engine.config import RunConfig
        from engine.events import RunFailed, RunFinished, StepDone
        from engine.trace import TraceRecorder

        session = self._require_session()
        if command.chat and session.has_chat_template:
            tokens = session.chat_tokens([("user", command.text)])
        else:
            tokens = session.tokenize_prompt(command.text)
        plain = RunConfig(mode="plain", max_tokens=command.config.max_tokens, sampling=command.config.sampling)
        traces = []
        for which, config in (("plain", plain), (command.config.mode, command.config)):
            recorder = TraceRecorder()
            n_tokens = 0
            for event in session.run(config, tokens, prompt_text=command.text, fresh_cancel=False):
                recorder.add(event)
                if isinstance(event, StepDone):
                    n_tokens += len(event.tokens)
                    if session.memory.mirror_ok:
                        recorder.add(session.kv_snapshot(event.step, config.n_sequences))
                    self._emit(RaceProgress(which, n_tokens))
                elif isinstance(event, RunFailed):
                    self._emit(event)
                    return
                elif isinstance(event, RunFinished) and event.finish_reason == "cancelled":
                    self._emit(RunFailed("the race was stopped"))
                    return
            traces.append(recorder.trace())
        self._emit(RaceReady(traces[0], traces[1]))

    def _distill(self, spec: dict) -> None:
        from pathlib import Path

        from engine import distill
        from engine.tuning import prompts
        from engine.tuning.sweep import prompt_tokens

        session = self._require_session()
        chosen = prompts.shipped() if spec["prompts"] == "shipped" else prompts.load_file(spec["prompts"])
        chosen = chosen[: spec["count"]]
        train = [prompt_tokens(session, p, True) for i, p in enumerate(chosen) if i % 4 != 3]
        held = [prompt_tokens(session, p, True) for i, p in enumerate(chosen) if i % 4 == 3] or train[:1]
        result = distill.distill_draft(session, Path(spec["draft"]), train, spec["steps"], Path(spec["output"]),
                                       n_tokens=spec["n_tokens"], keep_layers=spec["keep_layers"],
                                       cancel=self._cancel, progress=self._emit)
        # A Stop that ended the training early does not skip the measurement: it gets a Stop flag of
        # its own, which a second Stop sets (the trained draft is then loaded unmeasured).
        measuring = self._tokens.issue()
        self._begin_job(measuring)
        try:
            n_check = min(48, spec["n_tokens"])
            before = distill.greedy_agreement(session, Path(result.start_path), held, n_check, cancel=measuring)
            after = distill.greedy_agreement(session, result.path, held, n_check, cancel=measuring)
        finally:
            self._tokens.retire(measuring)
        self._emit(DistillDone(str(result.path), result.steps, result.stopped,
                               result.losses[0] if result.losses else None,
                               result.losses[-1] if result.losses else None, tuple(result.eval_losses),
                               result.t_train_s, before, after))
        self._draft(str(result.path))

    def _batch(self, command: _Batch) -> None:
        import time

        from engine import parallel
        from engine.tuning import prompts
        from engine.tuning.sweep import prompt_tokens

        session = self._require_session()
        chosen = prompts.shipped() if command.source == "shipped" else prompts.load_file(command.source)
        chosen = chosen[: command.count]
        jobs = [parallel.BatchJob(p.id, tuple(prompt_tokens(session, p, command.chat))) for p in chosen]
        shown_at = 0.0
        for event in parallel.run_batch(session, command.config, jobs, command.parallel):
            self._emit(event)
            # the shared cache's picture, at the rate the window can use
            if isinstance(event, parallel.JobStep) and time.perf_counter() - shown_at >= 0.05 \
                    and session.memory.mirror_ok:
                self._emit(BatchKv(parallel.kv_snapshot(session, command.parallel)))
                shown_at = time.perf_counter()
        if session.memory.mirror_ok:
            self._emit(BatchKv(parallel.kv_snapshot(session, command.parallel)))

    # ------------------------------------------------------------------ conversations
    def _conversation_store(self):
        if self._store is None:
            from engine.conversation_store import ConversationStore

            self._store = ConversationStore()
        return self._store

    def _require_chat(self):
        """The chat binding of the current conversation to the current model (re-encoded for it
        if another model wrote its ids; the window is told)."""
        from engine.chat import Chat, ConversationChanged
        from engine.conversation import Conversation

        session = self._require_session()
        if self._chat is None or self._chat.session is not session:
            if self._conversation is None:
                self._conversation = Conversation()
            self._chat = Chat(session, self._conversation, store=self._conversation_store(),
                              model_key=session.model.info.path)
            if self._chat.note:
                self._emit(ConversationChanged(self._conversation.view(), self._chat.note))
        return self._chat

    def _show_conversation(self, note: str = "") -> None:
        from engine.chat import ConversationChanged

        self._emit(ConversationChanged(self._conversation.view(), note))
        self._emit_conversation_list()

    def _emit_conversation_list(self, query: str = "") -> None:
        current = self._conversation.id if self._conversation is not None else ""
        found, damaged = self._conversation_store().scan(query)
        self._emit(ConversationList(tuple(found), current, query, tuple(damaged)))

    def _conversation_command(self, command: _Conversation) -> None:
        from engine.conversation import Conversation, new_like, set_system
        from engine.conversation_store import DamagedConversation

        store = self._conversation_store()
        action = command.action
        if action == "list":
            self._emit_conversation_list(command.text)
            return
        current = self._conversation or Conversation()
        if action == "start":
            last = store.last_opened()
            try:
                current = store.load(last) if last else current
            except DamagedConversation:
                pass  # start afresh (the file stays for the user to look at; the list names it)
        elif action == "new":
            current = new_like(current)
        elif action == "open":
            current = store.load(command.conv_id)
        elif action == "rename":
            if command.conv_id == current.id:
                current.title = command.text.strip() or current.title
                store.save(current)
            else:
                store.rename(command.conv_id, command.text)
        elif action == "delete":
            store.delete(command.conv_id)
            if command.conv_id == current.id:
                current = Conversation()
        elif action == "system":
            set_system(current, command.text)
            if current.messages:
                store.save(current)
        self._conversation = current
        self._chat = None  # bound again (and re-encoded if needed) at the next turn
        if self._conversation.messages:
            store.set_last_opened(self._conversation.id)
        self._show_conversation()

    def _profile(self, *, measure: bool, remeasure: bool) -> None:
        """Make the target's (and the draft's) batch-cost profile known to the window: from the
        cache, or measured now when ``measure`` (Stop ends a measurement; nothing is stored)."""
        from engine.tuning import profile

        session = self._require_session()
        roles = ["target"] + (["draft"] if session.draft is not None else [])
        for role in roles:
            draft = role == "draft"
            if not remeasure and self._profiles[role] is not None:
                continue
            known = None if remeasure else profile.cached(profile.profile_key(session, draft=draft))
            if known is None and not measure:
                continue
            self._emit(ProfileStarted(role, measuring=known is None))
            if known is None:
                known = profile.load_or_measure(
                    session, draft=draft, remeasure=remeasure,
                    progress=lambda f, role=role: self._emit(ProfileProgress(role, f)))
            self._profiles[role] = known.to_dict()
        self._emit(ProfileReady(self._profiles["target"], self._profiles["draft"]))

    def _profile_after_load(self) -> None:
        """The profile a new model or draft needs; Stop skips it without failing the load."""
        from engine.tuning.profile import ProfileCancelled

        try:
            self._profile(measure=self._auto_profile, remeasure=False)
        except ProfileCancelled as exc:
            self._auto_profile = False  # skipped for this model: a draft loaded next does not measure it
            self._emit(ProfileReady(self._profiles["target"], self._profiles["draft"], str(exc)))

    def _exactness(self, *, measure: bool) -> None:
        from engine.probe import cached_probe, exactness_note, load_or_probe

        session = self._require_session()
        result = load_or_probe(session) if measure else cached_probe(session)
        if result is not None:
            self._emit(ExactnessReady(result, exactness_note(result)))

    def _emit_saved_sweeps(self, session) -> None:
        from engine.tuning import sweep
        from engine.tuning.profile import model_sha256

        sha = model_sha256(session.model.info.path)
        found = (sweep.load_saved(sha, mode) for mode in sweep.SWEEP_MODES)
        self._emit(SavedSweeps(tuple(r for r in found if r is not None)))

    def _sweep(self, spec) -> None:
        """Measure ``spec``'s settings against plain; the events go to the window as they come and
        the finished (or stopped) result is kept for this model."""
        from engine.tuning import sweep
        from engine.tuning.profile import model_sha256

        session = self._require_session()
        self._profile(measure=True, remeasure=False)
        curve = _curve(self._profiles["target"])
        draft_curve = _curve(self._profiles["draft"]) if spec.mode == "speculative" else None
        for event in sweep.run_sweep(session, spec, curve=curve, draft_curve=draft_curve):
            if isinstance(event, sweep.SweepFinished) and event.result["cells"]:
                sweep.save(event.result, model_sha256(session.model.info.path))
            self._emit(event)

    def _baseline(self, command: _Baseline) -> None:
        """A plain run of the last run's prompt: the speed-up's denominator, measured on demand."""
        from engine.errors import SpecDecError
        from engine.events import RunFinished

        session = self._require_session()
        if not self._last_prompt_tokens:
            raise SpecDecError("run something first; the baseline repeats the last prompt with plain decoding")
        final = None
        for event in session.run(command.config, self._last_prompt_tokens, fresh_cancel=False):
            if isinstance(event, RunFinished):
                final = event
        if final is None or final.finish_reason == "cancelled":
            raise SpecDecError("stopped: the plain baseline was not measured")
        self._emit(BaselineDone(command.key, final.stats["tokens_per_second"]))


def _curve(profile: dict | None):
    if profile is None:
        return None
    from engine.tuning.profile import BatchCostProfile

    return BatchCostProfile.from_dict(profile).curve

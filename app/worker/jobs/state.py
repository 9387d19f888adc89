"""What the engine thread keeps between jobs, and what every job is handed: the session, the way
to report to the window, the running job's Stop flag, and the conversation and profiles the window
is shown. Touched by the engine thread only (the window talks to it through the worker's queue)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from specdec_studio.app.worker.job_control import JobTokens, StepGate


@dataclass
class WorkerState:
    emit: Callable[[object], None]  # a report to the window (appended to the worker's event deque)
    tokens: JobTokens = field(default_factory=JobTokens)
    cancel: threading.Event = field(default_factory=threading.Event)  # the running job's Stop flag
    gate: StepGate = field(init=False)
    session: object | None = None  # engine.session.Session
    conversation: object | None = None  # engine.chat.conversation.Conversation: the chat's history
    chat: object | None = None  # engine.chat.turns.Chat binding the conversation to the session
    conversation_store: object | None = None  # engine.chat.store.ConversationStore, made when needed
    profiles: dict[str, dict | None] = field(default_factory=lambda: {"target": None, "draft": None})
    auto_profile: bool = True  # measure a missing profile after a load (a Stop turns it off for that model)
    last_prompt_tokens: list[int] = field(default_factory=list)  # the baseline repeats them
    router: object | None = None  # engine.server.decoder.Router while the window serves (Stop of one request)

    def __post_init__(self) -> None:
        self.gate = StepGate(self.cancel)

    def require_session(self):
        from specdec_studio.engine.errors import SpecDecError

        if self.session is None:
            raise SpecDecError("no model is loaded; open a model first")
        return self.session

    def begin_job(self, token: threading.Event) -> None:
        """The job about to run watches ``token``: the session's runs and llama.cpp's abort
        callback, the step gate, and the jobs' own loops."""
        self.cancel = token
        self.gate.watch(token)
        if self.session is not None:
            self.session.use_cancel(token)

    def close_session(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.close()

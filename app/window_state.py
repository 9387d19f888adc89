"""What the window's parts share, declared once: MainWindow and its mixins (layout, models, chat,
tuning, demo, jobs) read and write these attributes; nothing else of the window's state is shared."""

from __future__ import annotations

from specdec_studio.app.transcript import Turn
from specdec_studio.app.widgets.step_inspector import RunRecord


class WindowState:
    def _init_state(self) -> None:
        self.model_loaded = False
        self.loading = False  # a model (or a download) is on its way; Stop skips what follows it
        self.downloading: str | None = None  # the known model being downloaded (Stop ends it)
        self.model_path: str | None = None
        self.draft_path: str | None = None
        self.has_chat_template = False
        self.running = False
        # What the stream shows: the engine's conversation (sent as views; the window keeps no
        # history of its own), the run streaming now, and the last completion.
        self.conversation = None  # engine.chat.conversation.ConversationView
        self.live: Turn | None = None
        self.completion: Turn | None = None
        self.editing_index: int | None = None  # the user message the next Run replaces
        self.baselines: dict[tuple, float] = {}
        self.last_run_key: tuple | None = None
        self.last_run_config = None  # the config the last run used: its baseline repeats it
        self.last_finished = None
        self.last_run_mode = "plain"
        self.sweeping = False
        self.profiling = False  # a batch-cost profile is being measured (Stop skips it)
        self.comparing_formats = False
        self.compared_formats: tuple[str, ...] = ()  # the copies the last format comparison measured
        self.checking_exactness = False
        self.profiles: dict[str, dict | None] = {"target": None, "draft": None}
        self._break_even_shown_for: tuple | None = None  # (k, target profile, draft profile) of the Tune line
        self._pending_rejected: dict[int, tuple] = {}
        self._latest_snapshot = None
        self._figures_painted_at = 0.0
        self._run_started_at = 0.0
        self.record = RunRecord()  # the shown run's steps, for the step inspector
        self.last_trace = None  # engine.records.trace.Trace of the last run (live or loaded)
        self.replaying = False  # a recorded trace is playing into the window
        self.paused = False  # the live run (or replay) holds after its current step
        self.presenting = False
        self.training = False  # a draft is being trained (the progress bar shows)
        self._distill_summary: str | None = None  # what training made, shown again once the draft has loaded
        self._handlers: dict | None = None  # event type -> handler, made on the first events

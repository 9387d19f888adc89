"""What the window's parts share, declared once: MainWindow and its mixins (layout, models, chat,
tuning, demo, jobs) read and write these attributes; nothing else of the window's state is shared."""

from __future__ import annotations

from specdec_studio.app.model.activity import Activity, ActivityMachine
from specdec_studio.app.transcript import Turn
from specdec_studio.app.model.run_record import RunRecord


class WindowState:
    def _init_state(self) -> None:
        # What the window is doing (app/model/activity.py): the one place that decides what works.
        self.machine = ActivityMachine()
        self.stream_job: int | None = None  # the job whose reports the engine thread sends now
        self.download_key: str | None = None  # the known model the download job fetches
        self.model_loaded = False
        self.model_path: str | None = None
        self.draft_path: str | None = None
        self.has_chat_template = False
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
        self.compared_formats: tuple[str, ...] = ()  # the copies the last format comparison measured
        self.profiles: dict[str, dict | None] = {"target": None, "draft": None}
        self._break_even_shown_for: tuple | None = None  # (k, target profile, draft profile) of the Tune line
        self._pending_rejected: dict[int, tuple] = {}
        self._latest_snapshot = None
        self._figures_painted_at = 0.0
        self._generation_s = 0.0  # the live run's step times so far (its clock for the figures)
        self.record = RunRecord()  # the shown run's steps, for the step inspector
        self.last_trace = None  # engine.records.trace.Trace of the last run (live or loaded)
        self.replaying = False  # a recorded trace is on screen (playing, paused or played to its end)
        self.paused = False  # the demo's hold: the live run (or replay, or the next run) stops after a step
        self.presenting = False
        self._distill_summary: str | None = None  # what training made, shown again once the draft has loaded
        self._handlers: dict | None = None  # event type -> handler, made on the first events

    # What the activity means for the parts that ask (read-only: only transitions change it).
    @property
    def activity(self) -> Activity:
        return self.machine.activity

    @property
    def running(self) -> bool:
        """A job that decodes holds the engine: a run, race, batch, baseline, sweep, comparison,
        exactness check or training."""
        return self.machine.activity in (Activity.RUNNING, Activity.PAUSED, Activity.SWEEPING, Activity.COMPARING,
                                         Activity.PROBING, Activity.TRAINING)

    @property
    def loading(self) -> bool:
        """A target is loading, or downloading to be loaded."""
        return (self.machine.activity is Activity.LOADING and self.machine.kind != "draft") or \
            (self.machine.activity is Activity.DOWNLOADING and self.machine.kind != "draft")

    @property
    def downloading(self) -> str | None:
        return self.download_key if self.machine.activity is Activity.DOWNLOADING else None

    @property
    def profiling(self) -> bool:
        return self.machine.activity is Activity.PROFILING

    @property
    def sweeping(self) -> bool:
        return self.machine.activity is Activity.SWEEPING

    @property
    def comparing_formats(self) -> bool:
        return self.machine.activity is Activity.COMPARING

    @property
    def checking_exactness(self) -> bool:
        return self.machine.activity is Activity.PROBING

    @property
    def training(self) -> bool:
        return self.machine.activity is Activity.TRAINING

"""What the window is doing, as one state machine, and which controls that allows.

Every job the window starts, every end of one, every Stop is a transition in ``TRANSITIONS``; a
request that is not in the table is refused with one sentence, never half-done. ``allowed_controls``
is the only place that decides which controls work: the window applies its answer after every
change. Plain Python (no Qt), so the table is tested and documented on its own
(``docs/window_states.md`` is drawn from it: ``python -m specdec_studio.app.model.activity``).

Jobs are named by the id the engine worker gives each request. The activity belongs to the newest
job started under it: the end of an older one (a profile the user's Run skipped, a load whose
draft restore is queued behind it) changes nothing here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class Activity(enum.Enum):
    IDLE = "idle"
    LOADING = "loading"  # a model or a draft (and the profile the load measures after it)
    DOWNLOADING = "downloading"
    RUNNING = "running"  # a run, a race, a batch or a plain baseline
    PAUSED = "paused"  # a live run held between two steps
    PROFILING = "profiling"  # a batch-cost profile asked for with Re-measure
    SWEEPING = "sweeping"
    COMPARING = "comparing"  # weight formats and their speeds
    PROBING = "probing"  # the exactness check
    REPLAYING = "replaying"  # a recorded trace plays into the window
    TRAINING = "training"  # a draft is distilled for the target


class Trigger(enum.Enum):
    # asked for by the user
    LOAD = "load"  # a model or a draft file
    DOWNLOAD = "download"
    RUN = "run"  # a run, a race, a batch or a baseline
    REMEASURE = "remeasure"
    SWEEP = "sweep"
    COMPARE = "compare"
    PROBE = "probe"
    TRAIN = "train"
    REPLAY = "replay"
    RESUME = "resume"  # resume or step a paused run
    STOP = "stop"
    # reported by the engine thread (or the replay player) for the job in hand
    DOWNLOADED = "downloaded"  # the download is done, its model now loads
    MEASURING = "measuring"  # the load goes on to measure a missing profile
    HELD = "held"  # the run waits at the step gate
    ENDED = "ended"  # the job finished, failed or was stopped


A = Activity
T = Trigger
BUSY = (A.LOADING, A.DOWNLOADING, A.RUNNING, A.PAUSED, A.PROFILING, A.SWEEPING, A.COMPARING, A.PROBING,
        A.TRAINING)
STARTS = {T.LOAD: A.LOADING, T.DOWNLOAD: A.DOWNLOADING, T.RUN: A.RUNNING, T.REMEASURE: A.PROFILING,
          T.SWEEP: A.SWEEPING, T.COMPARE: A.COMPARING, T.PROBE: A.PROBING, T.TRAIN: A.TRAINING,
          T.REPLAY: A.REPLAYING}
NEEDS_MODEL = {T.RUN, T.REMEASURE, T.SWEEP, T.COMPARE, T.PROBE, T.TRAIN}


def _table() -> dict[tuple[Activity, Trigger], Activity]:
    table: dict[tuple[Activity, Trigger], Activity] = {}
    for trigger, activity in STARTS.items():  # from idle, anything
        table[A.IDLE, trigger] = activity
    # A profile is the one job the user's request comes before: Run, a model or a draft, a
    # download skip it (it is stopped, and measured again when asked).
    for trigger in (T.RUN, T.LOAD, T.DOWNLOAD):
        table[A.PROFILING, trigger] = STARTS[trigger]
    table[A.LOADING, T.LOAD] = A.LOADING  # the draft the window restores after its model loaded
    table[A.REPLAYING, T.RUN] = A.RUNNING  # Run closes the replay
    table[A.REPLAYING, T.REPLAY] = A.REPLAYING  # another trace replaces it
    table[A.DOWNLOADING, T.DOWNLOADED] = A.LOADING
    table[A.LOADING, T.MEASURING] = A.PROFILING
    table[A.RUNNING, T.HELD] = A.PAUSED
    table[A.PAUSED, T.HELD] = A.PAUSED  # held again after one granted step
    table[A.PAUSED, T.RESUME] = A.RUNNING
    for activity in BUSY:
        table[activity, T.STOP] = activity  # stopping: the job ends by itself, soon
        table[activity, T.ENDED] = A.IDLE
    table[A.REPLAYING, T.STOP] = A.IDLE  # the player stops at once
    table[A.REPLAYING, T.ENDED] = A.IDLE  # played to its end (the replay stays shown)
    return table


TRANSITIONS = _table()

DOING = {A.IDLE: "nothing runs", A.LOADING: "a model is loading", A.DOWNLOADING: "a model is downloading",
         A.RUNNING: "a run is going", A.PAUSED: "a run is paused", A.PROFILING: "the batch-cost profile is measured",
         A.SWEEPING: "a sweep is going", A.COMPARING: "weight formats are compared",
         A.PROBING: "the exactness check is going", A.REPLAYING: "a trace is replaying",
         A.TRAINING: "a draft is training"}
ASKED = {T.LOAD: "open a model", T.DOWNLOAD: "start a download", T.RUN: "start a run",
         T.REMEASURE: "re-measure the profile", T.SWEEP: "start a sweep", T.COMPARE: "compare weight formats",
         T.PROBE: "check exactness", T.TRAIN: "train a draft", T.REPLAY: "replay a trace", T.RESUME: "resume",
         T.STOP: "stop"}


def refusal(activity: Activity, trigger: Trigger, model_loaded: bool) -> str:
    """The one sentence the status bar shows for a request the table refuses."""
    if activity is A.IDLE and trigger in NEEDS_MODEL and not model_loaded:
        return f"Cannot {ASKED[trigger]}: no model is loaded; open one in the model bar."
    if activity is A.IDLE:
        return f"Nothing to {ASKED.get(trigger, trigger.value)}."
    ending = "close the replay first" if activity is A.REPLAYING else "wait for it to end or press Stop"
    return f"Cannot {ASKED.get(trigger, trigger.value)} while {DOING[activity]}: {ending}."


CHANGED = frozenset({"activity", "job", "kind", "stopping"})  # what a transition tells its observers


class ActivityMachine:
    """The window's activity, the job it belongs to and whether Stop was pressed for it."""

    def __init__(self) -> None:
        self.activity = A.IDLE
        self.job: int | None = None  # the engine worker's id of the job the activity belongs to
        self.kind = ""  # which job of its activity: "run", "race", "batch", "baseline", "draft", …
        self.stopping = False
        self.history: list[tuple[Activity, Trigger, Activity]] = []  # every transition taken
        self._observers: list = []  # told after every transition (app/model/window_model.py's Observer)

    def subscribe(self, observer) -> None:
        self._observers.append(observer)

    def allows(self, trigger: Trigger, *, model_loaded: bool = True) -> bool:
        if trigger in NEEDS_MODEL and not model_loaded:
            return False
        return (self.activity, trigger) in TRANSITIONS

    def apply(self, trigger: Trigger, *, job: int | None = None, kind: str = "") -> bool:
        """Take the transition for ``trigger``; False (and nothing changed) if the table has none.
        A starting trigger names the new job; the others keep the job in hand."""
        target = TRANSITIONS.get((self.activity, trigger))
        if target is None:
            return False
        self.history.append((self.activity, trigger, target))
        if trigger in STARTS:
            self.job, self.kind, self.stopping = job, kind or trigger.value, False
        elif trigger is T.STOP:
            self.stopping = target is not A.IDLE
        if target is A.IDLE:
            self.job, self.kind, self.stopping = None, "", False
        self.activity = target
        for observer in tuple(self._observers):
            observer(self, CHANGED)
        return True

    def owns(self, job: int | None) -> bool:
        """Whether ``job`` is the one the activity belongs to (a report from an older job is not)."""
        return job is not None and job == self.job

    @property
    def busy(self) -> bool:
        """A job holds the engine thread (a replay does not)."""
        return self.activity in BUSY


@dataclass(frozen=True)
class Facts:
    """What the window knows besides its activity that a control depends on."""

    model_loaded: bool = False
    controls_valid: bool = True  # the run controls hold a valid config
    chat_has_message: bool = False  # the shown chat has a user message (Regenerate, Edit)
    conversation_has_messages: bool = False
    has_finished_run: bool = False  # a run finished: its plain baseline can be measured
    has_copies: bool = False  # the format comparison made copies to load
    has_chat_template: bool = False  # the model can chat (else the chat switch stays off)
    presenting: bool = False  # presentation mode: the number keys choose the mode


CONTROLS = ("run", "stop", "regenerate", "edit_last", "clear", "chat_mode", "conversations", "baseline",
            "model_bar", "sliders", "remeasure", "exactness", "formats", "format_speeds", "load_copy", "race",
            "batch", "tune_run", "tune_stop", "tune_mode", "replay", "mode_keys")


def allowed_controls(activity: Activity, facts: Facts, *, stopping: bool = False) -> dict[str, bool]:
    """Which controls work in ``activity``: the one function that decides it."""
    idle = activity is A.IDLE
    ready = idle and facts.model_loaded
    replay = activity is A.REPLAYING
    can_start_run = (ready or (replay and facts.model_loaded) or (activity is A.PROFILING and facts.model_loaded))
    loads = idle or activity is A.PROFILING
    # Pause, Step and Reset are not here: they work in every activity (Pause while idle holds the
    # next run; Step and Reset act on what is shown).
    return {
        "run": can_start_run and facts.controls_valid,
        "stop": (activity in BUSY and not stopping) or replay,
        "regenerate": can_start_run and facts.chat_has_message and facts.controls_valid,
        "edit_last": can_start_run and facts.chat_has_message,
        "clear": (idle or replay) and facts.conversation_has_messages,
        "chat_mode": facts.has_chat_template,
        # a model load takes seconds: a new or another conversation waits for it (not for longer jobs)
        "conversations": idle or replay or activity is A.LOADING,
        "baseline": can_start_run and facts.has_finished_run,
        "model_bar": loads,  # the model and draft pickers, Download, Reload
        "sliders": True,  # they set the next run, whatever runs now (a change shows as pending)
        "remeasure": ready,
        "exactness": ready,
        "formats": ready,
        "format_speeds": ready,
        "load_copy": ready and facts.has_copies,
        "race": can_start_run and facts.controls_valid,  # a race, a batch, a baseline: runs as Run is
        "batch": can_start_run and facts.controls_valid,
        "tune_run": ready,
        "tune_stop": activity is A.SWEEPING and not stopping,
        "tune_mode": activity is not A.SWEEPING,
        "replay": idle or replay,
        "mode_keys": facts.presenting,
    }


def mermaid() -> str:
    """The transition table as a Mermaid state diagram."""
    lines = ["stateDiagram-v2"]
    for (source, trigger), target in sorted(TRANSITIONS.items(), key=lambda kv: (kv[0][0].value, kv[0][1].value)):
        lines.append(f"    {source.value} --> {target.value}: {trigger.value}")
    return "\n".join(lines)


def markdown_page() -> str:
    """docs/window_states.md, drawn from the table and from allowed_controls (a test keeps the page
    equal to this)."""
    facts = Facts(model_loaded=True, chat_has_message=True, conversation_has_messages=True, has_finished_run=True,
                  has_copies=True, has_chat_template=True)
    shown = [c for c in CONTROLS if c not in ("chat_mode", "mode_keys", "sliders")]
    rows = ["| activity | " + " | ".join(shown) + " |", "|---|" + "---|" * len(shown)]
    for activity in Activity:
        allowed = allowed_controls(activity, facts)
        rows.append(f"| {activity.value} | " + " | ".join("✓" if allowed[c] else "" for c in shown) + " |")
    return "\n".join([
        "# The window's states",
        "",
        "What the window is doing is one state machine (`app/model/activity.py`); this page is drawn from its",
        "table by `python -m specdec_studio.app.model.activity > docs/window_states.md` (a test keeps it so).",
        "Every job start, end and Stop is a transition below; a request that is not one is refused with",
        "one sentence in the status bar. A job's reports name its id, so the end of a job the window has",
        "left behind (a profile skipped by Run, a load whose draft restore is queued) changes nothing.",
        "",
        "```mermaid", mermaid(), "```",
        "",
        "## Which controls work",
        "",
        "With a model loaded, a chat with messages and a finished run (without a model only the model",
        "bar and replays work). The run controls (sliders, mode, k) always work: they set the next run.",
        "Pause, Step and Reset work in every state (Pause while idle holds the next run). After Stop, Stop",
        "stays off until the job has ended.",
        "",
        *rows,
        "",
    ])


if __name__ == "__main__":
    print(markdown_page(), end="")

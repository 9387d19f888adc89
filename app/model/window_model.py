"""What the window knows, Qt-free: the activity machine and one typed slice per part of the window.

Each slice has one writer, the controller named in its docstring (``tests/app/test_window_shape.py``
checks it with ``ast``). A slice changes only through :meth:`Slice.update`, which tells its
subscribers which fields changed, as napari's evented models do; the controls' enabled states and
the views that show a slice are such subscribers, so no job has to remember to refresh them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from types import MappingProxyType
from typing import Any

from specdec_studio.app.model.activity import Activity, ActivityMachine
from specdec_studio.app.model.turn import Turn

# An observer hears the object that changed and the names of the fields that did.
Observer = Callable[[object, frozenset[str]], None]


class Slice:
    """A frozen dataclass whose one door for a change is :meth:`update`: a stray ``slice.x = v``
    raises, so a slice cannot change behind its subscribers' backs."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "_observers", [])

    def subscribe(self, observer: Observer) -> None:
        self._observers.append(observer)

    def update(self, **changes: Any) -> frozenset[str]:
        """Set fields and notify once with the names of those whose value is another object now;
        returns those names (empty: nothing changed, nobody was told)."""
        names = {f.name for f in fields(self)}
        unknown = set(changes) - names
        if unknown:
            raise TypeError(f"{type(self).__name__} has no field {', '.join(sorted(unknown))}")
        changed = frozenset(name for name, value in changes.items() if getattr(self, name) is not value)
        for name in changed:
            object.__setattr__(self, name, changes[name])
        if changed:
            for observer in tuple(self._observers):
                observer(self, changed)
        return changed


@dataclass(frozen=True, eq=False)
class ModelsSlice(Slice):
    """The models loaded (written by app/window/models.py)."""

    loaded: bool = False  # a target is loaded and can run
    path: str | None = None  # the target's file
    draft_path: str | None = None
    has_chat_template: bool = False
    download_key: str | None = None  # the known model the download job fetches


@dataclass(frozen=True, eq=False)
class ChatSlice(Slice):
    """The conversation on show (written by app/window/chat.py). The engine keeps the history;
    the window keeps the view it was last sent."""

    conversation: object | None = None  # engine.chat.conversation.ConversationView
    editing_index: int | None = None  # the user message the next Run replaces


@dataclass(frozen=True, eq=False)
class RunSlice(Slice):
    """The run on show and what the last one measured (written by app/window/runs.py)."""

    live: Turn | None = None  # the run streaming now (or the replay's)
    completion: Turn | None = None  # the last completion (not a chat turn)
    last_run_key: tuple | None = None  # what the plain baseline of the last run is stored under
    last_run_config: object | None = None  # the config the last run used: its baseline repeats it
    last_run_mode: str = "plain"
    last_finished: object | None = None  # engine.events.RunFinished of the run on show
    last_trace: object | None = None  # engine.records.trace.Trace of the last run (live or loaded)
    baselines: Mapping[tuple, float] = field(default_factory=lambda: MappingProxyType({}))


@dataclass(frozen=True, eq=False)
class DemoSlice(Slice):
    """The demo's state (written by app/window/demo.py)."""

    replay_shown: bool = False  # a recorded trace is on screen (playing, paused or played to its end)
    hold: bool = False  # the demo's hold: the live run (or the replay, or the next run) stops after a step


@dataclass(frozen=True, eq=False)
class PresentationSlice(Slice):
    """Presentation mode (written by app/window/presentation.py)."""

    on: bool = False  # full screen, large type, high contrast, keyboard-driven


@dataclass(frozen=True, eq=False)
class TuningSlice(Slice):
    """What tuning measured (written by app/window/tuning.py)."""

    profiles: Mapping[str, dict | None] = field(
        default_factory=lambda: MappingProxyType({"target": None, "draft": None}))
    compared_formats: tuple[str, ...] = ()  # the copies the last format comparison measured
    copies: tuple[str, ...] = ()  # their files, which Load this copy offers


@dataclass(frozen=True, eq=False)
class JobsSlice(Slice):
    """The jobs beside a run (written by app/window/jobs.py)."""

    distill_summary: str | None = None  # what training made, said again once the draft has loaded


class WindowModel:
    """The activity machine and the slices; ``subscribe`` hears every change of any of them."""

    def __init__(self) -> None:
        self.machine = ActivityMachine()
        self.models = ModelsSlice()
        self.chat = ChatSlice()
        self.run = RunSlice()
        self.demo = DemoSlice()
        self.presentation = PresentationSlice()
        self.tuning = TuningSlice()
        self.jobs = JobsSlice()

    def slices(self) -> tuple[Slice, ...]:
        return self.models, self.chat, self.run, self.demo, self.presentation, self.tuning, self.jobs

    def subscribe(self, observer: Observer) -> None:
        self.machine.subscribe(observer)
        for part in self.slices():
            part.subscribe(observer)

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
        return self.machine.activity in (Activity.LOADING, Activity.DOWNLOADING) and self.machine.kind != "draft"

    @property
    def downloading(self) -> str | None:
        return self.models.download_key if self.machine.activity is Activity.DOWNLOADING else None

    @property
    def profiling(self) -> bool:
        return self.machine.activity is Activity.PROFILING

    @property
    def checking_exactness(self) -> bool:
        return self.machine.activity is Activity.PROBING

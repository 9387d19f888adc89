"""The run on show, as the window received it: every step's batch, result and KV picture, for the
step inspector and the exports. Filled from a live run or a replayed trace alike."""

from __future__ import annotations

from dataclasses import dataclass, field

from specdec_studio.engine.events import KvSnapshot, RunFinished, RunStarted, StepBatch, StepDone
from specdec_studio.engine.records.kv_history import KvHistory


@dataclass
class RunRecord:
    """A run's steps as the window received them: batch, result and KV picture per step."""

    started: object | None = None  # RunStarted
    batches: dict[int, object] = field(default_factory=dict)  # step -> StepBatch
    steps: dict[int, object] = field(default_factory=dict)  # step -> StepDone
    # step -> KvSnapshot (after its decode), kept as keyframes and changes: a long run's pictures
    # would otherwise grow with the square of its length
    snapshots: KvHistory = field(default_factory=KvHistory)
    finished: object | None = None  # RunFinished

    def clear(self) -> None:
        self.started = self.finished = None
        self.batches.clear()
        self.steps.clear()
        self.snapshots = KvHistory()

    def add(self, event) -> None:
        if isinstance(event, RunStarted):
            self.clear()
            self.started = event
        elif isinstance(event, StepBatch):
            self.batches[event.step] = event
        elif isinstance(event, StepDone):
            self.steps[event.step] = event
        elif isinstance(event, KvSnapshot):
            self.snapshots.add(event)
        elif isinstance(event, RunFinished):
            self.finished = event

    @property
    def step_numbers(self) -> list[int]:
        return sorted(self.steps)

    def snapshot_before(self, step: int):
        """The cells as the previous step left them (after its verification), if recorded."""
        return self.snapshots.before(step)

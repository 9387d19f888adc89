"""Recorded runs: a run's events to and from a versioned JSON-lines file, and their replay.

The first line is a header (format, version, when, which app, the run's config and model facts);
every other line is one event with its time in seconds since the run started:

    {"format": "specdec-trace", "version": 2, "created": "…", "app": "0.1.0", "config": {…}, "model": {…}}
    {"t": 0.0, "type": "RunStarted", "data": {…}}
    {"t": 0.012, "type": "StepBatch", "data": {"step": 1, "rows": [[token, text, pos, [seqs], logits, role, verdict]]}}
    {"t": 0.012, "type": "StepDone", "data": {…, "tokens": [[id, text, source(, why)], …]}}
    {"t": 0.05, "type": "KvSnapshot", "data": {…, "n_cells": 512, "n_seq": 1, "cells": [[cell, pos, seqs, kept, step]]}}
    …
    {"t": 2.31, "type": "RunFinished", "data": {…}}

A StepDone of an Auto run carries Auto's decision as ``"auto": {"decision", "k", "branches", "depth",
"predicted_gain", "proposers"}`` (traces written before it had a field of its own kept it in ``extra``:
both load). A token of a run that explained its tokens (version 2) carries its explanation as a fourth field:
``{"top": [[id, text, p], …], "p": p_chosen, "proposed": [id, text], "by": proposer, "ok": accepted,
"qtop": […], "matched": text, "rule": [p, q, draw]}``, the fields that do not apply left out.

A KV snapshot stores only the cells that changed since the trace's previous snapshot (a cell's
sequences as a hex bitmask); loading rebuilds every snapshot as the engine made it (arrays up to
the last used cell). A trace loads whole or not at all: a truncated or corrupted file raises
:class:`TraceError` naming the line.

A replayed trace is just another event source: :class:`Replay` hands out the events whose time
has come on a clock the caller drives (the window's timer, or the CLI's sleep), at any speed.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from datetime import datetime, UTC
from pathlib import Path

import numpy as np

from specdec_studio.engine import __version__
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.errors import ConfigError, SpecDecError, not_utf8
from specdec_studio.engine.events import (
    Event,
    Explanation,
    KvSnapshot,
    RejectedDraft,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWarning,
    StepBatch,
    StepDone,
)
from specdec_studio.engine.records.kv_history import KvHistory
from specdec_studio.engine.records.trace_read import (
    KvDecoder,
    as_number,
    as_object,
    as_string,
    event_from_json,
)

# What a trace keeps: a run's own events (a chat's conversation updates are not part of it)
TRACE_EVENTS = (RunStarted, StepDone, StepBatch, RejectedDraft, KvSnapshot, RunFinished, RunFailed, RunWarning)
FORMAT = "specdec-trace"
VERSION = 2  # 2: tokens may carry their explanation
READS_VERSIONS = (1, 2)  # a version-1 trace loads whole; its tokens explain nothing beyond their source
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
MAX_RECORDED_S = 7 * 24 * 3600  # an event's time in a trace: a week of decoding is more than any run takes


class TraceError(SpecDecError):
    """A trace file is missing, truncated, corrupted or of an unknown version."""


@dataclass(frozen=True)
class Trace:
    """A recorded run: its header and every event with its time (seconds since RunStarted)."""

    header: dict
    events: Sequence[tuple[float, Event]]  # a tuple, or RecordedEvents (its KV pictures kept compactly)

    @property
    def duration_s(self) -> float:
        return self.events[-1][0] if self.events else 0.0

    @property
    def finished(self) -> RunFinished | None:
        last = self.events[-1][1] if self.events else None
        return last if isinstance(last, RunFinished) else None

    @property
    def config(self) -> dict:
        return self.header.get("config", {})

    @property
    def title(self) -> str:
        mode = self.config.get("mode", "?")
        return f"{mode} · {self.header.get('model', {}).get('name', 'unknown model')}"


class _KvPlace:
    """Where a KV snapshot of a trace's events sits in its :class:`KvHistory`."""

    __slots__ = ("place",)

    def __init__(self, place: int) -> None:
        self.place = place


class RecordedEvents(Sequence):
    """A trace's events, each KV snapshot kept in a :class:`KvHistory` (keyframes and changes) and
    rebuilt whole where it is read: a long run's pictures would otherwise take memory that grows
    with the square of its length. Nothing is added once the trace is made."""

    def __init__(self, items: list[tuple[float, Event | _KvPlace]], kv: KvHistory) -> None:
        self._items = tuple(items)
        self._kv = kv

    def __len__(self) -> int:
        return len(self._items)

    def __getitem__(self, index):
        if isinstance(index, slice):
            return [self._whole(item) for item in self._items[index]]
        return self._whole(self._items[index])

    def _whole(self, item: tuple[float, Event | _KvPlace]) -> tuple[float, Event]:
        t, event = item
        return (t, self._kv.at(event.place)) if isinstance(event, _KvPlace) else item


class _EventList:
    """Events as they are collected, KV snapshots into a history of their own."""

    def __init__(self) -> None:
        self.items: list[tuple[float, Event | _KvPlace]] = []
        self.kv = KvHistory()

    def append(self, t: float, event: Event) -> None:
        self.items.append((t, _KvPlace(self.kv.add(event)) if isinstance(event, KvSnapshot) else event))

    def events(self) -> RecordedEvents:
        return RecordedEvents(self.items, self.kv)


class TraceRecorder:
    """Collects a run's events as they happen (on the engine's thread) into a :class:`Trace`."""

    def __init__(self) -> None:
        self._events = _EventList()
        self._t0: float | None = None
        self._header: dict = {}

    def add(self, event: Event, now: float | None = None) -> None:
        if not isinstance(event, TRACE_EVENTS):
            return
        now = time.perf_counter() if now is None else now
        if isinstance(event, RunStarted):
            self._events, self._t0 = _EventList(), now
            self._header = make_header(event)
        if self._t0 is None:
            return  # nothing before a run's start belongs to a trace
        self._events.append(now - self._t0, event)

    def trace(self) -> Trace | None:
        return Trace(dict(self._header), self._events.events()) if self._events.items else None


def make_header(started: RunStarted) -> dict:
    return {"format": FORMAT, "version": VERSION, "created": datetime.now(UTC).isoformat(timespec="seconds"),
            "app": __version__, "config": started.config, "model": started.model}


# ----------------------------------------------------------------------------- writing
def save(trace: Trace, path: str | Path) -> None:
    """Write ``trace`` as JSON lines (atomically: a reader never sees half a file)."""
    from specdec_studio.engine.jsonfile import write_text

    write_text(Path(path), "".join(line + "\n" for line in dump_lines(trace)), shared=True)


def dump_lines(trace: Trace) -> Iterator[str]:
    yield json.dumps(trace.header, ensure_ascii=False)
    kv = _KvEncoder()
    for t, event in trace.events:
        data = kv.encode(event) if isinstance(event, KvSnapshot) else _plain(event)
        yield json.dumps({"t": round(t, 6), "type": type(event).__name__, "data": data}, ensure_ascii=False)


def _plain(event: Event) -> dict:
    out = {}
    for f in fields(event):
        value = getattr(event, f.name)
        if f.name == "tokens":  # TokenInfo: [id, text, source] and, where the run explained it, its why
            value = [[t.id, t.text, t.source] + ([why_record(t.why)] if t.why is not None else []) for t in value]
        elif f.name == "rows":  # BatchRow: [token, text, pos, seqs, logits, role, verdict]
            value = [[r.token, r.text, r.pos, list(r.seqs), r.logits, r.role, r.verdict] for r in value]
        elif f.name == "auto":  # AutoStep: an object, absent on steps of other modes
            if value is None:
                continue
            value = {**asdict(value), "proposers": list(value.proposers)}
        out[f.name] = value
    return out


def why_record(why: Explanation) -> dict:
    """An explanation as a compact object; fields that do not apply (none proposed, empty) are left out."""
    record: dict = {"top": [list(r) for r in why.top], "p": why.p_chosen}
    if why.proposed >= 0:
        record.update({"proposed": [why.proposed, why.proposed_text], "by": why.proposer, "ok": why.accepted})
    if why.proposer_top:
        record["qtop"] = [list(r) for r in why.proposer_top]
    if why.matched:
        record["matched"] = why.matched
    if why.sampled:  # the sampling rule's three numbers, exact: they reproduce its decision
        record["rule"] = [why.p, why.q, why.draw]
    return record


class _KvEncoder:
    """Each snapshot as the cells that changed since the previous one."""

    def __init__(self) -> None:
        self.previous: tuple[np.ndarray, ...] | None = None

    def encode(self, snap: KvSnapshot) -> dict:
        snap = snap.padded()  # the file gives every cell of the cache; a delta finds the cells that changed
        n_seq, n_cells = snap.seq_of_cell.shape
        state = _packed(snap)
        prev = self.previous
        if prev is None or prev[0].shape != state[0].shape or prev[1].shape != state[1].shape:
            changed = np.flatnonzero((state[0] >= 0) | state[1].any(axis=1) | state[2].any(axis=1))
        else:
            changed = np.flatnonzero((state[0] != prev[0]) | (state[1] != prev[1]).any(axis=1)
                                     | (state[2] != prev[2]).any(axis=1) | (state[3] != prev[3]))
        self.previous = state
        pos, during, kept, written = state
        cells = [[int(c), int(pos[c]), during[c].tobytes().hex(), kept[c].tobytes().hex(), int(written[c])]
                 for c in changed]
        data = {"step": snap.step, "n_cells": n_cells, "n_seq": n_seq, "used": snap.used, "holes": snap.holes,
                "largest_free_run": snap.largest_free_run, "seq_pos_min": list(snap.seq_pos_min),
                "seq_pos_max": list(snap.seq_pos_max), "delta": prev is not None, "cells": cells}
        if snap.states:  # a hybrid or recurrent model's state slots (older traces have none)
            data["states"] = [[s.seq, s.n_tokens, s.snapshots, s.snapshots_max, s.checkpoint_at, s.rollback,
                               s.rolled_back, s.redecoded] for s in snap.states]
        return data


def _packed(snap: KvSnapshot) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    n_cells = snap.seq_of_cell.shape[1]
    written = snap.written_step if snap.written_step is not None else np.full(n_cells, -1, dtype=np.int32)
    return (snap.pos_of_cell.astype(np.int32), np.packbits(snap.seq_of_cell.T, axis=1, bitorder="little"),
            np.packbits(snap.kept.T, axis=1, bitorder="little"), written.astype(np.int32))


# ----------------------------------------------------------------------------- reading
def load(path: str | Path) -> Trace:
    """Read a whole trace; raise :class:`TraceError` with the line at fault if it is not one."""
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise TraceError(f"there is no trace file at {path}") from None
    except UnicodeDecodeError as exc:
        raise TraceError(f"the trace {not_utf8(path.name, exc)}") from None
    except OSError as exc:
        raise TraceError(f"the trace {path.name} could not be read ({exc})") from None
    return parse(lines, path.name)


def parse(lines: Iterable[str], name: str = "trace") -> Trace:
    """Every event of a trace's lines, each field checked for its type and range: a file may be
    damaged or crafted, and nothing in it may reach the window unchecked."""
    lines = [line for line in lines if line.strip()]
    if not lines:
        raise TraceError(f"the trace {name} is empty")
    header = _json(lines[0], name, 1)
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise TraceError(f"{name} is not a SpecDec Studio trace (its first line has no \"format\": \"{FORMAT}\")")
    if header.get("version") not in READS_VERSIONS:
        raise TraceError(f"the trace {name} has format version {str(header.get('version'))[:20]!r}; "
                         f"this version of the app reads versions {READS_VERSIONS[0]} to {READS_VERSIONS[-1]}")
    try:
        _check_header(header)
    except (ConfigError, TypeError, ValueError) as exc:
        raise TraceError(f"the trace {name} has a corrupted header ({exc})") from None
    decoder = KvDecoder()
    events = _EventList()
    for number, line in enumerate(lines[1:], start=2):
        record = _json(line, name, number)
        try:
            if not isinstance(record, dict):
                raise TypeError("a line is not an object")
            t = as_number(record["t"])
            if not 0.0 <= t <= MAX_RECORDED_S:  # a replay waits for it: a crafted time must not hang one
                raise ValueError(f"an event at {t:g} s, not within the {MAX_RECORDED_S // 3600} hours a trace may last")
            event = event_from_json(as_string(record["type"]), as_object(record["data"]), decoder)
        except (KeyError, TypeError, ValueError, IndexError, OverflowError, ConfigError, MemoryError) as exc:
            raise TraceError(f"the trace {name} is corrupted at line {number} ({type(exc).__name__}: {exc})") from None
        events.append(t, event)
    items = events.items
    if not items or not isinstance(items[0][1], RunStarted):
        raise TraceError(f"the trace {name} does not start with its run's start")
    if not isinstance(items[-1][1], (RunFinished, RunFailed)):
        raise TraceError(f"the trace {name} is truncated: it ends before its run finished (line {len(lines)})")
    return Trace(header, events.events())


def _json(line: str, name: str, number: int):
    try:
        return json.loads(line)
    except json.JSONDecodeError as exc:
        raise TraceError(f"the trace {name} is truncated or corrupted at line {number} ({exc.msg})") from None
    except RecursionError:
        raise TraceError(f"the trace {name} is corrupted at line {number} (nested too deeply)") from None


def _check_header(header: dict) -> None:
    """What the window reads from a header: a valid run config, model facts as an object, the
    creation time as text."""
    RunConfig.from_dict(header.get("config", {}))
    as_object(header.get("model", {}))
    as_string(header.get("created", ""))
    as_string(header.get("model", {}).get("name", ""))


# ----------------------------------------------------------------------------- replay
class Replay:
    """Hands out a trace's events as a clock the caller drives passes their recorded times.

    ``advance(dt)`` moves the replay's clock on by ``dt`` seconds of wall time (times ``speed``)
    and returns the events now due; ``seek_end`` returns all that remain. Pausing is simply not
    advancing."""

    def __init__(self, trace: Trace, speed: float = 1.0) -> None:
        if not (math.isfinite(speed) and speed > 0):
            raise ValueError(f"a replay's speed must be a finite number above 0, not {speed}")
        self.trace = trace
        self.speed = speed
        self.clock = 0.0  # recorded seconds
        self.index = 0

    @property
    def done(self) -> bool:
        return self.index >= len(self.trace.events)

    def advance(self, wall_dt: float) -> list[Event]:
        self.clock += wall_dt * self.speed
        return self._until(self.clock)

    def next_step(self) -> list[Event]:
        """Every event up to and including the next StepDone (or the end): one step forward."""
        out = []
        while not self.done:
            t, event = self.trace.events[self.index]
            self.index += 1
            self.clock = max(self.clock, t)
            out.append(event)
            if isinstance(event, StepDone):
                break
        return out

    def seek_end(self) -> list[Event]:
        return self._until(float("inf"))

    def advance_to(self, recorded_s: float) -> list[Event]:
        """The events recorded up to ``recorded_s`` not handed out yet (a film's frame clock)."""
        self.clock = max(self.clock, recorded_s)
        return self._until(self.clock)

    def _until(self, t_limit: float) -> list[Event]:
        events = self.trace.events
        start = self.index
        while self.index < len(events) and events[self.index][0] <= t_limit:
            self.index += 1
        return [e for _, e in events[start:self.index]]

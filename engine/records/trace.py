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

A token of a run that explained its tokens (version 2) carries its explanation as a fourth field:
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
from dataclasses import dataclass, fields
from datetime import datetime, UTC
from pathlib import Path

import numpy as np

from specdec_studio.engine import __version__
from specdec_studio.engine.config import MAX_SEQUENCES, RunConfig
from specdec_studio.engine.errors import ConfigError, SpecDecError, not_utf8
from specdec_studio.engine.events import (
    BatchRow,
    Event,
    Explanation,
    KvSnapshot,
    RecurrentState,
    RejectedDraft,
    RunFailed,
    RunFinished,
    RunStarted,
    RunWarning,
    StepBatch,
    StepDone,
    TokenInfo,
)
from specdec_studio.engine.strategies.explain import TOP_N
from specdec_studio.engine.records.kv_history import KvHistory

# What a trace keeps: a run's own events (a chat's conversation updates are not part of it)
TRACE_EVENTS = (RunStarted, StepDone, StepBatch, RejectedDraft, KvSnapshot, RunFinished, RunFailed, RunWarning)
FORMAT = "specdec-trace"
VERSION = 2  # 2: tokens may carry their explanation
READS_VERSIONS = (1, 2)  # a version-1 trace loads whole; its tokens explain nothing beyond their source
MAX_TOKEN_TEXT = 64  # characters of a listed token's text kept from a trace (a crafted file may hold more)
MAX_MATCHED_TEXT = 400
SPEEDS = (0.25, 0.5, 1.0, 2.0, 4.0)
MAX_KV_CELLS = 1 << 20  # a trace's KV map is at most this many cells wide (llama.cpp contexts here are far smaller)


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
    decoder = _KvDecoder()
    events = _EventList()
    for number, line in enumerate(lines[1:], start=2):
        record = _json(line, name, number)
        try:
            if not isinstance(record, dict):
                raise TypeError("a line is not an object")
            t = _number(record["t"])
            event = _event(_string(record["type"]), _object(record["data"]), decoder)
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
    _object(header.get("model", {}))
    _string(header.get("created", ""))
    _string(header.get("model", {}).get("name", ""))


# Typed reads of a JSON value: a wrong type is a corrupted trace, never a crash further on.
def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"expected an integer, got {type(value).__name__}")
    return value


def _number(value: object) -> float:
    """A finite number: a NaN or infinite time would stall a replay's clock for ever."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"expected a number, got {type(value).__name__}")
    number = float(value)
    if not math.isfinite(number):
        raise ValueError(f"expected a finite number, got {value}")
    return number


def _string(value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected text, got {type(value).__name__}")
    return value


def _object(value: object) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {type(value).__name__}")
    return value


def _list(value: object) -> list:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {type(value).__name__}")
    return value


def _in_range(value: object, low: int, high: int, what: str) -> int:
    """An integer ``low <= value < high``."""
    value = _int(value)
    if not low <= value < high:
        raise ValueError(f"{what} {value} is outside [{low}, {high})")
    return value


def _tokens(rows: object) -> tuple[TokenInfo, ...]:
    out = []
    for row in _list(rows):
        row = _list(row)
        if len(row) not in (3, 4):
            raise ValueError(f"a token has {len(row)} fields, not 3 or 4")
        text = _string(row[1])
        why = _why(_object(row[3]), text) if len(row) == 4 else None
        out.append(TokenInfo(_int(row[0]), text, _string(row[2]), why))
    return tuple(out)


def _ranked(value: object) -> tuple[tuple[int, str, float], ...]:
    out = []
    for entry in _list(value)[:TOP_N]:
        token, text, p = _list(entry)
        out.append((_int(token), _string(text)[:MAX_TOKEN_TEXT], _probability(p)))
    return tuple(out)


def _probability(value: object) -> float:
    p = _number(value)
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"a probability of {p}")
    return p


def _why(record: dict, chosen_text: str) -> Explanation:
    """An explanation as :func:`why_record` wrote it; the chosen token's text is the token's own."""
    proposed, proposed_text = _list(record["proposed"]) if "proposed" in record else (-1, "")
    rule = _list(record["rule"]) if "rule" in record else []
    if rule and len(rule) != 3:
        raise ValueError("a sampling rule needs p, q and the draw")
    p, q, draw = (None if x is None else _number(x) for x in rule) if rule else (None,) * 3
    return Explanation(_ranked(record["top"]), _probability(record["p"]), chosen_text, _int(proposed),
                       _string(proposed_text)[:MAX_TOKEN_TEXT], _string(record.get("by", ""))[:40],
                       bool(record.get("ok", False)), _ranked(record.get("qtop", [])),
                       _string(record.get("matched", ""))[:MAX_MATCHED_TEXT], bool(rule), p, q, draw)


def _event(kind: str, data: dict, kv: _KvDecoder) -> Event:
    if kind == "StepDone":
        return StepDone(_int(data["step"]), _tokens(data["tokens"]), _int(data["n_drafted"]),
                        _int(data["n_accepted"]), _number(data["t_decode_s"]), _number(data["t_step_s"]),
                        dict(_object(data.get("extra") or {})))
    if kind == "StepBatch":
        rows = []
        for row in _list(data["rows"]):
            tok, text, pos, seqs, logits, role, verdict = _list(row)
            rows.append(BatchRow(_int(tok), _string(text), _int(pos),
                                 tuple(_in_range(s, 0, MAX_SEQUENCES, "sequence") for s in _list(seqs)),
                                 bool(logits), _string(role), _string(verdict)))
        return StepBatch(_int(data["step"]), tuple(rows))
    if kind == "KvSnapshot":
        return kv.decode(data)
    if kind == "RunStarted":
        config = _object(data["config"])
        RunConfig.from_dict(config)
        return RunStarted(dict(config), dict(_object(data["model"])), _int(data["n_prompt"]),
                          _string(data["prompt_text"]))
    if kind == "RunFinished":
        end_token = data.get("end_token")
        return RunFinished(_string(data["text"]), tuple(_int(i) for i in _list(data["token_ids"])),
                           _string(data["finish_reason"]), _int_keys(_object(data["stats"])),
                           None if end_token is None else _int(end_token))
    if kind == "RejectedDraft":
        return RejectedDraft(_int(data["step"]), tuple(_int(i) for i in _list(data["ids"])),
                             tuple(_string(t) for t in _list(data["texts"])))
    if kind == "RunFailed":
        return RunFailed(_string(data["message"]))
    if kind == "RunWarning":
        return RunWarning(_string(data["message"]))
    raise ValueError(f"unknown event type {kind[:40]!r}")


def _int_keys(value):
    """JSON turned the integer keys of the stats' tables (tokens per step -> steps) into strings:
    turn them back, so a replayed run's figures equal the recorded ones."""
    if isinstance(value, dict):
        keys_are_ints = bool(value) and all(isinstance(k, str) and k.lstrip("-").isdigit() for k in value)
        return {(int(k) if keys_are_ints else k): _int_keys(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_int_keys(v) for v in value]
    return value


class _KvDecoder:
    def __init__(self) -> None:
        self.state: tuple[np.ndarray, ...] | None = None

    def decode(self, data: dict) -> KvSnapshot:
        n_cells = _in_range(data["n_cells"], 1, MAX_KV_CELLS + 1, "n_cells")
        n_seq = _in_range(data["n_seq"], 1, MAX_SEQUENCES + 1, "n_seq")
        n_bytes = (n_seq + 7) // 8
        if not data["delta"] or self.state is None or self.state[0].shape[0] != n_cells \
                or self.state[1].shape[1] != n_bytes:
            self.state = (np.full(n_cells, -1, dtype=np.int32), np.zeros((n_cells, n_bytes), dtype=np.uint8),
                          np.zeros((n_cells, n_bytes), dtype=np.uint8), np.full(n_cells, -1, dtype=np.int32))
        pos, during, kept, written = (a.copy() for a in self.state)
        for cell_record in _list(data["cells"]):
            cell, p, seqs, kept_seqs, step = _list(cell_record)
            cell = _in_range(cell, 0, n_cells, "cell")
            pos[cell] = _in_range(p, -1, 2**31 - 1, "position")
            during[cell] = _seq_bits(seqs, n_bytes)
            kept[cell] = _seq_bits(kept_seqs, n_bytes)
            written[cell] = _in_range(step, -1, 2**31 - 1, "step")
        self.state = (pos, during, kept, written)
        # held as the engine gives it: arrays up to the last used cell (KvSnapshot)
        top = int(np.flatnonzero(pos >= 0).max(initial=-1)) + 1
        seq_of_cell = np.unpackbits(during[:top], axis=1, count=n_seq, bitorder="little").astype(bool).T.copy()
        kept_of_cell = np.unpackbits(kept[:top], axis=1, count=n_seq, bitorder="little").astype(bool).T.copy()
        same = np.array_equal(seq_of_cell, kept_of_cell)
        return KvSnapshot(_int(data["step"]), seq_of_cell, pos[:top].copy(), _int(data["used"]), _int(data["holes"]),
                          _int(data["largest_free_run"]), tuple(_int(p) for p in _list(data["seq_pos_min"])),
                          tuple(_int(p) for p in _list(data["seq_pos_max"])),
                          None if same else kept_of_cell, written[:top].copy(),
                          tuple(_recurrent_state(s) for s in _list(data.get("states", []))[:MAX_SEQUENCES]),
                          n_cells)


def _recurrent_state(record: object) -> RecurrentState:
    seq, n_tokens, snapshots, snapshots_max, checkpoint_at, how, back, redone = _list(record)
    if how not in ("", "snapshot", "checkpoint"):
        raise ValueError(f"a recurrent state's rollback is {str(how)[:20]!r}, not snapshot or checkpoint")
    count = lambda v, what: _in_range(v, 0, 2**31 - 1, what)  # noqa: E731
    return RecurrentState(_in_range(seq, 0, MAX_SEQUENCES, "sequence"), count(n_tokens, "state tokens"),
                          count(snapshots, "snapshots"), count(snapshots_max, "snapshots"),
                          _in_range(checkpoint_at, -1, 2**31 - 1, "checkpoint"), how, count(back, "rollback"),
                          count(redone, "re-decoded tokens"))


def _seq_bits(hex_text: object, n_bytes: int) -> np.ndarray:
    """A cell's sequences: ``n_bytes`` bytes of bitmask written as hex."""
    raw = bytes.fromhex(_string(hex_text))
    if len(raw) != n_bytes:
        raise ValueError(f"a cell's sequence mask has {len(raw)} bytes, expected {n_bytes}")
    return np.frombuffer(raw, dtype=np.uint8)


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

"""The batch-cost profile: how long one ``llama_decode`` of B tokens takes on this machine.

Every speed-up prediction prices a step with this curve (:mod:`engine.tuning.cost_model`). It is
measured on the loaded context itself (same model, context size, threads, batch size and
llama.cpp build), with the KV cache filled to a realistic depth first, for every B from 1 to 16
(the CPU kernels make steps: with repacked weights B = 4 costs less than B = 3) and a log-spaced
grid to 128, and two logit patterns (every row, last row only). Each point is the lower quartile
of several timed decodes after a warm-up; the cells a decode wrote are removed before the next one,
and the cache is cleared at the end. On SmolLM2-135M with 2 threads it takes about 15-20 s, so it
is cached per (model file hash, n_ctx, threads, batch size, build, GPU layers) and reused.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np


from specdec_studio.engine.batch import Batch
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.models.identity import PROBE_TEXT, build_fingerprint, model_sha256
from specdec_studio.engine.jsonfile import write_json
from specdec_studio.engine.memory import DecodeAborted, Memory
from specdec_studio.engine.tuning.cost_model import CostCurve
from specdec_studio.engine.tuning.shape_fit import off_fit, physical_fit

PROFILE_SIZES = (*range(1, 17), 24, 32, 48, 64, 96, 128)  # every B to 16: the kernels make steps (B = 4 < B = 3)
# Cells already in the cache, like a chat prompt plus some of its answer. Kept under 256 so that
# batches up to 56 tokens attend one 256-cell block as most runs of the shipped prompts do (past
# 512 attended cells llama.cpp's CPU attention takes another path for a single-token decode).
DEFAULT_KV_FILL = 200
ROUNDS_SMALL, ROUNDS_LARGE = 5, 3  # timed rounds for B <= LARGE_BATCH and above
LARGE_BATCH = 32
PLAIN_REPEATS = 3  # B = 1 is timed this many times a round
# ... after this many untimed one-token decodes. A one-token decode right after a larger decode
# runs slow for a few decodes, not only the first (it rebuilds its graph, and the CPU takes a
# while to settle): measured here with 2 threads, 9.9, 9.0, 6.9 ms after a 64-token decode and
# 6.3 from the 4th on, 7.3 then 6.6 after a 4-token one. Plain decoding runs one-token decodes
# back to back, so its step is the settled one: timed straight after the round's largest size,
# B = 1 read 10.4 ms against plain decoding's 6.4, and every size's cost relative to it read 1.6x
# too low. What a tree step costs the plain steps after it is the run's to measure (StepCost).
PLAIN_SETTLE = 4
LOW_QUANTILE = 25  # percent: the point of a size's samples the curve takes
# a size up to LARGE_BATCH whose time is this far (relative) from the curve's fitted shape is
# timed again, up to REMEASURE_PASSES times; what stays off is kept as measured (the Profile tab
# shows it, Auto prices with the fit). Larger sizes are not: their per-token cost really does rise
# on some CPUs (cache sizes), and five more rounds of B = 128 cost seconds
OFF_FIT_TOLERANCE = 0.08
REMEASURE_PASSES = 2
FORMAT_VERSION = 2  # 2: B = 1 timed settled (PLAIN_SETTLE); a format-1 profile is measured again


class ProfileCancelled(SpecDecError):
    """Stop was pressed while the profile was being measured; nothing was stored."""


class ProfileUnavailable(SpecDecError):
    """The context is too small to hold the measurement; Auto then prices its steps with the
    run's own timings, and only an explicit ``specdec profile`` treats this as an error."""


@dataclass(frozen=True)
class ProfileKey:
    """What a batch-cost curve depends on; profiles are cached under this key."""

    model_sha256: str
    n_ctx: int
    n_threads: int
    n_batch: int
    build: str  # llama-cpp-python version and llama.cpp's system info (CPU features, backends)
    kv_fill: int
    sizes: tuple[int, ...] = PROFILE_SIZES
    n_gpu_layers: int = 0  # layers offloaded to a GPU: a different machine, as far as the curve goes
    n_threads_batch: int | None = None  # threads for batches past one token, where not n_threads
    # the RPC servers that hold the layers: their network's round trips are part of every step's cost
    rpc_servers: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", tuple(self.sizes))  # JSON gives a list
        object.__setattr__(self, "rpc_servers", tuple(self.rpc_servers))

    def filename(self) -> str:
        fields = asdict(self)
        if fields["n_threads_batch"] is None:  # the common case keeps the name profiles had before it
            del fields["n_threads_batch"]
        if not fields["rpc_servers"]:
            del fields["rpc_servers"]
        digest = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]
        return f"{self.model_sha256[:16]}-c{self.n_ctx}-t{self.n_threads}-b{self.n_batch}-{digest}.json"


@dataclass(frozen=True)
class BatchCostProfile:
    key: ProfileKey
    model_name: str
    curve: CostCurve
    repeats: tuple[int, ...]
    measured_at: float  # Unix time
    t_measure_s: float

    def to_dict(self) -> dict:
        return {
            "format": FORMAT_VERSION,
            "key": asdict(self.key),
            "model_name": self.model_name,
            "sizes": list(self.curve.sizes),
            "t_all_logits_s": list(self.curve.t_all_logits),
            "t_last_logit_s": list(self.curve.t_last_logit),
            "relative_all_logits": [self.curve.relative(b) for b in self.curve.sizes],
            "repeats": list(self.repeats),
            "measured_at": self.measured_at,
            "t_measure_s": self.t_measure_s,
        }

    @classmethod
    def from_dict(cls, data: dict) -> BatchCostProfile:
        if data.get("format") != FORMAT_VERSION:
            raise ValueError("profile of another format")
        curve = CostCurve(tuple(data["sizes"]), tuple(data["t_all_logits_s"]), tuple(data["t_last_logit_s"]))
        return cls(ProfileKey(**data["key"]), data["model_name"], curve, tuple(data["repeats"]),
                   float(data["measured_at"]), float(data["t_measure_s"]))


def curve_of(profile: dict | None) -> CostCurve | None:
    """The cost curve of a profile sent as plain data (``to_dict``), or None without one."""
    return BatchCostProfile.from_dict(profile).curve if profile is not None else None


# ------------------------------------------------------------------------- cache
def profile_dir() -> Path:
    from specdec_studio.engine.paths import cache_root

    return cache_root() / "profiles"


def cached(key: ProfileKey) -> BatchCostProfile | None:
    path = profile_dir() / key.filename()
    try:
        profile = BatchCostProfile.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return profile if profile.key == key else None


def store(profile: BatchCostProfile) -> Path:
    path = profile_dir() / profile.key.filename()
    write_json(path, profile.to_dict(), indent=1)
    return path


# ------------------------------------------------------------------------- measuring
def measure_curve(memory: Memory, batch: Batch, fill_tokens: Sequence[int], *, sizes: Sequence[int] = PROFILE_SIZES,
                  cancel: threading.Event | None = None,
                  progress: Callable[[float], None] | None = None) -> tuple[CostCurve, tuple[int, ...]]:
    """Time one decode of B tokens for every B in ``sizes`` on ``memory``'s context.

    The cache is first filled with ``fill_tokens``; each timed decode appends B tokens after them
    in sequence 0 and is removed again. One warm-up round decodes every shape once (llama.cpp
    builds and allocates a graph per shape), then every size is timed once per round, so a drift of
    the machine's speed during the measurement hits every size alike; each point is the lower
    quartile of its rounds. Sizes off the curve's fitted shape get more rounds. Returns the curve
    and the number of timed rounds per size.
    """
    sizes = [b for b in sizes if b <= batch.capacity]
    fill = len(fill_tokens)
    memory.clear()
    try:  # a Stop can also interrupt a decode (the abort callback): the same cancel
        memory.decode_tokens(batch, list(fill_tokens), 0)
    except DecodeAborted:
        raise ProfileCancelled("the batch-cost profile was stopped before it finished") from None
    filler = np.asarray(fill_tokens, dtype=np.int32)

    def timed(n: int, all_logits: bool) -> float:
        if cancel is not None and cancel.is_set():
            raise ProfileCancelled("the batch-cost profile was stopped before it finished")
        batch.clear()
        for i in range(n):
            batch.add(int(filler[i % fill]), fill + i, (0,), all_logits or i == n - 1)
        memory.prepare_rollback(0, fill, n)
        try:
            dt = memory.decode(batch)
        except DecodeAborted:
            raise ProfileCancelled("the batch-cost profile was stopped before it finished") from None
        memory.seq_rm(0, fill, -1)
        return dt

    rounds = {b: ROUNDS_SMALL if b <= LARGE_BATCH else ROUNDS_LARGE for b in sizes}
    samples: dict[tuple[int, bool], list[float]] = {(b, v): [] for b in sizes for v in (True, False)}
    work = float(sum(b * (r + 1) for b, r in rounds.items()))
    done = 0.0

    def time_size(b: int, keep: bool) -> None:
        nonlocal done
        if b == 1:  # the unit of everything: timed settled (the second logit pattern follows settled decodes)
            for _ in range(PLAIN_SETTLE):
                timed(1, True)
        for all_logits in (True, False):
            # a single-token decode is cheap and the unit of everything: time it more often
            for _ in range(PLAIN_REPEATS if b == 1 else 1):
                dt = timed(b, all_logits)
                if keep:
                    samples[(b, all_logits)].append(dt)
        done += b
        if progress is not None:
            progress(min(1.0, done / work))

    # The lower quartile, not the mean: anything else on the machine only ever adds time to a
    # decode, so the low end of the samples is the decode's own cost.
    def point(b: int, all_logits: bool) -> float:
        return float(np.percentile(samples[(b, all_logits)], LOW_QUANTILE))

    try:
        for r in range(max(rounds.values()) + 1):  # round 0 is the warm-up
            for b in sizes:
                if r <= rounds[b]:
                    time_size(b, keep=r > 0)
        # A size far off the decode's shape (shape_fit) was most likely timed while something
        # else ran: time it again, a few more rounds, before the curve is trusted.
        for _ in range(REMEASURE_PASSES):
            off = set()
            for all_logits in (True, False):
                times = [point(b, all_logits) for b in sizes]
                off.update(sizes[i] for i in off_fit(times, physical_fit(sizes, times), OFF_FIT_TOLERANCE)
                           if sizes[i] <= LARGE_BATCH)
            if not off:
                break
            work += sum(off) * ROUNDS_SMALL
            for _ in range(ROUNDS_SMALL):
                for b in sorted(off):
                    time_size(b, keep=True)
            for b in off:
                rounds[b] += ROUNDS_SMALL
    finally:
        memory.clear()
    t_all = tuple(point(b, True) for b in sizes)
    t_last = tuple(point(b, False) for b in sizes)
    return CostCurve(tuple(sizes), t_all, t_last), tuple(rounds[b] for b in sizes)


def fill_tokens_for(vocab, n: int) -> list[int]:
    """``n`` ordinary tokens to fill the cache with (their values do not change a decode's time)."""

    base = vocab.tokenize(PROBE_TEXT, add_special=True, parse_special=False)
    return (base * (n // len(base) + 1))[:n]


# ------------------------------------------------------------------------- for a session
def profile_key(session, *, draft: bool = False, sizes: Sequence[int] = PROFILE_SIZES) -> ProfileKey:
    """The key of the target's (or the loaded draft's) profile in ``session``'s current setting."""
    model = session.draft_model if draft else session.model
    if model is None:
        raise SpecDecError("no draft model is loaded")
    sizes = tuple(b for b in sizes if b <= session.n_batch)
    fill = min(DEFAULT_KV_FILL, session.n_ctx - max(sizes) - 1)
    return ProfileKey(model_sha256(model.info.path), session.n_ctx, session.n_threads, session.n_batch,
                      build_fingerprint(), fill, sizes, model.n_gpu_layers,
                      session.n_threads_batch if session.n_threads_batch != session.n_threads else None,
                      model.rpc_servers)


def load_or_measure(session, *, draft: bool = False, remeasure: bool = False, sizes: Sequence[int] = PROFILE_SIZES,
                    progress: Callable[[float], None] | None = None) -> BatchCostProfile:
    """The cached profile for ``session``'s target (or draft), measured now if there is none.

    Runs on the session's thread; Stop (``session.cancel()``) ends a measurement with
    :class:`ProfileCancelled` and stores nothing.
    """
    key = profile_key(session, draft=draft, sizes=sizes)
    if not remeasure:
        found = cached(key)
        if found is not None:
            return found
    if key.kv_fill < 1:
        raise ProfileUnavailable(f"a context of {session.n_ctx} tokens is too small to profile batches of "
                                 f"up to {max(key.sizes)} tokens; raise the context size")
    if draft:
        memory, batch, model = session.draft.memory, session.draft.batch, session.draft_model
    else:
        memory, batch, model = session.memory, session.batch, session.model
    cancel = session.cancel_flag  # a Stop set before the measurement starts ends it at once
    t0 = time.perf_counter()
    curve, repeats = measure_curve(memory, batch, fill_tokens_for(session.vocab, key.kv_fill), sizes=key.sizes,
                                   cancel=cancel, progress=progress)
    profile = BatchCostProfile(key, Path(model.info.path).name, curve, repeats, time.time(),
                               time.perf_counter() - t0)
    store(profile)
    return profile

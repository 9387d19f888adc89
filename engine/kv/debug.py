"""Checking the KV mirror against llama.cpp's own dump.

With ``LLAMA_KV_CACHE_DEBUG=3`` in the environment when a context is created, llama.cpp logs,
before each slot search, a header (used cells, head, size, n_swa), one text block with a
character per cell (``.`` empty, the sequence id, ``M`` for several sequences), one block with
each cell's position, and every sequence's min/max position. :class:`KvDumpReader` collects those
from the log callback; :class:`KvVerifier` compares the first dump of each decode (the state
before it) with the mirror.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from specdec_studio.engine import native
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.kv.cells import KvCells, KvMirror

DEBUG_ENV = "LLAMA_KV_CACHE_DEBUG"
DEBUG_LEVEL = "3"

_HEADER = re.compile(
    r"find_slot: stream\[(\d+)\], n = *(\d+), used = *(\d+), head = *(\d+), size = *(\d+), n_swa = *(\d+)"
)
_RANGE = re.compile(r"find_slot: stream\[\d+\] min\[(\d+)\] = *(-?\d+), max\[\d+\] = *(-?\d+)")


class KvMirrorMismatch(SpecDecError):
    """The mirror and llama.cpp's dump disagree (a bug in the mirror, reported with the cell)."""


@dataclass
class KvDump:
    used: int
    head: int
    size: int
    n_swa: int
    cells: str | None = None
    positions: str | None = None
    ranges: dict[int, tuple[int, int]] = field(default_factory=dict)


class KvDumpReader:
    """A log sink that turns llama.cpp's find_slot debug output into :class:`KvDump` records."""

    def __init__(self) -> None:
        self.dumps: list[KvDump] = []

    def __call__(self, level: int, text: str) -> None:
        header = _HEADER.search(text)
        if header:
            _, _, used, head, size, n_swa = (int(g) for g in header.groups())
            self.dumps.append(KvDump(used, head, size, n_swa))
            return
        if not self.dumps:
            return
        dump = self.dumps[-1]
        ranged = _RANGE.search(text)
        if ranged:
            seq, lo, hi = (int(g) for g in ranged.groups())
            dump.ranges[seq] = (lo, hi)
        elif text.startswith("\n") and dump.cells is None:
            dump.cells = text[1:]
        elif text.startswith("\n") and dump.positions is None:
            dump.positions = text[1:]


def _first_difference(cache: KvCells, dump_cells: str) -> str:
    offset = 0
    for i, token in enumerate(cache.cell_tokens()):
        got = dump_cells[offset : offset + len(token)]
        if got != token:
            return f"cell {i}: the mirror has {token!r}, llama.cpp has {got!r}"
        offset += len(token)
        if i % 256 == 255:
            offset += 3  # the " *\n" marker
    return "the cell text differs in layout"


class KvVerifier:
    """Compares the mirror with llama.cpp's dump around each decode; raises on the first mismatch."""

    def __init__(self, mirror: KvMirror) -> None:
        self.mirror = mirror
        self.reader = KvDumpReader()
        self.n_checked = 0

    def __enter__(self) -> KvVerifier:
        native.add_log_sink(self.reader)
        return self

    def __exit__(self, *exc: object) -> None:
        native.remove_log_sink(self.reader)

    def before_decode(self) -> list[tuple[KvCells, str, str, tuple]]:
        self.reader.dumps.clear()
        expected = []
        for cache in self.mirror.caches:
            cells, positions = cache.render_dump()
            expected.append((cache, cells, positions, cache.seq_ranges(), cache.used, cache.head))
        return expected

    def after_decode(self, expected) -> None:
        """Check the first dump of each cache (the state before the decode) against the mirror."""
        for cache, cells, positions, (pos_min, pos_max), used, head in expected:
            dump = next((d for d in self.reader.dumps if (d.n_swa > 0) == (cache.n_swa > 0)), None)
            if dump is None:
                raise KvMirrorMismatch(
                    "llama.cpp printed no KV dump; was the context made with LLAMA_KV_CACHE_DEBUG=3?"
                )
            kind = "SWA cache" if cache.n_swa else "KV cache"
            if dump.cells != cells:
                raise KvMirrorMismatch(
                    f"KV mirror differs from llama.cpp's {kind} at {_first_difference(cache, dump.cells or '')}"
                )
            if dump.positions != positions:
                raise KvMirrorMismatch(f"KV mirror positions differ from llama.cpp's {kind}")
            if (dump.used, dump.head) != (used, head):
                raise KvMirrorMismatch(
                    f"KV mirror has used={used}, head={head}; llama.cpp's {kind} has used={dump.used}, head={dump.head}"
                )
            mirror_ranges = {s: (int(pos_min[s]), int(pos_max[s])) for s in range(len(pos_max)) if pos_min[s] >= 0}
            if dump.ranges != mirror_ranges:
                raise KvMirrorMismatch(f"per-sequence min/max differ: mirror {mirror_ranges}, llama.cpp {dump.ranges}")
        self.n_checked += 1

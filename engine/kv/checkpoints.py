"""Saved recurrent states, for going back where llama.cpp's own rollback cannot.

A recurrent layer's state has seen every token of its sequence and cannot forget the last few.
llama.cpp can keep per-token snapshots of it (``n_rs_seq``), but only for some architectures, only
within the tokens of the last decode, and at most ``n_rs_seq`` of them. Everywhere else a rollback
takes a checkpoint: the sequence's recurrent state copied out before the decodes that may be
undone, and, to undo them, copied back and the tokens that stay decoded again (what llama.cpp's
``speculative-simple`` does with ``common_prompt_checkpoint``). Only the recurrent part is saved
(``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``); a hybrid model's attention cells are cut as usual.
"""

from __future__ import annotations

import ctypes
import time
from dataclasses import dataclass, field

import llama_cpp as llama

PARTIAL_ONLY = 1  # LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY: the recurrent (or SWA) part of a sequence


@dataclass
class Checkpoint:
    """One sequence's recurrent state after its first ``n_past`` tokens, and the tokens decoded
    into the sequence since (position ``n_past + i`` holds ``since[i]``)."""

    n_past: int
    data: ctypes.Array
    size: int
    since: list[int] = field(default_factory=list)


class Checkpoints:
    """The live checkpoint of each sequence of one context, with what saving and restoring cost."""

    def __init__(self, ctx: llama.llama_context_p) -> None:
        self.ctx = ctx
        self.by_seq: dict[int, Checkpoint] = {}
        self._buffers: dict[int, ctypes.Array] = {}  # reused between checkpoints of a sequence
        self.n_saved = 0
        self.n_restored = 0
        self.t_save_s = 0.0
        self.t_restore_s = 0.0  # copying states back; the re-decode is counted as decoding

    def save(self, seq_id: int, n_past: int) -> None:
        t0 = time.perf_counter()
        buf = self._buffers.get(seq_id)
        # A sequence's recurrent state keeps its size, so the buffer of its last checkpoint takes
        # the next one without asking llama.cpp the size first (which writes the state out once
        # more, to count it); only a state that no longer fits is measured, and copied again.
        written = (
            0 if buf is None else llama.llama_state_seq_get_data_ext(self.ctx, buf, len(buf), seq_id, PARTIAL_ONLY)
        )
        if written == 0:
            size = llama.llama_state_seq_get_size_ext(self.ctx, seq_id, PARTIAL_ONLY)
            buf = self._buffers[seq_id] = (ctypes.c_uint8 * size)()
            written = llama.llama_state_seq_get_data_ext(self.ctx, buf, size, seq_id, PARTIAL_ONLY)
        self.by_seq[seq_id] = Checkpoint(n_past, buf, written)
        self.n_saved += 1
        self.t_save_s += time.perf_counter() - t0

    def covering(self, seq_id: int, p0: int) -> Checkpoint | None:
        """The checkpoint of ``seq_id`` from which its first ``p0`` tokens can be rebuilt."""
        ckpt = self.by_seq.get(seq_id)
        if ckpt is None or not ckpt.n_past <= p0 <= ckpt.n_past + len(ckpt.since):
            return None
        return ckpt

    def restore(self, seq_id: int) -> Checkpoint:
        """Copy the state back (the caller then cuts the cells after it and re-decodes)."""
        ckpt = self.by_seq.pop(seq_id)
        t0 = time.perf_counter()
        read = llama.llama_state_seq_set_data_ext(self.ctx, ckpt.data, ckpt.size, seq_id, PARTIAL_ONLY)
        self.t_restore_s += time.perf_counter() - t0
        if read == 0:
            raise RuntimeError(f"llama_state_seq_set_data_ext could not restore sequence {seq_id}'s saved state")
        self.n_restored += 1
        return ckpt

    def drop(self, seq_id: int | None = None) -> None:
        if seq_id is None or seq_id < 0:
            self.by_seq.clear()
        else:
            self.by_seq.pop(seq_id, None)

    def stats(self) -> dict[str, float]:
        return {"saved": self.n_saved, "restored": self.n_restored,
                "t_save_s": self.t_save_s, "t_restore_s": self.t_restore_s}

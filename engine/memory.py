"""The one gateway to ``llama_decode`` and llama.cpp's memory (KV cache) API for a context.

Strategies call this object, never llama.cpp's memory functions, so that anything that must follow
the KV cache (the cell mirror of the KV-map view) sees every change exactly once, in order.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Protocol

import llama_cpp as llama

from specdec_studio.engine.batch import Batch
from specdec_studio.engine.kv.checkpoints import Checkpoints
from specdec_studio.engine.events import RecurrentState
from specdec_studio.engine.native import decode_failure, memory_edit_failure, problem_mark


_NO_ABORT = llama.ggml_abort_callback()  # a NULL callback


class NoKvSlot(Exception):
    """llama_decode found no room in the KV cache for the batch (the context is full)."""


class DecodeAborted(Exception):
    """llama_decode stopped because the abort callback asked it to (the run was cancelled)."""


class MemoryObserver(Protocol):
    """Something that follows the KV cache (the cell mirror); called after llama.cpp succeeded."""

    def on_decode(self, batch: Batch) -> None: ...
    def on_seq_rm(self, seq_id: int, p0: int, p1: int) -> None: ...
    def on_seq_cp(self, src: int, dst: int, p0: int, p1: int) -> None: ...
    def on_seq_keep(self, seq_id: int) -> None: ...
    def on_seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None: ...
    def on_clear(self) -> None: ...


# Batches at least this long get llama.cpp's abort callback, so that Stop interrupts a long prompt
# or lookahead decode. Shorter decodes are not worth it: ggml calls the callback hundreds of times
# per decode from its worker threads, each call taking the GIL, which measurably slowed
# small-batch decoding (prompt lookup, plain); the run's cancel flag is checked between steps.
LONG_DECODE_TOKENS = 32

# A checkpoint's re-decode goes in batches of this many tokens (a verification keeps at most k_max
# + 1 = 17, so one batch).
REDO_BATCH = 32


class Memory:
    """Decode and memory calls on one context, mirrored into ``mirror`` (and checked by
    ``verifier`` against llama.cpp's own dump when the KV debug check is on)."""

    def __init__(self, ctx: llama.llama_context_p, mirror=None, verifier=None, abort_callback=None,
                 model_label: str = "the model", memory_words: str = "", recurrent: bool = False) -> None:
        self.ctx = ctx
        # how a failure names the model and, for a recurrent or hybrid one, its memory (native.decode_failure)
        self.model_label = model_label
        self.memory_words = memory_words
        self.abort_callback = abort_callback
        self.mem = llama.llama_get_memory(ctx)
        self.mirror = mirror
        self.verifier = verifier
        self.observers: list[MemoryObserver] = [mirror] if mirror is not None else []
        self.t_decode_s = 0.0  # time inside llama_decode, summed over the context's life
        # Observers are visual aids: one that fails is switched off with its reason kept here
        # (the session reports it), and decoding goes on.
        self.observer_failures: list[str] = []
        # How a sequence goes back after a verification: a KV cache cuts cells; a recurrent state
        # uses llama.cpp's per-token snapshots where it keeps them, else a checkpoint (engine.kv.checkpoints).
        self.recurrent = recurrent
        self.n_snapshots = llama.llama_n_rs_seq(ctx) if recurrent else 0
        self.checkpoints = Checkpoints(ctx) if recurrent else None
        self._last_decode: dict[int, int] = {}  # tokens of each sequence in the last decode (recurrent only)
        self._redo_batch: Batch | None = None
        # the rollbacks since the KV map last looked: seq -> (how, tokens back, tokens re-decoded)
        self.rollbacks: dict[int, tuple[str, int, int]] = {}

    @property
    def mirror_ok(self) -> bool:
        """False once the cell mirror disagreed with llama.cpp and was switched off."""
        return self.mirror is not None and self.mirror in self.observers

    def _notify(self, method: str, *args) -> None:
        for obs in tuple(self.observers):
            try:
                getattr(obs, method)(*args)
            except Exception as exc:  # noqa: BLE001 - a mirror bug must never end a run
                self.observers.remove(obs)
                self.observer_failures.append(f"{type(obs).__name__}: {exc}")

    def decode(self, batch: Batch) -> float:
        """Decode ``batch``; return the seconds llama.cpp took.

        Raises :class:`NoKvSlot` when the context is full (llama.cpp restored its memory, so the
        cache is as before), :class:`DecodeAborted` on cancel, :class:`DecodeError` otherwise,
        in one sentence with the cause llama.cpp logged.
        """
        mark = problem_mark()
        expected = self.verifier.before_decode() if self.verifier is not None else None
        long_decode = self.abort_callback is not None and batch.n_tokens >= LONG_DECODE_TOKENS
        if long_decode:
            llama.llama_set_abort_callback(self.ctx, self.abort_callback, None)
        t0 = time.perf_counter()
        try:
            rc = llama.llama_decode(self.ctx, batch.raw)
            if rc == 0:
                # A GPU or RPC backend returns before the graph has run (the logits read would wait
                # for it): wait here, so that the decode's time is the decode's, not the host's.
                llama.llama_synchronize(self.ctx)
        finally:
            if long_decode:
                llama.llama_set_abort_callback(self.ctx, _NO_ABORT, None)
        dt = time.perf_counter() - t0
        self.t_decode_s += dt
        if expected is not None and rc == 0:  # a batch llama.cpp refused never reached the cache
            self.verifier.after_decode(expected)
        if rc == 0:
            if self.recurrent:
                self._follow_recurrent(batch)
            if self.observers:
                self._notify("on_decode", batch)
            return dt
        if rc == 1:
            raise NoKvSlot()
        if rc == 2:
            raise DecodeAborted()
        raise decode_failure(rc, batch.n_tokens, self.model_label, mark, self.memory_words)

    def decode_tokens(self, batch: Batch, tokens: Sequence[int], start_pos: int, seq_id: int = 0) -> int:
        """Decode consecutive ``tokens`` of one sequence in batch-sized chunks, logits for the last
        one only; return its row. Every caller that must reproduce another's cache (the target's
        prompt, a draft's, a test's plain schedule) chunks the same way through here."""
        row = 0
        for start in range(0, len(tokens), batch.capacity):
            chunk = tokens[start : start + batch.capacity]
            batch.clear()
            batch.add_run(chunk, start_pos + start, seq_id, logits_last=True)
            self.decode(batch)
            row = len(chunk) - 1
        return row

    # ------------------------------------------------------------------ recurrent-state rollback
    def prepare_rollback(self, seq_id: int, n_past: int, span: int, decodes: int = 1) -> None:
        """Before decodes into ``seq_id`` (which holds ``n_past`` tokens) whose last ``span`` tokens
        a later :meth:`seq_rm` may drop: save a checkpoint where llama.cpp's snapshots will not do
        (they cover the tokens of one decode, at most ``n_snapshots``). Free on a KV cache."""
        if not self.recurrent or span <= 0:
            return
        if decodes == 1 and span <= self.n_snapshots:
            self.checkpoints.drop(seq_id)
            return
        self.checkpoints.save(seq_id, n_past)

    def _follow_recurrent(self, batch: Batch) -> None:
        """Note which sequences the decode reached and extend their checkpoints' token logs."""
        ckpts = self.checkpoints.by_seq
        n = batch.n_tokens
        seq = batch.single_seq
        if seq >= 0:  # the usual step: a run of one sequence
            ckpt = ckpts.get(seq)
            if ckpt is not None:
                first = ckpt.n_past + len(ckpt.since)
                # the strategies write a sequence's rows in position order, and llama.cpp has just
                # accepted the batch (one sequence's positions in it continuous): so its two ends
                # say whether these are the positions after the log
                if batch.pos[0] == first and batch.pos[n - 1] == first + n - 1:
                    ckpt.since.extend(batch.token[:n].tolist())
                else:  # not the next positions: the log no longer says what the sequence holds
                    del ckpts[seq]
            self._last_decode = {seq: n}
            return
        counts: dict[int, int] = {}
        for i in range(n):
            for s in batch.seqs_of(i):
                s = int(s)
                counts[s] = counts.get(s, 0) + 1
                ckpt = ckpts.get(s)
                if ckpt is not None:
                    if int(batch.pos[i]) == ckpt.n_past + len(ckpt.since):
                        ckpt.since.append(int(batch.token[i]))
                    else:  # not the next position: the log no longer says what the sequence holds
                        del ckpts[s]
        self._last_decode = counts

    def _rewind(self, seq_id: int, p0: int, mark: int) -> bool:
        """Drop positions from ``p0`` on of a recurrent sequence: by llama.cpp's snapshots where they
        hold those tokens, else from the sequence's checkpoint (restore, then re-decode what stays)."""
        n_held = self.pos_max(seq_id) + 1
        back = n_held - p0
        if back <= 0:
            return bool(llama.llama_memory_seq_rm(self.mem, seq_id, p0, -1))
        if back <= min(self.n_snapshots, self._last_decode.get(seq_id, 0)):
            if llama.llama_memory_seq_rm(self.mem, seq_id, p0, -1):
                self.checkpoints.drop(seq_id)
                self._last_decode[seq_id] = 0  # one snapshot rollback per decode
                self.rollbacks[seq_id] = ("snapshot", back, 0)
                return True
        ckpt = self.checkpoints.covering(seq_id, p0)
        if ckpt is None:
            return False
        self.checkpoints.restore(seq_id)
        if not llama.llama_memory_seq_rm(self.mem, seq_id, ckpt.n_past, -1):
            raise memory_edit_failure(seq_id, ckpt.n_past, -1, self.model_label, mark, self.memory_words)
        self._notify("on_seq_rm", seq_id, ckpt.n_past, -1)
        redo = ckpt.since[: p0 - ckpt.n_past]
        if redo:
            if self._redo_batch is None:
                self._redo_batch = Batch(REDO_BATCH, 1)
            self.decode_tokens(self._redo_batch, redo, ckpt.n_past, seq_id)
        self._last_decode[seq_id] = 0
        self.rollbacks[seq_id] = ("checkpoint", back, len(redo))
        return True

    def seq_rm(self, seq_id: int, p0: int = -1, p1: int = -1, *, refusal_ok: bool = False) -> bool:
        """Remove positions [p0, p1) of ``seq_id`` (-1: from the start / to the end). A recurrent
        sequence goes back only where llama.cpp's snapshots or a checkpoint (:meth:`prepare_rollback`)
        allow; otherwise that raises DecodeError, naming why, unless the caller can do without
        (``refusal_ok``: then False is returned, the cache unchanged)."""
        mark = problem_mark()
        if self.recurrent and p0 > 0 and p1 < 0 and seq_id >= 0:
            ok = self._rewind(seq_id, p0, mark)
            if ok:
                self._notify("on_seq_rm", seq_id, p0, p1)
        else:
            ok = bool(llama.llama_memory_seq_rm(self.mem, seq_id, p0, p1))
            if ok:
                if self.checkpoints is not None:
                    self.checkpoints.drop(seq_id)
                self._notify("on_seq_rm", seq_id, p0, p1)
        if not ok and not refusal_ok:
            raise memory_edit_failure(seq_id, p0, p1, self.model_label, mark, self.memory_words)
        return ok

    def seq_cp(self, src: int, dst: int, p0: int = -1, p1: int = -1) -> None:
        if self.checkpoints is not None:
            self.checkpoints.drop(dst)
        llama.llama_memory_seq_cp(self.mem, src, dst, p0, p1)
        self._notify("on_seq_cp", src, dst, p0, p1)

    def seq_keep(self, seq_id: int) -> None:
        if self.checkpoints is not None:
            self.checkpoints.by_seq = {s: c for s, c in self.checkpoints.by_seq.items() if s == seq_id}
        llama.llama_memory_seq_keep(self.mem, seq_id)
        self._notify("on_seq_keep", seq_id)

    def seq_add(self, seq_id: int, p0: int, p1: int, delta: int) -> None:
        llama.llama_memory_seq_add(self.mem, seq_id, p0, p1, delta)
        self._notify("on_seq_add", seq_id, p0, p1, delta)

    def clear(self) -> None:
        if self.checkpoints is not None:
            self.checkpoints.drop()
        llama.llama_memory_clear(self.mem, True)
        if self.mirror is not None and self.mirror not in self.observers:
            self.observers.insert(0, self.mirror)  # an empty cache is known exactly: follow again
        self._notify("on_clear")

    def recurrent_states(self, n_seq: int) -> tuple[RecurrentState, ...]:
        """Each sequence's recurrent state now, with the rollbacks since the last call (drained)."""
        if not self.recurrent:
            return ()
        states = []
        for seq in range(n_seq):
            n_tokens = self.pos_max(seq) + 1
            ckpt = self.checkpoints.by_seq.get(seq)
            how, back, redone = self.rollbacks.get(seq, ("", 0, 0))
            states.append(RecurrentState(seq, max(0, n_tokens), min(self.n_snapshots, self._last_decode.get(seq, 0)),
                                         self.n_snapshots, ckpt.n_past if ckpt is not None else -1, how, back, redone))
        self.rollbacks.clear()
        return tuple(states)

    def close(self) -> None:
        if self._redo_batch is not None:
            self._redo_batch.close()
            self._redo_batch = None

    def pos_min(self, seq_id: int) -> int:
        return llama.llama_memory_seq_pos_min(self.mem, seq_id)

    def pos_max(self, seq_id: int) -> int:
        return llama.llama_memory_seq_pos_max(self.mem, seq_id)

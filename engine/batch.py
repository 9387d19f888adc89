"""A llama_batch writer in which one token may belong to many sequences.

llama-cpp-python's ``LlamaBatch.add_sequence`` writes a run of tokens for one sequence; lookahead
and tree verification need a token shared by several sequences at an arbitrary position. The
arrays llama.cpp reads are numpy arrays owned here (the ``llama_batch`` struct points into them),
the sequence ids of every row one table among them, so writing a token is a handful of stores, a
block of rows (a lookahead step's n-grams and window) is a few slice assignments, and the memory
gateway can read back what was written (for the KV mirror).
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence

import numpy as np

import llama_cpp as llama

_SEQ_ROW = ctypes.POINTER(llama.llama_seq_id)


class Batch:
    """Owns one ``llama_batch`` of ``capacity`` tokens, each in up to ``n_seq_max`` sequences.

    ``logits_every_row``: every row asks for logits whatever its caller wants, for a model whose
    llama.cpp graph ignores which rows asked (``ModelInfo.logits_every_row``); its graph computes
    them all anyway, so it costs nothing, and a row's logits are then that row's."""

    def __init__(self, capacity: int, n_seq_max: int, logits_every_row: bool = False) -> None:
        self.capacity = capacity
        self.n_seq_max = n_seq_max
        self.logits_every_row = logits_every_row
        self.token = np.zeros(capacity, dtype=np.int32)
        self.pos = np.zeros(capacity, dtype=np.int32)
        self.n_seq_id = np.zeros(capacity, dtype=np.int32)
        self.logits = np.zeros(capacity, dtype=np.int8)
        self.seq_table = np.zeros((capacity, n_seq_max), dtype=np.int32)  # row i: its sequences, first n_seq_id[i]
        self.seq_id = list(self.seq_table)  # row views
        # llama.cpp reads row i's sequences through a pointer of its own: one per table row
        base, stride = self.seq_table.ctypes.data, self.seq_table.strides[0]
        self._seq_rows = (_SEQ_ROW * (capacity + 1))(
            *(ctypes.cast(base + i * stride, _SEQ_ROW) for i in range(capacity))
        )
        raw = llama.llama_batch()
        raw.n_tokens = 0
        raw.token = self.token.ctypes.data_as(ctypes.POINTER(llama.llama_token))
        raw.embd = None
        raw.pos = self.pos.ctypes.data_as(ctypes.POINTER(llama.llama_pos))
        raw.n_seq_id = self.n_seq_id.ctypes.data_as(ctypes.POINTER(ctypes.c_int32))
        raw.seq_id = ctypes.cast(self._seq_rows, ctypes.POINTER(_SEQ_ROW))
        raw.logits = self.logits.ctypes.data_as(ctypes.POINTER(ctypes.c_int8))
        self.raw: llama.llama_batch | None = raw
        self.n_tokens = 0
        self.n_logits = 0  # rows that ask for logits (what a decode's cost depends on)
        # the one sequence every token so far belongs to alone, or -1: lets the readers of a batch
        # (the KV mirror, the recurrent-state log) skip the per-token walk in the usual step
        self.single_seq = -1

    def clear(self) -> None:
        self.n_tokens = 0
        self.n_logits = 0
        self.raw.n_tokens = 0

    def add(self, token: int, pos: int, seq_ids: Sequence[int], want_logits: bool) -> int:
        """Append one token; return its index in the batch (the logits row when ``want_logits``)."""
        i = self.n_tokens
        if i >= self.capacity:
            raise IndexError(f"batch is full ({self.capacity} tokens)")
        n = len(seq_ids)
        self.token[i] = token
        self.pos[i] = pos
        self.n_seq_id[i] = n
        if n == 1:  # the usual row: a scalar store, not a slice assignment
            self.seq_table[i, 0] = seq_ids[0]
            self._rows_in(i, seq_ids[0])
        else:
            self.seq_id[i][:n] = seq_ids
            self.single_seq = -1
        want = bool(want_logits or self.logits_every_row)
        self.logits[i] = want
        self.n_logits += want
        self.n_tokens = i + 1
        self.raw.n_tokens = i + 1
        return i

    def add_block(self, tokens: np.ndarray, pos: np.ndarray, seqs: np.ndarray, want_logits: bool,
                  n_seqs: np.ndarray | None = None) -> int:
        """Append ``len(tokens)`` rows at once; return the first one's index. ``seqs`` is each row's
        one sequence (1-D), or a table whose row i holds row i's ``n_seqs[i]`` sequences (2-D)."""
        i, n = self.n_tokens, len(tokens)
        if i + n > self.capacity:
            raise IndexError(f"batch is full ({self.capacity} tokens)")
        self.token[i:i + n] = tokens
        self.pos[i:i + n] = pos
        if seqs.ndim == 1:
            self.n_seq_id[i:i + n] = 1
            self.seq_table[i:i + n, 0] = seqs
            firsts = seqs
        else:
            self.n_seq_id[i:i + n] = n_seqs
            self.seq_table[i:i + n, :seqs.shape[1]] = seqs
            firsts = seqs[:, 0] if not (np.asarray(n_seqs) != 1).any() else None
        if n:
            self._rows_in(i, int(firsts[0]) if firsts is not None and bool((firsts == firsts[0]).all()) else -1)
        want = bool(want_logits or self.logits_every_row)
        self.logits[i:i + n] = want
        self.n_logits += n * want
        self.n_tokens = i + n
        self.raw.n_tokens = i + n
        return i

    def add_run(self, tokens: Sequence[int], start_pos: int, seq_id: int, logits_last: bool) -> None:
        """Append consecutive tokens of one sequence (a prompt chunk) in one go."""
        i, n = self.n_tokens, len(tokens)
        if i + n > self.capacity:
            raise IndexError(f"batch is full ({self.capacity} tokens)")
        self.token[i : i + n] = tokens
        self.pos[i : i + n] = np.arange(start_pos, start_pos + n, dtype=self.pos.dtype)
        self.n_seq_id[i : i + n] = 1
        self.seq_table[i : i + n, 0] = seq_id
        if n:
            self._rows_in(i, seq_id)
        self.logits[i : i + n] = self.logits_every_row
        self.n_logits += n if self.logits_every_row else 0
        if logits_last and n and not self.logits_every_row:
            self.logits[i + n - 1] = 1
            self.n_logits += 1
        self.n_tokens = i + n
        self.raw.n_tokens = i + n

    def _rows_in(self, i: int, seq: int) -> None:
        """Rows from ``i`` on were added, all in the one sequence ``seq`` (-1: not so)."""
        self.single_seq = seq if seq >= 0 and (i == 0 or self.single_seq == seq) else -1

    def seqs_of(self, i: int) -> np.ndarray:
        return self.seq_id[i][: self.n_seq_id[i]]

    def close(self) -> None:
        self.raw = None  # the arrays llama.cpp read are this object's own: freed with it

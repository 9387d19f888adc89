"""A llama_batch writer in which one token may belong to many sequences.

llama-cpp-python's ``LlamaBatch.add_sequence`` writes a run of tokens for one sequence; lookahead
and tree verification need a token shared by several sequences at an arbitrary position. The
arrays llama_batch_init allocates are exposed as numpy views, so writing a token is a handful of
stores and the memory gateway can read back what was written (for the KV mirror).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

import llama_cpp as llama


class Batch:
    """Owns one ``llama_batch`` of ``capacity`` tokens, each in up to ``n_seq_max`` sequences.

    ``logits_every_row``: every row asks for logits whatever its caller wants, for a model whose
    llama.cpp graph ignores which rows asked (``ModelInfo.logits_every_row``); its graph computes
    them all anyway, so it costs nothing, and a row's logits are then that row's."""

    def __init__(self, capacity: int, n_seq_max: int, logits_every_row: bool = False) -> None:
        self.capacity = capacity
        self.n_seq_max = n_seq_max
        self.logits_every_row = logits_every_row
        self.raw = llama.llama_batch_init(capacity, 0, n_seq_max)
        self.token = np.ctypeslib.as_array(self.raw.token, shape=(capacity,))
        self.pos = np.ctypeslib.as_array(self.raw.pos, shape=(capacity,))
        self.n_seq_id = np.ctypeslib.as_array(self.raw.n_seq_id, shape=(capacity,))
        self.logits = np.ctypeslib.as_array(self.raw.logits, shape=(capacity,))
        self.seq_id = [np.ctypeslib.as_array(self.raw.seq_id[i], shape=(n_seq_max,)) for i in range(capacity)]
        self.n_tokens = 0
        # the one sequence every token so far belongs to alone, or -1: lets the readers of a batch
        # (the KV mirror, the recurrent-state log) skip the per-token walk in the usual step
        self.single_seq = -1

    def clear(self) -> None:
        self.n_tokens = 0
        self.raw.n_tokens = 0

    def add(self, token: int, pos: int, seq_ids: Sequence[int], want_logits: bool) -> int:
        """Append one token; return its index in the batch (the logits row when ``want_logits``)."""
        i = self.n_tokens
        if i >= self.capacity:
            raise IndexError(f"batch is full ({self.capacity} tokens)")
        n = len(seq_ids)
        if n == 1 and (i == 0 or self.single_seq == seq_ids[0]):
            self.single_seq = seq_ids[0]
        else:
            self.single_seq = -1
        self.token[i] = token
        self.pos[i] = pos
        self.n_seq_id[i] = n
        self.seq_id[i][:n] = seq_ids
        self.logits[i] = want_logits or self.logits_every_row
        self.n_tokens = i + 1
        self.raw.n_tokens = i + 1
        return i

    def add_run(self, tokens: Sequence[int], start_pos: int, seq_id: int, logits_last: bool) -> None:
        """Append consecutive tokens of one sequence (a prompt chunk) in one go."""
        i, n = self.n_tokens, len(tokens)
        if i + n > self.capacity:
            raise IndexError(f"batch is full ({self.capacity} tokens)")
        self.token[i : i + n] = tokens
        self.pos[i : i + n] = np.arange(start_pos, start_pos + n, dtype=self.pos.dtype)
        self.n_seq_id[i : i + n] = 1
        if n:
            self.single_seq = seq_id if i == 0 or self.single_seq == seq_id else -1
        for row in self.seq_id[i : i + n]:
            row[0] = seq_id
        self.logits[i : i + n] = self.logits_every_row
        if logits_last and n:
            self.logits[i + n - 1] = 1
        self.n_tokens = i + n
        self.raw.n_tokens = i + n

    def seqs_of(self, i: int) -> np.ndarray:
        return self.seq_id[i][: self.n_seq_id[i]]

    def close(self) -> None:
        if self.raw is not None:
            llama.llama_batch_free(self.raw)
            self.raw = None

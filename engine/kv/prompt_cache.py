"""Prompts kept in RAM, as llama-server's ``--cache-ram``: before a batch slot's cells are given to
another prompt, the state of its sequence (every cell, as llama.cpp serialises it) is copied out,
and a later prompt that starts the same way has it copied back instead of decoding it again.

A server's clients come back to their conversations in any order and to any slot; a slot keeps
only its last one (engine.parallel), so without this every return to an older conversation decodes
its whole history again. The bytes copied back are those the prompt's own decode wrote, so what
follows is decoded exactly as after that decode.

Only where nothing follows the cells one by one (the KV map's mirror cannot see a copy land), and
only on a model whose memory is attention alone: a recurrent state cannot be cut back to the part
of a saved prompt that a new one shares.
"""

from __future__ import annotations

import ctypes
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp as llama

from specdec_studio.engine.kv.prefix import common_prefix

WHOLE_STATE = 0  # llama_state_seq flags: the sequence's every cell, not a recurrent partial state
MIN_GAIN = 16  # a copy back must save decoding at least this many tokens over the slot's own cells


@dataclass
class SavedPrompt:
    tokens: tuple[int, ...]  # what the cells hold, from position 0
    data: ctypes.Array
    size: int


class PromptCache:
    """Saved sequence states of one context, least recently used first, together at most
    ``limit_bytes``."""

    def __init__(self, ctx: llama.llama_context_p, limit_bytes: int) -> None:
        self.ctx = ctx
        self.limit_bytes = limit_bytes
        self._saved: OrderedDict[tuple[int, ...], SavedPrompt] = OrderedDict()
        self.n_bytes = 0
        self.n_saved = self.n_restored = 0

    def __len__(self) -> int:
        return len(self._saved)

    def save(self, seq: int, tokens: Sequence[int]) -> None:
        """Keep the state of ``seq``, which holds ``tokens`` from position 0; a saved prompt that
        ``tokens`` start with is replaced (it holds nothing more). Too big for the limit: nothing."""
        key = tuple(tokens)
        if not key or key in self._saved:
            if key:
                self._saved.move_to_end(key)
            return
        size = llama.llama_state_seq_get_size_ext(self.ctx, seq, WHOLE_STATE)
        if size == 0 or size > self.limit_bytes:
            return
        data = (ctypes.c_uint8 * size)()
        written = llama.llama_state_seq_get_data_ext(self.ctx, data, size, seq, WHOLE_STATE)
        if written == 0:
            return
        for older in [k for k in self._saved if len(k) < len(key) and key[: len(k)] == k]:
            self._drop(older)
        while self._saved and self.n_bytes + written > self.limit_bytes:
            self._drop(next(iter(self._saved)))
        self._saved[key] = SavedPrompt(key, data, written)
        self.n_bytes += written
        self.n_saved += 1

    def longest(self, prompt: Sequence[int]) -> tuple[SavedPrompt | None, int]:
        """The saved prompt sharing the longest start with ``prompt``, and how long that start is."""
        best, n_best = None, 0
        for saved in self._saved.values():
            n = common_prefix(saved.tokens, prompt)
            if n > n_best:
                best, n_best = saved, n
        return best, n_best

    def restore(self, memory, seq: int, saved: SavedPrompt) -> bool:
        """Replace what ``seq`` holds with ``saved``'s cells; False (``seq`` empty) where llama.cpp
        could not place them."""
        memory.seq_rm(seq, -1, -1)
        read = llama.llama_state_seq_set_data_ext(self.ctx, saved.data, saved.size, seq, WHOLE_STATE)
        if read == 0:
            memory.seq_rm(seq, -1, -1)
            return False
        self._saved.move_to_end(saved.tokens)
        self.n_restored += 1
        return True

    def _drop(self, key: tuple[int, ...]) -> None:
        self.n_bytes -= self._saved.pop(key).size


def reuse_cells(cache: PromptCache | None, memory, seq: int, cached: list[int], prompt: Sequence[int]) -> list[int]:
    """Before batch slot ``seq`` (its cells holding ``cached``) takes ``prompt``: save its cells
    where the prompt would cut them, and copy back the saved prompt that shares a longer start with
    it, if one does by at least MIN_GAIN tokens. Returns what the cells hold now."""
    if cache is None:
        return cached
    n_own = common_prefix(cached, prompt)
    if n_own < len(cached):
        cache.save(seq, cached)
    saved, n_shared = cache.longest(prompt)
    if saved is None or n_shared < n_own + MIN_GAIN:
        return cached
    return list(saved.tokens) if cache.restore(memory, seq, saved) else []

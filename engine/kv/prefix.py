"""Prefix reuse: the cells of a sequence that already hold the start of a new prompt are kept, and
only the rest of the prompt is decoded (a chat's next turn, a request that resends a conversation)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def common_prefix(a: Sequence[int], b: Sequence[int], limit: int | None = None) -> int:
    """How many leading tokens ``a`` and ``b`` share (at most ``limit``)."""
    n = min(len(a), len(b)) if limit is None else max(0, min(len(a), len(b), limit))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def keep_sequence_prefix(memory, seq: int, cached: Sequence[int], tokens: Sequence[int],
                         limit: int | None = None) -> int:
    """Keep the cells of ``seq`` (which hold ``cached`` from position 0) for the longest prefix of
    ``tokens`` they share (at most ``limit``), drop the rest of ``seq``, and return its length; 0
    with ``seq`` emptied where nothing can be kept.

    At least the last token is left out so that decoding it gives the logits a run starts from.
    Nothing is kept from a sequence that does not hold exactly ``cached`` (a sliding-window cache
    that dropped its start, a decode that failed part-way), from a recurrent state that cannot go
    back, or while the KV map is switched off after a disagreement (it follows again only from an
    empty cache)."""
    most = len(tokens) - 1 if limit is None else min(limit, len(tokens) - 1)
    n_keep = common_prefix(cached, tokens, most)
    intact = memory.pos_min(seq) in (0, -1) and memory.pos_max(seq) + 1 == len(cached)
    mirror_lost = memory.mirror is not None and not memory.mirror_ok
    if n_keep == 0 or not intact or mirror_lost or not memory.seq_rm(seq, n_keep, -1, refusal_ok=True):
        memory.seq_rm(seq, -1, -1)
        return 0
    return n_keep

"""The exactness probe: does batching change this model's logits on this llama.cpp build?

Speculative and lookahead decoding verify several positions in one batch; they reproduce plain
decoding bit for bit only if llama.cpp's kernels give the same logits for a token whether it is
decoded alone or inside a batch. The probe decodes one fixed text one token at a time and in
batches of 2 to 128, and reports the largest absolute logit difference per batch size
(0 = invariant). Measured on SmolLM2-135M Q4_1 with flash attention: exact up to 48 tokens a batch,
off by up to ~1.45 from 64 on (llama.cpp switches matrix kernels for large batches), so a strategy
is held to exactness only for the batch sizes it really uses (:func:`deviation_for_batch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from engine.sampling import logits_row
from engine.session import Session

PROBE_TEXT = (
    "The quick brown fox jumps over the lazy dog. In 1905 Albert Einstein published four papers "
    "that changed physics: on the photoelectric effect, Brownian motion, special relativity and "
    "the equivalence of mass and energy. def add(a, b):\n    return a + b\n"
)
BATCH_SIZES = (2, 4, 8, 16, 32, 64, 128)


def _logits_in_chunks(session: Session, tokens: list[int], chunk: int) -> np.ndarray:
    """Logits of every position, decoding ``tokens`` in consecutive chunks of ``chunk`` tokens."""
    memory, batch = session.memory, session.batch
    n_vocab = session.vocab.n_tokens
    memory.clear()
    rows = []
    for start in range(0, len(tokens), chunk):
        part = tokens[start : start + chunk]
        batch.clear()
        for i, t in enumerate(part):
            batch.add(t, start + i, (0,), True)
        memory.decode(batch)
        rows.extend(logits_row(session.ctx, i, n_vocab).copy() for i in range(len(part)))
    return np.stack(rows)


def probe_exactness(model_path: str | Path, *, n_threads: int | None = None, n_tokens: int = 160) -> dict:
    with Session(model_path, n_ctx=n_tokens + 16, n_threads=n_threads) as session:
        tokens = session.vocab.tokenize(PROBE_TEXT, add_special=True, parse_special=False)
        tokens = (tokens * (n_tokens // len(tokens) + 1))[:n_tokens]
        reference = _logits_in_chunks(session, tokens, 1)
        by_batch = {}
        for size in BATCH_SIZES:
            batched = _logits_in_chunks(session, tokens, size)
            by_batch[size] = float(np.max(np.abs(batched - reference)))
        logit_scale = float(np.max(np.abs(reference)))
    worst = max(by_batch.values())
    return {
        "model": str(model_path),
        "n_tokens": n_tokens,
        "max_abs_diff_by_batch": by_batch,
        "max_abs_diff": worst,
        "logit_scale": logit_scale,
        "batch_invariant": worst == 0.0,
    }


def plain_top2_margin(session: Session, prompt: Sequence[int], prefix: Sequence[int]) -> float:
    """Top-2 logit margin of plain decoding after ``prompt + prefix``, on plain's own schedule
    (the prompt in chunks of n_batch, then one token per decode), so the logits are plain's bit
    for bit. Where a strategy's greedy output first differs from plain's, a margin below the
    probe's deviation means batching alone can have flipped the token."""
    memory, batch = session.memory, session.batch
    memory.clear()
    row = memory.decode_tokens(batch, list(prompt), 0)
    for i, token in enumerate(prefix):
        batch.clear()
        row = batch.add(token, len(prompt) + i, (0,), True)
        memory.decode(batch)
    logits = logits_row(session.ctx, row, session.vocab.n_tokens)
    top2 = np.partition(logits, -2)[-2:]
    memory.clear()
    return float(top2[1] - top2[0])


def deviation_for_batch(result: dict, batch_size: int) -> float:
    """The largest deviation a strategy whose batches hold up to ``batch_size`` tokens can meet."""
    by_batch = {int(k): v for k, v in result["max_abs_diff_by_batch"].items()}
    cover = min((s for s in by_batch if s >= batch_size), default=max(by_batch))
    return max(v for s, v in by_batch.items() if s <= cover)

"""The exactness probe: does batching change this model's logits on this llama.cpp build?

Speculative and lookahead decoding verify several positions in one batch; they reproduce plain
decoding bit for bit only if llama.cpp's kernels give the same logits for a token whether it is
decoded alone or inside a batch. The probe decodes one fixed text one token at a time and in
batches of 2 to 128, and reports the largest absolute logit difference per batch size
(0 = invariant). Measured on SmolLM2-135M Q4_1 with flash attention: exact up to 48 tokens a batch,
off by up to ~1.45 from 64 on (llama.cpp switches matrix kernels for large batches), so a strategy
is held to exactness only for the batch sizes it really uses (:func:`deviation_for_batch`).

Long contexts are probed separately: once a single-token decode attends enough cells, llama.cpp's
CPU attention adds the partial sums in another order than a multi-token batch does (its split-KV
path from 512 cells; on SmolLM2 with 2 threads measured from 256), so with more than one thread
even small batches differ there. The long part fills the cache past 512 cells on plain's schedule
and compares the next tokens decoded one at a time with the same tokens in batches, and finds the
shortest context where they start to differ (``deviation_from_cells``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.jsonfile import write_json
from specdec_studio.engine.models.identity import PROBE_TEXT, build_fingerprint, model_sha256
from specdec_studio.engine.sampling import logits_row
from specdec_studio.engine.session import Session

BATCH_SIZES = (2, 4, 8, 16, 32, 64, 128)
# llama.cpp's CPU flash attention takes its split-KV path for one query row from this many cells
SPLIT_KV_CELLS = 512
LONG_CONTEXT_CELLS = 600  # the long probe's prefix
LONG_BATCH_SIZES = (2, 4, 8, 16, 32)
# Where the deviation starts: the next ONSET_TOKENS tokens alone and as one batch, after a prefix
# of every ONSET_STEP cells up to the long probe's. The split-KV path is not the only cause: on
# chat prompts with 2 threads, greedy outputs of batched strategies were seen to leave plain's at
# 257-297 cells, well before SPLIT_KV_CELLS, so the probe measures where it starts.
ONSET_STEP = 16
ONSET_TOKENS = 4


class ProbeStopped(SpecDecError):
    """Stop ended the exactness check before it measured everything (nothing is kept)."""


def _check_stop(session: Session) -> None:
    if session.cancel_flag.is_set():
        raise ProbeStopped("the exactness check was stopped; nothing was kept")


def _logits_in_chunks(session: Session, tokens: list[int], chunk: int) -> np.ndarray:
    """Logits of every position, decoding ``tokens`` in consecutive chunks of ``chunk`` tokens."""
    memory, batch = session.memory, session.batch
    n_vocab = session.vocab.n_tokens
    memory.clear()
    rows = []
    for start in range(0, len(tokens), chunk):
        _check_stop(session)
        part = tokens[start : start + chunk]
        batch.clear()
        for i, t in enumerate(part):
            batch.add(t, start + i, (0,), True)
        memory.decode(batch)
        rows.extend(logits_row(session.ctx, i, n_vocab).copy() for i in range(len(part)))
    return np.stack(rows)


def _logits_after_prefix(session: Session, prefix: list[int], tokens: list[int], chunk: int) -> np.ndarray:
    """Logits of ``tokens`` decoded after ``prefix`` (the prefix on plain's schedule), ``chunk``
    tokens a decode; the prefix's cells are kept between calls."""
    memory, batch = session.memory, session.batch
    memory.seq_rm(0, len(prefix), -1)
    rows = []
    for start in range(0, len(tokens), chunk):
        _check_stop(session)
        part = tokens[start : start + chunk]
        batch.clear()
        for i, t in enumerate(part):
            batch.add(t, len(prefix) + start + i, (0,), True)
        memory.decode(batch)
        rows.extend(logits_row(session.ctx, i, session.vocab.n_tokens).copy() for i in range(len(part)))
    return np.stack(rows)


def probe_exactness(model_path: str | Path, *, n_threads: int | None = None, n_tokens: int = 160,
                    long_context: int = LONG_CONTEXT_CELLS, cancel: threading.Event | None = None) -> dict:
    """``cancel``: Stop's flag; set, it ends the check within one decode (ProbeStopped)."""
    n_long = max(LONG_BATCH_SIZES)
    with Session(model_path, n_ctx=max(n_tokens, long_context + n_long) + 16, n_threads=n_threads,
                 cancel=cancel) as session:
        try:
            return _measure(session, model_path, n_tokens, long_context, n_long)
        except SpecDecError:
            _check_stop(session)  # a decode Stop aborted says so as a stop
            raise


def _measure(session: Session, model_path, n_tokens: int, long_context: int, n_long: int) -> dict:
    base = session.vocab.tokenize(PROBE_TEXT, add_special=True, parse_special=False)
    text = base * ((long_context + n_long) // len(base) + 1)
    tokens = text[:n_tokens]
    reference = _logits_in_chunks(session, tokens, 1)
    by_batch = {}
    for size in BATCH_SIZES:
        batched = _logits_in_chunks(session, tokens, size)
        by_batch[size] = float(np.max(np.abs(batched - reference)))
    logit_scale = float(np.max(np.abs(reference)))
    # past SPLIT_KV_CELLS: the same prefix, then the next tokens alone and in batches
    prefix, after = text[:long_context], text[long_context : long_context + n_long]
    session.memory.clear()
    session.memory.decode_tokens(session.batch, prefix, 0)
    long_reference = _logits_after_prefix(session, prefix, after, 1)
    long_by_batch = {
        size: float(np.max(np.abs(_logits_after_prefix(session, prefix, after, size) - long_reference)))
        for size in LONG_BATCH_SIZES
    }
    onset = _deviation_onset(session, text, long_context)
    session.memory.clear()
    worst = max(by_batch.values())
    long_worst = max(long_by_batch.values())
    return {
        "model": str(model_path),
        "n_threads": session.n_threads,
        "n_tokens": n_tokens,
        "max_abs_diff_by_batch": by_batch,
        "max_abs_diff": worst,
        "logit_scale": logit_scale,
        "long_context": {"n_cells": long_context, "max_abs_diff_by_batch": long_by_batch,
                         "max_abs_diff": long_worst, "deviation_from_cells": onset},
        "batch_invariant": worst == 0.0 and long_worst == 0.0,
    }


def _deviation_onset(session: Session, text: list[int], long_context: int) -> int | None:
    """The shortest prefix (in cells, on a grid of ONSET_STEP) after which the next ONSET_TOKENS
    tokens decoded as one batch differ from the same tokens decoded one at a time; None if none
    does up to ``long_context``. The cache holds ``text[:long_context]`` on plain's schedule: each
    prefix is that cache cut back (longest first), so no prefix is decoded twice."""
    onset = None
    for cells in range(long_context - long_context % ONSET_STEP, 0, -ONSET_STEP):
        prefix, after = text[:cells], text[cells:cells + ONSET_TOKENS]
        alone = _logits_after_prefix(session, prefix, after, 1)
        if np.any(_logits_after_prefix(session, prefix, after, ONSET_TOKENS) != alone):
            onset = cells
    return onset


def plain_logits(session: Session, prompt: Sequence[int], prefix: Sequence[int]) -> np.ndarray:
    """The logits plain decoding has after ``prompt + prefix``, on plain's own schedule (the prompt
    in chunks of n_batch, then one token per decode), so they are plain's bit for bit. Empties the
    target's cache."""
    memory, batch = session.memory, session.batch
    memory.clear()
    row = memory.decode_tokens(batch, list(prompt), 0)
    for i, token in enumerate(prefix):
        batch.clear()
        row = batch.add(token, len(prompt) + i, (0,), True)
        memory.decode(batch)
    logits = logits_row(session.ctx, row, session.vocab.n_tokens).copy()
    memory.clear()
    return logits


def plain_top2_margin(session: Session, prompt: Sequence[int], prefix: Sequence[int]) -> float:
    """Top-2 logit margin of plain decoding after ``prompt + prefix`` (:func:`plain_logits`). Where a
    strategy's greedy output first differs from plain's, a margin below the probe's deviation means
    batching alone can have flipped the token."""
    top2 = np.partition(plain_logits(session, prompt, prefix), -2)[-2:]
    return float(top2[1] - top2[0])


def shared_cache_deviation(session: Session, context: Sequence[int], others: Sequence[Sequence[int]]) -> float:
    """Largest logit difference for ``context``'s last token decoded alone against decoded in
    sequence 1 of a cache whose sequence 0 holds another prompt (each of ``others``).

    Batch decoding of many prompts shares one cache: a prompt's attention then runs over more
    cells (the others' masked out), which sums in another order. On SmolLM2 that moved logits by
    up to ~0.6 here, so a near-tie can flip. Empties the target's cache."""
    session.ensure_sequences(2)
    target = session.target
    n_vocab = session.vocab.n_tokens
    target.forget()
    row = target.memory.decode_tokens(target.batch, list(context), 0, 0)
    alone = logits_row(target.ctx, row, n_vocab).copy()
    worst = 0.0
    for other in others:
        target.forget()
        target.memory.decode_tokens(target.batch, list(other), 0, 0)
        row = target.memory.decode_tokens(target.batch, list(context), 0, 1)
        worst = max(worst, float(np.abs(logits_row(target.ctx, row, n_vocab) - alone).max()))
    target.forget()
    return worst


def deviation_for_batch(result: dict, batch_size: int, n_cells: int = 0) -> float:
    """The largest deviation a strategy whose batches hold up to ``batch_size`` tokens can meet,
    in a context that reaches ``n_cells`` cells (prompt plus generated tokens)."""
    def covering(table: dict) -> float:
        by_batch = {int(k): v for k, v in table.items()}
        cover = min((s for s in by_batch if s >= batch_size), default=max(by_batch))
        return max(v for s, v in by_batch.items() if s <= cover)

    deviation = covering(result["max_abs_diff_by_batch"])
    if n_cells >= (result["long_context"].get("deviation_from_cells") or SPLIT_KV_CELLS):
        deviation = max(deviation, covering(result["long_context"]["max_abs_diff_by_batch"]))
    return deviation


def exactness_note(result: dict) -> str:
    """What a user can expect of this model on this build, in one or two sentences."""
    short = result["max_abs_diff_by_batch"]
    exact_up_to = max((int(b) for b, v in short.items() if v == 0.0 and all(
        w == 0.0 for c, w in short.items() if int(c) <= int(b))), default=1)
    long = result["long_context"]
    if result["batch_invariant"]:
        return ("Exact: batched and single-token decodes give bit-identical logits here, so every strategy "
                "reproduces plain greedy output token for token, and a chat turn that reuses the cached "
                "conversation equals a fresh decode of it.")
    parts = []
    if exact_up_to > 1:
        parts.append(f"batches of up to {exact_up_to} tokens give plain's logits bit for bit in short contexts")
    else:
        parts.append(f"batched logits differ from plain's by up to {result['max_abs_diff']:.2f} even in short contexts")
    if long["max_abs_diff"] > 0:
        onset = long.get("deviation_from_cells")  # measured since issue 79; older results did not
        where = f"from {onset} cells of context" if onset else f"past {SPLIT_KV_CELLS} cells"
        parts.append(f"{where} with {result.get('n_threads', 'several')} threads they differ by up "
                     f"to {long['max_abs_diff']:.3f} (llama.cpp's attention adds in another order), so a near-tie "
                     "can flip; one thread avoids it")
    return ("Lossless up to near-ties: " + "; ".join(parts) + ". Greedy output equals plain's except where "
            "plain's top two tokens are closer than that; likewise a chat turn that reuses the cached "
            "conversation (decoded in other batches) can differ from a fresh decode of it only at such a near-tie.")


def _cache_path(model_path: str | Path, n_threads: int) -> Path:
    from specdec_studio.engine.paths import cache_root

    sha = model_sha256(model_path)
    # v2: with the cells the deviation starts from (deviation_from_cells)
    return cache_root() / "exactness" / f"{sha[:16]}-t{n_threads}-{build_fingerprint()}-v2.json"


def _sizes_as_ints(result: dict) -> dict:
    """A result read back from JSON, with its batch sizes as ints again (JSON keys are strings)."""
    result["max_abs_diff_by_batch"] = {int(k): v for k, v in result["max_abs_diff_by_batch"].items()}
    long = result["long_context"]
    long["max_abs_diff_by_batch"] = {int(k): v for k, v in long["max_abs_diff_by_batch"].items()}
    return result


def cached_probe_for(model_path: str | Path, n_threads: int) -> dict | None:
    """The probe result kept for this model file, thread count and build, if any."""
    try:
        return _sizes_as_ints(json.loads(_cache_path(model_path, n_threads).read_text()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def cached_probe(session: Session) -> dict | None:
    """The probe result kept for this session's model, thread count and build, if any."""
    return cached_probe_for(session.model.info.path, session.n_threads)


def load_or_probe(session: Session) -> dict:
    """The exactness probe for ``session``'s model and thread count: cached, or measured now
    (about 10 s for SmolLM2 on 2 cores; it opens its own context on the same thread, and ends
    within a decode of the session's Stop: ProbeStopped)."""
    found = cached_probe(session)
    if found is not None:
        return found
    result = probe_exactness(session.model.info.path, n_threads=session.n_threads, cancel=session.cancel_flag)
    write_json(_cache_path(session.model.info.path, session.n_threads), result)
    return result

"""A llama.cpp context on a loaded model, with the batch, the KV memory gateway and the cell mirror
that go with it, made within a memory budget and freed together.

The context also remembers which tokens its sequence 0 holds (``cached``): a run that starts with
the same tokens decodes only what follows them (prefix reuse, as llama-server's ``cache_prompt``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp as llama

from specdec_studio.engine import native
from specdec_studio.engine.batch import Batch
from specdec_studio.engine.errors import ContextAllocationError
from specdec_studio.engine.kv.cells import KvMirror
from specdec_studio.engine.kv.debug import DEBUG_ENV, DEBUG_LEVEL, KvVerifier
from specdec_studio.engine.kv.prefix import keep_sequence_prefix
from specdec_studio.engine.kv.prompt_cache import PromptCache
from specdec_studio.engine.memory import Memory
from specdec_studio.engine.models.loading import LoadedModel, ModelInfo, memory_words

LOGIT_BYTES = 4  # llama.cpp's compute buffer holds a ubatch's logits: n_ubatch x n_vocab floats
STREAM_CELLS_STEP = 256  # llama.cpp rounds each stream's cells up to a multiple of this


def may_stream(settings: ContextSettings, info: ModelInfo, n_ctx: int, n_seq: int) -> bool:
    """Whether ``n_seq`` batch slots can each have a KV stream of their own: where nothing follows
    the cells (the KV map's mirror and the KV check assume one unified cache), on a model whose
    memory is attention only, with at least one step of cells per stream."""
    return (n_seq > 1 and not settings.observe and not settings.verify_kv and info.memory_kind == "attention"
            and stream_cells(n_ctx, n_seq) > 0)


def stream_cells(n_ctx: int, n_seq: int) -> int:
    """The cells each of ``n_seq`` KV streams gets within ``n_ctx`` (rounded down to llama.cpp's
    step, so that the streams together never take more than ``n_ctx``); 0 where one step does not fit."""
    return n_ctx // n_seq // STREAM_CELLS_STEP * STREAM_CELLS_STEP


def usable_n_ctx(n_ctx: int, *infos: ModelInfo | None) -> int:
    """The context size the models can take: a model with a learned position table (gpt2,
    starcoder, mpt) cannot encode a position past its rows, and llama.cpp aborts on one, so its
    context (and a draft's, whose positions are the target's) stops there and fills up instead."""
    limits = [info.n_pos_max for info in infos if info is not None and info.n_pos_max > 0]
    return min([n_ctx, *limits])


@dataclass(frozen=True)
class ContextSettings:
    """What every context of a session shares."""

    n_ctx: int
    n_batch: int
    n_threads: int
    verify_kv: bool = False
    n_threads_batch: int | None = None  # threads for batches of more than one token; None: n_threads
    # a window or a trace watches the runs: keep the KV map's cell mirror and describe every step's
    # batch. Off, a headless run pays for neither (about a fifth of a step of a model that decodes
    # in half a millisecond, measured on llama.cpp's tiny qwen35)
    observe: bool = True


def _available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _compute_buffer_sink(into: list[int]):
    """A llama.cpp log sink that collects the compute buffer sizes a new context reports."""
    def sink(_level: int, line: str) -> None:
        if "compute buffer size =" in line:
            try:
                into.append(int(float(line.split("=")[1].split()[0]) * 2**20))
            except (IndexError, ValueError):
                pass

    return sink


class MemoryBudget:
    """Checks that a context fits in free RAM before llama.cpp allocates it.

    Compute buffers are taken from what llama.cpp reported for the same model's last context, else
    estimated from their largest part (a ubatch of logits)."""

    def __init__(self) -> None:
        self._compute_bytes: dict[str, int] = {}  # model path -> compute buffers llama.cpp reported

    def parts(self, n_ctx: int, n_batch: int, info: ModelInfo) -> dict[str, int]:
        compute = self._compute_bytes.get(info.path, n_batch * info.n_vocab * LOGIT_BYTES)
        return {"kv": n_ctx * info.kv_bytes_per_cell(), "compute": compute}

    def check(self, n_ctx: int, n_batch: int, info: ModelInfo) -> None:
        parts = self.parts(n_ctx, n_batch, info)
        need = sum(parts.values())
        avail = _available_memory_bytes()
        if avail is not None and need > avail:
            gib = 2**30
            raise ContextAllocationError(
                f"a context of {n_ctx} tokens needs about {need / gib:.1f} GiB (KV cache {parts['kv'] / gib:.1f} GiB, "
                f"compute buffers {parts['compute'] / gib:.1f} GiB) but only {avail / gib:.1f} GiB of memory is free; "
                "lower the context size (the KV cache) or the batch size (the compute buffers)"
            )

    def remember(self, info: ModelInfo, reported: list[int]) -> None:
        if reported:
            self._compute_bytes[info.path] = sum(reported)


class ModelContext:
    """One llama.cpp context: ``ctx``, its ``batch``, its ``memory`` (with the mirror, and the
    KV-debug verifier when asked) and the tokens its sequence 0 holds. Use :meth:`create`."""

    def __init__(self, ctx: llama.llama_context_p, batch: Batch, memory: Memory, n_seq_max: int,
                 n_vocab: int, stack: contextlib.ExitStack, rs_snapshots_asked: int = 0) -> None:
        self.ctx = ctx
        # the n_rs_seq this context was made with (llama.cpp keeps 0 where the architecture has no
        # such rollback: memory.n_snapshots says what it kept)
        self.rs_snapshots_asked = rs_snapshots_asked
        self.batch = batch
        self.memory = memory
        self.n_seq_max = n_seq_max
        self.n_vocab = n_vocab
        self.n_ctx = llama.llama_n_ctx(ctx)
        # a cache of one KV stream per sequence (batch decoding's slots) holds this many cells per
        # sequence; a unified one (every other run) lets any sequence take all of them
        self.n_ctx_seq = llama.llama_n_ctx_seq(ctx)
        self.streams = self.n_ctx_seq < self.n_ctx
        self.n_batch = batch.capacity
        self.cached: list[int] = []  # the tokens of sequence 0, by position
        self.prompt_cache: PromptCache | None = None  # batch slots' prompts kept in RAM, where the owner asks
        self._stack = stack

    @classmethod
    def create(cls, model: LoadedModel, settings: ContextSettings, n_seq_max: int, budget: MemoryBudget,
               abort_callback=None, rs_snapshots: int = 0, streams: bool = False,
               prompt_cache_bytes: int = 0) -> ModelContext:
        """A context with room for ``n_seq_max`` sequences, keeping ``rs_snapshots`` recurrent-state
        snapshots per sequence on a recurrent or hybrid model (engine.kv.rollback picks how many);
        raises ContextAllocationError (naming what to lower) if it does not fit or llama.cpp
        cannot make it.

        With ``streams`` each sequence gets a KV stream of its own (:func:`stream_cells` cells; the
        caller checks that it is not 0), as llama-server's slots: a sequence's attention then reads
        its own cells only instead of masking every other's, which measured here 37 -> 30 ms for a
        step of 4 slots and a fifth less for their prompts. Sequences can then share no cell, so
        lookahead (coupled sequences) and the KV map's mirror (one cache) need the unified cache.
        With ``prompt_cache_bytes``, batch slots' prompts are kept in RAM (engine.kv.prompt_cache)
        where nothing follows the cells and the memory is attention only."""
        params = llama.llama_context_default_params()
        params.n_ctx = usable_n_ctx(settings.n_ctx, model.info)
        if streams:
            params.n_ctx = stream_cells(params.n_ctx, n_seq_max) * n_seq_max
        params.n_batch = settings.n_batch
        params.n_ubatch = settings.n_batch
        params.n_seq_max = n_seq_max
        params.n_threads = settings.n_threads
        # llama.cpp decodes a one-token batch with n_threads and any larger one with n_threads_batch
        params.n_threads_batch = settings.n_threads_batch or settings.n_threads
        # Flash attention on where the backend has it (llama.cpp's default). Measured here: with it,
        # SmolLM2's CPU logits are bit-identical whether a token is decoded alone or in a batch
        # (up to 48 tokens); without it they differ by up to ~1.3 (`specdec probe-exactness`).
        params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_AUTO
        # Lookahead couples sequences inside one batch; llama.cpp needs a unified cache for that.
        params.kv_unified = not streams
        params.no_perf = True
        params.swa_full = True  # the SWA cache as large as the main one: the mirror assumes it
        # A recurrent state cannot drop its last tokens: llama.cpp can keep a snapshot of each
        # sequence's state after each of its last n_rs_seq tokens (measured on its tiny lfm2, qwen35,
        # nemotron_h: the decode after a rollback equals a fresh one to 1e-7), at a cost to every
        # decode that grows with n_rs_seq; without them a rollback takes a checkpoint
        # (engine.kv.checkpoints). It keeps 0 where the architecture has no such rollback.
        if model.info.memory_kind != "attention":
            params.n_rs_seq = rs_snapshots
        budget.check(settings.n_ctx, settings.n_batch, model.info)
        native.take_recent_problems()
        reported: list[int] = []
        sink = _compute_buffer_sink(reported)
        native.add_log_sink(sink)
        try:
            with _kv_debug_environment(settings.verify_kv):  # llama.cpp reads it when it builds the cache
                ctx = llama.llama_init_from_model(model.ptr, params)
        finally:
            native.remove_log_sink(sink)
            budget.remember(model.info, reported)
        if not ctx:
            why = "; ".join(native.take_recent_problems()[-2:]) or "allocation failed"
            raise ContextAllocationError(
                f"llama.cpp could not create a context of {settings.n_ctx} tokens ({why}); lower the context size"
            )
        stack = contextlib.ExitStack()
        stack.callback(llama.llama_free, ctx)
        try:
            batch = Batch(settings.n_batch, n_seq_max, model.info.logits_every_row)
            stack.callback(batch.close)
            # the KV check compares llama.cpp's dump with the mirror, which follows one unified cache
            observed = (settings.observe or settings.verify_kv) and not streams
            mirror = (
                KvMirror(llama.llama_n_ctx(ctx), n_seq_max, settings.n_batch, model.info.n_swa) if observed else None
            )
            verifier = stack.enter_context(KvVerifier(mirror)) if settings.verify_kv else None
            memory = Memory(ctx, mirror, verifier, abort_callback=abort_callback,
                            model_label=f"{Path(model.info.path).name} ({model.info.arch})",
                            memory_words=memory_words(model.info, llama.llama_n_rs_seq(ctx)),
                            recurrent=model.info.memory_kind != "attention")
            stack.callback(memory.close)
        except BaseException:
            stack.close()
            raise
        made = cls(ctx, batch, memory, n_seq_max, model.info.n_vocab, stack, rs_snapshots)
        if prompt_cache_bytes > 0 and mirror is None and model.info.memory_kind == "attention":
            # the copies grow as conversations come: never past a quarter of the memory free now
            free = _available_memory_bytes()
            limit = prompt_cache_bytes if free is None else min(prompt_cache_bytes, free // 4)
            made.prompt_cache = PromptCache(ctx, limit)
        return made

    # ----------------------------------------------------------------------------- prefix reuse
    def keep_prefix(self, tokens: Sequence[int], limit: int | None = None) -> int:
        """Keep the longest prefix of ``tokens`` (at most ``limit`` tokens) that sequence 0 already
        holds (:func:`engine.kv.prefix.keep_sequence_prefix`), drop everything else (every other
        sequence included), and return its length; a cache that keeps nothing is cleared."""
        for seq in range(1, self.n_seq_max):
            self.memory.seq_rm(seq, -1, -1)
        n_keep = keep_sequence_prefix(self.memory, 0, self.cached, tokens, limit)
        if n_keep == 0:
            self.forget()
        del self.cached[n_keep:]
        return n_keep

    def note_cached(self, tokens: Sequence[int]) -> None:
        """Record what sequence 0 holds after a run: the prefix of ``tokens`` (every token the run
        saw, in order) that fits the cells llama.cpp reports."""
        n = self.memory.pos_max(0) + 1
        self.cached = list(tokens[:n]) if 0 < n <= len(tokens) else []
        if not self.cached:
            self.forget()

    def forget(self) -> None:
        """Empty the cache."""
        self.memory.clear()
        self.cached = []

    def close(self) -> None:
        self._stack.close()  # verifier, batch, then the context: LIFO


@contextlib.contextmanager
def _kv_debug_environment(on: bool):
    if not on:
        yield
        return
    previous = os.environ.get(DEBUG_ENV)
    os.environ[DEBUG_ENV] = DEBUG_LEVEL
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(DEBUG_ENV, None)
        else:
            os.environ[DEBUG_ENV] = previous

"""A Session owns a model, its context and KV memory on one thread, and runs one strategy at a time.

Use a session from the thread that created it (llama.cpp contexts are single-threaded); the only
call that may come from another thread is :meth:`Session.cancel`.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import llama_cpp as llama

from engine import native
from engine.batch import Batch
from engine.chat_template import ChatTemplate, TemplateRefused
from engine.config import DEFAULT_N_BATCH, DEFAULT_N_CTX, RunConfig
from engine.errors import ConfigError, ContextAllocationError, PromptError, SpecDecError
from engine.events import Event, KvSnapshot, RunFinished, RunStarted, RunWarning, StepDone
from engine.kv_cells import KvMirror
from engine.kv_debug import DEBUG_ENV, DEBUG_LEVEL, KvVerifier
from engine.memory import Memory
from engine.models import LoadedModel, ModelInfo, check_draft_vocab
from engine.sampling import Sampler
from engine.stats import RunCounters
from engine.strategies.common import DraftRuntime, Output, Runtime
from engine.tokens import Vocab

SNAPSHOT_INTERVAL_S = 0.05  # KV snapshots at most every 50 ms, and always at the end of a run
LOGIT_BYTES = 4  # llama.cpp's compute buffer holds a ubatch's logits: n_ubatch x n_vocab floats


def default_threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _compute_buffer_sink(into: list[int]):
    """A llama.cpp log sink that collects the compute buffer sizes a new context reports."""
    def sink(_level: int, line: str) -> None:
        if "compute buffer size =" in line:
            try:
                into.append(int(float(line.split("=")[1].split()[0]) * 2**20))
            except (IndexError, ValueError):
                pass

    return sink


def _available_memory_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class ChatMessage:
    role: str
    content: str


class Session:
    """Loads a target model and runs decoding strategies on it.

    Parameters
    ----------
    model_path:
        A GGUF file. Raises :class:`engine.errors.ModelFileError` if it is missing or unloadable.
    n_ctx:
        KV cache size in cells, shared by all sequences of a run.
    n_threads:
        CPU threads for llama.cpp (generation and batches).
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_batch: int = DEFAULT_N_BATCH,
        n_threads: int | None = None,
        n_gpu_layers: int = 0,
        draft_path: str | Path | None = None,
        verify_kv: bool = False,
        cancel: threading.Event | None = None,
    ) -> None:
        if n_ctx < 16:
            raise ContextAllocationError(f"context size must be at least 16 tokens, got {n_ctx}")
        self._stack = contextlib.ExitStack()
        self.model = self._stack.enter_context(LoadedModel(model_path, n_gpu_layers=n_gpu_layers))
        self.vocab = Vocab(self.model.vocab)
        self.n_ctx = n_ctx
        self.n_batch = n_batch
        self.n_threads = n_threads or default_threads()
        self.verify_kv = verify_kv
        # Set by Stop, cleared only when a caller starts a new job (see :meth:`run`): a Stop that
        # comes while a run is being prepared (a context made, a prompt tokenised) is not lost.
        self._cancel = cancel if cancel is not None else threading.Event()
        # Held here so ctypes never collects the callback while llama.cpp may call it.
        self._abort_cb = llama.ggml_abort_callback(lambda _data: self._cancel.is_set())
        self._ctx_stack: contextlib.ExitStack | None = None
        self.ctx: llama.llama_context_p | None = None
        self.memory: Memory | None = None
        self.batch: Batch | None = None
        self.n_seq_max = 0
        self.history: list[ChatMessage] = []
        self.last_prompt_tokens: list[int] = []
        self._compute_bytes: dict[str, int] = {}  # model path -> compute buffers llama.cpp reported
        self.template: ChatTemplate | None = None
        self.template_problem: str | None = None  # why the model's own template was refused
        self._draft_stack: contextlib.ExitStack | None = None
        self.draft_model: LoadedModel | None = None
        self.draft: DraftRuntime | None = None
        try:
            self._load_template()
            self._make_context(1)  # checks the memory budget first
            if draft_path is not None:
                self.load_draft(draft_path)
        except BaseException:
            self.close()  # nobody else holds the model yet: free it (and its GPU layers) now
            raise

    # ----------------------------------------------------------------------------- context
    def context_budget(self, n_ctx: int, info: ModelInfo) -> dict[str, int]:
        """Bytes a context of ``n_ctx`` cells will take: the KV cache (real head sizes, f16) and the
        compute buffers, as llama.cpp reported them for this model's last context, else estimated
        from their largest part (a ubatch of logits)."""
        compute = self._compute_bytes.get(info.path, self.n_batch * info.n_vocab * LOGIT_BYTES)
        return {"kv": n_ctx * info.kv_bytes_per_cell(), "compute": compute}

    def _check_context_fits(self, n_ctx: int, info: ModelInfo) -> None:
        parts = self.context_budget(n_ctx, info)
        need = sum(parts.values())
        avail = _available_memory_bytes()
        if avail is not None and need > avail:
            gib = 2**30
            raise ContextAllocationError(
                f"a context of {n_ctx} tokens needs about {need / gib:.1f} GiB (KV cache {parts['kv'] / gib:.1f} GiB, "
                f"compute buffers {parts['compute'] / gib:.1f} GiB) but only {avail / gib:.1f} GiB of memory is free; "
                "lower the context size (the KV cache) or the batch size (the compute buffers)"
            )

    def _new_context(self, model: LoadedModel, n_seq_max: int) -> tuple[llama.llama_context_p, contextlib.ExitStack]:
        """A context on ``model`` and the stack that frees it."""
        params = llama.llama_context_default_params()
        params.n_ctx = self.n_ctx
        params.n_batch = self.n_batch
        params.n_ubatch = self.n_batch
        params.n_seq_max = n_seq_max
        params.n_threads = self.n_threads
        params.n_threads_batch = self.n_threads
        # Flash attention on where the backend has it (llama.cpp's default). Measured here: with it,
        # SmolLM2's CPU logits are bit-identical whether a token is decoded alone or in a batch
        # (up to 48 tokens); without it they differ by up to ~1.3 (`specdec probe-exactness`).
        params.flash_attn_type = llama.LLAMA_FLASH_ATTN_TYPE_AUTO
        # Lookahead couples sequences inside one batch; llama.cpp needs a unified cache for that.
        params.kv_unified = True
        params.no_perf = True
        params.swa_full = True  # the SWA cache as large as the main one: the mirror assumes it
        self._check_context_fits(self.n_ctx, model.info)
        native.take_recent_problems()
        # llama.cpp reads its KV debug level from the environment when it builds the cache
        previous = os.environ.get(DEBUG_ENV)
        if self.verify_kv:
            os.environ[DEBUG_ENV] = DEBUG_LEVEL
        reported: list[int] = []
        sink = _compute_buffer_sink(reported)
        native.add_log_sink(sink)
        try:
            ctx = llama.llama_init_from_model(model.ptr, params)
        finally:
            native.remove_log_sink(sink)
            if reported:
                self._compute_bytes[model.info.path] = sum(reported)
            if self.verify_kv:
                if previous is None:
                    os.environ.pop(DEBUG_ENV, None)
                else:
                    os.environ[DEBUG_ENV] = previous
        if not ctx:
            why = "; ".join(native.take_recent_problems()[-2:]) or "allocation failed"
            raise ContextAllocationError(
                f"llama.cpp could not create a context of {self.n_ctx} tokens ({why}); lower the context size"
            )
        stack = contextlib.ExitStack()
        stack.callback(llama.llama_free, ctx)
        return ctx, stack

    def _new_memory(self, ctx: llama.llama_context_p, model: LoadedModel, n_seq_max: int,
                    stack: contextlib.ExitStack) -> Memory:
        mirror = KvMirror(llama.llama_n_ctx(ctx), n_seq_max, self.n_batch, model.info.n_swa)
        verifier = None
        if self.verify_kv:
            verifier = stack.enter_context(KvVerifier(mirror))
        return Memory(ctx, mirror, verifier, abort_callback=self._abort_cb)

    def _make_context(self, n_seq_max: int) -> None:
        """(Re)create the target context with room for ``n_seq_max`` sequences.

        The new context is made before the old one is freed: if it cannot be made, the session
        keeps the context it had and stays usable."""
        ctx, stack = self._new_context(self.model, n_seq_max)
        try:
            batch = Batch(self.n_batch, n_seq_max)
            stack.callback(batch.close)
            memory = self._new_memory(ctx, self.model, n_seq_max, stack)
        except BaseException:
            stack.close()
            raise
        self._close_context()
        self._ctx_stack, self.ctx, self.batch, self.memory = stack, ctx, batch, memory
        self.n_seq_max = n_seq_max

    # ----------------------------------------------------------------------------- draft model
    def load_draft(self, path: str | Path) -> ModelInfo:
        """Load a draft model for speculative decoding; raises if its vocabulary does not match."""
        draft = LoadedModel(path)
        try:
            check_draft_vocab(self.model, draft)
            ctx, stack = self._new_context(draft, 1)
        except BaseException:
            draft.close()
            raise
        self.unload_draft()
        batch = Batch(self.n_batch, 1)
        stack.callback(batch.close)
        self._draft_stack = contextlib.ExitStack()
        self._draft_stack.callback(draft.close)
        self._draft_stack.callback(stack.close)
        self.draft_model = draft
        self.draft = DraftRuntime(ctx, self._new_memory(ctx, draft, 1, stack), batch, draft.info.n_vocab, self.n_batch)
        return draft.info

    def unload_draft(self) -> None:
        if self._draft_stack is not None:
            self._draft_stack.close()
        self._draft_stack = None
        self.draft_model = None
        self.draft = None

    def _close_context(self) -> None:
        if self._ctx_stack is not None:
            self._ctx_stack.close()  # batch first, then the context: LIFO
            self._ctx_stack = None
            self.ctx = self.memory = self.batch = None

    def close(self) -> None:
        """Free context, then model. Idempotent."""
        self.unload_draft()
        self._close_context()
        self._stack.close()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------- control
    def cancel(self) -> None:
        """Ask the current run to stop; safe from any thread. It ends within one step."""
        self._cancel.set()

    @property
    def cancel_flag(self) -> threading.Event:
        """The flag :meth:`cancel` sets; long jobs other than runs (profiles, sweeps) watch it."""
        return self._cancel

    @property
    def has_chat_template(self) -> bool:
        """True if the model has a chat template and it passed the sandbox's checks."""
        return self.template is not None

    def _load_template(self) -> None:
        info = self.model.info
        if not info.chat_template:
            return
        try:
            self.template = ChatTemplate(info.chat_template, name=Path(info.path).name,
                                         bos_token=self.model.token_text(info.bos).decode("utf-8", "replace"),
                                         eos_token=self.model.token_text(info.eos).decode("utf-8", "replace"))
        except TemplateRefused as exc:
            self.template_problem = f"{exc}; the model opens in completion mode"

    # ----------------------------------------------------------------------------- prompts
    def tokenize_prompt(self, prompt: str) -> list[int]:
        if not prompt.strip():
            raise PromptError("the prompt is empty; type something for the model to continue")
        return self.vocab.tokenize(prompt, add_special=True, parse_special=True)

    def render_chat(self, messages: Sequence[ChatMessage]) -> str:
        """The model's own chat template applied to ``messages``, ending with the assistant's turn."""
        if self.template is None:
            why = self.template_problem or f"{Path(self.model.info.path).name} has no chat template"
            raise PromptError(f"{why}; use completion mode")
        return self.template.render([(m.role, m.content) for m in messages])

    def chat_tokens(self, messages: Sequence[ChatMessage]) -> list[int]:
        if not messages or not messages[-1].content.strip():
            raise PromptError("the message is empty; type something to send")
        # The template writes BOS itself where the model wants one.
        return self.vocab.tokenize(self.render_chat(messages), add_special=False, parse_special=True)

    # ----------------------------------------------------------------------------- runs
    def run(self, config: RunConfig, prompt_tokens: Sequence[int], *, prompt_text: str = "",
            fresh_cancel: bool = True) -> Iterator[Event]:
        """Validate now, then return the generator of the run's events.

        Bad input raises here (a :class:`engine.errors.SpecDecError`), before any event; the
        generator ends with :class:`engine.events.RunFinished`. With ``fresh_cancel`` an earlier
        Stop is forgotten now; a caller that owns the cancel flag (the app's worker clears it when
        the user asks for the job, a sweep between its runs) passes False so that a Stop pressed
        before the run starts ends it at once.
        """
        if fresh_cancel:
            self._cancel.clear()
        config.validate(self.n_batch)
        if not prompt_tokens:
            raise PromptError("the prompt is empty; type something for the model to continue")
        if len(prompt_tokens) >= self.n_ctx:
            raise PromptError(
                f"the prompt has {len(prompt_tokens)} tokens but the context holds only {self.n_ctx}; "
                "shorten the prompt or raise the context size"
            )
        from engine.strategies import registry

        self.last_prompt_tokens = list(prompt_tokens)
        strategy = registry.get(config.mode)
        if config.mode == "speculative" and self.draft is None:
            raise ConfigError("speculative decoding needs a draft model; choose one from the target's family")
        if config.n_sequences > self.n_seq_max:
            self._make_context(config.n_sequences)
        return self._run(config, list(prompt_tokens), prompt_text, strategy)

    def _run(self, config: RunConfig, prompt: list[int], prompt_text: str, strategy: Callable) -> Iterator[Event]:
        assert self.memory is not None and self.batch is not None
        self.memory.clear()
        output = Output(self.vocab, config.max_tokens)
        rt = Runtime(
            ctx=self.ctx,
            memory=self.memory,
            batch=self.batch,
            vocab=self.vocab,
            n_ctx=self.n_ctx,
            n_batch=self.n_batch,
            config=config,
            sampler=Sampler(config.sampling),
            cancel=self._cancel,
            counters=RunCounters(),
            output=output,
            draft=self.draft if config.mode == "speculative" else None,
        )
        yield RunStarted(config.as_dict(), self.model.info.summary(), len(prompt), prompt_text)
        last_snapshot = 0.0
        step = 0
        failures = self.memory.observer_failures
        n_failures = len(failures)
        for event in strategy(rt, prompt):
            yield event
            if len(failures) > n_failures:
                yield RunWarning(f"the KV map stopped following the cache ({failures[-1]}); "
                                 "decoding goes on unaffected")
                n_failures = len(failures)
            if isinstance(event, StepDone):
                step = event.step
            if isinstance(event, StepDone) and self.memory.mirror_ok:
                now = time.perf_counter()
                if now - last_snapshot >= SNAPSHOT_INTERVAL_S:
                    yield self.kv_snapshot(step, config.n_sequences)
                    last_snapshot = now
        if self.memory.mirror_ok:
            yield self.kv_snapshot(step, config.n_sequences)
        output.finish("length")  # a strategy that returns without a reason ran out of tokens
        yield RunFinished(output.text(), tuple(output.ids), output.finish_reason or "length", rt.counters.as_dict())

    def kv_snapshot(self, step: int, n_seq: int) -> KvSnapshot:
        """The target's KV cells as the latest decode left them (every sequence of the step in
        place), as plain arrays the GUI may keep (they are copies)."""
        mirror = self.memory.mirror
        cache = mirror.after_last_decode or mirror.base
        n_seq = min(n_seq, cache.n_seq)
        holes, largest = cache.fragmentation()
        pos_min, pos_max = cache.seq_ranges()
        return KvSnapshot(
            step=step,
            seq_of_cell=cache.seqs[:, :n_seq].T.copy(),  # a new array even when it is one column
            pos_of_cell=cache.pos.copy(),
            used=cache.used,
            holes=holes,
            largest_free_run=largest,
            seq_pos_min=tuple(int(v) for v in pos_min[:n_seq]),
            seq_pos_max=tuple(int(v) for v in pos_max[:n_seq]),
        )

    def complete(self, config: RunConfig, prompt: str) -> RunFinished:
        """Run to the end on a completion prompt and return the final event."""
        return _last(self.run(config, self.tokenize_prompt(prompt), prompt_text=prompt))

    def chat(self, config: RunConfig, user_text: str, *, fresh_cancel: bool = True) -> Iterator[Event]:
        """One chat turn: the history plus ``user_text``; the answer joins the history when done."""
        messages = [*self.history, ChatMessage("user", user_text)]
        tokens = self.chat_tokens(messages)
        events = self.run(config, tokens, prompt_text=user_text, fresh_cancel=fresh_cancel)

        def turn() -> Iterator[Event]:
            for event in events:
                if isinstance(event, RunFinished):
                    self.history[:] = [*messages, ChatMessage("assistant", event.text)]
                yield event

        return turn()


def _last(events: Iterator[Event]) -> RunFinished:
    final = None
    for event in events:
        final = event
    if not isinstance(final, RunFinished):
        raise SpecDecError("the run ended without a result")
    return final

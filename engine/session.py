"""A Session owns a model, its context and KV memory on one thread, and runs one strategy at a time.

Use a session from the thread that created it (llama.cpp contexts are single-threaded); the only
call that may come from another thread is :meth:`Session.cancel`.
"""

from __future__ import annotations

import contextlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import llama_cpp as llama

from specdec_studio.engine.chat.template import ChatTemplate, model_template
from specdec_studio.engine.config import DEFAULT_N_BATCH, DEFAULT_N_CTX, RunConfig, default_threads
from specdec_studio.engine.drafts import price
from specdec_studio.engine.context import ContextSettings, MemoryBudget, ModelContext, may_stream, usable_n_ctx
from specdec_studio.engine.errors import ConfigError, ContextAllocationError, PromptError, SpecDecError
from specdec_studio.engine.events import Event, KvSnapshot, RunFinished, RunStarted
from specdec_studio.engine.kv.rollback import longest_draft, snapshots_to_keep
from specdec_studio.engine.models.loading import LoadedModel, ModelInfo, check_draft_vocab, mode_refusal
from specdec_studio.engine.runner import kv_snapshot, run_events
from specdec_studio.engine.sampling import Sampler
from specdec_studio.engine.stats import RunCounters
from specdec_studio.engine.strategies import registry
from specdec_studio.engine.strategies.common import Output, Runtime
from specdec_studio.engine.strategies.explain import Explainer, ExplainerThread
from specdec_studio.engine.tokens import Vocab


class Session:
    """Loads a target model (and optionally a draft) and runs decoding strategies on it.

    Parameters
    ----------
    model_path:
        A GGUF file. Raises :class:`engine.errors.ModelFileError` if it is missing or unloadable.
    n_ctx:
        KV cache size in cells, shared by all sequences of a run.
    n_threads:
        CPU threads for llama.cpp (generation and batches).
    n_threads_batch:
        CPU threads for batches of more than one token (verification, prompts), if not ``n_threads``
        (``specdec profile --formats`` measures which pair is fastest).
    rpc_servers:
        ``host:port`` of llama.cpp ``rpc-server`` processes that hold the target's layers
        (:mod:`engine.models.rpc`); the draft model stays on this machine, next to the loop that
        drafts.
    observe:
        A window or a trace watches the runs: keep the KV map's mirror of the cells and send every
        step's batch (:class:`engine.events.StepBatch`). A headless run that nobody watches passes
        False and pays for neither (and batch slots may then each get a KV stream of their own).
    prompt_cache_mib:
        RAM for the prompts batch slots give up (engine.kv.prompt_cache), where nothing is observed.
    """

    def __init__(
        self,
        model_path: str | Path,
        *,
        n_ctx: int = DEFAULT_N_CTX,
        n_batch: int = DEFAULT_N_BATCH,
        n_threads: int | None = None, n_threads_batch: int | None = None,
        n_gpu_layers: int = 0, rpc_servers: tuple[str, ...] = (),
        draft_path: str | Path | None = None, draft_gpu_layers: int = 0,
        verify_kv: bool = False, observe: bool = True,
        cancel: threading.Event | None = None,
        prompt_cache_mib: int = 0,
    ) -> None:
        if n_ctx < 16:
            raise ContextAllocationError(f"context size must be at least 16 tokens, got {n_ctx}")
        self.settings = ContextSettings(n_ctx, n_batch, n_threads or default_threads(), verify_kv, n_threads_batch,
                                        observe)
        self.budget = MemoryBudget()
        self.prompt_cache_mib = prompt_cache_mib  # batch slots' prompts kept in RAM (engine.kv.prompt_cache)
        self._stack = contextlib.ExitStack()
        self._runs: weakref.WeakSet = weakref.WeakSet()  # run generators not yet collected
        self._runtime: Runtime | None = None  # the latest run's, for off_the_clock
        self.model = self._stack.enter_context(LoadedModel(model_path, n_gpu_layers=n_gpu_layers,
                                                                rpc_servers=rpc_servers))
        self.vocab = Vocab(self.model.vocab)
        # Set by Stop, cleared only when a caller starts a new job (see :meth:`run`): a Stop that
        # comes while a run is being prepared (a context made, a prompt tokenised) is not lost.
        self._cancel = cancel if cancel is not None else threading.Event()
        # Held here so ctypes never collects the callback while llama.cpp may call it.
        self._abort_cb = llama.ggml_abort_callback(lambda _data: self._cancel.is_set())
        self.target: ModelContext | None = None
        self.last_prompt_tokens: list[int] = []
        self.template: ChatTemplate | None = None
        self.template_problem: str | None = None  # why the model's own template was refused
        self.draft_model: LoadedModel | None = None
        self.draft: ModelContext | None = None
        self._mtp = None  # the MTP head on the target context (engine.drafts.mtp), made by the first MTP run
        self._ngram_memory = None  # what past runs of this model generated, read by the first run that asks
        # what strategies keep from one run to the next: their indexes of the context (Auto's, prompt
        # lookup's n-gram cache), each brought to the next run's prompt by reading what it adds
        self._kept: dict = {}
        # What a window asks of its runs (a script need not): every step's KV picture among the
        # events (engine.runner), explanations made on a thread of their own while the next step
        # decodes, and whether a run may decode ahead of the step its consumer shows (None: yes)
        self.step_snapshots = False
        self.explain_in_background = False
        self.run_ahead: Callable[[], bool] | None = None
        self._explain_thread: ExplainerThread | None = None
        try:
            self.template, self.template_problem = model_template(self.model)
            self._make_context(1)  # checks the memory budget first
            if draft_path is not None:
                self.load_draft(draft_path, n_gpu_layers=draft_gpu_layers)
        except BaseException:
            self.close()  # nobody else holds the model yet: free it (and its GPU layers) now
            raise

    # ----------------------------------------------------------------------------- settings
    @property
    def n_ctx(self) -> int:
        """The context a run has: the setting, or less where a model's learned positions end."""
        draft = self.draft_model
        return usable_n_ctx(self.settings.n_ctx, self.model.info, draft.info if draft is not None else None)

    n_batch = property(lambda self: self.settings.n_batch)
    n_threads = property(lambda self: self.settings.n_threads)
    n_threads_batch = property(lambda self: self.settings.n_threads_batch or self.settings.n_threads)
    verify_kv = property(lambda self: self.settings.verify_kv)
    observe = property(lambda self: self.settings.observe)
    # the target context's parts, for the tools that decode on it directly (profile, probe)
    ctx = property(lambda self: self.target.ctx if self.target else None)
    memory = property(lambda self: self.target.memory if self.target else None)
    batch = property(lambda self: self.target.batch if self.target else None)
    n_seq_max = property(lambda self: self.target.n_seq_max if self.target else 0)

    def context_budget(self, n_ctx: int, info: ModelInfo) -> dict[str, int]:
        """Bytes a context of ``n_ctx`` cells will take on ``info``'s model, by part."""
        return self.budget.parts(n_ctx, self.n_batch, info)

    def _make_context(self, n_seq_max: int, rs_snapshots: int | None = None, streams: bool = False) -> None:
        """(Re)create the target context with room for ``n_seq_max`` sequences (and, on a recurrent
        or hybrid model, ``rs_snapshots`` state snapshots per sequence; None: as the old one), in
        one KV stream each with ``streams`` (:meth:`ModelContext.create`).

        The new context is made before the old one is freed: if it cannot be made, the session
        keeps the context it had and stays usable."""
        if rs_snapshots is None:
            rs_snapshots = self.target.rs_snapshots_asked if self.target is not None else 0
        target = ModelContext.create(self.model, self.settings, n_seq_max, self.budget, self._abort_cb, rs_snapshots,
                                     streams=streams, prompt_cache_bytes=self.prompt_cache_mib << 20)
        self._close_mtp()  # it reads the old context's hidden rows
        if self.target is not None:
            self.target.close()
        self.target = target

    def ensure_sequences(self, n_seq: int, *, draft: bool = False, streams: bool = False) -> None:
        """Room for ``n_seq`` sequences in the target context (and the draft's, with ``draft``):
        batch decoding gives each prompt its own, in a KV stream each with ``streams`` where
        engine.context.may_stream. A context is made again only when it is too small or of the
        other kind, which empties its cache."""
        streams = streams and may_stream(self.settings, self.model.info, self.n_ctx, n_seq)
        if streams:
            if not self.target.streams or self.n_seq_max != n_seq:
                self._make_context(n_seq, streams=True)
        elif self.target.streams or n_seq > self.n_seq_max:
            self._make_context(max(n_seq, 1))
        if draft and self.draft is not None and n_seq > self.draft.n_seq_max:
            grown = ModelContext.create(self.draft_model, self.settings, n_seq, self.budget, self._abort_cb)
            self.draft.close()
            self.draft = grown

    def slot_cells(self, n_slots: int) -> int:
        """The cells each of ``n_slots`` batch slots may hold: its stream's, or (unified) an equal
        share of the cache."""
        return self.target.n_ctx_seq if self.target.streams else self.n_ctx // n_slots

    # ----------------------------------------------------------------------------- MTP head
    def mtp_head(self):
        """The target's MTP head, made on first use; raises ConfigError (one sentence) where the
        model has none or llama.cpp cannot run it."""
        from specdec_studio.engine.drafts.mtp import MtpHead

        info = self.model.info
        refused = mode_refusal("mtp", info.arch, info.memory_kind, info.diffusion, info.n_mtp_layers)
        if refused:
            raise ConfigError(refused)
        if self._mtp is None:
            self._mtp = MtpHead(self.model.ptr, self.target.ctx, n_ctx=self.target.n_ctx, n_batch=self.n_batch,
                                n_threads=self.n_threads, n_threads_batch=self.n_threads_batch, arch=info.arch)
        return self._mtp

    def _close_mtp(self) -> None:
        if self._mtp is not None:
            self._mtp.close()
            self._mtp = None

    # ----------------------------------------------------------------------------- draft model
    def load_draft(self, path: str | Path, *, n_gpu_layers: int = 0) -> ModelInfo:
        """Load a draft model for speculative decoding, ``n_gpu_layers`` of its layers on the GPU
        (its own setting: a small draft often fits where the target does not); raises if its
        vocabulary does not match. The draft in use stays loaded until the new one is ready."""
        model = LoadedModel(path, n_gpu_layers=n_gpu_layers)
        try:
            check_draft_vocab(self.model, model)
            draft = ModelContext.create(model, self.settings, 1, self.budget, self._abort_cb)
        except BaseException:
            model.close()
            raise
        self.unload_draft()
        self.draft_model, self.draft = model, draft
        return model.info

    def unload_draft(self) -> None:
        if self.draft is not None:
            self.draft.close()
        if self.draft_model is not None:
            self.draft_model.close()
        self.draft_model = self.draft = None

    def close(self) -> None:
        """Close every run still open, then free the draft, the context, then the model. Idempotent.

        A run abandoned by an exception (a closed pipe, Ctrl+C) may still be referenced by the
        traceback; closing it here runs its ``finally`` (which reads the KV cache) while the
        contexts are alive, never later on freed ones."""
        for events in list(self._runs):
            events.close()
        self._runs.clear()
        self._runtime = None
        if self._explain_thread is not None:
            self._explain_thread.close()
            self._explain_thread = None
        self.unload_draft()
        self._close_mtp()
        if self.target is not None:
            self.target.close()
            self.target = None
        self._stack.close()

    def __enter__(self) -> Session:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ----------------------------------------------------------------------------- control
    def cancel(self) -> None:
        """Ask the current run to stop; safe from any thread. It ends within one step."""
        self._cancel.set()

    def use_cancel(self, flag: threading.Event) -> None:
        """Watch ``flag`` from now on (a caller that gives every job its own Stop flag): runs,
        llama.cpp's abort callback and the long jobs all read the session's current flag."""
        self._cancel = flag

    @property
    def cancel_flag(self) -> threading.Event:
        """The flag :meth:`cancel` sets; long jobs other than runs (profiles, sweeps) watch it."""
        return self._cancel

    @property
    def has_chat_template(self) -> bool:
        """True if the model has a chat template and it passed the sandbox's checks."""
        return self.template is not None

    def require_template(self) -> ChatTemplate:
        """The model's chat template, or a PromptError saying why chat is not available."""
        if self.template is None:
            why = self.template_problem or f"{Path(self.model.info.path).name} has no chat template"
            raise PromptError(f"{why}; use completion mode")
        return self.template

    # ----------------------------------------------------------------------------- prompts
    def tokenize_prompt(self, prompt: str) -> list[int]:
        if not prompt.strip():
            raise PromptError("the prompt is empty; type something for the model to continue")
        return self.vocab.tokenize(prompt, add_special=True, parse_special=True)

    def chat_tokens(self, messages: Sequence[tuple[str, str]]) -> list[int]:
        """``messages`` (role, content) in the model's chat template, ending with the assistant's
        turn, as tokens: a one-off prompt (a conversation that lasts is
        :class:`engine.chat.conversation.Conversation`)."""
        if not messages or not messages[-1][1].strip():
            raise PromptError("the message is empty; type something to send")
        # The template writes BOS itself where the model wants one.
        text = self.require_template().render(list(messages))
        return self.vocab.tokenize(text, add_special=False, parse_special=True)

    # ----------------------------------------------------------------------------- runs
    def check_prompt(self, prompt_tokens: Sequence[int]) -> None:
        """Refuse, in one sentence, a prompt that cannot run in this context."""
        if not prompt_tokens:
            raise PromptError("the prompt is empty; type something for the model to continue")
        if len(prompt_tokens) >= self.n_ctx:
            raise PromptError(f"the prompt has {len(prompt_tokens)} tokens but the context holds only "
                              f"{self.n_ctx}; shorten the prompt or raise the context size")

    def run(self, config: RunConfig, prompt_tokens: Sequence[int], *, prompt_text: str = "",
            fresh_cancel: bool = True, reuse_prefix: bool = False) -> Iterator[Event]:
        """Validate now, then return the generator of the run's events.

        Bad input raises here (a :class:`engine.errors.SpecDecError`), before any event; the
        generator ends with :class:`engine.events.RunFinished`. With ``fresh_cancel`` an earlier
        Stop is forgotten now; a caller that owns the cancel flag (the app's worker clears it when
        the user asks for the job, a sweep between its runs) passes False so that a Stop pressed
        before the run starts ends it at once. With ``reuse_prefix`` the cells of the longest
        prefix the cache already holds are kept (of the target, and of the draft model) and only
        the rest of the prompt is decoded; without, the run starts from an empty cache.
        """
        if fresh_cancel:
            self._cancel.clear()
        config.validate(self.n_batch)
        self.check_prompt(prompt_tokens)
        mode = registry.mode(config.mode)
        strategy = mode.run_function()
        info = self.model.info
        # before anything is decoded
        refused = mode_refusal(config.mode, info.arch, info.memory_kind, info.diffusion, info.n_mtp_layers)
        if refused:
            raise ConfigError(refused)
        if mode.needs == "draft" and self.draft is None:
            raise ConfigError(f"{mode.name} decoding needs a draft model; choose one from the target's family")
        # Auto drafts with the model's own MTP head where it has one and no draft model is loaded
        with_mtp = mode.needs == "mtp" or (mode.optional_draft and self.draft is None and info.n_mtp_layers > 0)
        if info.memory_kind != "attention":
            # snapshots or checkpoints for this run's rollbacks (engine.kv.rollback); a context made
            # again for them starts with an empty cache, so a chat that keeps its mode keeps its cells
            sp = config.speculative
            longest = longest_draft(config.mode, sp.k, sp.k_max, sp.adaptive)
            wanted = snapshots_to_keep(sp.rollback, config.mode, longest, with_mtp)
            if wanted != self.target.rs_snapshots_asked:
                self._make_context(self.n_seq_max, wanted)
        mtp = self.mtp_head() if with_mtp else None
        # a recurrent or hybrid model runs Auto on one sequence (no sibling branches): each more
        # would hold a whole recurrent state and its snapshots
        if self.target.streams or (info.memory_kind == "attention" and config.n_sequences > self.n_seq_max):
            self._make_context(max(config.n_sequences, 1))  # a single run's sequences share one cache
        prompt = list(prompt_tokens)
        self.last_prompt_tokens = prompt
        target = self.target
        if reuse_prefix:
            n_reused = target.keep_prefix(prompt)
        else:
            target.forget()
            n_reused = 0
        output = Output(self.vocab, config.max_tokens)
        auto = mode.plans
        curve = self.cost_curve() if auto else None  # read once: Auto prices its steps and its draft with it
        sampler = Sampler(config.sampling)
        rt = Runtime(
            ctx=target.ctx,
            memory=target.memory,
            batch=target.batch,
            vocab=self.vocab,
            n_ctx=self.n_ctx,
            n_batch=self.n_batch,
            config=config,
            sampler=sampler,
            cancel=self._cancel,
            counters=RunCounters(),
            output=output,
            draft=self.draft if mode.needs == "draft" or mode.optional_draft else None,
            mtp=mtp,
            n_reused=n_reused,
            cost_curve=curve,
            draft_token_cost=price.first_source_cost(self, curve, mtp) if auto else 1.0,
            ngram_memory=self.ngram_memory() if auto and config.speculative.ngram_memory else None,
            kept=self._kept,
            # Shared with the explanation thread (where the session has one): vocab.piece (a buffer
            # per thread, its cache a dict each thread only adds whole entries to), the sampler's
            # distribution (reads its frozen params, writes only arrays of its own) and the logit
            # rows, which Explainer.explain copies before the next decode overwrites llama.cpp's.
            # The explainer's scratch buffer and texts are the thread's alone while it runs.
            explainer=Explainer(self.vocab.piece, sampler.greedy, sampler.distribution,
                                self._explainer_thread()) if config.explain else None,
            observed=self.settings.observe,
            step_snapshots=self.step_snapshots,
            run_ahead=self.run_ahead,
        )
        started = RunStarted(config.as_dict(), self.model.info.summary(), len(prompt), prompt_text)
        events = run_events(rt, strategy, prompt, target, started)
        self._runtime = rt
        self._runs.add(events)
        return events

    def _explainer_thread(self) -> ExplainerThread | None:
        """The thread explanations are made on where the session is asked to (one for its life:
        one explanation at a time, in the order asked, the order a run's events need them)."""
        if not self.explain_in_background:
            return None
        if self._explain_thread is None:
            self._explain_thread = ExplainerThread()
        return self._explain_thread

    def ngram_memory(self):
        """The n-gram memory of this model's past runs (engine.strategies.ngram_memory), read from
        the data folder the first time a run asks for it, keyed by the model file's hash."""
        if self._ngram_memory is None:
            from specdec_studio.engine.strategies import ngram_memory

            self._ngram_memory = ngram_memory.for_model(self.model.path)
        return self._ngram_memory

    @contextlib.contextmanager
    def off_the_clock(self):
        """Work the caller does between two events of the current run that is not decoding (a
        chat's periodic save): its time is left out of the run's tokens per second."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            if self._runtime is not None:
                self._runtime.t_off_clock_s += time.perf_counter() - t0

    def cost_curve(self):
        """The batch-cost profile's curve if one was measured for this model and context (Auto
        prices its steps with it; without one it measures its own decodes as it goes)."""
        from specdec_studio.engine.tuning import profile

        known = profile.cached(profile.profile_key(self))
        return known.curve if known is not None else None

    def draft_token_cost(self) -> float:
        """What one decode of the draft model costs in decodes of the target before a run has timed
        any (engine.drafts.price)."""
        if self.draft_model is None:
            raise SpecDecError("no draft model is loaded")
        return price.draft_token_cost(self, self.cost_curve())

    def kv_snapshot(self, step: int, n_seq: int) -> KvSnapshot:
        """The target's KV cells now, as arrays the GUI may keep (a session made with
        ``observe=False`` keeps no picture of them: a RuntimeError)."""
        if self.target.memory.mirror is None:
            raise RuntimeError("this session does not follow the KV cells (it was made with observe=False)")
        return kv_snapshot(self.target, step, n_seq)

    def complete(self, config: RunConfig, prompt: str) -> RunFinished:
        """Run to the end on a completion prompt and return the final event."""
        return last_event(self.run(config, self.tokenize_prompt(prompt), prompt_text=prompt))


def last_event(events: Iterator[Event]) -> RunFinished:
    final = None
    for event in events:
        final = event
    if not isinstance(final, RunFinished):
        raise SpecDecError("the run ended without a result")
    return final

"""What one run is asked to do. Frozen: the app builds a new one for every run."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Literal

from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.kv.rollback import ROLLBACKS, Rollback
from specdec_studio.engine.sampling import SamplingParams
from specdec_studio.engine.strategies import registry


def default_threads() -> int:
    """Threads for llama.cpp when none are asked for: every core, at most 8."""
    return max(1, min(8, os.cpu_count() or 1))


MODES: tuple[str, ...] = registry.NAMES  # every mode's name, in the order the app lists them
# The mode the window (on fresh settings), `specdec run`, `chat`, `batch` and `serve` start in. Auto
# decodes plain wherever nothing pays, so it costs about nothing where it cannot win
# (tests/bench/auto.py, per prompt category), while plain by default showed a newcomer nothing
# accepted. RunConfig's own default stays plain: the baseline every figure is of.
DEFAULT_MODE = "auto"
AUTO_SEQUENCES = (
    5  # Auto's tree: the n-gram cache (its best follower and two alternatives), the suffix match, the draft
)
MAX_SEQUENCES = 256  # llama.cpp's LLAMA_MAX_SEQ

# Every default the CLI, the app's controls and its engine worker share, written once.
DEFAULT_N_CTX = 4096  # KV cells of a context
DEFAULT_N_BATCH = 512  # tokens one llama_decode takes (and one ubatch)
DEFAULT_MAX_TOKENS_CLI = 128  # `specdec run -n`
DEFAULT_MAX_TOKENS_APP = 256  # the app's "max" control: a chat answer is usually longer
DEFAULT_K = 4  # draft tokens per step


@dataclass(frozen=True)
class LookaheadParams:
    W: int = 15  # Jacobi window: lookahead branches
    N: int = 5  # n-gram size
    G: int = 15  # verification n-grams per step (0 = Jacobi only)
    seed_pool_from_prompt: bool = True
    init_window_from_prompt: bool = False
    # Keep KV cells in position order: after a match, drop the n-gram's cells and decode the
    # accepted tokens again at the head of the next batch (at most N - 1 extra tokens a step).
    # llama.cpp's attention sums cells in cell order, so the reference's layout (keep the
    # n-gram's scattered cells, fill holes with later tokens) changes logits in the last bits
    # and can flip near-tied tokens; in order, lookahead reproduces plain decoding exactly on
    # batch-invariant kernels. False gives the reference's layout.
    ordered_kv: bool = True

    @property
    def n_sequences(self) -> int:
        return self.W + self.G + 1

    @property
    def batch_size(self) -> int:
        """Tokens one step decodes at most (the issue's formula, plus re-decoded accepted tokens)."""
        core = 1 + (self.W - 1) + self.W * (self.N - 2) + self.G * (self.N - 1)
        return core + (self.N - 1 if self.ordered_kv and self.G else 0)

    @property
    def logit_rows(self) -> int:
        """Rows of a full step that request logits: the input token, every verification token and
        the window's newest level (with N = 2 that level is the input token and the first level)."""
        return 1 + self.G * (self.N - 1) + (self.W - 1 if self.N == 2 else self.W)

    def validate(self, n_batch: int | None = None) -> None:
        if self.W < 1:
            raise ConfigError(f"lookahead window W must be >= 1, got {self.W}")
        if self.N < 2:
            raise ConfigError(f"n-gram size N must be >= 2, got {self.N}")
        if self.G < 0:
            raise ConfigError(f"verification set G must be >= 0, got {self.G}")
        if self.n_sequences > MAX_SEQUENCES:
            raise ConfigError(f"W + G + 1 = {self.n_sequences} sequences exceeds llama.cpp's limit of {MAX_SEQUENCES}")
        if n_batch is not None and self.batch_size > n_batch:
            raise ConfigError(
                f"W={self.W}, N={self.N}, G={self.G} needs {self.batch_size} tokens a step "
                f"but the batch holds {n_batch}"
            )


# The CLI keeps llama-lookahead's defaults (15, 5, 15) so that its figures compare with llama.cpp's
# example; the app starts from a setting that can win on a CPU (one decode of 121 tokens costs
# ~44 single-token decodes on 2 cores, so 15/5/15 runs at ~0.07x plain there).
LOOKUP_SOURCES: tuple[str, ...] = ("cache", "latest", "simple", "map-k", "map-k4v", "mod")
LOOKAHEAD_CLI_DEFAULTS = (15, 5, 15)  # W, N, G
LOOKAHEAD_APP_DEFAULTS = (4, 3, 4)


@dataclass(frozen=True)
class SpeculativeParams:
    k: int = DEFAULT_K
    adaptive: Literal["off", "tutorial", "heuristic"] = "off"
    k_min: int = 1
    k_max: int = 16
    # Auto's longest step, in proposed tokens; a run prices it lower where the machine's cost curve
    # makes a step that long dearer than MAX_STEP_COST plain steps (engine.strategies.auto.priors):
    # 16 on a 2-core CPU, more where a batch costs little more than a token (a GPU); round a loop
    # the text has repeated, as long as the loop has gone on (engine.strategies.auto.run)
    auto_k_max: int = 64
    p_min: float = 0.0
    ngram_max: int = 3  # prompt lookup: longest n-gram matched
    ngram_min: int = 1
    # prompt lookup's source: "cache" drafts confident continuations from the context's n-gram
    # counts (llama-lookup); "latest" copies what followed the most recent match (transformers);
    # the others are llama.cpp's draftless spec types ngram-simple, -map-k, -map-k4v and -mod
    lookup: Literal["cache", "latest", "simple", "map-k", "map-k4v", "mod"] = "cache"
    # Auto: draft also from what past runs of this model generated (an n-gram memory kept per model
    # in the data folder), and learn this run's output into it
    ngram_memory: bool = False
    # the key n-gram and the longest copy of the simple and map sources (0: llama.cpp's own, 12 and 48)
    lookup_key: int = 0
    lookup_copy: int = 0
    # on a recurrent or hybrid model, how rejected drafts are undone (engine.kv.rollback): "auto"
    # picks by the drafter, "snapshots" (llama.cpp's n_rs_seq) or "checkpoints" (state copies)
    rollback: Rollback = "auto"

    def validate(self) -> None:
        if self.k < 1:
            raise ConfigError(f"draft length k must be >= 1, got {self.k}")
        if self.adaptive not in ("off", "tutorial", "heuristic"):
            raise ConfigError(f"adaptive rule must be off, tutorial or heuristic, got {self.adaptive!r}")
        if not 1 <= self.k_min <= self.k_max:
            raise ConfigError(f"need 1 <= k_min <= k_max, got {self.k_min} and {self.k_max}")
        if self.auto_k_max < 1:
            raise ConfigError(f"Auto's longest step must be >= 1 token, got {self.auto_k_max}")
        if not 0.0 <= self.p_min < 1.0:
            raise ConfigError(f"p_min must be in [0, 1), got {self.p_min}")
        if not 1 <= self.ngram_min <= self.ngram_max:
            raise ConfigError(f"need 1 <= ngram_min <= ngram_max, got {self.ngram_min} and {self.ngram_max}")
        if self.lookup not in LOOKUP_SOURCES:
            raise ConfigError(f"prompt lookup's source must be one of {', '.join(LOOKUP_SOURCES)}, got {self.lookup!r}")
        if self.lookup_key < 0 or self.lookup_copy < 0:
            raise ConfigError(f"prompt lookup's key and copy sizes must be >= 0 (0: llama.cpp's), got "
                              f"{self.lookup_key} and {self.lookup_copy}")
        if self.rollback not in ROLLBACKS:
            raise ConfigError(f"rollback must be one of {', '.join(ROLLBACKS)}, got {self.rollback!r}")


@dataclass(frozen=True)
class RunConfig:
    mode: str = "plain"
    max_tokens: int = 128
    sampling: SamplingParams = field(default_factory=SamplingParams)
    lookahead: LookaheadParams = field(default_factory=LookaheadParams)
    speculative: SpeculativeParams = field(default_factory=SpeculativeParams)
    # give every generated token an Explanation (the target's top tokens, the proposer's, the
    # verdict in numbers): 0.2-0.4 ms a token on a 49k vocabulary, so only where it is shown or
    # recorded (the app, a trace), never in a benchmark
    explain: bool = False

    @property
    def mode_entry(self) -> registry.Mode:
        """What the mode does (engine.strategies.registry); a ConfigError for an unknown name."""
        return registry.mode(self.mode)

    def validate(self, n_batch: int | None = None) -> None:
        mode = self.mode_entry
        if self.max_tokens < 1:
            raise ConfigError(f"max tokens must be >= 1, got {self.max_tokens}")
        self.sampling.validate()
        if mode.settings == "lookahead":
            self.lookahead.validate(n_batch)
        if mode.settings == "speculative":
            self.speculative.validate()

    @property
    def n_sequences(self) -> int:
        mode = self.mode_entry
        if mode.settings == "lookahead":
            return self.lookahead.n_sequences
        return AUTO_SEQUENCES if mode.plans else 1

    def step_shape(self) -> tuple[int, int]:
        """(tokens, logit rows) of the largest target decode one step of this run makes."""
        mode = self.mode_entry
        if mode.settings == "lookahead":
            return self.lookahead.batch_size, self.lookahead.logit_rows
        if mode.draft_then_verify:
            k = self.speculative.k_max if self.speculative.adaptive != "off" else self.speculative.k
            return k + 1, k + 1
        if mode.plans:
            return self.speculative.auto_k_max + 1, self.speculative.auto_k_max + 1
        return 1, 1

    def as_dict(self) -> dict:
        """Every parameter that matters for this mode, as plain data (for JSON and the app)."""
        out: dict = {"mode": self.mode, "max_tokens": self.max_tokens, **dataclasses.asdict(self.sampling)}
        mode = self.mode_entry
        if mode.settings == "lookahead":
            out.update(dataclasses.asdict(self.lookahead))
        elif mode.settings == "speculative":
            out.update(dataclasses.asdict(self.speculative))
        if self.explain:  # absent when off, as in every config written before it existed
            out["explain"] = True
        return out

    @classmethod
    def from_dict(cls, data: object) -> RunConfig:
        """The config :meth:`as_dict` wrote (a trace's, a saved setting's); unknown keys are
        ignored. Raises :class:`ConfigError` in one sentence if a known key has a value of the
        wrong type or the settings are invalid: the data may come from a damaged or crafted file."""
        if not isinstance(data, dict):
            raise ConfigError(f"a run's settings must be an object, got {type(data).__name__}")

        def pick(kind):
            values = {}
            for f in dataclasses.fields(kind):
                if f.name in data:
                    values[f.name] = _checked_value(f.name, data[f.name], f.default)
            return kind(**values)

        mode = data.get("mode", "plain")
        registry.mode(mode)  # one sentence for a name no mode has
        config = cls(mode=mode, max_tokens=_checked_value("max_tokens", data.get("max_tokens", 128), 128),
                     sampling=pick(SamplingParams), lookahead=pick(LookaheadParams),
                     speculative=pick(SpeculativeParams),
                     explain=_checked_value("explain", data.get("explain", False), False))
        config.validate()
        return config


def _checked_value(name: str, value: object, default: object) -> object:
    """``value`` if it has the type of the field's ``default`` (an int where a float is wanted is
    fine; a bool is not a number here); else a ConfigError naming the field."""
    if isinstance(default, bool):
        ok = isinstance(value, bool)
    elif isinstance(default, int) or default is None:  # seed: an int or None
        ok = (isinstance(value, int) and not isinstance(value, bool)) or (default is None and value is None)
    elif isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool) and value == value  # no NaN
    else:
        ok = isinstance(value, str)
    if not ok:
        raise ConfigError(f"setting {name!r} has the wrong type ({type(value).__name__}: {str(value)[:40]!r})")
    return float(value) if isinstance(default, float) else value

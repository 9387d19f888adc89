"""The events a run yields. Frozen, plain data: they cross from the engine thread to the GUI.

A numpy array inside an event is never written again after the event is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np

from specdec_studio.engine.kv.cells import longest_run, seq_ranges

TokenSource = Literal["prompt", "sampled", "accepted_ngram", "accepted_draft"]


# A token as an explanation lists it: id, text, probability (rounded to 4 significant digits)
Ranked = tuple[int, str, float]


@dataclass(frozen=True)
class Explanation:
    """Why a generated token is the one it is, in numbers (made only when a run asks for them:
    ``RunConfig.explain``).

    ``top`` is the target's top tokens at the token's position under the distribution verification
    read: at temperature 0 the model's own softmax, otherwise the sampler's filtered, tempered one.
    Where something was proposed at this position, ``proposed`` is it and ``proposer`` names who
    proposed it; a rejected proposal's explanation is that of the token that replaced it. Greedy
    verification accepts a proposal that equals the target's argmax; sampled verification draws
    ``draw`` uniform in [0, 1) and accepts where ``draw * q < p`` (q = 1 for a proposal without a
    distribution), so ``min(1, p / q)`` is the chance it had.
    """

    top: tuple[Ranked, ...]
    p_chosen: float  # the target's probability of the emitted token (a sampled token may be outside top)
    chosen_text: str  # the emitted token's text: what replaced a rejected proposal
    proposed: int = -1  # -1: nothing was proposed here (a plain step, or past the last proposal)
    proposed_text: str = ""
    proposer: str = ""  # "draft", "mtp", "lookup:cache", "lookahead", Auto's "ngram", "suffix", …
    accepted: bool = False
    proposer_top: tuple[Ranked, ...] = ()  # a draft model's (or MTP head's) top tokens, q
    matched: str = ""  # the context text an n-gram proposal continued (where the proposer matched)
    sampled: bool = False  # verification drew (temperature > 0) rather than compared with the argmax
    p: float | None = None  # sampled: the target's probability of the proposal
    q: float | None = None  # sampled: the proposer's probability of it (1 for a point mass)
    draw: float | None = None  # sampled: the uniform draw the rule compared (None: q was 0, no draw)


@dataclass(frozen=True)
class TokenInfo:
    id: int
    text: str
    source: TokenSource
    why: Explanation | None = None  # only in runs that explain their tokens


@dataclass(frozen=True)
class RunStarted:
    config: dict
    model: dict
    n_prompt: int
    prompt_text: str


@dataclass(frozen=True)
class AutoStep:
    """What Auto decided at one step (``StepDone.auto``)."""

    decision: str  # "plain", or the tree's kind as the run's report names it (auto.report)
    k: int = 0  # the tree's tokens
    branches: int = 0  # its sequences
    depth: int = 0  # its deepest token's distance from the input token
    predicted_gain: float = 1.0  # tokens a step it was expected to emit per plain step's time
    proposers: tuple[str, ...] = ()  # per emitted token: "target", or the source its token came from


@dataclass(frozen=True)
class StepDone:
    """One target decode and what verification made of it."""

    step: int
    tokens: tuple[TokenInfo, ...]
    n_drafted: int
    n_accepted: int
    t_decode_s: float
    t_step_s: float
    extra: dict = field(default_factory=dict)  # a strategy's figures of the step (draft-then-verify: k)
    auto: AutoStep | None = None  # Auto's decision, on an Auto step


@dataclass(frozen=True)
class RejectedDraft:
    step: int
    ids: tuple[int, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class RecurrentState:
    """A sequence's recurrent state on a hybrid or recurrent model, as the KV map draws it beside
    the cells: the state itself, llama.cpp's snapshots of it, the saved checkpoint, and how the
    step's rollback (if any) went back."""

    seq: int
    n_tokens: int  # tokens the state has seen
    snapshots: int  # per-token snapshots llama.cpp holds now (of the last decode)
    snapshots_max: int  # n_rs_seq: 0 where the architecture has none
    checkpoint_at: int  # tokens the saved checkpoint had seen; -1: none saved
    rollback: str = ""  # this step: "" none, "snapshot", "checkpoint" (restored and re-decoded)
    rolled_back: int = 0  # tokens taken back this step
    redecoded: int = 0  # tokens decoded again after a checkpoint's restore


@dataclass(frozen=True)
class KvSnapshot:
    """The KV cells after a step's decode (``seq_of_cell``: every branch and n-gram of the step in
    place) and after the strategy kept what verification accepted (``kept_seq_of_cell``); a cell
    used in the first and free in the second held a token verified and removed this step.

    The arrays cover the cache's first ``width`` cells, up to the last one in use in either picture
    (``n_cells`` in all); every cell past them is free. A chat in a 4,096-cell cache uses a few
    hundred, and the window keeps a snapshot of every step of a run."""

    step: int
    seq_of_cell: np.ndarray  # (n_seq, width) bool
    pos_of_cell: np.ndarray  # (width,) int32, -1 free
    used: int
    holes: int
    largest_free_run: int = 0
    seq_pos_min: tuple[int, ...] = ()
    seq_pos_max: tuple[int, ...] = ()
    kept_seq_of_cell: np.ndarray | None = None  # (n_seq, width) bool; None: same as seq_of_cell
    written_step: np.ndarray | None = None  # (width,) int32: the run's step that wrote the cell, -1 before it
    # the recurrent state of each sequence (hybrid and recurrent models; empty for a KV cache)
    states: tuple[RecurrentState, ...] = ()
    n_cells: int = 0  # the cache's cells; 0: the arrays cover all of them

    @property
    def width(self) -> int:
        """The cells the arrays cover."""
        return self.pos_of_cell.shape[0]

    @property
    def cache_cells(self) -> int:
        return max(self.n_cells, self.width)

    def padded(self) -> KvSnapshot:
        """The same snapshot with arrays over every cell of the cache (the free ones past ``width``)."""
        extra = self.cache_cells - self.width
        if extra == 0:
            return self

        def wider(a: np.ndarray | None, fill) -> np.ndarray | None:
            if a is None:
                return None
            pad = [(0, 0)] * (a.ndim - 1) + [(0, extra)]
            return np.pad(a, pad, constant_values=fill)

        return replace(self, seq_of_cell=wider(self.seq_of_cell, False), pos_of_cell=wider(self.pos_of_cell, -1),
                       kept_seq_of_cell=wider(self.kept_seq_of_cell, False),
                       written_step=wider(self.written_step, -1))

    def after_verification(self) -> KvSnapshot:
        """The cells as verification left them: its kept sequences, the cells none of them holds
        freed, and the figures (used, holes, largest free run, ranges) counted on those."""
        if self.kept_seq_of_cell is None:
            return self
        kept = self.kept_seq_of_cell
        in_use = kept.any(axis=0)
        used_cells = np.flatnonzero(in_use)
        top = int(used_cells[-1]) + 1 if used_cells.size else 0
        pos = np.where(in_use[:top], self.pos_of_cell[:top], -1).astype(np.int32)
        held = kept[:, :top].copy()
        pos_min, pos_max = seq_ranges(held, pos)
        # free runs below the last used cell, and the free tail past it
        largest = max(longest_run(~in_use[:top]), self.cache_cells - top)
        return replace(self, seq_of_cell=held, pos_of_cell=pos, used=int(used_cells.size),
                       holes=top - int(used_cells.size), largest_free_run=largest,
                       seq_pos_min=tuple(pos_min.tolist()), seq_pos_max=tuple(pos_max.tolist()), kept_seq_of_cell=None,
                       written_step=None if self.written_step is None else self.written_step[:top].copy(),
                       n_cells=self.cache_cells)

    @property
    def kept(self) -> np.ndarray:
        return self.seq_of_cell if self.kept_seq_of_cell is None else self.kept_seq_of_cell

    @property
    def removed(self) -> np.ndarray:
        """Cells that the step's decode wrote and verification then removed."""
        return self.seq_of_cell.any(axis=0) & ~self.kept.any(axis=0)


@dataclass(frozen=True)
class BatchRow:
    """One token of the batch a step sent to the target: what the step inspector draws."""

    token: int
    text: str
    pos: int
    seqs: tuple[int, ...]
    logits: bool
    role: str  # input | redecode | window | ngram | draft | suffix
    verdict: str = ""  # accepted | rejected (the first mismatch of its candidate) | "" (not verified)


@dataclass(frozen=True)
class StepBatch:
    """The batch of a step's target decode, sent just before its StepDone."""

    step: int
    rows: tuple[BatchRow, ...]


@dataclass(frozen=True)
class RunFinished:
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    stats: dict
    end_token: int | None = None  # the end-of-generation token that ended the run (not in token_ids)


@dataclass(frozen=True)
class RunFailed:
    message: str


@dataclass(frozen=True)
class RunWarning:
    """Something went wrong beside the decoding (the KV map's mirror was switched off); the run
    goes on and its output is unaffected."""

    message: str


Event = RunStarted | StepDone | StepBatch | RejectedDraft | KvSnapshot | RunFinished | RunFailed | RunWarning

"""The events a run yields. Frozen, plain data: they cross from the engine thread to the GUI.

A numpy array inside an event is never written again after the event is made.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal, Union

import numpy as np

TokenSource = Literal["prompt", "sampled", "accepted_ngram", "accepted_draft"]


@dataclass(frozen=True)
class TokenInfo:
    id: int
    text: str
    source: TokenSource


@dataclass(frozen=True)
class RunStarted:
    config: dict
    model: dict
    n_prompt: int
    prompt_text: str


@dataclass(frozen=True)
class StepDone:
    """One target decode and what verification made of it."""

    step: int
    tokens: tuple[TokenInfo, ...]
    n_drafted: int
    n_accepted: int
    t_decode_s: float
    t_step_s: float
    extra: dict = field(default_factory=dict)


@dataclass(frozen=True)
class RejectedDraft:
    step: int
    ids: tuple[int, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True)
class KvSnapshot:
    step: int
    seq_of_cell: np.ndarray
    pos_of_cell: np.ndarray
    used: int
    holes: int
    largest_free_run: int = 0
    seq_pos_min: tuple[int, ...] = ()
    seq_pos_max: tuple[int, ...] = ()


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


Event = Union[RunStarted, StepDone, RejectedDraft, KvSnapshot, RunFinished, RunFailed, RunWarning]

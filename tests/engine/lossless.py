"""The losslessness contract, shared by the lookahead and speculative tests.

Greedy output of a strategy must equal plain greedy output. Only on a model whose llama.cpp
kernels are not batch-invariant (the exactness probe measured a deviation > 0) may the outputs
part, and only at the first differing position, where plain's logits for the two tokens chosen
there are closer than the measured deviation: there a batched logit can legitimately pick the
other token. Where one output is the other's start, the shorter one chose an end of generation
there (a run never drops a token): that end token and the longer one's token must be that close.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning.probe import plain_logits, plain_top2_margin

_EOG: dict[int, np.ndarray] = {}  # id(vocab) -> its end-of-generation token ids


def assert_lossless(
    session: Session, prompt: Sequence[int], plain: Sequence[int], other: Sequence[int], deviation: float, label: str
) -> None:
    plain, other = list(plain), list(other)
    if plain == other:
        return
    common = min(len(plain), len(other))
    first = next((i for i, (a, b) in enumerate(zip(plain, other)) if a != b), common)
    assert deviation > 0, f"{label}: batch-invariant model, yet output differs from plain at token {first}"
    if first < common:
        margin = plain_top2_margin(session, prompt, plain[:first])
        what = "plain's top-2 margin"
    else:
        logits = plain_logits(session, prompt, plain[:first])
        end = float(logits[end_tokens(session)].max())
        went_on = plain[first] if len(plain) > first else other[first]
        margin = abs(float(logits[went_on]) - end)
        what = f"{'it' if len(other) < len(plain) else 'plain'} ended there: the margin to its end token"
    assert margin < deviation, (
        f"{label}: differs from plain at token {first} where {what} {margin:.4f} "
        f">= measured batch deviation {deviation:.4f}"
    )


def end_tokens(session: Session) -> np.ndarray:
    """Every token id of the session's vocabulary that ends generation."""
    vocab = session.vocab
    found = _EOG.get(id(vocab))
    if found is None:
        found = _EOG[id(vocab)] = np.array([t for t in range(vocab.n_tokens) if vocab.is_eog(t)])
    return found

"""The losslessness contract, shared by the lookahead and speculative tests.

Greedy output of a strategy must equal plain greedy output. Only on a model whose llama.cpp
kernels are not batch-invariant (the exactness probe measured a deviation > 0) may the outputs
part, and only at the first differing position, where plain's top-2 logit margin is below the
measured deviation: there a batched logit can legitimately pick the other token.
"""

from __future__ import annotations

from collections.abc import Sequence

from specdec_studio.engine.tuning.probe import plain_top2_margin
from specdec_studio.engine.session import Session


def assert_lossless(
    session: Session, prompt: Sequence[int], plain: Sequence[int], other: Sequence[int], deviation: float, label: str
) -> None:
    plain, other = list(plain), list(other)
    if plain == other:
        return
    first = next((i for i, (a, b) in enumerate(zip(plain, other)) if a != b), min(len(plain), len(other)))
    assert deviation > 0, f"{label}: batch-invariant model, yet output differs from plain at token {first}"
    margin = plain_top2_margin(session, prompt, plain[:first])
    assert margin < deviation, (
        f"{label}: differs from plain at token {first} where plain's top-2 margin {margin:.4f} "
        f">= measured batch deviation {deviation:.4f}"
    )

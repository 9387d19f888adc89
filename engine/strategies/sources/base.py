"""What every draft source of Auto answers to (llama.cpp's ``common_speculative`` in miniature):
a proposal for the text so far, and a cheap test of whether it would propose anything at all."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass
class Proposal:
    """A source's continuation of the context: its tokens and, per token, the signal the
    calibration bins it by (a source's own evidence: an n-gram's counts, a match's length, a
    draft's probability)."""

    source: str
    tokens: list[int]
    signals: list[tuple]


class Source(Protocol):
    """One source of proposals. ``decodes``: it runs a model for each token it proposes (a draft
    model, an MTP head), so the planner asks it only for as many tokens as can pay at its price,
    and its :meth:`may_propose` is never asked."""

    name: str
    decodes: bool

    def propose(self, context: Sequence[int], k: int, stop=None) -> Proposal:
        """Up to ``k`` tokens to follow ``context`` (``stop(depth, reach)``: a decoding source
        stops drafting where it says so). The context's index is up to date when asked."""

    def may_propose(self, context: Sequence[int]) -> bool:
        """Whether :meth:`propose` would propose at least one token, settled by a lookup or two;
        the context's n-gram cache has counted the context when asked."""

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        """Other branches of its own proposal, once the chains could pay for a tree."""

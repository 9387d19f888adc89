"""What every draft source of Auto answers to (llama.cpp's ``common_speculative`` in miniature):
a proposal for the text so far, and a cheap test of whether it would propose anything at all."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol


@dataclass(frozen=True)
class Kind:
    """What Auto knows of a kind of proposal before a run has verified any: its name (the
    ``Proposal.source`` it is made under), its family, what the report calls it, and the chance
    its first token is right by its signal. A source declares the kinds it proposes."""

    name: str
    family: str
    label: str
    prior: Callable[[tuple], float]


# Filled as each source module declares its kinds. Sources of different families that propose the
# same token after the same path read the context in different ways; one family's second proposal
# (a sibling branch is the n-gram cache again) is not a second opinion (priors.py says what that
# was worth).
FAMILY: dict[str, str] = {}
LABEL: dict[str, str] = {}
_PRIOR: dict[str, Callable[[tuple], float]] = {}


def declare(name: str, family: str, label: str, prior: Callable[[tuple], float]) -> Kind:
    """A kind of proposal, known from now on to the calibration, the tree and the report."""
    FAMILY[name], LABEL[name], _PRIOR[name] = family, label, prior
    return Kind(name, family, label, prior)


def signal_prior(source: str, signal: tuple) -> float:
    """The chance a first token of kind ``source`` with ``signal`` is right, before any outcome."""
    return _PRIOR[source](signal)


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
    kinds: ClassVar[tuple[Kind, ...]]  # the kinds of proposal it makes (its own name's first)

    @classmethod
    def for_run(cls, index, options) -> Source | None:
        """The source for a run over ``index`` (auto.sources.ContextIndex) with ``options``
        (auto.sources.RunOptions: the draft, the memory, whether siblings are wanted); None where
        the run has nothing for it to propose from."""

    def propose(self, context: Sequence[int], k: int, stop=None) -> Proposal:
        """Up to ``k`` tokens to follow ``context`` (``stop(depth, reach)``: a decoding source
        stops drafting where it says so). The context's index is up to date when asked."""

    def may_propose(self, context: Sequence[int]) -> bool:
        """Whether :meth:`propose` would propose at least one token, settled by a lookup or two;
        the context's n-gram cache has counted the context when asked."""

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        """Other branches of its own proposal, once the chains could pay for a tree."""

"""The n-gram memory of the model's past runs as a source (engine.strategies.ngram_memory): what
followed the text's last n-gram in what this model generated before."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_studio.engine.strategies.auto.priors import bucket
from specdec_studio.engine.strategies.sources.base import Proposal, declare


def memory_prior(signal: tuple) -> float:
    """By the n-gram's size (2-4), its follower's share bucket (0-2) and count bucket (0-3)."""
    size, share, count = signal
    return min(0.8, 0.3 + 0.1 * (size - 2) + 0.08 * share + 0.04 * count)


class MemorySource:
    name = "memory"
    decodes = False
    kinds = (declare("memory", "memory", "n-gram memory of past runs", memory_prior),)

    @classmethod
    def for_run(cls, index, options) -> MemorySource | None:
        return cls(options.memory) if options.memory is not None else None

    def __init__(self, memory) -> None:
        self.memory = memory  # an NgramMemory

    def propose(self, context: Sequence[int], k: int, stop=None) -> Proposal:
        tokens, evidence = self.memory.propose(context, k)
        signals = [(size, bucket(share, (0.75, 0.9)), bucket(total, (4, 8, 16))) for size, share, total in evidence]
        return Proposal("memory", tokens, signals)

    def may_propose(self, context: Sequence[int]) -> bool:
        return bool(self.memory.propose(context, 1)[0])

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        return []

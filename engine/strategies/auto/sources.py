"""The candidate sources of a run, kept up to date with the context: the context's index (its
n-gram cache and suffix matcher, kept from one run to the next) and the list of sources
(``engine.strategies.sources``) that propose from it, walked in order without naming one."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from specdec_studio.engine.strategies.auto.priors import MIN_SUFFIX_MATCH, NGRAM_MAX, NGRAM_MIN
from specdec_studio.engine.strategies.lookup import NgramCacheDrafter
from specdec_studio.engine.strategies.sources.base import Kind, Proposal, Source
from specdec_studio.engine.strategies.sources.draft import DraftSource
from specdec_studio.engine.strategies.sources.memory import MemorySource
from specdec_studio.engine.strategies.sources.ngram_cache import NgramCacheSource
from specdec_studio.engine.strategies.sources.suffix import SuffixSource
from specdec_studio.engine.strategies.suffix_automaton import SuffixMatcher

__all__ = ["ContextIndex", "Proposal", "Sources"]

# Every source a run may walk, in the order their chains are listed (the n-gram cache's first: its
# siblings fork off it). Adding a source is its module under strategies/sources/ and one entry here.
SOURCE_TYPES = (NgramCacheSource, SuffixSource, MemorySource, DraftSource)

# the suffix source's cheap test reads a match's minimum from the n-gram cache's counts
assert NGRAM_MIN <= MIN_SUFFIX_MATCH - 1 <= NGRAM_MAX


class ContextIndex:
    """The n-gram cache and the suffix matcher of a context, kept from one run to the next.

    A chat turn's prompt is the previous turn's whole context (its prompt, its answer, the end of
    its turn) and the new message. Reading a conversation afresh costs every turn more as it grows
    (measured on SmolLM2 chats: 8-16 ms at 2,950 tokens), so each structure reads only what the
    prompt adds to the tokens it has read, where the prompt begins with them. Both only ever add
    tokens, in order, so the index extended is the index a fresh read of the prompt makes."""

    def __init__(self) -> None:
        self.ngrams = NgramCacheDrafter(NGRAM_MIN, NGRAM_MAX)
        self.suffix = SuffixMatcher()

    def read(self, prompt: Sequence[int]) -> int:
        """Bring the index to ``prompt``; returns how many of its tokens the matcher had read
        before (0 when the prompt does not begin with them: it is then read afresh)."""
        seen = self.suffix.tokens
        kept = len(seen)
        if kept > len(prompt) or list(prompt[:kept]) != seen:
            self.suffix = SuffixMatcher()
            kept = 0
        self.suffix.extend(prompt[kept:])
        self.ngrams.begin(prompt)  # the cache keeps or drops its own counts the same way
        return kept


@dataclass(frozen=True)
class RunOptions:
    """What a run gives its sources beyond the context's index."""

    draft: object | None = None  # a drafter that decodes (a draft model's, an MTP head's)
    memory: object | None = None  # an NgramMemory of past runs
    alternatives: bool = True  # the n-gram cache's sibling branches (a one-sequence tree cannot use them)


class Sources:
    """The candidate sources of one run, kept up to date with the context. ``alternatives``
    adds the n-gram cache's sibling branches (a step whose tree has one sequence cannot use them).
    ``index``: the context index of an earlier run (:class:`ContextIndex`), brought to ``prompt``
    and kept up to date from here on; a new one without. ``memory``: an NgramMemory of past runs;
    ``draft``: a drafter that decodes (a draft model's, an MTP head's)."""

    def __init__(self, prompt: Sequence[int], draft=None, alternatives: bool = True, memory=None,
                 index: ContextIndex | None = None) -> None:
        self.index = index if index is not None else ContextIndex()
        self.index.read(prompt)
        self.ngrams = self.index.ngrams
        self.suffix = self.index.suffix
        options = RunOptions(draft, memory, alternatives)
        self.sources: list[Source] = [source for kind in SOURCE_TYPES
                                      if (source := kind.for_run(self.index, options)) is not None]

    def kinds(self) -> list[Kind]:
        """Every kind of proposal this run's sources make, in their order."""
        return [kind for source in self.sources for kind in source.kinds]

    def named(self, name: str) -> Source:
        """The source called ``name`` (a test's or a bench's handle on one of them)."""
        return next(s for s in self.sources if s.name == name)

    def advance(self, context: Sequence[int]) -> None:
        suffix = self.suffix
        n_read = len(suffix.tokens)
        if n_read == len(context) - 1:  # every step but a tree's: one token, no slice
            suffix.add(context[-1])
        else:
            suffix.extend(context[n_read:])

    def repeats(self, context: Sequence[int], length: int) -> bool:
        """Whether the context's end repeats at least ``length`` tokens of earlier text (the suffix
        match), following the text only where it could: a match grows by at most one token a
        token, so from where the matcher last stood it cannot reach ``length`` sooner than
        ``length - match_length`` tokens later. A step that does not plan asks this alone, and
        the matcher catches up when a step next plans."""
        suffix = self.suffix
        if suffix.match_length + len(context) - len(suffix.tokens) < length:
            return False
        self.advance(context)
        return suffix.match_length >= length

    def proposes_anything(self, context: Sequence[int]) -> bool:
        """Whether :meth:`chains` (the decoding sources aside) would propose at least one token,
        for any length asked, settled by each source's lookup or two (``Source.may_propose``).

        Most planning steps of a chat answer find nothing; this settles them without the
        planner's tests, and without the suffix matcher following the text. Between two decodes
        each object Python touches costs more than in a tight loop, so the fewer the better
        (docs/auto.md; tests/bench/auto_overhead.py measures it)."""
        self.ngrams.count(context)
        return any(s.may_propose(context) for s in self.sources if not s.decodes)

    def propose(self, context: Sequence[int], k: int, draft_k: int = 0) -> list[Proposal]:
        """Every source's proposal: :meth:`chains` and then their :meth:`siblings`."""
        chains = self.chains(context, k, draft_k)
        return chains + self.siblings(context, k, chains)

    def chains(self, context: Sequence[int], k: int, draft_k: int = 0, draft_stop=None) -> list[Proposal]:
        """Each source's own continuation, up to ``k`` tokens; a decoding source's (each token a
        decode) up to ``draft_k``, and only while ``draft_stop(depth, reach)`` is false."""
        self.ngrams.count(context)
        out = []
        for source in self.sources:
            if not source.decodes:
                out.append(source.propose(context, k))
            elif draft_k > 0:
                out.append(source.propose(context, draft_k, draft_stop))
        return [p for p in out if p.tokens]

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        """Other branches of the chains, which the run asks for only once the chains could pay for
        a tree (the n-gram cache's, where the text went another way before)."""
        out: list[Proposal] = []
        for source in self.sources:
            out += source.siblings(context, k, chains)
        return out

"""The suffix match as a source (SAM-Decoding, SuffixDecoding): what followed the longest earlier
occurrence of the text's end, its signal the match's length (a loop gone round twice is believed
like a long match)."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_studio.engine.strategies.auto.priors import (LONG_MATCH_BUCKET, LOOP_SURE_ROUNDS, MIN_SUFFIX_MATCH,
                                                           SUFFIX_PRIOR, bucket)
from specdec_studio.engine.strategies.lookup import NgramCacheDrafter
from specdec_studio.engine.strategies.sources.base import Proposal, declare
from specdec_studio.engine.strategies.suffix_automaton import SuffixMatcher


class SuffixSource:
    name = "suffix"
    decodes = False
    # its signal: the match's length bucket (2, 3-4, 5-8, 9-16, 17-32, 33+)
    kinds = (declare("suffix", "suffix", "suffix match", lambda signal: SUFFIX_PRIOR[signal[0]]),)

    @classmethod
    def for_run(cls, index, options) -> SuffixSource:
        return cls(index.suffix, index.ngrams)

    def __init__(self, suffix: SuffixMatcher, ngrams: NgramCacheDrafter) -> None:
        self.suffix = suffix  # follows the text as the run's Sources advance it
        self.ngrams = ngrams  # the same context's n-gram cache: the cheap test reads its counts

    def propose(self, context: Sequence[int], k: int, stop=None) -> Proposal:
        tokens, length = self.suffix.continuation(k, MIN_SUFFIX_MATCH)
        signal = (bucket(length, (3, 5, 9, 17, 33)),)
        if tokens and self.suffix.loop_rounds() >= LOOP_SURE_ROUNDS:  # believed like a long match
            signal = (max(signal[0], LONG_MATCH_BUCKET),)
        return Proposal("suffix", tokens, [signal] * len(tokens))

    def may_propose(self, context: Sequence[int]) -> bool:
        """The match is MIN_SUFFIX_MATCH tokens long or more where the text's last that many
        occurred before: where the n-gram before its last token has been followed by that token
        twice, counting now. Read from the cache, the matcher need not follow the text here (it
        catches up when a step plans in full)."""
        before = self.ngrams.followers_of(tuple(context[-MIN_SUFFIX_MATCH:-1]))
        return before is not None and before.counts.get(context[-1], 0) >= 2

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        return []

"""The context's n-gram cache as a source (llama-lookup's): the most frequent follower of the
longest n-gram that ends the text, walked while its chance of being reached is worth a row; and its
sibling branches, where the text went another way before."""

from __future__ import annotations

import functools
from collections.abc import Sequence

from specdec_studio.engine.strategies.auto.priors import (
    ALT_BRANCHES,
    ALT_MIN_COUNT,
    ALT_PRIOR,
    MIN_REACH,
    NGRAM_MAX,
    NGRAM_MIN,
    bucket,
)
from specdec_studio.engine.strategies.lookup import Followers, NgramCacheDrafter
from specdec_studio.engine.strategies.sources.base import Proposal, declare

# A sibling forks off the n-gram branch with a prior of the fork's reach times its follower's
# ALT_PRIOR, and one under MIN_REACH is never kept: past this reach no fork can be
FORK_REACH_MIN = MIN_REACH / max(ALT_PRIOR)


def ngram_prior(signal: tuple) -> float:
    """By the n-gram's size, its follower's share bucket (0-3) and count bucket (0-3), and the
    follower's rank (0: the most frequent; a 2nd or 3rd follower by its share alone)."""
    size, share, count, rank = signal
    if rank:
        return ALT_PRIOR[share]
    return min(0.9, 0.2 + 0.1 * (size - 1) + 0.12 * share + 0.05 * count)


@functools.lru_cache(maxsize=1024)
def ngram_signal(size: int, best_count: int, total: int) -> tuple[tuple, float]:
    """The signal of an n-gram's most frequent follower (its n-gram's size, the follower's share
    and the n-gram's count, bucketed) and that signal's prior. A chain round a loop labels up to
    64 tokens a step with the same few counts: worked out once per counts, not per token."""
    # a follower seen once holds all of its n-gram's followers by construction: its share says
    # nothing until the n-gram has been followed twice
    share = best_count / total if total > 1 else 0.0
    signal = (size, bucket(share, (0.5, 0.67, 0.9)), bucket(total, (2, 4, 8)), 0)
    return signal, ngram_prior(signal)


class NgramCacheSource:
    """``ngram`` proposals and, with ``alternatives``, their ``ngram_alt`` siblings (a step whose
    tree has one sequence cannot use them)."""

    name = "ngram"
    decodes = False
    kinds = (declare("ngram", "ngram", "n-gram cache", ngram_prior),
             declare("ngram_alt", "ngram", "n-gram cache's other followers", ngram_prior))

    @classmethod
    def for_run(cls, index, options) -> NgramCacheSource:
        return cls(index.ngrams, options.alternatives)

    def __init__(self, ngrams: NgramCacheDrafter, alternatives: bool = True) -> None:
        self.ngrams = ngrams
        self.alternatives = alternatives

    def propose(self, context: Sequence[int], k: int, stop=None) -> Proposal:
        tokens: list[int] = []
        signals: list[tuple] = []
        self._walk(list(context[max(0, len(context) - NGRAM_MAX):]), k, 1.0, tokens, signals)
        return Proposal("ngram", tokens, signals)

    def may_propose(self, context: Sequence[int]) -> bool:
        """The next token is confident, and likely enough to be walked."""
        found = self.ngrams.confident(context[-NGRAM_MAX:])
        return found is not None and ngram_signal(found[0], found[1].best_count, found[1].total)[1] >= MIN_REACH

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        """The n-gram branch's sibling branches (none without ``alternatives``). The run asks for
        them only once the chains could pay for a tree: a sibling is a 2nd or 3rd follower (prior
        at most ALT_PRIOR[-1]), a branch a tree adds, not one it is sent for."""
        if not self.alternatives:
            return []
        ngram = chains[0] if chains and chains[0].source == "ngram" else Proposal("ngram", [], [])
        return [p for p in self._alternatives(context, k, ngram) if p.tokens]

    def _walk(self, seq: list[int], k: int, chance: float, tokens: list[int], signals: list[tuple]) -> None:
        """Extend ``tokens`` (and ``seq``) with the cache's confident followers, up to ``k`` tokens,
        while the chain's prior chance of being reached stays worth a row."""
        while len(tokens) < k:
            found = self.ngrams.confident(seq)
            if found is None:
                break
            size, entry = found
            signal, prior = ngram_signal(size, entry.best_count, entry.total)
            chance *= prior
            if chance < MIN_REACH:  # deeper tokens could not be worth a row: stop walking
                break
            tokens.append(entry.best)
            signals.append(signal)
            seq.append(entry.best)

    def _alternatives(self, context: Sequence[int], k: int, main: Proposal) -> list[Proposal]:
        """Sibling branches of the n-gram branch: wherever along it (or right after it) the
        longest n-gram ending the text so far went another way often enough before, that other
        follower, then the cache's own continuation. The branch shares the n-gram branch's
        tokens up to there, so in the tree it forks off at that depth. The ALT_BRANCHES
        likeliest (by prior: the chance of reaching the fork times the follower's) are kept."""
        tail = list(context[max(0, len(context) - NGRAM_MAX):])
        path = [*tail, *main.tokens]  # the text at depth d is its first len(tail) + d tokens
        forks = []  # (prior, depth, token, signal)
        reach = 1.0
        for depth in range(min(len(main.tokens), k - 1) + 1):
            if reach < FORK_REACH_MIN:  # a fork from here on would be under MIN_REACH: none is kept
                break
            end = len(tail) + depth
            taken = main.tokens[depth] if depth < len(main.tokens) else None
            found = self._fork(path, end, taken)
            if found is not None:
                size, entry, others = found
                for rank, (count, token) in enumerate(others[:ALT_BRANCHES], start=1):
                    signal = (size, bucket(count / entry.total, (0.15, 0.3, 0.45)),
                              bucket(entry.total, (2, 4, 8)), rank)
                    forks.append((reach * ngram_prior(signal), depth, token, signal))
            if depth < len(main.tokens):
                reach *= ngram_prior(main.signals[depth])
        out = []
        for prior, depth, token, signal in sorted(forks, reverse=True)[:ALT_BRANCHES]:
            if prior < MIN_REACH:
                break
            tokens, signals = [*main.tokens[:depth], token], [*main.signals[:depth], signal]
            self._walk([*tail, *tokens], k, prior, tokens, signals)
            out.append(Proposal("ngram_alt", tokens[:k], signals[:k]))
        return out

    def _fork(
        self, path: list[int], end: int, taken: int | None
    ) -> tuple[int, Followers, list[tuple[int, int]]] | None:
        """The longest n-gram ending at ``end`` of ``path`` that went another way than ``taken``
        ALT_MIN_COUNT times or more: its size, its followers, and those other ways as (count,
        token), most frequent first; None where there is none."""
        # A longer n-gram ending here was followed only where its last token was, and by what
        # followed that token there: where the last token alone never went two ways, no longer
        # n-gram did. Along a loop most tokens go one way, and one lookup settles them
        shortest = self.ngrams.followers_of(tuple(path[end - NGRAM_MIN:end])) if end >= NGRAM_MIN else None
        if shortest is None or len(shortest.counts) < 2:
            return None
        for size in range(min(NGRAM_MAX, end), NGRAM_MIN - 1, -1):
            entry = shortest if size == NGRAM_MIN else self.ngrams.followers_of(tuple(path[end - size:end]))
            if entry is None or len(entry.counts) < 2:
                continue
            others = sorted(((count, token) for token, count in entry.counts.items()
                             if token != taken and count >= ALT_MIN_COUNT), reverse=True)
            if others:
                return size, entry, others
        return None

"""The candidate sources of a run (the n-gram cache and its sibling branches, the suffix match, the
n-gram memory of past runs, a draft model), kept up to date with the context, each proposing a
continuation with its signals."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

from specdec_studio.engine.strategies.auto.priors import (
    ALT_BRANCHES,
    ALT_MIN_COUNT,
    ALT_PRIOR,
    LONG_MATCH_BUCKET,
    LOOP_SURE_ROUNDS,
    MIN_REACH,
    MIN_SUFFIX_MATCH,
    NGRAM_MAX,
    NGRAM_MIN,
    bucket,
    signal_prior,
)
from specdec_studio.engine.strategies.lookup import Followers, NgramCacheDrafter
from specdec_studio.engine.strategies.suffix_automaton import SuffixMatcher


# proposes_anything reads a suffix match's minimum from the n-gram cache's counts
assert NGRAM_MIN <= MIN_SUFFIX_MATCH - 1 <= NGRAM_MAX

# A sibling forks off the n-gram branch with a prior of the fork's reach times its follower's
# ALT_PRIOR, and one under MIN_REACH is never kept: past this reach no fork can be
FORK_REACH_MIN = MIN_REACH / max(ALT_PRIOR)


@dataclass
class Proposal:
    source: str
    tokens: list[int]
    signals: list[tuple]


@functools.lru_cache(maxsize=1024)
def ngram_signal(size: int, best_count: int, total: int) -> tuple[tuple, float]:
    """The signal of an n-gram's most frequent follower (its n-gram's size, the follower's share
    and the n-gram's count, bucketed) and that signal's prior. A chain round a loop labels up to
    64 tokens a step with the same few counts: worked out once per counts, not per token."""
    # a follower seen once holds all of its n-gram's followers by construction: its share says
    # nothing until the n-gram has been followed twice
    share = best_count / total if total > 1 else 0.0
    signal = (size, bucket(share, (0.5, 0.67, 0.9)), bucket(total, (2, 4, 8)), 0)
    return signal, signal_prior("ngram", signal)


class ContextIndex:
    """The n-gram cache and the suffix matcher of a context, kept from one run to the next.

    A chat turn's prompt is the previous turn's whole context (its prompt, its answer, the end of
    its turn) and the new message. Reading a conversation afresh costs every turn more as it grows
    (measured on SmolLM2 chats: 1.4 ms at 359 tokens, 8-16 ms at 2,950; 27 ms for 3,000 random
    tokens), so each structure reads only what the prompt adds to the tokens it has read, where the
    prompt begins with them. Both only ever add tokens, in order, so the index extended is the
    index a fresh read of the prompt makes."""

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


class Sources:
    """The candidate sources of one run, kept up to date with the context. ``alternatives``
    adds the n-gram cache's sibling branches (a step whose tree has one sequence cannot use them).
    ``index``: the context index of an earlier run (:class:`ContextIndex`), brought to ``prompt``
    and kept up to date from here on; a new one without."""

    def __init__(self, prompt: Sequence[int], draft=None, alternatives: bool = True, memory=None,
                 index: ContextIndex | None = None) -> None:
        self.index = index if index is not None else ContextIndex()
        self.index.read(prompt)
        self.ngrams = self.index.ngrams
        self.suffix = self.index.suffix
        self.draft = draft  # a DraftModelDrafter, or None
        self.alternatives = alternatives
        self.memory = memory  # an NgramMemory of past runs (engine.strategies.ngram_memory), or None

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
        """Whether :meth:`chains` (the draft model aside) would propose at least one token, for
        any length asked: the suffix match is long enough, the n-gram cache's next token is
        confident and likely enough to be walked, or the memory has a confident follower.

        Most planning steps of a chat answer find nothing; this settles them with three lookups
        instead of the planner's tests, and without the suffix matcher. Between two decodes each
        object Python touches costs more than in a tight loop (measured here: 1 us of work took
        15 us right after a decode), so the fewer the better. What an Auto plain step costs
        beyond plain decoding's (tests/bench/auto_overhead.py, every category): 0.067 ms at 16
        tokens and 0.072 at 32 before this test; 0.061 and 0.056 with it; 0.041 and 0.036 once
        it read the match from the n-gram counts and plain steps left the rest of the
        bookkeeping to the next planning step (auto.run; 0.057 and 0.053 just before, same day)."""
        ngrams = self.ngrams
        ngrams.count(context)
        # The suffix match is MIN_SUFFIX_MATCH tokens long or more where the text's last that many
        # occurred before: where the n-gram before its last token has been followed by that token
        # twice, counting now. Read from the cache just counted, the matcher need not follow the
        # text here (it catches up when a step plans in full).
        before = ngrams.followers_of(tuple(context[-MIN_SUFFIX_MATCH:-1]))
        if before is not None and before.counts.get(context[-1], 0) >= 2:
            return True
        found = ngrams.confident(context[-NGRAM_MAX:])
        if found is not None and ngram_signal(found[0], found[1].best_count, found[1].total)[1] >= MIN_REACH:
            return True
        return self.memory is not None and bool(self.memory.propose(context, 1)[0])

    def propose(self, context: Sequence[int], k: int, draft_k: int = 0) -> list[Proposal]:
        """Every source's proposal: :meth:`chains` and then their :meth:`siblings`."""
        chains = self.chains(context, k, draft_k)
        return chains + self.siblings(context, k, chains)

    def chains(self, context: Sequence[int], k: int, draft_k: int = 0, draft_stop=None) -> list[Proposal]:
        """Each source's own continuation (the n-gram cache's first, if it has one), up to ``k``
        tokens; the draft model's (each token a decode of the draft) up to ``draft_k``, and only
        while ``draft_stop(depth, reach)`` is false."""
        self.ngrams.count(context)
        out = [self._ngram(context, k), self._suffix(k)]
        if self.memory is not None:
            out.append(self._memory(context, k))
        if self.draft is not None and draft_k > 0:
            out.append(self._draft(context, draft_k, draft_stop))
        return [p for p in out if p.tokens]

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        """The n-gram branch's sibling branches (none without ``alternatives``). The run asks for
        them only once the chains could pay for a tree: a sibling is a 2nd or 3rd follower (prior
        at most ALT_PRIOR[-1]), a branch a tree adds, not one it is sent for."""
        if not self.alternatives:
            return []
        ngram = chains[0] if chains and chains[0].source == "ngram" else Proposal("ngram", [], [])
        return [p for p in self._ngram_alternatives(context, k, ngram) if p.tokens]

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

    def _ngram(self, context: Sequence[int], k: int) -> Proposal:
        tokens: list[int] = []
        signals: list[tuple] = []
        self._walk(list(context[max(0, len(context) - NGRAM_MAX):]), k, 1.0, tokens, signals)
        return Proposal("ngram", tokens, signals)

    def _ngram_alternatives(self, context: Sequence[int], k: int, main: Proposal) -> list[Proposal]:
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
                    forks.append((reach * signal_prior("ngram_alt", signal), depth, token, signal))
            if depth < len(main.tokens):
                reach *= signal_prior("ngram", main.signals[depth])
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

    def _suffix(self, k: int) -> Proposal:
        tokens, length = self.suffix.continuation(k, MIN_SUFFIX_MATCH)
        signal = (bucket(length, (3, 5, 9, 17, 33)),)
        if tokens and self.suffix.loop_rounds() >= LOOP_SURE_ROUNDS:  # believed like a long match
            signal = (max(signal[0], LONG_MATCH_BUCKET),)
        return Proposal("suffix", tokens, [signal] * len(tokens))

    def _memory(self, context: Sequence[int], k: int) -> Proposal:
        tokens, evidence = self.memory.propose(context, k)
        signals = [(size, bucket(share, (0.75, 0.9)), bucket(total, (4, 8, 16))) for size, share, total in evidence]
        return Proposal("memory", tokens, signals)

    def _draft(self, context: Sequence[int], k: int, stop=None) -> Proposal:
        draft = self.draft.propose(context, k, stop)
        probs = self.draft.last_probs
        return Proposal("draft", draft.tokens, [(bucket(p, (0.3, 0.6, 0.8, 0.95)),) for p in probs])

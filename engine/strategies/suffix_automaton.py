"""An online suffix automaton over token ids, and the longest earlier match of the text's end.

The automaton of a text recognises every substring of it in O(length) states; each state keeps
the end position of the substring's first occurrence. :class:`SuffixMatcher` adds tokens one at a
time and keeps, as it goes, the longest suffix of the text that also occurs *ending earlier* (the
SAM-Decoding / SuffixDecoding draft source): what followed that earlier occurrence is a
continuation worth proposing, and the longer the match, the likelier it is right.

No library here does this over integer ids (the suffix-array packages index strings and rebuild
on every append), so it is written out: Blumer et al.'s construction, O(1) amortised per token.
"""

from __future__ import annotations

from collections.abc import Iterable


class SuffixAutomaton:
    def __init__(self) -> None:
        self.next: list[dict[int, int]] = [{}]
        self.link: list[int] = [-1]
        self.length: list[int] = [0]
        self.first_end: list[int] = [-1]  # end index of the first occurrence of the state's strings
        self.last = 0
        self.n = 0  # tokens added

    def add(self, token: int) -> None:
        nxt, link, length, first_end = self.next, self.link, self.length, self.first_end
        cur = len(length)
        nxt.append({})
        length.append(length[self.last] + 1)
        link.append(0)
        first_end.append(self.n)
        p = self.last
        while p != -1 and token not in nxt[p]:
            nxt[p][token] = cur
            p = link[p]
        if p != -1:
            q = nxt[p][token]
            if length[p] + 1 == length[q]:
                link[cur] = q
            else:
                clone = len(length)
                nxt.append(dict(nxt[q]))
                length.append(length[p] + 1)
                link.append(link[q])
                first_end.append(first_end[q])
                while p != -1 and nxt[p].get(token) == q:
                    nxt[p][token] = clone
                    p = link[p]
                link[q] = link[cur] = clone
        self.last = cur
        self.n += 1


class SuffixMatcher:
    """The text so far, its automaton, and the longest suffix that occurred ending earlier."""

    def __init__(self, tokens: Iterable[int] = ()) -> None:
        self.automaton = SuffixAutomaton()
        self.tokens: list[int] = []
        self.state = 0  # the automaton state of the current match
        self.match_length = 0
        for t in tokens:
            self.add(t)

    def add(self, token: int) -> None:
        sam = self.automaton
        # Match first, against the text without the new token: a match found now ends earlier.
        v, n = self.state, self.match_length
        while v != 0 and token not in sam.next[v]:
            v = sam.link[v]
            n = sam.length[v]
        if token in sam.next[v]:
            v = sam.next[v][token]
            n += 1
        else:
            v, n = 0, 0
        sam.add(token)
        # Adding the token may have split v's class: move to the state that holds length n now.
        while v != 0 and n <= sam.length[sam.link[v]]:
            v = sam.link[v]
        self.state, self.match_length = v, n
        self.tokens.append(token)

    def extend(self, tokens: Iterable[int]) -> None:
        for t in tokens:
            self.add(t)

    def period(self) -> int:
        """The distance between the text's end and the end of the match's earliest occurrence
        (0 without a match)."""
        if not self.match_length:
            return 0
        return len(self.tokens) - 1 - self.automaton.first_end[self.state]

    def loop_rounds(self) -> int:
        """How many whole periods the match reaches back: 1 or more where the end repeats what it
        wrote one period before (a line written again and again), 0 without a match."""
        period = self.period()
        return self.match_length // period if period else 0

    def loop_length(self) -> int:
        """How many tokens the text has gone round a loop: the match's length when the match
        reaches back over its own period, else 0."""
        return self.match_length if self.loop_rounds() else 0

    def continuation(self, k: int, min_length: int = 1) -> tuple[list[int], int]:
        """Up to ``k`` tokens that followed the earliest earlier occurrence of the longest
        matching suffix (at least ``min_length`` long), and that match's length.

        When the match is at least as long as the distance between its two occurrences, the
        text's end is periodic with that distance (a loop, a repeated line), and what followed
        the earlier occurrence runs into the text's end; the proposal then goes on around the
        period for all ``k`` tokens instead of stopping there."""
        if self.match_length < max(1, min_length) or k <= 0:
            return [], 0
        period = self.period()
        start = len(self.tokens) - period
        if self.match_length < period or start + k <= len(self.tokens):
            return self.tokens[start: start + k], self.match_length
        return [self.tokens[start + j % period] for j in range(k)], self.match_length

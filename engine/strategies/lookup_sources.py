"""llama.cpp's draftless speculation types as prompt-lookup drafters: ``ngram-simple``,
``ngram-map-k``, ``ngram-map-k4v`` and ``ngram-mod`` (``common/ngram-map.cpp``,
``common/ngram-mod.cpp``, run by ``llama-speculative-simple --spec-type T``).

All four match a *long* n-gram (12 or 24 tokens, where llama-lookup's cache matches 1 to 4) and
then copy a long run (up to 48 or 64 tokens): they draft rarely, and when they do, a whole
repeated passage at once. Their sizes are llama.cpp's defaults, so a run here drafts what
``llama-speculative-simple`` drafts on the same text. Where we depart from llama.cpp it is said
at the place, and always towards what the type is meant to do:

- the hash tables are exact (a Python dict on the n-gram), so no collision ever proposes a
  token that never followed the n-gram;
- a map's newest occurrence of a key is the one copied (llama.cpp keeps whichever its hash
  slot took first).

``ngram-mod`` keeps llama.cpp's lag: its table takes the context's new n-grams only once 32 have
piled up. That looks like a shortcut and is not: with every n-gram in the table, a chain that
starts always runs on to ``n_max`` (each n-gram it reaches has a follower), so ``n_min`` never
holds a draft back; with the lag, a chain whose copy runs into the newest text ends there, and
one that ends before ``n_min`` is not drafted. Measured with ``tests/bench/draftless_vs_llama_cpp.py``
(2 rounds, 15 chat categories): adding every n-gram at once took this source to 0.964x plain,
drafting 64-token chains into text that had stopped repeating.

Each drafter learns how many of its tokens the target accepted in :meth:`settle`, from the
context itself (the draft's tokens that the context now holds after the point it was made).
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from specdec_studio.engine.strategies.verify import Draft

# llama.cpp's defaults (common/common.h): the key n-gram and the longest copied m-gram
MAP_KEY, MAP_VALUE = 12, 48
MAP_VALUES_PER_KEY = 4  # ngram-map-k4v: distinct continuations kept per key
MAP_MIN_HITS = 1
MOD_MATCH, MOD_MIN, MOD_MAX = 24, 48, 64
MOD_CHUNK = 32  # ngram-mod takes the context's new n-grams once this many have piled up
MOD_TABLE_LIMIT = 1 << 20  # n-grams kept before the table starts over (llama.cpp: 4 Mi slots, 25 % full)


class _LastDraft:
    """The last proposal and where it was made, so that :meth:`accepted` can read off the
    context how much of it verification kept."""

    __slots__ = ("tokens", "at")

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.at = 0

    def made(self, context_len: int, tokens: list[int]) -> None:
        self.tokens, self.at = tokens, context_len

    def accepted(self, context: Sequence[int]) -> int | None:
        """Tokens of the last draft the context now holds; None if there was no draft."""
        if not self.tokens:
            return None
        n = 0
        for proposed, kept in zip(self.tokens, context[self.at:]):
            if proposed != kept:
                break
            n += 1
        self.tokens = []
        return n


class SimpleMatchDrafter:
    """``ngram-simple``: the newest earlier occurrence of the context's last ``size_key`` tokens,
    and up to ``size_value`` tokens that followed it, drafted only if at least ``size_key`` did
    (a short tail is a loop about to close on itself, rarely worth a batch).

    llama.cpp searches the context backwards at every step; here every key n-gram is indexed once,
    as the context grows, with its newest start, so a step costs the same however long the
    context (the search was the largest host cost of a lookup step on a fast model)."""

    def __init__(self, size_key: int = MAP_KEY, size_value: int = MAP_VALUE) -> None:
        self.size_key, self.size_value = size_key, size_value
        self.begin(())

    def begin(self, prompt: Sequence[int]) -> None:
        self.newest_start: dict[tuple[int, ...], int] = {}
        self.n_indexed = 1  # starts below this are indexed (llama.cpp never matches at 0)
        self.last_key: tuple[int, ...] = ()  # the key n-gram at start n_indexed - 1

    def settle(self, context: Sequence[int]) -> None:
        pass

    def propose(self, context: Sequence[int], k: int) -> Draft:
        t0 = time.perf_counter()
        tokens = self._continuation(context)[:k]
        return Draft(tokens, None, time.perf_counter() - t0, matched=self.size_key if tokens else 0)

    def _continuation(self, context: Sequence[int]) -> list[int]:
        n, m = self.size_key, self.size_value
        history = len(context) - 1  # the newest token is the one just sampled: nothing follows it yet
        if history <= n + m + 1:
            return []
        # candidate starts are 1 .. history-n-1: the key's own place and the one before are not matches
        limit = history - n - 1
        last = self.n_indexed - 1
        if self.n_indexed > limit + 1 or (last >= 1 and tuple(context[last:last + n]) != self.last_key):
            self.begin(())  # not the context indexed so far, grown: index this one afresh
        index = self.newest_start
        for start in range(self.n_indexed, limit + 1):
            index[tuple(context[start:start + n])] = start
        self.n_indexed = limit + 1
        self.last_key = tuple(context[limit:limit + n])
        start = index.get(tuple(context[-n:]))
        if start is None:
            return []
        n_copy = min(m, history - (start + n))
        if n_copy < n:
            return []
        return list(context[start + n:start + n + n_copy])


class MapDrafter:
    """``ngram-map-k`` (``values_per_key`` 1) and ``ngram-map-k4v`` (4): a map from every key
    n-gram of the context to where it occurred with a whole ``size_value``-token continuation
    after it.

    ``ngram-map-k`` copies the newest continuation, as long as the target accepted of the last
    draft from the same key (all ``size_value`` at first; a key whose draft was wholly rejected
    drafts nothing again). ``ngram-map-k4v`` counts up to four distinct continuations of a key and
    drafts the most frequent one only while it holds at least twice the others' count
    (llama.cpp then copies the newest occurrence's tokens; here the counted continuation's own)."""

    def __init__(self, values_per_key: int = 1, size_key: int = MAP_KEY, size_value: int = MAP_VALUE,
                 min_hits: int = MAP_MIN_HITS) -> None:
        self.size_key, self.size_value = size_key, size_value
        self.values_per_key, self.min_hits = values_per_key, min_hits
        self.begin(())

    def begin(self, prompt: Sequence[int]) -> None:
        self.starts: dict[tuple[int, ...], list[int]] = {}  # key -> its starts with a whole continuation
        self.n_indexed = 0  # starts indexed so far
        self.hits: dict[tuple[int, ...], int] = {}  # key -> times it ended the context
        # (key, value index) -> tokens its last draft had accepted (the next draft's length)
        self.draft_len: dict[tuple[tuple[int, ...], int], int] = {}
        self.last = _LastDraft()
        self.last_from: tuple[tuple[int, ...], int] | None = None

    def settle(self, context: Sequence[int]) -> None:
        n_accepted = self.last.accepted(context)
        if n_accepted is not None and self.last_from is not None:
            self.draft_len[self.last_from] = n_accepted

    def _index(self, context: Sequence[int]) -> None:
        """Index every start whose key and whole continuation lie before the context's newest
        ``size_key`` tokens (the key being looked up)."""
        n, m = self.size_key, self.size_value
        end = len(context) - 1 - n - m - 1  # llama.cpp: a start below cur_len - n - m - 1
        for start in range(max(self.n_indexed, 1), end):
            self.starts.setdefault(tuple(context[start:start + n]), []).append(start)
        self.n_indexed = max(self.n_indexed, end)

    def propose(self, context: Sequence[int], k: int) -> Draft:
        t0 = time.perf_counter()
        tokens = self._draft(context)[:k]
        self.last.made(len(context), tokens)
        return Draft(tokens, None, time.perf_counter() - t0, matched=self.size_key if tokens else 0)

    def _draft(self, context: Sequence[int]) -> list[int]:
        n, m = self.size_key, self.size_value
        self.last_from = None
        if len(context) - 1 < 2 * n + m:
            return []
        self._index(context)
        key = tuple(context[-n:])
        starts = self.starts.get(key)
        if not starts:
            return []
        self.hits[key] = hits = self.hits.get(key, 0) + 1
        if self.values_per_key == 1:
            chosen, start = 0, starts[-1]
        else:
            if hits < self.min_hits:
                return []
            found = self._dominant_value(context, starts)
            if found is None:
                return []
            chosen, start = found
        length = min(m, self.draft_len.get((key, chosen), m))
        self.last_from = (key, chosen)
        return list(context[start + n:start + n + length])

    def _dominant_value(self, context: Sequence[int], starts: list[int]) -> tuple[int, int] | None:
        """(the index of the most frequent of the key's first distinct continuations, a start
        where it follows), if it holds at least twice the count of the others; else None."""
        n, m = self.size_key, self.size_value
        values: list[tuple[int, ...]] = []
        counts: list[int] = []
        first_start: list[int] = []
        for start in starts:
            value = tuple(context[start + n:start + n + m])
            if value in values:
                counts[values.index(value)] += 1
            elif len(values) < self.values_per_key:
                values.append(value)
                counts.append(1)
                first_start.append(start)
        best = max(range(len(values)), key=counts.__getitem__)
        others = sum(counts) - counts[best]
        if others > 0 and counts[best] < 2 * others:
            return None
        return best, first_start[best]


class ModHashDrafter:
    """``ngram-mod``: a table from the context's ``n_match``-grams to the token that followed each
    last, brought up to date in chunks of ``MOD_CHUNK`` tokens (see the module docstring). A
    draft chains lookups: each token found extends the n-gram for the next, so a copy can run on
    across passages. A chain shorter than ``n_min`` is not drafted: it ran into the newest text,
    where the passage it copied may be the one being written."""

    def __init__(self, n_match: int = MOD_MATCH, n_min: int = MOD_MIN, n_max: int = MOD_MAX) -> None:
        self.n_match, self.n_min, self.n_max = n_match, n_min, n_max
        self.table: dict[tuple[int, ...], int] = {}
        self.n_added = 0  # n-grams starting before this index are in the table

    def begin(self, prompt: Sequence[int]) -> None:
        self.table.clear()
        self.n_added = 0
        self._add(prompt)

    def settle(self, context: Sequence[int]) -> None:
        pass  # the table only grows, and only with verified text

    def _add(self, tokens: Sequence[int]) -> None:
        """Every n-gram of ``tokens`` whose follower is in ``tokens``."""
        n, table = self.n_match, self.table
        for start in range(self.n_added, len(tokens) - n):
            table[tuple(tokens[start:start + n])] = tokens[start + n]
        self.n_added = max(self.n_added, len(tokens) - n)
        if len(table) > MOD_TABLE_LIMIT:  # bounded memory: start over from the newest text
            table.clear()
            self.n_added = max(0, len(tokens) - 4 * n)
            self._add(tokens)

    def propose(self, context: Sequence[int], k: int) -> Draft:
        t0 = time.perf_counter()
        history = context[:-1]  # the newest token was just sampled: llama.cpp's id_last
        if self.n_added + MOD_CHUNK < len(history):
            self._add(history)
        n = self.n_match
        tokens: list[int] = []
        if len(context) >= n:
            seq = list(context[-n:])
            # walk as far as the n_min test needs even when k is shorter: it judges the chain
            limit = max(self.n_min, min(k, self.n_max))
            while len(tokens) < limit:
                token = self.table.get(tuple(seq[len(seq) - n:]))
                if token is None:
                    break
                tokens.append(token)
                seq.append(token)
            if len(tokens) < self.n_min:
                tokens = []
        return Draft(tokens[:k], None, time.perf_counter() - t0, matched=n if tokens else 0)

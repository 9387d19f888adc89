"""Prompt lookup decoding: draft by copying what followed the last few tokens earlier in the
context (llama.cpp's ``examples/lookup``, transformers' prompt lookup).

Our two ways to pick the continuation, both proposing point masses (no draft distribution), are
below; llama.cpp's draftless spec types (``simple``, ``map-k``, ``map-k4v``, ``mod``) are in
:mod:`engine.strategies.lookup_sources`, chosen the same way (``SpeculativeParams.lookup``):

``cache`` (default, llama-lookup's context n-gram cache): every n-gram of the context counts the
tokens that followed it. Each draft position takes the longest n-gram whose most frequent
follower is frequent and dominant enough, and drafting stops at the first position where none
is. Unconfident positions are never sent to the target, so a step verifies few tokens that are
bound to be rejected.

``latest`` (transformers, llama-cpp-python's ``LlamaPromptLookupDecoding``): the most recent
occurrence of the longest matching n-gram, and the k tokens that followed it, unconditionally.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np

from specdec_studio.engine.config import SpeculativeParams
from specdec_studio.engine.events import Event
from specdec_studio.engine.strategies.common import Runtime
from specdec_studio.engine.strategies.lookup_sources import (MAP_KEY, MAP_VALUE, MAP_VALUES_PER_KEY, MapDrafter,
                                                             ModHashDrafter, SimpleMatchDrafter)
from specdec_studio.engine.strategies.verify import ContextOnlyDrafter, Draft, run_draft_verify

# Confidence a continuation needs before it is drafted, by n-gram length (1, 2, 3 and longer):
# how many times the n-gram must have been followed by anything, and the share (percent) the most
# frequent follower must hold. The values are llama.cpp's "lax" thresholds for its context cache
# (common/ngram-cache.cpp): a lone token is weak evidence, a 3-gram seen once is strong.
MIN_SAMPLES = (2, 2, 1)
MIN_PERCENT = (66, 50, 50)


class Followers:
    """The tokens seen after one n-gram: counts, their total, and the most frequent one
    (the most recent wins a tie), kept up to date on every insert."""

    __slots__ = ("counts", "total", "best", "best_count")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.total = 0
        self.best = -1
        self.best_count = 0

    def add(self, token: int) -> None:
        count = self.counts.get(token, 0) + 1
        self.counts[token] = count
        self.total += 1
        if count >= self.best_count:
            self.best, self.best_count = token, count


class NgramCacheDrafter:
    """llama-lookup's drafting from a context n-gram cache (see the module docstring)."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        self.ngram_min, self.ngram_max = ngram_min, ngram_max
        self.followers: dict[tuple[int, ...], Followers] = {}
        self.n_seen = 0  # context tokens already counted
        self.counted: list[int] = []  # those tokens

    def begin(self, prompt: Sequence[int]) -> None:
        """Count the prompt's n-grams: only those it adds where it begins with every token counted
        so far (a chat turn after the run that counted the conversation before it), else afresh.
        Counting only ever adds, in order, so the counts are the same either way."""
        n = self.n_seen
        if n == 0 or len(prompt) < n or list(prompt[:n]) != self.counted:
            self.followers.clear()
            self.n_seen = 0
            self.counted = []
        self.count(prompt)

    def settle(self, context: Sequence[int]) -> None:
        pass

    def count(self, context: Sequence[int]) -> None:
        """Count every n-gram that ends at a token not counted yet; the context only ever grows
        by emitted tokens, so nothing counted is ever taken back."""
        followers = self.followers
        for i in range(max(self.n_seen, 1), len(context)):
            token = context[i]
            for size in range(self.ngram_min, min(self.ngram_max, i) + 1):
                key = tuple(context[i - size : i])
                entry = followers.get(key)
                if entry is None:
                    entry = followers[key] = Followers()
                entry.add(token)
        self.counted.extend(context[self.n_seen:])
        self.n_seen = len(context)

    def confident(self, seq: Sequence[int]) -> tuple[int, Followers] | None:
        """The longest n-gram ending ``seq`` whose most frequent follower is frequent and dominant
        enough (the thresholds above), as (its size, its followers); None if there is none."""
        for size in range(min(self.ngram_max, len(seq)), self.ngram_min - 1, -1):
            entry = self.followers.get(tuple(seq[len(seq) - size :]))
            if entry is None:
                continue
            level = min(size, len(MIN_SAMPLES)) - 1
            if entry.total >= MIN_SAMPLES[level] and 100 * entry.best_count >= MIN_PERCENT[level] * entry.total:
                return size, entry
        return None

    def followers_of(self, ngram: tuple[int, ...]) -> Followers | None:
        """The tokens seen after ``ngram`` so far, or None if it never occurred."""
        return self.followers.get(ngram)

    def propose(self, context: Sequence[int], k: int) -> Draft:
        t0 = time.perf_counter()
        self.count(context)
        # the tail of the context the n-grams can reach, extended by each proposal in turn
        seq = list(context[max(0, len(context) - self.ngram_max) :])
        n_tail = len(seq)
        n_matched = 0  # the size of the n-gram the first proposal followed
        while len(seq) - n_tail < k:
            found = self.confident(seq)
            if found is None:
                break
            n_matched = n_matched or found[0]
            seq.append(found[1].best)
        return Draft(seq[n_tail:], None, time.perf_counter() - t0, matched=n_matched)


class LatestMatchDrafter(ContextOnlyDrafter):
    """Matches the longest n-gram (``ngram_max`` down to ``ngram_min`` tokens) that ends the
    context against all earlier text, takes its most recent occurrence, and proposes the tokens
    that followed it."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        self.ngram_min, self.ngram_max = ngram_min, ngram_max

    def propose(self, context: Sequence[int], k: int) -> Draft:
        t0 = time.perf_counter()
        ids = np.asarray(context, dtype=np.int32)
        n = ids.size
        for size in range(min(self.ngram_max, n - 1), self.ngram_min - 1, -1):
            pattern = ids[n - size :]
            # candidate starts: every window of `size` tokens that ends before the last token
            windows = np.lib.stride_tricks.sliding_window_view(ids[: n - 1], size)
            hits = np.flatnonzero((windows == pattern).all(axis=1))
            if hits.size:
                start = int(hits[-1]) + size
                proposal = ids[start : start + k].tolist()
                if proposal:
                    return Draft(proposal, None, time.perf_counter() - t0, matched=size)
        return Draft([], None, time.perf_counter() - t0)


def make_drafter(params: SpeculativeParams):
    """Prompt lookup's drafter for ``params.lookup``: ours (``cache``, ``latest``, which match
    ``ngram_min`` to ``ngram_max`` tokens) or one of llama.cpp's draftless types at its own sizes
    (engine.strategies.lookup_sources), whose key and copy sizes ``lookup_key``/``lookup_copy`` set
    (0: llama.cpp's)."""
    source = params.lookup
    sizes = {"size_key": params.lookup_key or MAP_KEY, "size_value": params.lookup_copy or MAP_VALUE}
    if source == "cache":
        return NgramCacheDrafter(params.ngram_min, params.ngram_max)
    if source == "latest":
        return LatestMatchDrafter(params.ngram_min, params.ngram_max)
    if source == "simple":
        return SimpleMatchDrafter(**sizes)
    if source == "map-k":
        return MapDrafter(values_per_key=1, **sizes)
    if source == "map-k4v":
        return MapDrafter(values_per_key=MAP_VALUES_PER_KEY, **sizes)
    if source == "mod":
        return ModHashDrafter()
    raise ValueError(f"unknown prompt lookup source {source!r}")


def run_lookup(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    params = rt.config.speculative
    if params.lookup == "cache":  # its counts are kept for the session's next run (a chat's next turn)
        key = ("lookup:cache", params.ngram_min, params.ngram_max)
        drafter = rt.kept.get(key)
        if drafter is None:
            # one kept at a time: a sweep over n-gram sizes would otherwise keep a context's counts for each
            for other in [k for k in rt.kept if isinstance(k, tuple) and k[0] == "lookup:cache"]:
                del rt.kept[other]
            drafter = rt.kept[key] = make_drafter(params)
    else:
        drafter = make_drafter(params)
    yield from run_draft_verify(rt, prompt, drafter)

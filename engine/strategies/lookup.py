"""Prompt lookup decoding: draft by copying what followed the latest earlier occurrence of the
last few tokens (llama.cpp's ``examples/lookup``, transformers' prompt lookup)."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence

import numpy as np

from engine.events import Event
from engine.strategies.common import Runtime
from engine.strategies.verify import Draft, run_draft_verify


class PromptLookupDrafter:
    """Matches the longest n-gram (``ngram_max`` down to ``ngram_min`` tokens) that ends the
    context against all earlier text, takes its most recent occurrence, and proposes the tokens
    that followed it. Proposals are point masses (no draft distribution)."""

    def __init__(self, ngram_min: int, ngram_max: int) -> None:
        self.ngram_min, self.ngram_max = ngram_min, ngram_max

    def begin(self, prompt: Sequence[int]) -> None:
        pass

    def settle(self, context: Sequence[int]) -> None:
        pass

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
                    return Draft(proposal, None, time.perf_counter() - t0)
        return Draft([], None, time.perf_counter() - t0)


def run_lookup(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    params = rt.config.speculative
    yield from run_draft_verify(rt, prompt, PromptLookupDrafter(params.ngram_min, params.ngram_max))

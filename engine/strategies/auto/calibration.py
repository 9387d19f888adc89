"""What a run learns as it goes: P(accepted | source, signal, position, agreed) from its own
verifications, and what a decode of B tokens costs relative to one."""

from __future__ import annotations

import functools
import statistics

from specdec_studio.engine.strategies.auto.priors import (
    CHAIN_DECAY,
    COST_SLOPE,
    LONG_MATCH_BUCKET,
    MAX_STEP_COST,
    PRIOR_MAX,
    PRIOR_WEIGHT,
    SCALE_WEIGHT,
    SHAPE_CHANGE_PRIOR,
    UNPRICED_STEP_TOKENS,
)
from specdec_studio.engine.strategies.sources.base import signal_prior


POSITIONS = 5  # positions 0-3 have bins of their own; 4 and deeper share one


class Calibrator:
    """P(accepted | source, signal, position), learnt from the run's verifications."""

    def __init__(self) -> None:
        self.bins: dict[tuple, list[float]] = {}  # key -> [accepted, offered]
        self.by_source: dict[str, list[float]] = {}  # source -> [accepted, offered]
        # predicted probability (in tenths) -> [sum predicted, accepted, offered]: calibration
        self.reliability = [[0.0, 0, 0] for _ in range(10)]
        self._answers: dict[tuple, float] = {}  # probability()'s answers since the last observe()
        # (source, agreed) -> [accepted, the signal priors' sum] over first tokens judged
        self.against_prior: dict[tuple[str, bool], list[float]] = {}

    def source_rate(self, source: str) -> float:
        """The share of the source's proposals the run has seen accepted (0.5 before any)."""
        acc, off = self.by_source.get(source, (0.0, 0.0))
        return (acc + 1.0) / (off + 2.0)

    @staticmethod
    def _key(source: str, signal: tuple, position: int, agreed: bool) -> tuple:
        # a sibling branch's tokens before and after its fork are the cache's best followers:
        # they share the n-gram branch's bins (only the fork's own token, rank > 0, has its own)
        if source == "ngram_alt" and signal[3] == 0:
            source = "ngram"
        return source, signal, min(position, POSITIONS - 1), agreed

    def probability(self, source: str, signal: tuple, position: int, agreed: bool = False) -> float:
        """``agreed``: a source of another family proposed the same token after the same path."""
        asked = (source, signal, min(position, POSITIONS - 1), agreed)
        found = self._answers.get(asked)
        if found is None:  # planning asks the same few questions many times between observations
            found = self._answers[asked] = self._estimate(*asked)
        return found

    def _estimate(self, source: str, signal: tuple, position: int, agreed: bool) -> float:
        """The bin's chance: a beta-binomial mean that leans on a prior worth PRIOR_WEIGHT
        outcomes: at the first position, the signal's (:meth:`_signal_prior`); deeper, the
        estimate one position up times CHAIN_DECAY (a source right at its first token is, until
        its deeper tokens have been judged, taken to be right at the next a little less often), so
        what the run learns at its first tokens carries down the chain. A suffix match's prior is
        at least what the run has learnt for a match one bucket shorter at the same position: as a
        copy goes on, its match grows into buckets with no outcomes yet, and they must not start
        below the shorter ones."""
        acc, off = self.bins.get(self._key(source, signal, position, agreed), (0.0, 0.0))
        if position == 0:
            prior = self._signal_prior(source, signal, agreed)
        else:
            decay = 1.0 if source == "suffix" and signal[0] >= LONG_MATCH_BUCKET else CHAIN_DECAY
            prior = decay * self.probability(source, signal, position - 1, agreed)
        if source == "suffix" and signal[0] > 0:  # a longer match is right at least as often as a shorter one
            prior = max(prior, self.probability(source, (signal[0] - 1,), position, agreed))
        return (acc + PRIOR_WEIGHT * prior) / (off + PRIOR_WEIGHT)

    def _signal_prior(self, source: str, signal: tuple, agreed: bool) -> float:
        """The signal's prior, scaled by how this run's first tokens of the same source (and
        agreement) fared against their own priors: a run whose suffix matches are right more
        often than the priors say (an answer that copies its passage) starts every new bin of
        that source higher; one whose are right less often (an answer that only echoes a few
        words) starts them lower. Worth SCALE_WEIGHT outcomes that matched the prior."""
        acc, expected = self.against_prior.get((source, agreed), (0.0, 0.0))
        scale = (acc + SCALE_WEIGHT) / (expected + SCALE_WEIGHT)
        return min(PRIOR_MAX, signal_prior(source, signal) * scale)

    def observe(self, source: str, signal: tuple, position: int, predicted: float | None, accepted: bool,
                agreed: bool = False) -> None:
        """One token judged. ``predicted``: the chance the planner gave it, for the reliability
        table; None for a token judged in hindsight (never sent, so never predicted)."""
        self._answers.clear()
        if position == 0:
            scale = self.against_prior.setdefault((source, agreed), [0.0, 0.0])
            scale[0] += accepted
            scale[1] += signal_prior(source, signal)
        entry = self.bins.setdefault(self._key(source, signal, position, agreed), [0.0, 0.0])
        entry[0] += accepted
        entry[1] += 1
        src = self.by_source.setdefault(source, [0.0, 0.0])
        src[0] += accepted
        src[1] += 1
        if predicted is None:
            return
        row = self.reliability[min(9, int(predicted * 10))]
        row[0] += predicted
        row[1] += accepted
        row[2] += 1

    def table(self) -> list[dict]:
        return [{"bin": f"{i / 10:.1f}-{(i + 1) / 10:.1f}", "n": n, "predicted": s / n, "observed": a / n}
                for i, (s, a, n) in enumerate(self.reliability) if n]


def scaled_relative(curve, scale: float, n_tokens: int) -> float:
    """T(B)/T(1) of ``curve`` with its extra cost per batch scaled by ``scale`` (0 for no tokens)."""
    return 1.0 + scale * (curve.relative(n_tokens, n_tokens) - 1.0) if n_tokens else 0.0


class CurvePrices:
    """A profile's fitted curve and what it prices at a run's starting scale (1): worked out once
    per curve and shared by every run priced with it. A run used to fit the curve before its
    first token and work out its table and its longest step on its first step: about 0.5 ms a
    run, 0.2 ms of it inside the generation (on a 16-token answer, a sixth of what Auto cost
    over plain). The table is a tuple, made whole here, so that runs on other threads can share it."""

    SIZES = 130  # relative costs kept for batches of 0-129 tokens: a step of up to 64 proposals and its sums

    def __init__(self, curve) -> None:
        self.curve = curve.fitted()
        self.table = tuple(scaled_relative(self.curve, 1.0, b) for b in range(self.SIZES))
        self.affordable: dict[int, int] = {}  # ceiling -> affordable tokens at scale 1 (the same on every thread)


@functools.lru_cache(maxsize=8)
def prices_of(curve) -> CurvePrices:
    """The shared :class:`CurvePrices` of a profile's curve (curves are compared by value: a
    profile read again from disk finds its prices)."""
    return CurvePrices(curve)


class StepCost:
    """Relative cost T(B)/T(1) of a decode of B tokens (all with logits): the profile's curve if
    there is one, else this run's own timings of that size, else a gentle linear prior.

    A run's timing of a size is the fastest of its last few decodes (other work on the machine only
    ever adds time), ignoring the first one (llama.cpp builds a graph for every new shape), and is
    trusted from the third.

    A tree step also costs the plain step after it a little: llama.cpp reuses a decode's graph
    only for the same batch shape, so coming back to one token rebuilds it (measured here: about
    0.5 ms on a 10 ms step). The run measures that too (a one-token decode after a larger one
    against one after another one-token decode) and charges it to the tree."""

    KEEP = 8
    TRUSTED = 3
    # the run's correction of the profile's extra cost per batch: within these bounds (a run that
    # measures far outside them is a machine that changed, not a profile's noise), and redrawn
    # only when it moved by more than SCALE_STEP
    SCALE_RANGE = (0.5, 2.0)
    SCALE_STEP = 0.02

    def __init__(self, curve=None) -> None:
        # priced with the profile's fit, not its raw points: one noisy size must not flip a plan
        prices = prices_of(curve) if curve is not None else None
        self.curve = prices.curve if prices is not None else None
        self.seen: dict[int, list[float]] = {}  # B -> the last KEEP decode times, after the first
        self._first: set[int] = set()
        # relative costs by B and affordable_tokens by ceiling, at the current scale: the curve's
        # shared ones at scale 1, this run's own (worked out as asked) once it has rescaled
        self._table: tuple[float, ...] | list[float] = prices.table if prices is not None else ()
        self._affordable: dict[int, int] = prices.affordable if prices is not None else {}
        self._own_table = False
        self.scale = 1.0  # the run's measured extra cost of a batch over the curve's (see _rescale)
        self._fastest: dict[int, float] = {}  # B -> the fastest timing _rescale last saw
        self._previous = 1
        self._plain_after: dict[bool, list[float]] = {False: [], True: []}  # after a tree step?

    def observe(self, n_tokens: int, seconds: float) -> None:
        if n_tokens == 1:
            times = self._plain_after[self._previous != 1]
            times.append(seconds)
            del times[: -self.KEEP]
        self._previous = n_tokens
        if n_tokens not in self._first:
            self._first.add(n_tokens)
            return
        times = self.seen.setdefault(n_tokens, [])
        times.append(seconds)
        del times[: -self.KEEP]
        # the run's relative costs are the sizes' fastest timings: redrawn only when one of those moved
        if self.curve is not None and len(times) >= self.TRUSTED:
            fastest = min(times)
            if self._fastest.get(n_tokens) != fastest:
                self._fastest[n_tokens] = fastest
                self._rescale()

    def _rescale(self) -> None:
        """Correct the profile with the run's own clock: T(B)/T(1) - 1, the extra a batch costs,
        is scaled by the median over the sizes this run has timed of measured extra ÷ the curve's.
        One factor keeps the fitted shape (and a factor up to 1 keeps the per-token cost falling),
        so a profile measured a little off from this run's machine, in its unit T(1) or in every
        size, is corrected from the first few steps instead of being trusted for the whole run."""
        ratios = []
        for b in self.seen:
            measured = self.measured_relative(b)
            if measured is not None:
                ratios.append((measured - 1.0) / max(1e-9, self.curve.relative(b, b) - 1.0))
        if not ratios:
            return
        low, high = self.SCALE_RANGE
        scale = min(high, max(low, statistics.median(ratios)))
        if abs(scale - self.scale) > self.SCALE_STEP * self.scale:
            self.scale = scale
            self._table, self._affordable, self._own_table = [], {}, True

    def relative(self, n_tokens: int) -> float:
        if self.curve is not None:
            table = self._table
            if n_tokens < len(table):
                return table[n_tokens]
            if not self._own_table:  # past the shared table: worked out each time asked (rare)
                return scaled_relative(self.curve, self.scale, n_tokens)
            while len(table) <= n_tokens:  # the curve's values, worked out once per scale
                table.append(scaled_relative(self.curve, self.scale, len(table)))
            return table[n_tokens]
        measured = self.measured_relative(n_tokens)
        return measured if measured is not None else 1.0 + COST_SLOPE * (n_tokens - 1)

    def affordable_tokens(self, ceiling: int) -> int:
        """The most tokens (at most ``ceiling``, at least 1) a step may propose: as many as keep the
        step's decode within MAX_STEP_COST plain steps on the profile's curve, as this run has
        corrected it; UNPRICED_STEP_TOKENS without a profile."""
        if self.curve is None:
            return max(1, min(ceiling, UNPRICED_STEP_TOKENS))
        tokens = self._affordable.get(ceiling)
        if tokens is None:
            tokens = self._affordable[ceiling] = self.most_tokens_within(ceiling)
        return tokens

    def most_tokens_within(self, ceiling: int) -> int:
        """The most tokens (at most ``ceiling``, at least 1) whose step costs at most MAX_STEP_COST
        plain steps at :meth:`relative`'s prices, worked out now."""
        tokens = 1
        while tokens < ceiling and self.relative(tokens + 2) <= MAX_STEP_COST:
            tokens += 1
        return tokens

    def measured_relative(self, n_tokens: int) -> float | None:
        """This run's own T(B)/T(1) once it has timed TRUSTED decodes of both sizes, else None."""
        one, this = self.seen.get(1, []), self.seen.get(n_tokens, [])
        if n_tokens <= 1 or len(one) < self.TRUSTED or len(this) < self.TRUSTED:
            return None
        return max(1.0, min(this) / min(one))

    def plain_time(self) -> float | None:
        """The fastest recent one-token decode (seconds), None before the run has timed one."""
        times = self.seen.get(1)
        return min(times) if times else None

    def typical_plain_time(self) -> float | None:
        """The mean of the recent one-token decodes that followed one-token decodes (seconds; the
        fastest recent one until TRUSTED of them are timed), None before the run has timed one.
        A tree step's single timing is set against this: against the fastest of them, the
        machine's jitter alone would make every tree look slower than it is."""
        after_plain = self._plain_after[False]
        if len(after_plain) < self.TRUSTED:
            return self.plain_time()
        return sum(after_plain) / len(after_plain)

    def first_chance_needed(self, room: int, min_gain: float) -> float:
        """The least chance r for which a tree of up to ``room`` nodes, each reached with chance r,
        would beat ``min_gain``: 1 + m·r tokens for a step of cost relative(m + 1) + penalty."""
        penalty = self.return_penalty()
        return min((min_gain * (self.relative(m + 1) + penalty) - 1.0) / m for m in range(1, room + 1))

    def return_penalty(self) -> float:
        """What going back to one-token decodes after a tree step costs, in plain steps."""
        same, after = self._plain_after[False], self._plain_after[True]
        if len(same) < self.TRUSTED or len(after) < self.TRUSTED:
            return SHAPE_CHANGE_PRIOR
        return max(0.0, min(after) - min(same)) / min(same)

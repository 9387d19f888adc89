"""Token selection on zero-copy numpy views of llama.cpp's logits, and the speculative rule.

The sampler follows llama.cpp's default chain order: top-k, top-p and min-p filter the
temperature-1 distribution, then temperature reshapes what survives. Everything sized by the
vocabulary is numpy; nothing here loops over tokens in Python.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np

import llama_cpp as llama

from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.native import logits_failure, problem_mark


@dataclass(frozen=True)
class SamplingParams:
    """How the target's next token is chosen. ``temperature <= 0`` means greedy (argmax)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int | None = None

    @property
    def greedy(self) -> bool:
        return self.temperature <= 0.0

    def validate(self) -> None:
        if self.temperature < 0:
            raise ConfigError(f"temperature must be >= 0, got {self.temperature}")
        if self.top_k < 0:
            raise ConfigError(f"top-k must be >= 0 (0 = off), got {self.top_k}")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"top-p must be in (0, 1], got {self.top_p}")
        if not 0.0 <= self.min_p < 1.0:
            raise ConfigError(f"min-p must be in [0, 1), got {self.min_p}")


# Views of llama.cpp's logits buffer by (address, floats): making a numpy view of a ctypes pointer
# costs more than the argmax of a small vocabulary's row, and a run reads the same few addresses
# at every step (the buffer moves only when a decode needs more rows than it holds). A view is
# only ever used at the address llama.cpp has just given for the logits wanted.
_VIEWS: dict[tuple[int, int], np.ndarray] = {}
_VIEWS_KEPT = 256


def _declare_logits_address():
    """``llama_get_logits_ith`` once more, returning the address as a plain int (0 for none):
    the views are keyed by it, and turning llama-cpp-python's float pointer into one took as
    long as the call. Indexing the library makes a function object of our own, so llama-cpp-
    python's declaration is left as it is."""
    from llama_cpp import llama_cpp as bindings

    fn = bindings._lib["llama_get_logits_ith"]
    fn.argtypes = [llama.llama_context_p_ctypes, ctypes.c_int32]
    fn.restype = ctypes.c_void_p
    return fn


_logits_address = _declare_logits_address()


def _view(address: int, n_floats: int) -> np.ndarray:
    key = (address, n_floats)
    view = _VIEWS.get(key)
    if view is None:
        if len(_VIEWS) >= _VIEWS_KEPT:
            _VIEWS.clear()
        view = _VIEWS[key] = np.ctypeslib.as_array(ctypes.cast(address, ctypes.POINTER(ctypes.c_float)),
                                                   shape=(n_floats,))
    return view


def logits_row(ctx: llama.llama_context_p, i: int, n_vocab: int) -> np.ndarray:
    """A float32 view (no copy) of the logits of batch output ``i``; valid until the next decode."""
    address = _logits_address(ctx, i)
    if not address:  # llama.cpp has just logged why (a row without logits, an index out of range)
        raise logits_failure(i, "this context", problem_mark() - 1)
    return _view(address, n_vocab)


def argmax_rows(ctx: llama.llama_context_p, first: int, count: int, n_vocab: int) -> np.ndarray:
    """The argmax of batch outputs ``first`` .. ``first + count - 1`` in one numpy call. Every one
    of those rows must have asked for logits: llama.cpp stores such rows contiguously, in batch
    order, so they are one block of its buffer."""
    address = _logits_address(ctx, first)
    if not address:
        raise logits_failure(first, "this context", problem_mark() - 1)
    return _view(address, count * n_vocab).reshape(count, n_vocab).argmax(axis=1)


class Sampler:
    """Greedy or seeded stochastic selection. One instance per run: it owns the run's RNG."""

    def __init__(self, params: SamplingParams) -> None:
        params.validate()
        self.params = params
        self.rng = np.random.default_rng(params.seed)
        self.last_draw: float | None = None  # accept_draft's uniform draw, for the token's explanation

    @property
    def greedy(self) -> bool:
        return self.params.greedy

    def distribution(self, logits: np.ndarray) -> np.ndarray:
        """The full-vocabulary float64 distribution tokens are drawn from (zeros where filtered)."""
        p = self.params
        n = logits.shape[0]
        if p.top_k and p.top_k < n:
            candidates = np.argpartition(logits, n - p.top_k)[n - p.top_k :]
        else:
            candidates = np.arange(n)
        values = logits[candidates].astype(np.float64)
        if p.top_p < 1.0:
            order = np.argsort(-values, kind="stable")
            candidates, values = candidates[order], values[order]
            probs = np.exp(values - values[0])
            cumulative = np.cumsum(probs) / probs.sum()
            keep = int(np.searchsorted(cumulative, p.top_p)) + 1
            candidates, values = candidates[:keep], values[:keep]
        if p.min_p > 0.0:
            keep_mask = values >= values.max() + np.log(p.min_p)
            candidates, values = candidates[keep_mask], values[keep_mask]
        scaled = (values - values.max()) / p.temperature
        weights = np.exp(scaled)
        dist = np.zeros(n, dtype=np.float64)
        dist[candidates] = weights / weights.sum()
        return dist

    def draw(self, dist: np.ndarray) -> int:
        """One token from a distribution that sums to 1."""
        cumulative = np.cumsum(dist)
        u = self.rng.random() * cumulative[-1]
        return int(min(np.searchsorted(cumulative, u, side="right"), dist.shape[0] - 1))

    def sample(self, logits: np.ndarray) -> int:
        if self.params.greedy:
            return int(np.argmax(logits))
        return self.draw(self.distribution(logits))

    def accept_draft(self, p: np.ndarray, q: np.ndarray | None, token: int) -> tuple[bool, int]:
        """The speculative sampling rule (Leviathan et al. 2023; Chen et al. 2023).

        Accept the drafted ``token`` with probability ``min(1, p[token] / q[token])``; on rejection
        return a replacement drawn from ``norm(max(0, p - q))``. ``q=None`` is a point mass on
        ``token`` (prompt lookup, lookahead n-grams): accept with probability ``p[token]``, else
        draw from ``p`` without ``token``. Either way the emitted token is distributed as ``p``.

        Returns ``(accepted, token_to_emit)``.
        """
        p_x = p[token]
        q_x = 1.0 if q is None else q[token]
        self.last_draw = None
        if q_x > 0.0:
            self.last_draw = self.rng.random()
            if self.last_draw * q_x < p_x:
                return True, token
        if q is None:
            residual = p.copy()
            residual[token] = 0.0
        else:
            residual = np.maximum(p - q, 0.0)
        total = residual.sum()
        if total <= 0.0:
            # p == q (or p is a point mass on the draft): rejection had probability zero.
            return True, token
        return False, self.draw(residual / total)

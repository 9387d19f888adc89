"""The sampler on synthetic logits: greedy, filters, seeds."""

from __future__ import annotations

import numpy as np
import pytest

from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.sampling import Sampler, SamplingParams


def test_greedy_is_argmax():
    logits = np.array([0.1, 3.0, 2.9, -1.0], dtype=np.float32)
    assert Sampler(SamplingParams()).sample(logits) == 1


def test_filters_leave_the_expected_support():
    logits = np.log(np.array([0.5, 0.2, 0.15, 0.1, 0.05]))
    dist = Sampler(SamplingParams(temperature=1.0, top_k=3)).distribution(logits)
    assert np.count_nonzero(dist) == 3 and np.isclose(dist.sum(), 1.0)
    dist = Sampler(SamplingParams(temperature=1.0, top_p=0.7)).distribution(logits)
    assert set(np.flatnonzero(dist)) == {0, 1}
    dist = Sampler(SamplingParams(temperature=1.0, min_p=0.25)).distribution(logits)
    assert set(np.flatnonzero(dist)) == {0, 1, 2}
    dist = Sampler(SamplingParams(temperature=1.0)).distribution(logits)
    assert np.allclose(dist, [0.5, 0.2, 0.15, 0.1, 0.05])


def test_seeded_draws_repeat_and_follow_the_distribution():
    logits = np.log(np.array([0.6, 0.3, 0.1]))
    a = Sampler(SamplingParams(temperature=1.0, seed=3))
    b = Sampler(SamplingParams(temperature=1.0, seed=3))
    draws_a = [a.sample(logits) for _ in range(20000)]
    assert draws_a == [b.sample(logits) for _ in range(20000)]
    freq = np.bincount(draws_a, minlength=3) / len(draws_a)
    assert np.allclose(freq, [0.6, 0.3, 0.1], atol=0.015)


@pytest.mark.parametrize(
    "params",
    [SamplingParams(temperature=-1), SamplingParams(top_p=0), SamplingParams(top_k=-2), SamplingParams(min_p=1)],
)
def test_invalid_parameters(params):
    with pytest.raises(ConfigError):
        Sampler(params)

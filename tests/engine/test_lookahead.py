"""Lookahead decoding on real models: lossless, the pool works, KV holds the accepted prefix."""

from __future__ import annotations

import pytest

from specdec_studio.engine.config import LookaheadParams, RunConfig
from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.events import StepDone
from specdec_studio.engine.tuning.probe import deviation_for_batch
from specdec_studio.engine.sampling import SamplingParams
from specdec_studio.engine.session import Session
from tests.conftest import CODE_PROMPT, N_THREADS, PROSE_PROMPT
from tests.engine.lossless import assert_lossless

N_TOKENS = 96  # long enough for the pool to fill and the window to match many times
# Gemma-3 (a 262,144-row output layer: each logit row costs about a plain step here) at fewer: its
# checks are the near-tie rule's, which a flip anywhere in the text exercises
TOKENS = {"default": N_TOKENS, "gemma": 64}
MODELS = ["default", "gemma"]
SETTINGS = [(4, 3, 4), (1, 2, 0)]
# A wider window, on the default model only: Gemma-3's output layer (262,144 rows) makes each of its
# 22 logit rows cost about a plain step, and the settings above already hold Gemma to the near-tie rule
WIDE_WINDOW = (7, 4, 0)
# llama-lookahead's default window decodes ~120 tokens a step (44 plain steps here): checked at a
# shorter length, on the default model (Gemma-3's kernels are not batch-invariant at any size, so the
# settings above already hold it to the near-tie rule)
DEFAULT_WINDOW, DEFAULT_WINDOW_TOKENS = (15, 5, 15), 40
PROMPTS = {"code": CODE_PROMPT, "prose": PROSE_PROMPT}
# The KV check and the stochastic check on Gemma-3 run under -m slow: the KV bookkeeping is the
# model's no more than SmolLM2's, the draws are checked on SmolLM2 in the regular run, and one of
# Gemma's greedy runs stays in it (GREEDY_CASES: its kernels are the ones that are not batch-invariant)
MODELS_SLOW_ON_GEMMA = ["default", pytest.param("gemma", marks=pytest.mark.slow)]
# the default window on the code prompt in the regular run (the widest there: 15-5-15), on the prose
# too with -m slow; the wide 7-4-0 window (no verification n-grams) only with -m slow
WIDE_PROMPTS = ["code", pytest.param("prose", marks=pytest.mark.slow)]


@pytest.fixture(scope="module")
def model(request, exactness_probe):
    """One model (the tests' ``model`` parameter, module-scoped so each loads once) with its
    exactness probe and plain's greedy tokens on both prompts, decoded before any other run."""
    from specdec_studio.engine.models import catalog

    path = catalog.known_path(request.param)
    probe = exactness_probe(path)
    with Session(path, n_ctx=2048, n_threads=N_THREADS) as session:
        plain = {}
        for name, text in PROMPTS.items():
            tokens = session.tokenize_prompt(text)
            plain[name] = (tokens, session.complete(RunConfig(max_tokens=TOKENS[request.param]), text).token_ids)
        yield request.param, session, probe, plain


def lookahead(W, N, G, n=N_TOKENS, **kw) -> RunConfig:
    return RunConfig(mode="lookahead", max_tokens=n, lookahead=LookaheadParams(W, N, G, **kw))


def _check_lossless(model, prompt_name: str, wng: tuple[int, int, int]) -> None:
    key, session, probe, plain = model
    tokens, plain_ids = plain[prompt_name]
    config = lookahead(*wng, n=TOKENS[key])
    result = session.complete(config, PROMPTS[prompt_name])
    assert len(plain_ids) == TOKENS[key]
    deviation = deviation_for_batch(probe, config.lookahead.batch_size)
    if key == "default" and config.lookahead.batch_size <= 32:
        assert deviation == 0.0  # measured: SmolLM2 is batch-invariant for small batches
    assert_lossless(session, tokens, plain_ids, result.token_ids, deviation, f"{key} {prompt_name} {wng}")


# Every test names its models from MODELS (the same list, or its first entry), module-scoped: pytest
# then groups the tests by model and loads each once.
# Gemma-3 in the regular run with the 4-3-4 window on the code prompt (its kernels are never
# batch-invariant: the check is the near-tie rule's, which a flip anywhere exercises); its other
# settings and the prose under -m slow
GREEDY_CASES = [
    pytest.param(
        name,
        wng,
        prompt_name,
        id="{}-W{}N{}G{}-{}".format(name, *wng, prompt_name),
        marks=pytest.mark.slow if name == "gemma" and (wng, prompt_name) != (SETTINGS[0], "code") else (),
    )
    for name in MODELS
    for wng in SETTINGS
    for prompt_name in PROMPTS
]


@pytest.mark.parametrize("model, wng, prompt_name", GREEDY_CASES, indirect=["model"], scope="module")
def test_greedy_lookahead_is_lossless(model, prompt_name, wng):
    _check_lossless(model, prompt_name, wng)


@pytest.mark.slow
@pytest.mark.parametrize("prompt_name", list(PROMPTS))
@pytest.mark.parametrize("model", MODELS[:1], indirect=True, scope="module")  # see WIDE_WINDOW
def test_a_wide_window_is_lossless(model, prompt_name):
    _check_lossless(model, prompt_name, WIDE_WINDOW)


@pytest.mark.parametrize("prompt_name", WIDE_PROMPTS)
@pytest.mark.parametrize("model", MODELS[:1], indirect=True, scope="module")  # see DEFAULT_WINDOW
def test_llama_cpp_default_window_is_lossless(model, prompt_name):
    key, session, probe, plain = model
    tokens, plain_ids = plain[prompt_name]
    config = lookahead(*DEFAULT_WINDOW, n=DEFAULT_WINDOW_TOKENS)
    result = session.complete(config, PROMPTS[prompt_name])
    deviation = deviation_for_batch(probe, config.lookahead.batch_size)
    assert_lossless(session, tokens, plain_ids[:DEFAULT_WINDOW_TOKENS], result.token_ids, deviation,
                    f"{key} {prompt_name} {DEFAULT_WINDOW}")
    if prompt_name == "code":  # the pool works: repetitive code gets n-grams accepted
        assert result.stats["n_accept"] > 0
        assert result.stats["tokens_per_step"] > 1.5


@pytest.mark.parametrize("ordered_kv", [True, False], ids=["ordered", "reference"])
@pytest.mark.parametrize("model", MODELS_SLOW_ON_GEMMA, indirect=True, scope="module")
def test_kv_holds_exactly_the_accepted_prefix_after_every_step(model, ordered_kv):
    key, session, _, plain = model
    tokens, _ = plain["code"]
    W, N, G = 4, 3, 4
    emitted = 0
    checked = 0
    accepted = 0
    for event in session.run(lookahead(W, N, G, n=80, ordered_kv=ordered_kv), tokens):
        if isinstance(event, StepDone):
            emitted += len(event.tokens)
            accepted += event.n_accepted
            if emitted >= 80:
                break  # the last step ends the run before tidying the cache
            # The KV holds the prompt and every emitted token but the newest (the next input);
            # with ordered cells the step's accepted tokens wait, uncached, for the next batch.
            pending = event.n_accepted if ordered_kv else 0
            expected_max = len(tokens) + emitted - 2 - pending
            for s in range(W + G + 1):
                assert session.memory.pos_min(s) == 0, (event.step, s)
                assert session.memory.pos_max(s) == expected_max, (event.step, s)
            checked += 1
    assert checked > 10 and accepted > 0


@pytest.mark.parametrize("model", MODELS_SLOW_ON_GEMMA, indirect=True, scope="module")
def test_stochastic_lookahead_is_reproducible_and_draws_like_plain(model):
    key, session, _, _ = model
    sampling = SamplingParams(temperature=0.8, top_p=0.95, seed=42)
    config = RunConfig(mode="lookahead", max_tokens=60, sampling=sampling, lookahead=LookaheadParams(4, 3, 4))
    a = session.complete(config, CODE_PROMPT)
    b = session.complete(config, CODE_PROMPT)
    assert a.token_ids == b.token_ids
    if key == "default":
        # One draw per emitted token, in plain's order, from bit-identical logits: the same tokens.
        plain = session.complete(RunConfig(max_tokens=60, sampling=sampling), CODE_PROMPT)
        assert a.token_ids == plain.token_ids


@pytest.mark.parametrize(
    "params, message",
    [
        (LookaheadParams(W=0), "W must be >= 1"),
        (LookaheadParams(N=1), "N must be >= 2"),
        (LookaheadParams(G=-1), "G must be >= 0"),
        (LookaheadParams(W=200, G=100), "exceeds llama.cpp's limit"),
        (LookaheadParams(W=60, N=8, G=20), "the batch holds 512"),
    ],
)
def test_invalid_settings(smollm_session, params, message):
    with pytest.raises(ConfigError, match=message):
        smollm_session.run(RunConfig(mode="lookahead", lookahead=params), [1, 2, 3])


def test_prompt_pool_seeding_is_a_flag(smollm_session):
    tokens = smollm_session.tokenize_prompt(CODE_PROMPT)
    seeded = smollm_session.complete(lookahead(4, 3, 4, n=64), CODE_PROMPT)
    unseeded = smollm_session.complete(lookahead(4, 3, 4, n=64, seed_pool_from_prompt=False), CODE_PROMPT)
    assert seeded.token_ids == unseeded.token_ids
    assert seeded.stats["n_accept"] >= unseeded.stats["n_accept"]
    assert len(tokens) > 20

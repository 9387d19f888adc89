"""Auto's golden plans: what it decides at every step (plain or a tree, its size, branches, depth,
who proposed each emitted token, and the tokens) on the simulated machine of ``tests/auto_plan.py``,
against ``tests/data/auto_plans.json``. A change that moves code must leave every plan as it was;
a change that means to plan differently writes the file again (``python -m tests.auto_plan
--golden``) and says why in its commit. The regular run checks the prompts whose plans hold every
kind of decision (plain steps, each source alone, trees of two sources, n-gram siblings), ``-m
slow`` every other shipped prompt."""

from __future__ import annotations

import json

import pytest

from specdec_studio.engine.session import Session
from tests.auto_plan import (GOLDEN_N_CTX, GOLDEN_PLANS, GOLDEN_TOKENS, SHARED_PROFILES, golden_prompts,
                             load_curve, step_plans)
from tests.conftest import N_THREADS

GOLDEN = json.loads(GOLDEN_PLANS.read_text())
# every kind of decision among them: trees of the n-gram cache and the suffix match (code, rag),
# n-gram siblings (translation, reasoning), the suffix match alone (qa_passage, extraction), a
# short answer of plain steps only (code_editing)
REGULAR = ["code", "translation-1", "rag-1", "qa_passage-1", "reasoning-1", "extraction-1", "code_editing-1"]


@pytest.fixture(scope="module")
def golden_session(smollm_path):
    if N_THREADS != 2:
        pytest.skip("the golden plans were recorded with 2 threads, whose batches' sums they follow")
    with Session(smollm_path, n_ctx=GOLDEN_N_CTX, n_threads=N_THREADS) as session:
        yield session, golden_prompts(session)


@pytest.fixture(scope="module")
def machine():
    return load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")


def _check(golden_session, machine, prompt_id: str) -> None:
    session, prompts = golden_session
    plans = step_plans(session, prompts[prompt_id], machine, GOLDEN_TOKENS)
    expected = GOLDEN[prompt_id]
    first = next((i for i, (a, b) in enumerate(zip(plans, expected)) if a != b), min(len(plans), len(expected)))
    assert plans == expected, (f"{prompt_id}: step {first + 1} planned {plans[first:first + 1]}, "
                               f"the golden plan {expected[first:first + 1]}")


def test_the_golden_plans_cover_every_shipped_prompt(golden_session):
    assert set(GOLDEN) == set(golden_session[1])
    # the regular run sees every kind of decision the golden plans hold
    kinds = {step[0].split(":")[0] for pid in REGULAR for step in GOLDEN[pid]}
    assert kinds == {"plain", "ngram", "ngram_alt", "suffix", "tree"}, kinds
    assert any("ngram_alt" in step[0] for pid in REGULAR for step in GOLDEN[pid])


@pytest.mark.parametrize("prompt_id", REGULAR)
def test_auto_plans_as_recorded(golden_session, machine, prompt_id):
    _check(golden_session, machine, prompt_id)


@pytest.mark.slow
@pytest.mark.parametrize("prompt_id", [pid for pid in GOLDEN if pid not in REGULAR])
def test_auto_plans_as_recorded_on_every_prompt(golden_session, machine, prompt_id):
    _check(golden_session, machine, prompt_id)

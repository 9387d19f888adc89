"""Defect 6 of issue 47, second half: the draft has its own GPU layers (``-ngld``, the window's
"Draft GPU layers") and Auto prices it from its own profile, measured on its own device. This
llama.cpp build has no GPU backend, so the layers are asked for and recorded, not offloaded: what
is checked is that the setting reaches the draft's load and keys the draft's profile."""

from __future__ import annotations

import dataclasses
import time

import pytest

from specdec_studio.engine.cli.main import build_parser
from specdec_studio.engine.models import catalog
from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning import profile
from specdec_studio.engine.tuning.cost_model import CostCurve
from tests.conftest import N_THREADS


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECDEC_MODELS", str(catalog.cache_dir()))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))


def _stored(key: profile.ProfileKey, t_plain: float) -> None:
    curve = CostCurve(sizes=(1, 2), t_all_logits=(t_plain, 1.5 * t_plain), t_last_logit=(t_plain, 1.4 * t_plain))
    profile.store(profile.BatchCostProfile(key, "test", curve, (1, 1), time.time(), 0.0))


def test_the_draft_loads_with_its_own_layers_and_is_priced_on_its_own_device(smollm_path, smollm_drafts, cache):
    draft = smollm_drafts["default-q2_k"]
    with Session(smollm_path, n_ctx=512, n_threads=N_THREADS, n_gpu_layers=0, draft_path=draft,
                 draft_gpu_layers=7) as session:
        assert session.model.n_gpu_layers == 0 and session.draft_model.n_gpu_layers == 7
        target_key, draft_key = profile.profile_key(session), profile.profile_key(session, draft=True)
        assert draft_key.n_gpu_layers == 7 and target_key.n_gpu_layers == 0
        # before any profile: the files' sizes, as on one device
        size_ratio = session.draft_model.info.size_bytes / session.model.info.size_bytes
        assert session.draft_token_cost() == pytest.approx(size_ratio)
        _stored(target_key, 0.020)
        # the draft's profile on the CPU is another device's: it does not price this draft
        _stored(dataclasses.replace(draft_key, n_gpu_layers=0), 0.016)
        assert session.draft_token_cost() == pytest.approx(size_ratio)
        _stored(draft_key, 0.004)  # measured with its 7 layers offloaded
        assert session.draft_token_cost() == pytest.approx(0.004 / 0.020)
        session.load_draft(draft)  # loaded again without offload: the CPU profile prices it
        assert session.draft_model.n_gpu_layers == 0
        assert session.draft_token_cost() == pytest.approx(0.016 / 0.020)


@pytest.mark.parametrize("command", ["run", "chat", "batch", "profile", "sweep"])
def test_every_command_that_loads_a_draft_takes_its_own_gpu_layers(command):
    args = build_parser().parse_args([command, "-ngl", "3", "-ngld", "99"])
    assert (args.gpu_layers, args.draft_gpu_layers) == (3, 99)
    assert build_parser().parse_args([command]).draft_gpu_layers == 0

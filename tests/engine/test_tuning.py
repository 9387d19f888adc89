"""The batch-cost profile, prompt sets and sweeps on the real default model."""

from __future__ import annotations

import csv
import json
import math
import shutil
import struct

import pytest

from specdec_studio.engine.models import catalog
from specdec_studio.engine.errors import ConfigError, SpecDecError
from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning import profile, prompts, sweep
from tests.conftest import N_THREADS, seed_profile


@pytest.fixture
def tmp_cache(tmp_path, monkeypatch):
    """Profiles, sweeps and file hashes in a fresh cache; models from the real one."""
    monkeypatch.setenv("SPECDEC_MODELS", str(catalog.cache_dir()))
    monkeypatch.setenv("SPECDEC_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="module")
def measured(smollm_session, smollm_profile, tmp_path_factory):
    """The default model's profile (measured once per test session by ``load_or_measure`` at this
    session's setting), in a cache of this module's own: the profile test checks it, the sweep
    test prices with it."""
    stored = seed_profile(smollm_profile, tmp_path_factory.mktemp("profile-cache"))
    first = profile.BatchCostProfile.from_dict(json.loads(stored.read_text()))
    return first, stored


def test_profile_is_monotone_cached_and_reused(smollm_session, measured, monkeypatch):
    first, stored = measured
    curve = first.curve
    assert curve.sizes == profile.PROFILE_SIZES
    assert first.key.n_threads == smollm_session.n_threads and first.key.n_ctx == smollm_session.n_ctx
    # monotone within noise: neighbours may swap by a little (kernels differ between sizes), but a
    # batch four times larger always costs more, and the curve rises overall
    points = dict(zip(curve.sizes, curve.t_all_logits))
    for b1, t1 in points.items():
        for b2, t2 in points.items():
            if b2 >= 4 * b1:
                assert t2 > t1, f"T({b2}) = {t2:.4f} s is not above T({b1}) = {t1:.4f} s"
    assert curve.relative(128) > 8 * curve.relative(2)
    assert all(last <= 1.25 * every for last, every in zip(curve.t_last_logit, curve.t_all_logits))
    # a measurement leaves the KV cache empty and is stored under its key (a few sizes, in a cache
    # of its own that starts empty)
    small_cache = stored.parent.parent.with_name("small-profile")
    monkeypatch.setenv("SPECDEC_CACHE", str(small_cache))
    small = profile.load_or_measure(smollm_session, sizes=(1, 2, 4))
    assert small.curve.sizes == (1, 2, 4) and small.key != first.key
    assert smollm_session.memory.mirror.base.used == 0
    assert [p.name for p in (small_cache / "profiles").glob("*.json")] == [small.key.filename()]
    assert profile.cached(small.key) == small

    # a second call reads the cache and measures nothing
    def fail(*_a, **_k):
        raise AssertionError("the cached profile was measured again")

    monkeypatch.setattr(profile, "measure_curve", fail)
    monkeypatch.setenv("SPECDEC_CACHE", str(stored.parent.parent))
    again = profile.load_or_measure(smollm_session)
    assert again == first


def test_another_thread_count_makes_a_new_profile(smollm_path, tmp_cache):
    sizes = (1, 2)  # the key is what is checked: two sizes are a profile
    with Session(smollm_path, n_ctx=512, n_threads=1) as one:
        p1 = profile.load_or_measure(one, sizes=sizes)
    with Session(smollm_path, n_ctx=512, n_threads=2) as two:
        assert profile.cached(profile.profile_key(two, sizes=sizes)) is None
        p2 = profile.load_or_measure(two, sizes=sizes)
    assert p1.key != p2.key and p1.key.n_threads == 1 and p2.key.n_threads == 2
    assert len(list((tmp_cache / "profiles").glob("*.json"))) == 2


def test_a_stopped_profile_stores_nothing(smollm_path, tmp_cache):
    with Session(smollm_path, n_ctx=512, n_threads=N_THREADS) as session:
        def stop_halfway(fraction):
            if fraction > 0.3:
                session.cancel()

        with pytest.raises(profile.ProfileCancelled):
            profile.load_or_measure(session, sizes=(1, 2, 4, 8), progress=stop_halfway)
        assert not list(tmp_cache.glob("profiles/*.json"))
        assert session.memory.mirror.base.used == 0


def test_shipped_prompt_sets_cover_every_category():
    every = prompts.shipped()
    ids = [p.id for p in every]
    assert len(ids) == len(set(ids))
    for category in prompts.CATEGORIES:
        rows = [p for p in every if p.category == category]
        assert len(rows) >= 6, category
        assert all(p.text.strip() or p.messages for p in rows)
    chat = [p for p in every if p.category == "chat"]
    assert all(len(p.messages) >= 3 and p.messages[-1][0] == "user" for p in chat)


def test_prompt_files(tmp_path):
    text = tmp_path / "one.txt"
    text.write_text("def add(a, b):\n")
    assert prompts.load_file(text)[0].text == "def add(a, b):\n"
    jsonl = tmp_path / "set.jsonl"
    jsonl.write_text('{"id": "a", "prompt": "x"}\n\n{"messages": [{"role": "user", "content": "hi"}]}\n')
    loaded = prompts.load_file(jsonl)
    assert [p.id for p in loaded] == ["a", "set-3"] and loaded[1].as_messages() == [("user", "hi")]
    jsonl.write_text('{"id": "a"}\n')
    with pytest.raises(SpecDecError, match="line 1"):
        prompts.load_file(jsonl)


def test_value_lists_and_ranges():
    assert sweep.parse_values("0..3") == (0, 1, 2, 3)
    assert sweep.parse_values("1,2,4") == (1, 2, 4)
    assert sweep.parse_values("1-3, 8") == (1, 2, 3, 8)
    assert sweep.parse_values("cache,latest", str) == ("cache", "latest")
    for bad in ("", "a", "3..1"):
        with pytest.raises(SpecDecError):
            sweep.parse_values(bad)


def test_sweep_spec_checks_axes_and_maps_k_zero_to_plain():
    one = tuple(prompts.shipped(["maths"], 1))
    with pytest.raises(ConfigError, match="no axis"):
        sweep.SweepSpec("lookahead", {"k": (1,)}, one).validate()
    with pytest.raises(ConfigError, match="W must be"):
        sweep.SweepSpec("lookahead", {"W": (0,), "N": (3,), "G": (1,)}, one).validate()
    spec = sweep.SweepSpec("lookup", {"k": (0, 3)}, one)
    assert [sweep.config_for(spec, s).mode for s in spec.settings()] == ["plain", "lookup"]
    grid = sweep.SweepSpec("lookahead", {"W": (1, 2), "N": (2,), "G": (0, 1)}, one)
    assert grid.settings()[1] == {"N": 2, "W": 1, "G": 1} and len(grid.settings()) == 4


def _png_size(path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", data[16:24])


def test_tiny_sweep_writes_json_csv_and_png(measured, smollm_session, tmp_cache, tmp_path, capsys):
    from specdec_studio.engine.cli import main

    (tmp_cache / "profiles").mkdir(parents=True)  # the module's profile: the sweep prices with it
    shutil.copy(measured[1], tmp_cache / "profiles")
    out = tmp_path / "out"
    rc = main(["sweep", "--mode", "lookahead", "-W", "1,2", "-N", "2", "-G", "0,1", "-n", "24",
               "--categories", "code_editing,translation", "-t", str(N_THREADS), "-c", str(smollm_session.n_ctx),
               "-o", str(out)])
    assert rc == 0
    result = json.loads((out / "results.json").read_text())
    cells = result["cells"]
    assert len(cells) == 4 and len(result["spec"]["prompts"]) == 2
    for cell in cells:
        assert math.isfinite(cell["measured"]) and cell["measured"] > 0
        assert math.isfinite(cell["predicted"]) and cell["predicted"] > 0
        assert cell["tokens_per_step"] >= 1.0
        assert len(cell["per_prompt"]) == 2
        # a divergence is reported with plain's margin, never silently
        assert cell["lossless"] == (not cell["divergences"])
    assert {tuple(sorted(c["setting"].items())) for c in cells} == {
        tuple(sorted({"N": 2, "W": w, "G": g}.items())) for w in (1, 2) for g in (0, 1)}
    with (out / "results.csv").open() as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 4 and all(r["measured"] and r["predicted"] for r in rows)
    assert _png_size(out / "heatmap-N2.png")[0] >= 600
    assert "best:" in capsys.readouterr().out


def test_sweep_stops_between_runs(smollm_session):
    spec = sweep.SweepSpec("lookup", {"k": (1, 2, 3, 4)}, tuple(prompts.shipped(["maths"], 2)), 16)
    events = sweep.run_sweep(smollm_session, spec)
    seen = []
    for event in events:
        seen.append(event)
        if isinstance(event, sweep.SweepProgress) and event.done == 3:
            smollm_session.cancel()
    final = seen[-1]
    assert isinstance(final, sweep.SweepFinished) and final.cancelled
    assert not any(isinstance(e, sweep.SweepCell) for e in seen)
    assert final.result["cells"] == []

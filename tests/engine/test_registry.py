"""The mode table (engine/strategies/registry.py): every mode runs from its entry, and a name no
mode has is one sentence wherever it comes from."""

from __future__ import annotations

import inspect

import pytest

from specdec_studio.engine.config import MODES, RunConfig
from specdec_studio.engine.errors import ConfigError
from specdec_studio.engine.strategies import registry


@pytest.mark.parametrize("mode", registry.TABLE, ids=lambda m: m.name)
def test_every_mode_runs_a_generator_of_events(mode):
    run = mode.run_function()
    assert inspect.isgeneratorfunction(run) or inspect.isgeneratorfunction(getattr(run, "__wrapped__", None))
    assert registry.get(mode.name) is run
    RunConfig(mode=mode.name).validate()  # its default settings are valid


def test_the_table_is_the_list_of_modes():
    assert MODES == tuple(m.name for m in registry.TABLE) == registry.NAMES
    assert len(set(MODES)) == len(MODES)
    # what the table says of the modes the code relies on
    assert [m.name for m in registry.TABLE if not m.verifies] == ["plain"]
    assert [m.name for m in registry.TABLE if m.plans] == ["auto"]
    assert {m.name for m in registry.TABLE if m.draft_then_verify} == {"speculative", "lookup", "mtp"}


@pytest.mark.parametrize("name", ["turbo", "", ["plain"], {"mode": "plain"}, None])
def test_a_name_no_mode_has_is_one_sentence(name):
    with pytest.raises(ConfigError, match="^unknown mode .*; choose one of plain, lookahead"):
        registry.mode(name)
    with pytest.raises(ConfigError, match="^unknown mode"):
        RunConfig.from_dict({"mode": name})

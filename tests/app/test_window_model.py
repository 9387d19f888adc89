"""The window's model (app/model/window_model.py), without Qt: a slice changes through update()
only, and its subscribers hear once which fields changed; the activity machine tells them of
every transition."""

from __future__ import annotations

import dataclasses

import pytest

from specdec_studio.app.model.activity import Activity, Trigger
from specdec_studio.app.model.turn import Turn
from specdec_studio.app.model.window_model import WindowModel


def test_an_update_tells_each_subscriber_once_which_fields_changed():
    model = WindowModel()
    heard = []
    model.subscribe(lambda changed, names: heard.append((changed, names)))
    turn = Turn(user="hi", chat=False)
    assert model.run.update(live=turn, completion=turn, last_run_mode="plain") == {"live", "completion"}
    assert heard == [(model.run, {"live", "completion"})]  # last_run_mode was "plain" already
    assert model.run.live is turn and model.run.completion is turn
    assert model.run.update(live=turn) == frozenset() and len(heard) == 1  # nothing changed: nobody told


def test_a_slice_refuses_a_write_behind_its_subscribers_backs():
    model = WindowModel()
    with pytest.raises(dataclasses.FrozenInstanceError):
        model.models.loaded = True
    with pytest.raises(TypeError, match="no field"):
        model.models.update(load=True)
    assert model.models.loaded is False


def test_the_machine_tells_its_transitions_and_the_model_reads_them():
    model = WindowModel()
    heard = []
    model.subscribe(lambda changed, names: heard.append(changed))
    assert not model.machine.apply(Trigger.ENDED)  # not in the table: nothing changes, nobody told
    assert heard == []
    model.machine.apply(Trigger.LOAD, job=1, kind="model")
    assert heard == [model.machine] and model.loading and not model.running
    model.machine.apply(Trigger.ENDED)
    model.machine.apply(Trigger.RUN, job=2, kind="run")
    assert model.activity is Activity.RUNNING and model.running and len(heard) == 3

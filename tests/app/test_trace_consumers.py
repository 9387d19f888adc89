"""Damaged traces of real runs, fed to the window and the video (issue 79, item 4): whatever loads
plays into a headless window (every handler of its events) and makes a video's title card without
an error; whatever does not load is refused in one sentence. The CLI's printing is fed alike in
tests/engine/test_trace_consumers.py."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_studio.app.qt import QtCore
from specdec_studio.app.video_export import title_card
from specdec_studio.app.window.main_window import MainWindow
from specdec_studio.engine.records import demo_traces
from specdec_studio.engine.records.trace import TraceError, parse
from tests.engine.test_trace import _JSON_VALUES
from tests.engine.test_trace_consumers import damaged, figure_places, recorded_lines


@pytest.fixture(scope="module")
def traces(smollm_session) -> dict[str, list[dict]]:
    import json

    found = {"auto": recorded_lines(smollm_session, "auto")}
    for path in demo_traces.shipped():  # a draft model's, lookahead's and prompt lookup's
        found[path.stem] = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    return found


@pytest.fixture(scope="module")
def film(qapp, tmp_path_factory):
    folder = tmp_path_factory.mktemp("film")
    window = MainWindow(autoload=False, settings=QtCore.QSettings(str(folder / "s.ini"), QtCore.QSettings.IniFormat))
    yield window
    window.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_what_a_damaged_trace_loads_plays_in_the_window_and_titles_a_video(traces, film, qtbot, data):
    name = data.draw(st.sampled_from(sorted(traces)))
    records = traces[name]
    places = figure_places(records)
    lines = damaged(records, [(data.draw(st.sampled_from(places)), data.draw(_JSON_VALUES)) for _ in range(2)])
    try:
        trace = parse(lines, "damaged.jsonl")
    except TraceError as exc:
        assert "\n" not in str(exc) and "damaged.jsonl" in str(exc)
        return
    assert not title_card(trace, (1280, 720)).isNull()
    film.demo.play_trace(trace)
    film.demo.player.finish_now()  # every event through the window's handlers at once
    qtbot.wait(1)
    film.runs.paint_figures()
    film.demo.close_replay()

"""Damaged traces of real runs, fed to what reads them (issue 79, item 4): the CLI's replay and its
figures, as ``specdec replay`` prints them. The parser's own fuzz (test_trace.py) checks that a
damaged trace loads or is refused; this one checks that what loads is safe to print: no traceback,
no hang, exit status 0 or 2 with one sentence. (The window's handlers and the video's title card
are fed alike in tests/app/test_trace_consumers.py.)"""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_studio.engine.cli.main import main as specdec
from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.records.trace import TraceRecorder, dump_lines
from tests.conftest import CODE_PROMPT
from tests.engine.test_trace import _JSON_VALUES, _paths, _replaced


def recorded_lines(session, mode: str) -> list[dict]:
    """A short real run of ``mode`` as a trace's records (Auto's steps carry its decisions, a
    draft-then-verify run's its k, the end its figures and Auto's account)."""
    recorder = TraceRecorder()
    config = RunConfig(mode=mode, max_tokens=12, speculative=SpeculativeParams(k=4))
    for event in session.run(config, session.tokenize_prompt(CODE_PROMPT)):
        recorder.add(event)
    return [json.loads(line) for line in dump_lines(recorder.trace())]


@pytest.fixture(scope="module")
def real_traces(smollm_session) -> dict[str, list[dict]]:
    return {mode: recorded_lines(smollm_session, mode) for mode in ("auto", "lookup")}


def figure_places(records: list[dict]) -> list[tuple[int, tuple]]:
    """Every place in the records outside the KV pictures and batches (the parser's fuzz covers
    those) and the events' times (a replay waits as long as the trace says: up to a week, which the
    parser's fuzz bounds): the header, the run's start, each step's tokens, extra and Auto step, the
    end's figures."""
    skip = {"KvSnapshot", "StepBatch"}
    return [(i, path) for i, record in enumerate(records) if record.get("type") not in skip
            for path, _ in _paths(record) if path[:1] != ("t",)]


def damaged(records: list[dict], changes) -> list[str]:
    records = list(records)
    for (line, path), value in changes:
        try:
            records[line] = _replaced(records[line], path, value)
        except (KeyError, IndexError, TypeError):
            pass
    return [json.dumps(r) for r in records]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_what_a_damaged_trace_loads_is_printed_or_refused_in_one_sentence(real_traces, tmp_path, capsys, data):
    mode = data.draw(st.sampled_from(sorted(real_traces)))
    records = real_traces[mode]
    places = figure_places(records)
    changes = [(data.draw(st.sampled_from(places)), data.draw(_JSON_VALUES)) for _ in range(2)]
    path = tmp_path / "damaged.jsonl"
    path.write_text("\n".join(damaged(records, changes)) + "\n")
    for extra in ([], ["--json"]):
        capsys.readouterr()
        status = specdec(["replay", str(path), "--speed", "4", *extra])
        err = capsys.readouterr().err
        assert status in (0, 2), (status, err)
        if status == 2:
            assert err.strip().startswith("specdec:") and "Traceback" not in err, err

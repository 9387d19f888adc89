"""Recorded runs: every event survives a trace file exactly, a damaged trace is refused with a clear
sentence, and each step's batch says what was sent and what verification made of it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_studio.engine.records import trace, trace_read
from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.events import (
    BatchRow,
    KvSnapshot,
    RejectedDraft,
    RunFinished,
    RunStarted,
    StepBatch,
    StepDone,
    TokenInfo,
)
from specdec_studio.engine.records.trace import Replay, TraceError, TraceRecorder
from tests.conftest import CODE_PROMPT

CONFIGS = {
    "plain": RunConfig(max_tokens=24),
    # the others explain their tokens, as a recorded trace does: the explanations survive the file too
    "lookahead": RunConfig(mode="lookahead", max_tokens=40, lookahead=LookaheadParams(4, 3, 4), explain=True),
    "lookup": RunConfig(mode="lookup", max_tokens=40, speculative=SpeculativeParams(k=4), explain=True),
    "auto": RunConfig(mode="auto", max_tokens=40, explain=True),
}


def _record(session, config: RunConfig) -> trace.Trace:
    """As ``specdec run --trace`` records: every event, and a KV snapshot after every step."""
    recorder = TraceRecorder()
    for event in session.run(config, session.tokenize_prompt(CODE_PROMPT)):
        recorder.add(event)
        if isinstance(event, StepDone):
            recorder.add(session.kv_snapshot(event.step, config.n_sequences))
    return recorder.trace()


@pytest.fixture(scope="module")
def recorded(smollm_session) -> dict[str, trace.Trace]:
    return {name: _record(smollm_session, config) for name, config in CONFIGS.items()}


def _same_event(a, b) -> bool:
    if isinstance(a, KvSnapshot):
        return (isinstance(b, KvSnapshot) and a.step == b.step and a.used == b.used and a.holes == b.holes
                and np.array_equal(a.seq_of_cell, b.seq_of_cell) and np.array_equal(a.kept, b.kept)
                and np.array_equal(a.pos_of_cell, b.pos_of_cell) and np.array_equal(a.written_step, b.written_step))
    if isinstance(a, StepDone):  # the extra dict's tuples come back as lists
        return (a.step, a.tokens, a.n_drafted, a.n_accepted, a.t_decode_s) == \
            (b.step, b.tokens, b.n_drafted, b.n_accepted, b.t_decode_s) and \
            json.dumps(a.extra) == json.dumps(b.extra)
    return a == b


@pytest.mark.parametrize("name", list(CONFIGS))
def test_trace_round_trip_is_exact(recorded, name, tmp_path):
    original = recorded[name]
    path = tmp_path / f"{name}.jsonl"
    trace.save(original, path)
    loaded = trace.load(path)
    assert loaded.header["format"] == trace.FORMAT and loaded.header["version"] == trace.VERSION
    assert loaded.config == original.config
    assert len(loaded.events) == len(original.events)
    for (t0, a), (t1, b) in zip(original.events, loaded.events):
        assert abs(t0 - t1) < 1e-5
        assert _same_event(a, b), (type(a).__name__, a, b)
    assert loaded.finished.text == original.finished.text
    assert loaded.finished.stats == original.finished.stats


def test_kv_snapshots_are_stored_as_changes(recorded, tmp_path):
    path = tmp_path / "lookahead.jsonl"
    trace.save(recorded["lookahead"], path)
    lines = [json.loads(line) for line in path.read_text().splitlines()[1:]]
    kv = [line for line in lines if line["type"] == "KvSnapshot"]
    assert len(kv) > 3
    full = kv[0]["data"]
    assert not full["delta"]
    # every later snapshot carries fewer cells than the cache uses: only what the step changed
    assert all(line["data"]["delta"] and len(line["data"]["cells"]) < line["data"]["used"] for line in kv[2:])


def test_replay_hands_out_every_event_in_order(recorded):
    original = recorded["lookup"]
    replay = Replay(original, speed=4.0)
    got = []
    while not replay.done:
        got += replay.advance(0.01)
    expected = [e for _, e in original.events]
    assert len(got) == len(expected) and all(_same_event(a, b) for a, b in zip(got, expected))
    # stepping: each call ends with the next step's StepDone
    replay = Replay(original)
    first = replay.next_step()
    assert isinstance(first[0], RunStarted) and isinstance(first[-1], StepDone) and first[-1].step == 0
    second = replay.next_step()
    assert isinstance(second[-1], StepDone) and second[-1].step == 1
    assert replay.seek_end()[-1] == original.finished


@pytest.mark.parametrize("damage", ["cut_mid_line", "cut_at_line", "garbage_line", "bad_version", "not_a_trace",
                                    "empty", "missing_field"])
def test_damaged_trace_is_refused_with_one_sentence(recorded, tmp_path, damage):
    path = tmp_path / "run.jsonl"
    trace.save(recorded["plain"], path)
    text = path.read_text()
    lines = text.splitlines()
    if damage == "cut_mid_line":
        text = text[: len(text) - len(lines[-1]) // 2 - 1]
    elif damage == "cut_at_line":
        text = "\n".join(lines[:-1]) + "\n"
    elif damage == "garbage_line":
        text = "\n".join(lines[:3] + ["{not json"] + lines[3:])
    elif damage == "bad_version":
        text = "\n".join([lines[0].replace(f'"version": {trace.VERSION}', '"version": 99')] + lines[1:])
    elif damage == "not_a_trace":
        text = '{"hello": 1}\n' + "\n".join(lines[1:])
    elif damage == "empty":
        text = ""
    elif damage == "missing_field":
        broken = json.loads(lines[2])
        broken["data"].pop("step", None)
        broken["data"].pop("text", None)
        text = "\n".join(lines[:2] + [json.dumps(broken)] + lines[3:])
    path.write_text(text)
    with pytest.raises(TraceError) as err:
        trace.load(path)
    message = str(err.value)
    assert "\n" not in message and "run.jsonl" in message
    assert any(word in message for word in ("truncated", "corrupted", "version", "not a SpecDec", "empty"))


def test_missing_trace_file_names_the_path(tmp_path):
    with pytest.raises(TraceError, match="no trace file"):
        trace.load(tmp_path / "nowhere.jsonl")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_step_batch_describes_the_decode_and_its_verdicts(recorded, name):
    events = [e for _, e in recorded[name].events]
    batches = {e.step: e for e in events if isinstance(e, StepBatch)}
    steps = [e for e in events if isinstance(e, StepDone) and e.step > 0]
    assert steps and all(s.step in batches for s in steps)
    config = CONFIGS[name]
    candidate_roles = {"plain": set(), "lookahead": {"ngram"}, "lookup": {"ngram"},
                       "auto": {"ngram", "ngram_alt", "suffix", "draft"}}[name]
    for s in steps:
        rows = batches[s.step].rows
        inputs = [r for r in rows if r.role == "input"]
        assert len(inputs) == 1 and inputs[0].logits
        # the accepted rows are the step's accepted tokens, in order
        accepted = [r for r in rows if r.verdict == "accepted"]
        assert len(accepted) == s.n_accepted
        assert [r.token for r in accepted] == [t.id for t in s.tokens[: s.n_accepted]]
        assert all(r.role in candidate_roles for r in accepted)
        # a mismatch is a candidate the target did not choose, never the step's input
        assert all(r.role in candidate_roles for r in rows if r.verdict == "rejected")
        if name == "lookahead":
            W = config.lookahead.W
            assert {r.role for r in rows} <= {"redecode", "input", "ngram", "window"}
            assert all(max(r.seqs) <= config.n_sequences - 1 for r in rows)
            assert any(r.role == "window" for r in rows) and W > 1
        if name == "lookup" and s.n_drafted > s.n_accepted:
            assert sum(r.verdict == "rejected" for r in rows) == 1  # the first mismatch, where it stopped
    # a token's position: the input row sits right after the previous steps' tokens
    started = events[0]
    n_emitted = 1  # step 0's token
    for s in steps:
        input_row = next(r for r in batches[s.step].rows if r.role == "input")
        assert input_row.pos == started.n_prompt + n_emitted - 1
        n_emitted += len(s.tokens)


def test_kv_snapshot_ages_and_removals(recorded):
    events = [e for _, e in recorded["lookup"].events]
    snaps = [e for e in events if isinstance(e, KvSnapshot)]
    started = events[0]
    last = snaps[-1]
    used = last.kept.any(axis=0)
    pos = last.pos_of_cell[used]
    written = last.written_step[used]
    assert (written[pos < started.n_prompt] == 0).all()  # the prompt: written before step 1
    generated = np.argsort(pos[pos >= started.n_prompt])
    assert (np.diff(written[pos >= started.n_prompt][generated]) >= 0).all()  # later positions, later steps
    # a step that rejected drafts shows the cells it removed
    rejecting = {e.step for e in events if isinstance(e, StepDone) and e.n_drafted > e.n_accepted}
    assert rejecting
    assert any(s.removed.any() for s in snaps if s.step in rejecting)
    assert all(s.removed.sum() == 0 for s in snaps
               if s.step not in rejecting and s.step in {e.step for e in events if isinstance(e, StepDone)})


def test_cli_run_writes_a_trace_and_replay_plays_it(smollm_path, tmp_path, capsys):
    from specdec_studio.engine.cli import main

    path = tmp_path / "cli.jsonl"
    assert main(["run", "-m", str(smollm_path), "--mode", "lookahead", "-n", "16", "-p", CODE_PROMPT,
                 "--trace", str(path), "--json", "-t", "2", "--no-predict"]) == 0
    ran = json.loads(capsys.readouterr().out)
    assert main(["replay", str(path), "--speed", "4", "--json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert replayed["token_ids"] == ran["token_ids"] and replayed["text"] == ran["text"]
    assert replayed["stats"]["tokens_per_second"] == pytest.approx(ran["stats"]["tokens_per_second"])
    path.write_text(path.read_text()[:-40])
    assert main(["replay", str(path)]) == 2
    assert "truncated" in capsys.readouterr().err


# ----------------------------------------------------------------------------- hostile traces
def _small_trace() -> list[str]:
    """A complete trace of a made-up lookahead run (no model needed): header, start, two steps
    with their batches and KV snapshots, a rejected draft, the end."""
    config = RunConfig(mode="lookahead", max_tokens=4, lookahead=LookaheadParams(2, 3, 1))
    recorder = TraceRecorder()
    n_seq, n_cells = config.n_sequences, 16

    def snapshot(step: int, used: int) -> KvSnapshot:
        seq_of_cell = np.zeros((n_seq, n_cells), dtype=bool)
        seq_of_cell[0, :used] = True
        seq_of_cell[1, used - 1] = True
        pos = np.where(np.arange(n_cells) < used, np.arange(n_cells), -1).astype(np.int32)
        written = np.where(np.arange(n_cells) < used, step, -1).astype(np.int32)
        return KvSnapshot(step, seq_of_cell, pos, used, 0, n_cells - used, (0, used - 1, -1, -1),
                          (used - 1, used - 1, -1, -1), None, written)

    events = [RunStarted(config.as_dict(), {"name": "made-up", "arch": "llama"}, 5, "def f("),
              StepDone(0, (TokenInfo(7, "x", "sampled"),), 0, 0, 0.01, 0.01),
              StepBatch(1, (BatchRow(7, "x", 5, (0,), True, "input", ""), BatchRow(8, "y", 6, (1,), True, "ngram",
                                                                                   "accepted"))),
              RejectedDraft(1, (9,), ("z",)),
              StepDone(1, (TokenInfo(8, "y", "accepted_ngram"), TokenInfo(3, "w", "sampled")), 2, 1, 0.02, 0.02),
              RunFinished("xyw", (7, 8, 3), "length", {
                  "n_prompt": 5, "n_predict": 3, "n_drafted": 2, "n_accept": 1, "accept_rate": 0.5, "steps": 2,
                  "t_encode_s": 0.01, "t_generate_s": 0.03, "encode_tokens_per_second": 500.0,
                  "tokens_per_second": 100.0, "tokens_per_step_hist": {1: 1, 2: 1}}, None)]
    for i, event in enumerate(events):
        recorder.add(event, now=0.01 * i)
        if isinstance(event, StepDone):
            recorder.add(snapshot(event.step, 6 + 2 * event.step), now=0.01 * i + 0.001)
    return list(trace.dump_lines(recorder.trace()))


def _paths(value, prefix=()):
    """Every place in a JSON value: (path, value) for the value itself and all it contains."""
    yield prefix, value
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, prefix + (k,))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, prefix + (i,))


def _replaced(value, path, new):
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replaced(value[path[0]], path[1:], new)
    return copy


_LINES = _small_trace()
_RECORDS = [json.loads(line) for line in _LINES]
# every place a damaged file could hold something else: the header (its config and model facts among
# them), and every field of every event (the KV snapshots' cells, sizes and masks among them)
_PLACES = [(i, path) for i, record in enumerate(_RECORDS) for path, _ in _paths(record)]
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([-1, 0, 1, 2**31, 2**40, 10**9])
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=12)
    | st.sampled_from(["ff", "zz", "00" * 40, "lookahead", "auto", "plain"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=8)


def test_the_made_up_trace_loads():
    loaded = trace.parse(_LINES, "made-up.jsonl")
    assert loaded.finished.text == "xyw" and loaded.config["mode"] == "lookahead"


# 400 damaged traces in the regular run, 2,000 more with -m slow
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(_PLACES), new=_JSON_VALUES, also=st.sampled_from(_PLACES), other=_JSON_VALUES)
def test_a_damaged_trace_is_refused_in_one_sentence_or_read_whole(place, new, also, other):
    """Any field of a trace replaced by any JSON value (two at a time): the trace loads, or it is
    refused with a TraceError of one line. Nothing else may escape (no MemoryError from a huge
    KV map, no silently wrapped negative cell, no traceback from a config of the wrong type)."""
    _check_damaged(place, new, also, other)


@pytest.mark.slow
@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(place=st.sampled_from(_PLACES), new=_JSON_VALUES, also=st.sampled_from(_PLACES), other=_JSON_VALUES)
def test_many_more_damaged_traces_are_refused_in_one_sentence_or_read_whole(place, new, also, other):
    _check_damaged(place, new, also, other)


def _check_damaged(place, new, also, other) -> None:
    records = list(_RECORDS)
    for (line, path), value in ((place, new), (also, other)):
        try:
            records[line] = _replaced(records[line], path, value)
        except (KeyError, IndexError, TypeError):  # the first change removed this place
            pass
    lines = [json.dumps(r) for r in records]
    try:
        loaded = trace.parse(lines, "damaged.jsonl")
    except TraceError as exc:
        assert "\n" not in str(exc) and "damaged.jsonl" in str(exc)
        return
    # what loads is what the window may rely on
    assert isinstance(loaded.header.get("model", {}), dict) and isinstance(loaded.title, str)
    RunConfig.from_dict(loaded.config)
    for _, event in loaded.events:
        if isinstance(event, KvSnapshot):
            assert event.seq_of_cell.shape[1] == event.pos_of_cell.shape[0] <= trace_read.MAX_KV_CELLS
            assert (event.pos_of_cell >= -1).all()


class _Markup:
    """What a browser would build from a page: its elements, their attributes, and its text."""

    def __init__(self, page: str) -> None:
        from html.parser import HTMLParser

        self.tags: list[str] = []
        self.attributes: list[tuple[str, str]] = []
        self.text: list[str] = []
        outer = self

        class Reader(HTMLParser):
            def handle_starttag(self, tag, attrs):
                outer.tags.append(tag)
                outer.attributes += [(name, value or "") for name, value in attrs]

            def handle_data(self, data):
                outer.text.append(data)

        Reader(convert_charrefs=True).feed(page)


EVIL = '"><script>alert(1)</script><img src=x onerror="alert(2)">'


def test_reports_and_transcripts_of_a_crafted_trace_carry_no_markup_from_it():
    from specdec_studio.engine.records import report
    from specdec_studio.engine.chat import transcript
    from specdec_studio.engine.chat.conversation import Conversation, Message

    records = [json.loads(line) for line in _LINES]
    records[0]["model"] = {"name": EVIL, EVIL: EVIL}
    records[0]["created"] = EVIL
    for record in records[1:]:
        data = record["data"]
        if record["type"] == "RunStarted":
            data["prompt_text"] = EVIL
            data["config"]["mode"] = "lookahead"
        if record["type"] == "StepDone":
            data["tokens"] = [[t[0], EVIL, EVIL] for t in data["tokens"]]  # the text and the source
        if record["type"] == "RunFinished":
            data["finish_reason"] = EVIL
    crafted = trace.parse([json.dumps(r) for r in records], "crafted.jsonl")
    conv = Conversation(title=EVIL)
    conv.add(Message("user", EVIL))
    conv.add(Message("assistant", EVIL, pieces=[[EVIL, EVIL, EVIL], [EVIL, "accepted_draft", 1, 5, 1.0]]))
    pages = {"report": report.run_report(crafted, {EVIL: b"\x89PNG"}), "transcript": report.transcript_html(crafted),
             "conversation": transcript.to_html(conv.view())}
    for name, page in pages.items():
        seen = _Markup(page)
        assert "script" not in seen.tags and "img" not in set(seen.tags) - ({"img"} if name == "report" else set()), (
            name
        )
        assert not [a for a, _ in seen.attributes if a.startswith("on")], name
        assert EVIL in "".join(seen.text), name  # shown as the text it is
    report_tags = _Markup(pages["report"])
    assert report_tags.tags.count("img") == 1  # the one plot passed in, not the crafted one


def test_a_traces_kv_pictures_are_kept_compactly_and_read_back_whole(smollm_session, monkeypatch):
    """A run past its budget of whole pictures (here none), a keyframe or two in: every snapshot the
    trace gives back equals the one the run took, while the trace keeps a fraction of their bytes."""
    from specdec_studio.engine.records import kv_history
    from specdec_studio.engine.records.kv_history import KEYFRAME_EVERY

    monkeypatch.setattr(kv_history, "WHOLE_BYTES", 0)

    config = RunConfig(mode="lookahead", max_tokens=160, lookahead=LookaheadParams(4, 3, 4))
    recorder, taken = TraceRecorder(), []
    for event in smollm_session.run(config, smollm_session.tokenize_prompt(CODE_PROMPT)):
        recorder.add(event)
        if isinstance(event, KvSnapshot):  # the run's own (a cleared cache's, before its first step)
            taken.append(event)
        if isinstance(event, StepDone):
            taken.append(smollm_session.kv_snapshot(event.step, config.n_sequences))
            recorder.add(taken[-1])
    recorded = recorder.trace()
    kept = [e for _, e in recorded.events if isinstance(e, KvSnapshot)]
    assert len(kept) == len(taken) > 2 * KEYFRAME_EVERY
    assert all(_same_event(a, b) and a.cache_cells == b.cache_cells for a, b in zip(kept, taken))
    full = sum(a.nbytes for s in taken for a in (s.seq_of_cell, s.pos_of_cell, s.kept_seq_of_cell, s.written_step)
               if a is not None)
    assert recorded.events._kv.nbytes < full / 4

"""Chat that lasts: the conversation model, prefix reuse, context overflow, persistence."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from specdec_studio.engine.chat.turns import AnswerInProgress, Chat, ConversationChanged, keep_interrupted
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.chat.conversation import INTERRUPTED, Conversation, Message
from specdec_studio.engine.chat.store import ConversationStore
from specdec_studio.engine.errors import PromptError
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.session import Session
from tests.conftest import N_THREADS
from tests.engine.lossless import assert_lossless

TURNS = ("Name a colour.", "Name a fruit of that colour.", "And a vegetable?", "Which is sweeter?",
         "Give it a name.", "Spell it backwards.", "Name a country.", "Its capital?", "One more city there?",
         "Thanks. Say goodbye.")


def _final(events) -> RunFinished:
    return [e for e in events if isinstance(e, RunFinished)][-1]


@pytest.fixture(scope="module")
def fresh_session(smollm_path):
    """A second session for full decodes from an empty cache (the chat's cache stays warm)."""
    with Session(smollm_path, n_ctx=2048, n_threads=N_THREADS) as session:
        yield session


# lookup's ten turns under -m slow, plain's six in the regular run (ten with -m slow too): the regular
# run checks drafting modes from a warm chat cache (test_lookahead_and_a_draft_model_start_from_the_warm_cache)
# and Auto's answers after a reused prompt against plain's (tests/engine/test_auto.py)
@pytest.mark.parametrize("mode, n_turns", [("plain", 6), pytest.param("plain", 10, marks=pytest.mark.slow),
                                           pytest.param("lookup", 10, marks=pytest.mark.slow)])
def test_turns_decode_only_new_tokens_and_equal_fresh_decodes(smollm_session, fresh_session, exactness_probe,
                                                              mode, n_turns):
    session = smollm_session
    deviation = exactness_probe(Path(session.model.info.path))["max_abs_diff"]
    chat = Chat(session)
    config = RunConfig(mode=mode, max_tokens=16)
    previous_prompt: list[int] = []
    previous_answer: list[int] = []
    for turn, text in enumerate(TURNS[:n_turns]):
        final = _final(chat.send(config, text))
        prompt = list(session.last_prompt_tokens)
        stats = final.stats
        assert stats["n_prompt"] == len(prompt)
        assert stats["n_prompt_reused"] + stats["n_prompt_decoded"] == len(prompt)
        if turn > 0:
            # the previous prompt and answer stay in the cache: only this turn's message (and the
            # one answer token the last run sampled but never decoded) is decoded
            assert prompt[: len(previous_prompt)] == previous_prompt
            assert stats["n_prompt_reused"] >= len(previous_prompt) + len(previous_answer) - 2
            new_tokens = len(prompt) - len(previous_prompt) - len(previous_answer)
            assert stats["n_prompt_decoded"] <= new_tokens + 2
        fresh = _final(fresh_session.run(RunConfig(mode="plain", max_tokens=16), prompt))
        assert fresh.stats["n_prompt_reused"] == 0
        assert_lossless(fresh_session, prompt, fresh.token_ids, final.token_ids, deviation, f"{mode} turn {turn}")
        # the answer joins the conversation with the ids the model produced
        answer = chat.conversation.messages[-1]
        assert answer.role == "assistant" and answer.content == final.text
        assert answer.produced[: len(final.token_ids)] == list(final.token_ids)
        previous_prompt, previous_answer = prompt, answer.produced
    assert len(chat.conversation.messages) == 2 * n_turns


def test_lookahead_and_a_draft_model_start_from_the_warm_cache(smollm_path, smollm_drafts):
    from specdec_studio.engine.config import LookaheadParams, SpeculativeParams

    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS, verify_kv=True,
                 draft_path=smollm_drafts["default-q3_k_m"]) as session:
        chat = Chat(session)
        lookahead = RunConfig(mode="lookahead", max_tokens=16, lookahead=LookaheadParams(3, 3, 3))
        speculative = RunConfig(mode="speculative", max_tokens=16, speculative=SpeculativeParams(k=3))
        _final(chat.send(lookahead, "Name a colour."))  # the context grows to 7 sequences: cold
        second = _final(chat.send(lookahead, "Name a fruit of that colour."))
        assert second.stats["n_prompt_reused"] > 20
        third = _final(chat.send(speculative, "And a vegetable?"))
        assert third.stats["n_prompt_reused"] > 40
        fourth = _final(chat.send(speculative, "Which is sweeter?"))
        # the draft kept its own cache too: it decoded only what is new
        assert fourth.stats["n_prompt_reused"] > third.stats["n_prompt"]
        assert session.draft.cached[: third.stats["n_prompt"]] == session.last_prompt_tokens[: third.stats["n_prompt"]]
        auto = _final(chat.send(RunConfig(mode="auto", max_tokens=16), "Name both again."))
        assert auto.stats["n_prompt_reused"] > fourth.stats["n_prompt"]
        again = _final(chat.send(RunConfig(mode="auto", max_tokens=16), "And once more?"))
        assert again.stats["n_prompt_reused"] > auto.stats["n_prompt"]
        assert session.memory.verifier.n_checked > 0


def test_regenerate_and_edit_reuse_everything_before_the_edit_point(smollm_session):
    chat = Chat(smollm_session)
    config = RunConfig(max_tokens=12)
    _final(chat.send(config, "Name a colour."))
    _final(chat.send(config, "Name an animal."))
    before = list(smollm_session.last_prompt_tokens)
    regen = _final(chat.regenerate(config))
    assert regen.stats["n_prompt_reused"] == len(before) - 1  # all but the token that gives the logits
    assert [m.content for m in chat.conversation.messages if m.role == "user"] == ["Name a colour.", "Name an animal."]
    edited = _final(chat.edit(2, "Name a bird.", config))
    users = [m.content for m in chat.conversation.messages if m.role == "user"]
    assert users == ["Name a colour.", "Name a bird."]
    first_turn = len(chat.conversation.messages[0].tokens) + len(chat.conversation.messages[1].tokens)
    assert edited.stats["n_prompt_reused"] >= first_turn - 1
    with pytest.raises(PromptError, match="only your own messages"):
        chat.edit(1, "x", config)


def test_overflow_drops_the_oldest_turns_and_the_mirror_follows(smollm_path):
    with Session(smollm_path, n_ctx=512, n_threads=N_THREADS, verify_kv=True) as session:
        chat = Chat(session)
        chat.set_system("You are brief.")
        config = RunConfig(mode="lookup", max_tokens=40)
        notes = []
        for turn in range(20):
            events = list(chat.send(config, f"Turn {turn}: tell me one more fact about the sea, please."))
            notes += [e.note for e in events if isinstance(e, ConversationChanged) and e.note]
            assert _final(events).finish_reason in ("stop", "length", "context_full")
        conv = chat.conversation
        assert conv.n_dropped > 0 and any("no longer sees" in n for n in notes)
        assert conv.messages[0].role == "system" and not conv.is_dropped(0)
        assert all(conv.is_dropped(i) for i in range(1, 1 + conv.n_dropped))
        view = conv.view()
        assert sum(m.dropped for m in view.messages) == conv.n_dropped
        assert session.memory.verifier.n_checked > 100  # llama.cpp's dump matched the mirror throughout
        assert session.last_prompt_tokens[: len(conv.messages[0].tokens)] == conv.messages[0].tokens


def test_a_message_larger_than_the_context_is_refused_and_nothing_is_lost(smollm_path):
    with Session(smollm_path, n_ctx=128, n_threads=N_THREADS) as session:
        chat = Chat(session)
        _final(chat.send(RunConfig(max_tokens=8), "Hi."))
        def record():
            return [(m.role, m.content, m.produced, m.state) for m in chat.conversation.messages]

        before = record()
        with pytest.raises(PromptError, match="context holds only 128"):
            chat.send(RunConfig(max_tokens=8), "word " * 400)
        assert record() == before and chat.conversation.n_dropped == 0


def test_the_answer_ids_are_the_models_own_not_a_retokenisation(smollm_session):
    chat = Chat(smollm_session)
    first = _final(chat.send(RunConfig(max_tokens=60), "Write the word 'hello' three times."))
    _final(chat.send(RunConfig(max_tokens=4), "Again."))
    user, answer, again, _ = chat.conversation.messages
    prompt = smollm_session.last_prompt_tokens
    # the next prompt is the messages' ids in order, then the template's generation prompt
    assert (
        prompt[: len(user.tokens) + len(answer.tokens) + len(again.tokens)]
        == user.tokens + answer.tokens + again.tokens
    )
    # and the answer's ids contain what the model produced, verbatim
    produced = list(first.token_ids)
    start = len(user.tokens)
    window = prompt[start: start + len(answer.tokens)]
    assert any(window[i: i + len(produced)] == produced for i in range(len(window) - len(produced) + 1))
    # the end-of-turn token the model produced closes the turn once, not twice
    if first.end_token is not None:
        assert answer.tokens.count(first.end_token) == 1


def test_persistence_round_trip_and_search(tmp_path, smollm_session):
    store = ConversationStore(tmp_path)
    chat = Chat(smollm_session, store=store)
    _final(chat.send(RunConfig(mode="lookup", max_tokens=12), "Name a colour."))
    conv = chat.conversation
    again = store.load(conv.id)
    assert again.to_dict() == conv.to_dict()
    assert [s.id for s in store.list("colour")] == [conv.id]
    assert store.list("no such words") == []
    store.rename(conv.id, "Colours")
    assert store.list()[0].title == "Colours"
    store.set_last_opened(conv.id)
    assert store.last_opened() == conv.id
    (store.root / "broken.json").write_text("{not json")
    assert [s.id for s in store.list()] == [conv.id]  # a damaged file costs only itself
    store.delete(conv.id)
    assert store.list() == [] and store.last_opened() is None


def test_a_streaming_answer_is_marked_interrupted_when_read_back(tmp_path):
    conv = Conversation()
    conv.add(Message("user", "Hello"))
    conv.add(Message("assistant", "Hi th", state="streaming"))
    store = ConversationStore(tmp_path)
    store.save(conv)
    back = store.load(conv.id)
    assert back.messages[-1].state == INTERRUPTED and back.messages[-1].content == "Hi th"


def test_a_stopped_turn_keeps_its_partial_answer(smollm_session):
    chat = Chat(smollm_session)
    events = chat.send(RunConfig(max_tokens=200), "Count from one to fifty in words.")
    for event in events:
        if isinstance(event, StepDone) and event.step >= 5:
            smollm_session.cancel()
    answer = chat.conversation.messages[-1]
    assert answer.state == INTERRUPTED and answer.finish_reason == "cancelled" and answer.content
    follow = _final(chat.send(RunConfig(max_tokens=8), "Go on."))
    assert follow.stats["n_prompt_reused"] > 0


def test_an_answer_followed_from_its_events_is_kept_after_its_engine_dies(tmp_path, smollm_session, monkeypatch):
    """What an engine process streamed after its last save reaches the saved conversation through
    the window's follower (app.worker.engine_process), as the engine itself would have written it."""
    from specdec_studio.engine.chat import turns

    monkeypatch.setattr(turns, "SAVE_INTERVAL_S", 3600.0)  # no save mid-turn, however slow the machine
    store = ConversationStore(tmp_path)
    chat = Chat(smollm_session, store=store)
    follower = AnswerInProgress()
    events = chat.send(RunConfig(mode="lookup", max_tokens=200), "Count from one to thirty in words, one per line.")
    for event in events:
        follower.follow(event)
        if isinstance(event, StepDone) and event.step >= 12:
            break
    # the engine "dies" here: the file holds the answer of its last save (at the turn's start), the
    # engine's memory what it streamed since
    in_memory = chat.conversation.messages[-1]
    conv_id, pieces = follower.interrupted()
    on_disk = store.load(conv_id)
    assert conv_id == chat.conversation.id and len(on_disk.messages[-1].pieces) < len(pieces)
    assert keep_interrupted(on_disk, pieces)
    kept = on_disk.messages[-1]
    assert kept.state == INTERRUPTED and kept.content == in_memory.content and kept.content
    assert kept.pieces == [p[:6] for p in in_memory.pieces]
    # an answer that is already as far as the stream went is left alone; a finished one too
    assert not keep_interrupted(on_disk, pieces)
    events.close()
    done = _final(chat.send(RunConfig(max_tokens=8), "Go on."))
    assert done.finish_reason in ("stop", "length")
    assert not keep_interrupted(store.load(conv_id), pieces + pieces)


def test_a_model_switch_re_encodes_the_conversation(smollm_session, smollm_drafts):
    chat = Chat(smollm_session)
    _final(chat.send(RunConfig(max_tokens=8), "Name a colour."))
    # another file (SmolLM2 requantised; Gemma-3-270M, the other model here, has no chat template)
    with Session(smollm_drafts["default-q3_k_m"], n_ctx=1024, n_threads=N_THREADS) as other:
        moved = Chat(other, chat.conversation)
        assert "re-encoded" in moved.note
        assert moved.conversation.messages[1].produced is None  # another model's ids are not kept
        final = _final(moved.send(RunConfig(max_tokens=8), "Another one?"))
        assert final.finish_reason in ("stop", "length")
        assert [m.role for m in moved.conversation.messages] == ["user", "assistant"] * 2
        assert "Name a colour." in other.vocab.detokenize(other.last_prompt_tokens)


KILL_SCRIPT = """
import sys
import time
from specdec_studio.engine.models import catalog
from specdec_studio.engine.chat.turns import Chat
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.chat.store import ConversationStore
from specdec_studio.engine.events import StepDone
from specdec_studio.engine.session import Session

store = ConversationStore()
with Session(catalog.resolve("default"), n_ctx=1024, n_threads=2) as session:
    chat = Chat(session, store=store)
    store.set_last_opened(chat.conversation.id)
    for event in chat.send(RunConfig(max_tokens=500), "Count from one to a thousand in words."):
        if isinstance(event, StepDone) and event.step == 1:
            time.sleep(2.1)  # the next step is past the periodic save's interval: it saves
        if isinstance(event, StepDone) and event.step == 3:
            print("saved while streaming", flush=True)
            time.sleep(600)  # killed here, in the middle of the run
"""


def test_kill_9_during_a_run_keeps_the_conversation_up_to_the_last_save(tmp_path):
    env = {**os.environ, "SPECDEC_DATA": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    proc = subprocess.Popen([sys.executable, "-c", KILL_SCRIPT], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "saved while streaming"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    store = ConversationStore(tmp_path)
    conv_id = store.last_opened()
    assert conv_id is not None
    conv = store.load(conv_id)
    assert conv.messages[0].content == "Count from one to a thousand in words."
    answer = conv.messages[1]
    assert answer.state == INTERRUPTED and answer.content.strip()


def test_the_id_inside_a_file_is_never_a_path(tmp_path):
    """A crafted id inside a file changes nothing: the file's name is the conversation."""
    store = ConversationStore(tmp_path)
    store.root.mkdir(parents=True)
    (store.root / "named.json").write_text('{"id": "../../escape", "messages": []}')
    conv = store.load("named")
    assert conv.id == "named"
    store.save(conv)
    assert sorted(p.name for p in tmp_path.rglob("*.json")) == ["named.json"]


@pytest.mark.parametrize("content", [
    "[1, 2, 3]",  # a list, not an object
    '{"id": "x", "updated": "yesterday", "messages": []}',  # a bad time
    '{"id": "x", "messages": [1, "two", null]}',  # messages that are not objects
    '{"id": "x", "messages": {"role": "user"}}',  # messages that are not a list
    '{"id": "x", "messages": [{"role": "user", "content": "hi", "pieces": [7]}]}',  # a piece that is no list
    # odd pieces (issue 47, defect 8: they raised on the GUI thread and left the window "Running…")
    '{"id": "x", "messages": [{"role": "assistant", "content": "hi", "pieces": [["hi"]]}]}',  # too short
    '{"id": "x", "messages": [{"role": "assistant", "content": "hi", "pieces": [["hi", "sampled", "one", 5, 0.0]]}]}',
    '{"id": "x", "messages": [{"role": "assistant", "content": "hi", "pieces": [[null, "sampled", 1, 5, 0.0]]}]}',
    '{"id": "x", "messages": [{"role": "assistant", "content": "hi", "pieces": [["hi", "sampled", 1, 5, "high"]]}]}',
    '"just a string"',
])
def test_a_damaged_conversation_file_costs_only_itself(tmp_path, content):
    store = ConversationStore(tmp_path)
    good = Conversation()
    good.add(Message("user", "Name a colour."))
    store.save(good)
    (store.root / "damaged.json").write_text(content)
    found, damaged = store.scan()
    assert [s.id for s in found] == [good.id] and damaged == ["damaged.json"]
    assert [s.id for s in store.list("colour")] == [good.id]
    from specdec_studio.engine.chat.store import DamagedConversation

    with pytest.raises(DamagedConversation, match="damaged.json is damaged") as err:
        store.load("damaged")
    assert "\n" not in str(err.value)


def test_a_turn_that_fails_to_start_drops_no_older_turns(smollm_path, tmp_path):
    """Fitting a turn may drop the oldest turns; if the run then cannot start (here: speculative
    without a draft), the conversation is as it was, on disk too."""
    from specdec_studio.engine.errors import ConfigError

    store = ConversationStore(tmp_path)
    with Session(smollm_path, n_ctx=256, n_threads=N_THREADS) as session:
        chat = Chat(session, store=store)
        for turn in range(2):
            _final(chat.send(RunConfig(max_tokens=24), f"Turn {turn}: tell me a fact about the sea, please."))
        conv = chat.conversation
        before = (conv.n_dropped, [(m.role, m.content, list(m.tokens)) for m in conv.messages])
        long_question = "Please tell me much more about the sea and its tides and its fish. " * 6
        with pytest.raises(ConfigError, match="draft model"):
            chat.send(RunConfig(mode="speculative", max_tokens=64), long_question)
        assert (conv.n_dropped, [(m.role, m.content, list(m.tokens)) for m in conv.messages]) == before
        assert store.load(conv.id).n_dropped == before[0]
        # the same message does drop turns when it can run: the failure above really had dropped some
        _final(chat.send(RunConfig(max_tokens=8), long_question))
        assert conv.n_dropped > before[0]


@pytest.mark.parametrize("how", ["regenerate", "edit"])
def test_regenerate_or_edit_stopped_before_its_first_token_keeps_what_it_replaced(smollm_session, tmp_path, how):
    """Issue 79: Regenerate (or Edit), then Stop before the first token, deleted the previous
    answer in memory and on disk (the turn saved the truncated chat before any token, and the
    empty answer was dropped). What a turn replaces now stays until its answer has a token: on
    disk while it runs, and in memory and on disk after a Stop or a failure."""
    store = ConversationStore(tmp_path)
    chat = Chat(smollm_session, store=store)
    config = RunConfig(max_tokens=8)
    _final(chat.send(config, "Name a colour."))
    before = [(m.role, m.content) for m in chat.conversation.messages]
    events = chat.regenerate(config) if how == "regenerate" else chat.edit(0, "Name a fruit.", config)
    first = next(events)
    assert isinstance(first, ConversationChanged)
    # a kill now would leave the file as it was
    assert [(m.role, m.content) for m in store.load(chat.conversation.id).messages] == before
    smollm_session.cancel()  # Stop, before the prompt's decode gives the first token
    final = _final(events)
    assert final.finish_reason == "cancelled" and not final.token_ids
    assert [(m.role, m.content) for m in chat.conversation.messages] == before
    assert [(m.role, m.content) for m in store.load(chat.conversation.id).messages] == before
    # and the chat goes on from there: the next regenerate replaces the answer once it has a token
    answer = _final(chat.regenerate(config))
    assert answer.token_ids and chat.conversation.messages[-1].content == answer.text
    assert store.load(chat.conversation.id).messages[-1].content == answer.text



def test_a_conversation_file_that_loads_reads_in_every_display(tmp_path):
    """Issue 79: a file with ``"updated": NaN`` (JSON's NaN loads) made ``/list`` print a traceback
    and the sidebar stop opening conversations, and figures without ``tokens_per_second`` raised in
    the window's figures line. A file that loads is now checked to what the displays read: a time
    that is no date reads as now, and figures keep only finite numbers of the names they know."""
    import json
    import math

    from specdec_studio.engine.chat.transcript import to_html, to_markdown

    store = ConversationStore(tmp_path)
    store.root.mkdir(parents=True)
    odd = {"id": "odd", "title": "Odd times", "created": -5, "updated": math.nan, "messages": [
        {"role": "user", "content": "hi", "created": math.inf},
        {"role": "assistant", "content": "hello", "figures": {"mode": "plain", "n_predict": 2, "n_drafted": 3,
                                                              "tokens_per_step": "fast", "accept_rate": math.nan}}]}
    (store.root / "odd.json").write_text(json.dumps(odd))  # json writes NaN and Infinity, and reads them
    good = Conversation()
    good.add(Message("user", "Name a colour."))
    store.save(good)
    listed, damaged = store.scan()
    assert sorted(s.id for s in listed) == sorted(["odd", good.id]) and not damaged
    assert all(math.isfinite(s.updated) for s in listed)
    conv = store.load("odd")
    assert math.isfinite(conv.messages[0].created)
    assert conv.messages[1].figures == {"mode": "plain", "n_predict": 2, "n_drafted": 3}
    assert "2 tokens" in to_markdown(conv.view()) and "accepted 0/3" in to_markdown(conv.view())
    assert "hello" in to_html(conv.view())
    # the CLI's /list, as a user types it
    env = {**os.environ, "SPECDEC_DATA": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "chat", "-n", "2", "--no-save"],
                          input="/list\n/quit\n", env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "Odd times" in done.stderr


def test_a_listing_reads_only_the_files_changed_since_the_last_one(tmp_path, monkeypatch):
    """Issue 79, item 11: every chat turn and every search read and checked every saved
    conversation again on the engine thread."""
    store = ConversationStore(tmp_path)
    saved = []
    for i in range(6):
        conv = Conversation()
        conv.add(Message("user", f"question {i} about {'tides' if i == 3 else 'bread'}"))
        store.save(conv)
        saved.append(conv)
    reads = []
    real_read = ConversationStore._read
    monkeypatch.setattr(ConversationStore, "_read", lambda self, path, **kw: reads.append(path.name)
                        or real_read(self, path, **kw))
    assert len(store.list()) == 6 and len(reads) == 6
    assert [s.id for s in store.list("TIDES")] == [saved[3].id] and len(reads) == 6  # a search reads nothing
    saved[0].add(Message("assistant", "about the tides, too"))
    store.save(saved[0])  # a turn: one file changed
    assert {s.id for s in store.list("tides")} == {saved[0].id, saved[3].id}
    assert reads[6:] == [f"{saved[0].id}.json"]
    (tmp_path / "conversations" / f"{saved[5].id}.json").unlink()
    (tmp_path / "conversations" / "broken.json").write_text("{not json")
    found, damaged = store.scan()
    assert len(found) == 5 and damaged == ["broken.json"] and reads[7:] == ["broken.json"]


def test_stop_ends_a_long_listing_at_the_next_file_and_the_next_listing_reads_the_rest(tmp_path, monkeypatch):
    """Issue 79, Stop everywhere: a first listing of many saved chats (the window lists them on the
    engine thread) ends at once on Stop, and keeps what it read for the listing after."""
    from specdec_studio.app.worker.jobs.conversations import emit_list
    from specdec_studio.app.worker.jobs.state import WorkerState
    from specdec_studio.engine.chat.store import ListingStopped

    store = ConversationStore(tmp_path)
    for i in range(8):
        conv = Conversation()
        conv.add(Message("user", f"question {i}"))
        store.save(conv)
    fresh = ConversationStore(tmp_path)  # a new session's first listing reads every file
    reads = []
    real_read = ConversationStore._read
    monkeypatch.setattr(ConversationStore, "_read", lambda self, path, **kw: reads.append(path.name)
                        or real_read(self, path, **kw))
    with pytest.raises(ListingStopped):
        fresh.scan(stopped=lambda: len(reads) >= 3)
    assert len(reads) == 3  # Stop was seen before the fourth file
    assert len(fresh.list()) == 8 and len(reads) == 8  # the rest, not the three again
    emitted = []
    state = WorkerState(emit=emitted.append)
    state.conversation_store = ConversationStore(tmp_path)
    state.cancel.set()  # the worker's listing job watches the job's Stop: it ends, the sidebar keeps its list
    reads.clear()
    emit_list(state)
    assert reads == [] and emitted == []

"""The edges users hit: a disk that refuses, a closed pipe, Ctrl+C, bytes that are not UTF-8,
same-named models, two writers of one conversation, and replays that must end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from specdec_studio.engine.chat import turns
from specdec_studio.engine.chat.conversation import Conversation, Message
from specdec_studio.engine.chat.store import ConversationStore
from specdec_studio.engine.chat.turns import Chat, ConversationChanged
from specdec_studio.engine.cli import main
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.models import catalog
from specdec_studio.engine.models.loading import LoadedModel, check_gguf_file
from specdec_studio.engine.records import trace
from specdec_studio.engine.session import Session
from tests.conftest import N_THREADS

CLI = [sys.executable, "-m", "specdec_studio.engine.cli"]


def _chat_cli(*args: str, data: Path, **kwargs) -> subprocess.Popen:
    env = {**os.environ, "SPECDEC_DATA": str(data)}
    return subprocess.Popen([*CLI, "chat", "-n", "8", "-t", str(N_THREADS), "-c", "1024", *args], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)


def _not_a_folder(tmp_path: Path) -> Path:
    """A data folder no one can write, even root: its parent is a file."""
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, not a folder")
    return blocker / "data"


# ------------------------------------------------------------------ saving never costs the answer
def test_an_unwritable_data_folder_still_answers_and_says_so_once(tmp_path):
    data = _not_a_folder(tmp_path)
    done = subprocess.run([*CLI, "chat", "-n", "6", "-t", str(N_THREADS), "-c", "1024"], input="Hi\nAnd again?\n",
                          env={**os.environ, "SPECDEC_DATA": str(data)}, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert len([line for line in done.stdout.splitlines() if line.strip()]) == 2  # both answers arrived
    assert done.stderr.count("not being saved") == 1 and "Traceback" not in done.stderr


def test_save_on_a_refusing_disk_says_so_and_the_chat_goes_on(tmp_path):
    """Defect 12 of issue 47: /save on a disk that refuses exited with status 2 and lost the chat."""
    data = _not_a_folder(tmp_path)
    done = subprocess.run([*CLI, "chat", "--no-save", "--json", "-n", "6", "-t", str(N_THREADS), "-c", "1024"],
                          input="Hi\n/save mine\nAnd again?\n/quit\n", env={**os.environ, "SPECDEC_DATA": str(data)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 4 and "error" in lines[1] and "not being saved" in lines[1]["error"]
    assert lines[2]["turn"] == 2 and lines[2]["stats"]["n_prompt_reused"] > 0  # answered, the chat kept
    assert lines[3] == {"command": "quit"} and "Traceback" not in done.stderr
    # said once: the next turn's own save, refused too, does not say it again
    assert done.stdout.count("not being saved") == 1 and done.stderr.count("not being saved") == 1, done.stderr


@pytest.mark.parametrize("flag", ["-p", "--system"])
def test_an_argument_that_is_not_utf8_is_one_sentence(flag):
    """Defect 12 of issue 47: a non-UTF-8 byte in -p printed a traceback."""
    word = os.fsdecode(b"caf\xe9 au lait")  # Latin-1 bytes, as a shell passes them
    command = "run" if flag == "-p" else "chat"
    done = subprocess.run([*CLI, command, flag, word, "-n", "2"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 2
    assert done.stderr.strip() == (f"specdec: {flag} is not UTF-8 text (byte 0xe9 at offset 3); "
                                   "give the text in UTF-8, or in a file with -f")


def test_a_disk_that_fills_mid_answer_keeps_the_answer_off_the_clock(smollm_session, tmp_path, monkeypatch):
    store = ConversationStore(tmp_path)
    chat = Chat(smollm_session, store=store)
    saves = []
    real_save = store.save

    def slow_then_full(conv):
        saves.append(time.perf_counter())
        time.sleep(0.5)  # a slow disk: its time is not the model's
        if len(saves) > 2:
            raise OSError(28, "No space left on device", str(store.root))
        return real_save(conv)

    monkeypatch.setattr(store, "save", slow_then_full)
    monkeypatch.setattr(turns, "SAVE_INTERVAL_S", 0.0)  # a save after every step
    seen = list(chat.send(RunConfig(max_tokens=8), "Count to ten."))
    final = next(e for e in seen if isinstance(e, RunFinished))
    notes = [e.note for e in seen if isinstance(e, ConversationChanged) and e.note]
    assert len(final.token_ids) == 8 and chat.conversation.messages[-1].content == final.text
    assert len(saves) >= 8 and len(notes) == 1 and "not being saved" in notes[0] and "No space" in notes[0]
    # at least 6 slow saves ran between the steps; none of their 0.5 s is in the generation time
    assert final.stats["t_generate_s"] < 0.5


# ------------------------------------------------------------------ an abandoned answer
def test_closing_a_session_closes_its_open_runs_first(smollm_path):
    with Session(smollm_path, n_ctx=512, n_threads=N_THREADS) as session:
        events = session.run(RunConfig(max_tokens=16), session.tokenize_prompt("Hello"))
        assert any(isinstance(next(events), StepDone) for _ in range(3))
    assert events.gi_frame is None  # its finally ran while the contexts were alive
    assert list(events) == []


def test_a_closed_pipe_ends_the_chat_quietly(tmp_path):
    proc = _chat_cli("--no-save", "-n", "256", data=tmp_path)
    # two messages: the second answer is written after the reader has gone, whatever the first did
    proc.stdin.write(b"Tell me a long story about a dragon.\nAnd one about a knight.\n")
    proc.stdin.flush()
    assert proc.stdout.read(1)  # the answer has begun: the reader goes away
    proc.stdout.close()
    proc.stdin.close()
    proc.wait(timeout=300)
    err = proc.stderr.read()
    assert proc.returncode == -signal.SIGPIPE, err  # as a shell tool ends under `| head`
    assert b"Traceback" not in err and b"Error" not in err


# ------------------------------------------------------------------ Ctrl+C
def test_ctrl_c_while_the_chat_waits_for_piped_input_ends_it(tmp_path):
    proc = _chat_cli("--no-save", data=tmp_path)
    deadline = time.monotonic() + 120
    seen = b""
    while b"[conversation" not in seen and time.monotonic() < deadline:  # loaded, now reading stdin
        seen += proc.stderr.read1(4096)
    time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail("Ctrl+C at the prompt was lost: the chat still waited for input")
    assert proc.returncode == 0 and b"Traceback" not in err


def test_ctrl_c_while_loading_stops_and_exits(tmp_path, monkeypatch, capsys):
    import specdec_studio.engine.session as session_module

    class InterruptedLoad(LoadedModel):
        def __init__(self, *args, **kwargs):
            os.kill(os.getpid(), signal.SIGINT)  # the user presses Ctrl+C during the load
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(session_module, "LoadedModel", InterruptedLoad)
    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path))
    monkeypatch.setattr(sys, "stdin", _NeverRead())
    assert main(["chat", "-t", str(N_THREADS), "-c", "512"]) == 130
    assert capsys.readouterr().err.strip().endswith("specdec: interrupted")


class _NeverRead:
    """A standard input the chat must never reach."""

    def isatty(self) -> bool:
        return False

    def readline(self) -> str:
        raise AssertionError("the chat read input after Ctrl+C during the load")


def test_an_answer_abandoned_before_its_first_token_saves_no_empty_answer(smollm_session, tmp_path):
    store = ConversationStore(tmp_path)
    chat = Chat(smollm_session, store=store)
    events = chat.send(RunConfig(max_tokens=8), "Hello there")
    first = next(events)  # the turn has begun: the empty answer is in the conversation and saved
    assert isinstance(first, ConversationChanged) and [m.role for m in first.view.messages] == ["user", "assistant"]
    events.close()  # Ctrl+C (or a closed pipe) before any token
    saved = store.load(chat.conversation.id)
    assert [m.role for m in saved.messages] == ["user"]  # the question stays; no empty "interrupted" answer


# ------------------------------------------------------------------ --json is line-clean
def test_chat_json_gives_one_line_per_input_line(tmp_path):
    done = subprocess.run([*CLI, "chat", "--json", "-n", "6", "-t", str(N_THREADS), "-c", "1024"],
                          input="Hi\n/list\n/bogus\n/load nothing-here\nBye\n", capture_output=True, text=True,
                          env={**os.environ, "SPECDEC_DATA": str(tmp_path)}, timeout=300)
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(lines) == 5, done.stdout
    assert "text" in lines[0] and lines[1]["command"] == "list" and len(lines[1]["conversations"]) == 1
    assert "unknown command" in lines[2]["error"] and "no longer exists" in lines[3]["error"]
    assert "text" in lines[4] and lines[4]["turn"] == 2


# ------------------------------------------------------------------ bytes that are not UTF-8
def test_piped_bytes_that_are_not_utf8_are_answered(tmp_path):
    done = subprocess.run([*CLI, "chat", "--no-save", "-n", "4", "-t", str(N_THREADS), "-c", "1024"],
                          input=b"caf\xe9\n", capture_output=True, env={**os.environ, "SPECDEC_DATA": str(tmp_path)},
                          timeout=300)
    assert done.returncode == 0 and b"Traceback" not in done.stderr and done.stdout.strip()


@pytest.mark.parametrize("command", [["run", "-f"], ["chat", "--no-save", "-f"], ["batch", "-f"],
                                     ["sweep", "-f"], ["replay"]])
def test_a_file_that_is_not_utf8_is_one_sentence(command, tmp_path, capsys):
    bad = tmp_path / "prompt.txt"
    bad.write_bytes(b"caf\xe9 au lait\n")
    assert main([*command, str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "UTF-8" in err[0] and "prompt.txt" in err[0]


# ------------------------------------------------------------------ replays end
def _trace_with_time(value: str, tmp_path: Path) -> Path:
    shipped = sorted((Path(trace.__file__).parents[2] / "resources" / "traces").glob("*.jsonl"))[0]
    lines = shipped.read_text().splitlines()
    record = json.loads(lines[3])
    record["t"] = "@T@"
    lines[3] = json.dumps(record).replace('"@T@"', value)
    out = tmp_path / "bad-time.jsonl"
    out.write_text("\n".join(lines) + "\n")
    return out


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity"])
def test_a_trace_time_that_is_not_finite_is_refused(value, tmp_path):
    with pytest.raises(trace.TraceError, match="finite"):
        trace.load(_trace_with_time(value, tmp_path))


@pytest.mark.parametrize("speed", ["nan", "inf", "0", "-1"])
def test_replay_speed_must_be_a_finite_number_above_zero(speed):
    done = subprocess.run([*CLI, "replay", "x.jsonl", "--speed", speed], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "finite number above 0" in done.stderr
    with pytest.raises(ValueError):
        trace.Replay(trace.Trace({}, ()), float(speed))


# ------------------------------------------------------------------ the store trusts file names
def _saved_conversation(store: ConversationStore, text: str) -> Conversation:
    conv = Conversation(title=text)
    conv.add(Message("user", text))
    store.save(conv)
    return conv


def test_a_hand_copy_is_its_own_conversation(tmp_path):
    store = ConversationStore(tmp_path)
    original = _saved_conversation(store, "first")
    copy = store.root / "my-copy.json"
    copy.write_bytes((store.root / f"{original.id}.json").read_bytes())
    assert {s.id for s in store.list()} == {original.id, "my-copy"}
    assert store.load("my-copy").id == "my-copy"
    store.delete("my-copy")
    assert [s.id for s in store.list()] == [original.id]
    (store.root / "a copy (2).json").write_bytes((store.root / f"{original.id}.json").read_bytes())
    found, damaged = store.scan()
    assert [s.id for s in found] == [original.id] and damaged == ["a copy (2).json"]


def test_two_writers_of_one_conversation_keep_both(tmp_path):
    app, cli = ConversationStore(tmp_path), ConversationStore(tmp_path)
    conv_id = _saved_conversation(app, "shared").id
    in_app, in_cli = app.load(conv_id), cli.load(conv_id)
    in_cli.add(Message("assistant", "the CLI's answer"))
    assert cli.save(in_cli) == ""
    in_app.add(Message("assistant", "the app's answer"))
    note = app.save(in_app)
    assert "changed elsewhere" in note and in_app.id != conv_id
    assert app.load(conv_id).messages[-1].content == "the CLI's answer"  # nothing was dropped
    assert app.load(in_app.id).messages[-1].content == "the app's answer"
    assert app.save(in_app) == ""  # its own file now: no second note


def test_a_listing_between_two_writers_saves_does_not_hide_the_other_writer(tmp_path):
    """Defect 2 of issue 47: the app's conversation list (made after ``specdec chat --load``
    saved a turn) took the file as the app's own, and the app's next save overwrote that turn."""
    app, cli = ConversationStore(tmp_path), ConversationStore(tmp_path)
    conv_id = _saved_conversation(app, "shared").id
    in_app, in_cli = app.load(conv_id), cli.load(conv_id)
    in_cli.add(Message("assistant", "the CLI's answer"))
    assert cli.save(in_cli) == ""
    assert [s.id for s in app.list()] == [conv_id]  # the sidebar refreshes between the two saves
    in_app.add(Message("assistant", "the app's answer"))
    note = app.save(in_app)
    assert "changed elsewhere" in note and in_app.id != conv_id
    assert app.load(conv_id).messages[-1].content == "the CLI's answer"
    assert app.load(in_app.id).messages[-1].content == "the app's answer"


# ------------------------------------------------------------------ flags the chat takes
@pytest.mark.parametrize("flag", [["--trace", "t.jsonl"], ["--kv-dump"], ["--baseline"]])
def test_chat_refuses_flags_it_cannot_honour(flag, capsys):
    assert main(["chat", *flag]) == 2
    err = capsys.readouterr().err
    assert "specdec chat does not take" in err and flag[0] in err


def test_chat_takes_its_first_message_from_a_file_and_a_system_message_with_load(tmp_path):
    env = {**os.environ, "SPECDEC_DATA": str(tmp_path)}
    first = tmp_path / "first.txt"
    first.write_text("Name a fruit.")
    done = subprocess.run([*CLI, "chat", "--json", "-n", "4", "-t", str(N_THREADS), "-c", "1024", "-f", str(first)],
                          input="", capture_output=True, text=True, env=env, timeout=300, check=True)
    conv_id = json.loads(done.stdout.splitlines()[0])["conversation"]
    saved = ConversationStore(tmp_path).load(conv_id)
    assert saved.messages[0].content == "Name a fruit."
    subprocess.run([*CLI, "chat", "-n", "4", "-t", str(N_THREADS), "-c", "1024", "--load", conv_id,
                    "--system", "Answer in French."], input="", capture_output=True, env=env, timeout=300, check=True)
    reloaded = ConversationStore(tmp_path).load(conv_id)
    assert reloaded.messages[0].role == "system" and reloaded.messages[0].content == "Answer in French."


# ------------------------------------------------------------------ copies keyed by content
@pytest.fixture(scope="module")
def twin_sources(smollm_path, tmp_path_factory) -> tuple[Path, Path]:
    """Two files with one name in two folders: the default model, and a copy of it that differs."""
    folder = tmp_path_factory.mktemp("twins")
    (folder / "a").mkdir()
    (folder / "b").mkdir()
    same = folder / "a" / smollm_path.name
    other = folder / "b" / smollm_path.name
    same.write_bytes(smollm_path.read_bytes())
    other.write_bytes(catalog.make_derived("default-q8_0", log=lambda _m: None).read_bytes())
    return same, other


@pytest.fixture
def model_cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("SPECDEC_MODELS", str(tmp_path / "models"))
    return tmp_path / "models"


def test_same_named_files_never_share_a_copy(twin_sources, model_cache):
    same, other = twin_sources
    assert catalog.copy_path(same, "Q8_0") != catalog.copy_path(other, "Q8_0")
    assert catalog.copy_path(same, "Q8_0").parent == model_cache


def test_concurrent_makes_write_one_checked_copy_that_knows_its_original(twin_sources, model_cache):
    source = twin_sources[0]
    stale = model_cache / f".{catalog.copy_path(source, 'Q8_0').name}.12345.partial"
    model_cache.mkdir(parents=True, exist_ok=True)
    stale.write_bytes(b"left by an interrupted make")
    made, logs = [], []
    makers = [threading.Thread(target=lambda: made.append(catalog.make_copy(source, "Q8_0", log=logs.append)))
              for _ in range(2)]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join()
    assert made[0] == made[1] and len([m for m in logs if m.startswith("requantising")]) == 1
    check_gguf_file(made[0])
    assert not stale.exists() and not list(model_cache.glob("*.partial")) and not list(model_cache.glob(".*.partial"))
    assert catalog.original_of(made[0]) == source.resolve()  # a source outside the model cache
    # a copy damaged on disk is made again, not trusted because it exists
    with open(made[0], "r+b") as f:
        f.truncate(1000)
    logs.clear()
    again = catalog.make_copy(source, "Q8_0", log=logs.append)
    check_gguf_file(again)
    assert any("damaged" in m for m in logs)


def test_a_file_changed_in_place_gets_a_new_copy(twin_sources, model_cache, tmp_path):
    changing = tmp_path / "model.gguf"
    changing.write_bytes(twin_sources[0].read_bytes())
    before = catalog.copy_path(changing, "Q8_0")
    changing.write_bytes(twin_sources[1].read_bytes())
    assert catalog.copy_path(changing, "Q8_0") != before


# ------------------------------------------------------------------ help and flags match the code
def test_format_flags_mean_what_the_help_says(capsys):
    from specdec_studio.engine.cli import tuning as cli_tuning
    from specdec_studio.engine.tuning import formats

    assert cli_tuning._format_list("", formats.SPEED_FORMATS, formats.FORMATS) == formats.SPEED_FORMATS
    assert cli_tuning._format_list("all", formats.SPEED_FORMATS, formats.FORMATS) == formats.FORMATS
    assert cli_tuning._format_list("q8_0, iq4_nl", formats.SPEED_FORMATS, formats.FORMATS) == ("Q8_0", "IQ4_NL")
    for refused in (["-ngl", "1"], ["-b", "64"], ["-tb", "1"]):
        assert main(["profile", "--formats", "Q8_0", *refused]) == 2
        assert "leave out " + refused[0] in capsys.readouterr().err
    assert main(["sweep", "--formats", "Q9_9"]) == 2
    assert "unknown format Q9_9" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["profile", "--help"])
    assert ",".join(formats.FORMATS) in capsys.readouterr().out.replace("\n", "").replace(" ", "")

"""``specdec chat``: a terminal chat over the same conversation model as the app.

One user turn per line (from a terminal, or a pipe for scripts). Each answer ends with a newline
on standard output; with ``--json`` each turn is one JSON line instead (text, token ids, finish
reason and the turn's figures), so a pipe gets machine-readable turns. The conversation is saved
as the app saves it, after every turn, to the same data directory (``SPECDEC_DATA``), so the app's
Chats tab and ``/list`` show it; its id is printed on standard error at the start, and
``--no-save`` keeps a throwaway chat off the disk.

Commands: ``/regen`` answers the last message again, ``/clear`` starts a new conversation,
``/save [TITLE]`` names it (and saves it, even with ``--no-save``), ``/load ID`` opens a saved one,
``/list`` shows the saved ones, ``/quit`` ends. Ctrl+C stops the answer being written; while the
chat waits for input (typed or piped) it ends the chat. With ``--json`` every input line gets
exactly one line on standard output: the turn, a command's result, or ``{"error": ...}``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import time

from specdec_studio.engine.cli.common import (add_run_args, ctrl_c_stops, flush_tokens, print_after_tokens,
                                              read_text_file, run_setup, session_from_args, write_tokens)
from specdec_studio.engine.config import DEFAULT_MODE
from specdec_studio.engine.chat.store import not_saved
from specdec_studio.engine.errors import SpecDecError

COMMANDS = "/regen, /clear, /save [TITLE], /load ID, /list, /quit"


# Flags every run-like subcommand shares that a chat cannot honour: refused in one sentence.
REFUSED_FLAGS = (("trace", "--trace records one run; use `specdec run --trace FILE`"),
                 ("kv_dump", "--kv-dump prints one run's cells; use `specdec run --kv-dump`"),
                 ("baseline", "--baseline measures one prompt against plain; use `specdec run --baseline`"))


def cmd_chat(args: argparse.Namespace) -> int:
    from specdec_studio.engine.chat.store import ConversationStore
    from specdec_studio.engine.chat.turns import Chat

    for flag, why in REFUSED_FLAGS:
        if getattr(args, flag):
            raise SpecDecError(f"specdec chat does not take {why}")
    # --chat is what a chat always does (the model's template); -f is the first message
    first = [read_text_file(args.file)] if args.file else [args.prompt] if args.prompt else []
    config, model_path, draft_path = run_setup(args)
    store = ConversationStore()
    interactive = sys.stdin.isatty()
    with (
        ctrl_c_stops() as stop,
        session_from_args(args, model_path, draft_path, stop, observe=False) as session,
    ):  # no map, no step inspector here
        if stop.is_set():  # Ctrl+C while the model loaded: llama.cpp's load cannot stop part-way
            raise KeyboardInterrupt
        saving = None if args.no_save else store  # where each turn is saved (None: nowhere)
        chat = Chat(session, store=saving)
        if args.load:
            chat = _open(session, store, args.load, saving)
        if args.system:
            chat.set_system(args.system)  # with --load: the loaded conversation's instructions change
            if args.load:
                note = chat.save()  # kept even if no turn follows
                if note:
                    print(f"[{note}]", file=sys.stderr)
        _say_where(chat, store)
        while True:
            if first:
                line = first.pop()
            else:
                line = _read_line(interactive)
                stop.clear()  # a Ctrl+C that stopped the last answer does not stop the next
                if line is None:
                    break
            line = line.rstrip("\n")
            if not line.strip():
                continue
            try:
                if line.startswith("/"):
                    chat, done, result = _command(line, chat, session, store, config, args)
                    if args.json and result is not None:
                        _json_line(result)
                    if done:
                        break
                    continue
                _answer(chat.send(config, line, fresh_cancel=False), chat, args)
            except SpecDecError as exc:
                if args.json:
                    _json_line({"error": str(exc)})
                print(f"specdec: {exc}", file=sys.stderr)
    return 0


def _read_line(interactive: bool) -> str | None:
    """The next user line, or None at the end of input or on Ctrl+C (which, while waiting for
    input, ends the chat, piped or typed; while an answer is written it only stops the answer).
    The ``> `` prompt goes to standard error, so standard output holds only answers."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if not interactive:
            line = sys.stdin.readline()
            return line if line else None
        sys.stderr.write("> ")
        sys.stderr.flush()
        return input()
    except (EOFError, KeyboardInterrupt):
        if interactive:
            print(file=sys.stderr)
        return None
    finally:
        signal.signal(signal.SIGINT, previous)


def _json_line(record: dict) -> None:
    sys.stdout.write(json.dumps(record) + "\n")
    sys.stdout.flush()


def _say_where(chat, store) -> None:
    """The conversation's id on standard error, and whether (and where) it is saved."""
    where = f"saved after every turn in {store.root}" if chat.store is not None else "not saved (--no-save)"
    print(f"[conversation {chat.conversation.id}: {where}]", file=sys.stderr)


def _open(session, store, conv_id: str, saving):
    from specdec_studio.engine.chat.turns import Chat

    try:
        conversation = store.load(conv_id)
    except ValueError as exc:  # not an id at all
        raise SpecDecError(f"no saved conversation {conv_id!r} ({exc})") from None
    chat = Chat(session, conversation, store=saving)
    print(f"[loaded {conversation.title!r}: {len(conversation.messages)} messages"
          + (f"; {chat.note}" if chat.note else "") + "]", file=sys.stderr)
    return chat


def _command(line: str, chat, session, store, config, args):
    """Run one /command: (the chat now, whether to end, its result as a JSON object or None).
    An answering command (/regen) writes its own line."""
    name, _, rest = line.partition(" ")
    if name in ("/quit", "/exit"):
        return chat, True, {"command": "quit"}
    if name == "/regen":
        _answer(chat.regenerate(config, fresh_cancel=False), chat, args)
        return chat, False, None
    if name == "/clear":
        chat.clear()
        print("[new conversation]", file=sys.stderr)
        _say_where(chat, store)
        return chat, False, {"command": "clear", "conversation": chat.conversation.id}
    if name == "/save":
        if rest.strip():
            chat.conversation.title = rest.strip()
        chat.store = store
        try:
            note = store.save(chat.conversation)
        except OSError as exc:  # the disk refused: said once (the next turn's save knows), the chat goes on
            chat.save_error = not_saved(exc, store.root)
            raise SpecDecError(chat.save_error) from None
        chat.save_error = ""
        if note:
            print(f"[{note}]", file=sys.stderr)
        print(f"[saved as {chat.conversation.id}: {chat.conversation.title!r}]", file=sys.stderr)
        return chat, False, {"command": "save", "conversation": chat.conversation.id, "title": chat.conversation.title}
    if name == "/load":
        if not rest.strip():
            raise SpecDecError("/load needs a conversation id; /list shows them")
        chat = _open(session, store, rest.strip(), None if args.no_save else store)
        _say_where(chat, store)
        return chat, False, {"command": "load", "conversation": chat.conversation.id,
                             "messages": len(chat.conversation.messages)}
    if name == "/list":
        found = store.list()
        for s in found:
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(s.updated))
            print(f"{s.id}  {when}  {s.n_messages:3d} messages  {s.title}", file=sys.stderr)
        return chat, False, {"command": "list", "conversations": [
            {"id": s.id, "title": s.title, "updated": s.updated, "messages": s.n_messages} for s in found]}
    raise SpecDecError(f"unknown command {name}; the commands are {COMMANDS}")


def _answer(events, chat, args) -> None:
    """One turn: its tokens as they come and a newline at its end (or, with ``--json``, one JSON
    line for the turn) on standard output; its figures on standard error. The run is closed
    before this returns, however it ends, so nothing of it outlives the session."""
    from specdec_studio.engine.chat.turns import ConversationChanged
    from specdec_studio.engine.events import RunFinished, RunWarning, StepDone

    t0 = time.perf_counter()
    t_first = None
    final = None
    wrote = False
    with contextlib.closing(events):
        try:
            for event in events:
                if isinstance(event, StepDone):
                    if t_first is None:
                        t_first = time.perf_counter() - t0
                    if not args.json:
                        write_tokens(event, args.color)
                        wrote = True
                elif isinstance(event, ConversationChanged) and event.note:
                    print_after_tokens(f"[{event.note}]")
                elif isinstance(event, RunWarning):
                    print_after_tokens(f"\nspecdec: warning: {event.message}")
                elif isinstance(event, RunFinished):
                    final = event
        except SpecDecError:
            flush_tokens()
            if wrote:
                sys.stdout.write("\n")  # a failed answer still ends its line
                sys.stdout.flush()
            raise
        finally:
            flush_tokens()  # whatever ended the answer, the tokens it made are shown
    if final is None:
        if args.json:
            _json_line({"error": "the answer ended without a result"})
        elif wrote:
            sys.stdout.write("\n")
            sys.stdout.flush()
        return
    if args.json:
        _json_line({"conversation": chat.conversation.id,
                    "turn": sum(m.role == "assistant" for m in chat.conversation.messages),
                    "text": final.text, "token_ids": list(final.token_ids),
                    "finish_reason": final.finish_reason, "stats": final.stats})
    else:
        sys.stdout.write("\n")  # an answer ends with a newline: a script can tell the turns apart
        sys.stdout.flush()
    s = final.stats
    line = (f"[{s['n_predict']} tokens · {s['tokens_per_second']:.1f} t/s · {s['tokens_per_step']:.2f} tokens/step"
            f" · prompt {s['n_prompt']} ({s['n_prompt_reused']} reused, {s['n_prompt_decoded']} decoded)"
            f" · first token {1000 * (t_first or 0.0):.0f} ms")
    if s["n_drafted"]:
        line += f" · accepted {s['n_accept']}/{s['n_drafted']}"
    print(f"{line} · {final.finish_reason}]", file=sys.stderr)


def add_parser(sub) -> None:
    """``chat``: every run flag, a system message, a conversation to open, --no-save."""
    p = sub.add_parser("chat", help="chat in the terminal (one turn per line; /regen /clear /save /load /list)")
    add_run_args(p)
    p.set_defaults(mode=DEFAULT_MODE)  # the app's default too (engine.config)
    p.add_argument("--system", default="", help="a system message to start the conversation with")
    p.add_argument("--load", default=None, help="open a saved conversation (its id, see /list)")
    p.set_defaults(handler=cmd_chat)
    p.add_argument(
        "--no-save",
        action="store_true",
        help="a throwaway chat: nothing is written (by default it is saved after every turn, as the app does)",
    )

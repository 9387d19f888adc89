"""The app's own cost: the same lookahead run headless and inside the window (offscreen),
alternated 3 times; prints ``gui/headless tokens-per-second ratio: X`` (target >= 0.95).

``--layers 1 --mode lookup`` runs prompt lookup on the default model cut to its first layer: GPU-like
step times, about 1,000 tokens/s on the code prompt here, where the window's cost per token shows.

``--chat`` runs a chat turn that asks for code instead, each in a new conversation; ``-n`` sets the
tokens. The engine's tokens per second leave out what the window does after the last token, so
``--chat`` times that too: the redraw that renders the finished answer as Markdown (median of the
rounds; every redraw of the turn, the answer's Markdown among them), then the redraws of a 50-turn
conversation of long answers (the real answer's pieces four
times over, each turn): drawn whole (a toggle of the view, a conversation opened) and after one more
turn (the redraw every turn ends with: only the new turn is drawn). Target: the latter within 50 ms.

Both sides decode the same steps: the window's runs keep the cached prompt prefix of the run before
(prefix reuse; a chat turn always does), so the headless runs do too. A run from an empty cache
decodes the prompt's last token in the prompt's batch rather than alone; that changes the window's
Jacobi guesses a little and with them how many steps lookahead takes (112 against 132 steps for the
256 tokens of the code prompt, measured 2026-12-02), which once made this ratio read 0.81 for a cost
the window does not have. Each round checks that both runs made the same text and took as many
steps."""

from __future__ import annotations

import dataclasses
import os
import statistics
import tempfile
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from _common import CODE_PROMPT, THREADS, model_path  # noqa: E402

from host_cost import cut_model  # noqa: E402

from specdec_studio.engine.config import RunConfig  # noqa: E402
from specdec_studio.engine.session import Session  # noqa: E402

ROUNDS = int(os.environ.get("GUI_ROUNDS", "3"))
N_TOKENS = 160
CHAT_MESSAGE = ("Write a Python module with three functions: a binary search, a merge sort and a function "
                "that counts words in a text, each with a docstring, in one code block, then explain them.")


# the window's controls for each mode; the headless run takes the config those controls make
MODES = {"lookahead": {"mode": "lookahead", "W": 4, "N": 3, "G": 4}, "lookup": {"mode": "lookup", "k": 3},
         "plain": {"mode": "plain"}}


def headless(session: Session, config: RunConfig, chat: bool):
    """The run as the window makes it (cached prefix kept); returns its RunFinished."""
    tokens = session.chat_tokens([("user", CHAT_MESSAGE)]) if chat else session.tokenize_prompt(CODE_PROMPT)
    final = None
    for event in session.run(config, tokens, reuse_prefix=True):
        final = event
    return final


def in_app(app, window, n_tokens: int, chat: bool, mode: str = "lookahead"):
    from specdec_studio.app.qt import QtCore

    if chat:
        window.chat.new_conversation()  # each turn from the same start, as the headless run
        app.processEvents()
    window.controls.set_values({**MODES[mode], "max_tokens": n_tokens, "temperature": 0.0})
    window.input.set_text(CHAT_MESSAGE if chat else CODE_PROMPT)
    window.runs.start_run()
    loop = QtCore.QEventLoop()
    timer = QtCore.QTimer()
    timer.timeout.connect(lambda: loop.quit() if not window.model.running else None)
    timer.start(20)
    loop.exec()
    timer.stop()
    return window.model.run.last_finished


def main() -> None:
    import argparse

    from specdec_studio.app.window.main_window import MainWindow
    from specdec_studio.app.qt import QtCore, QtWidgets

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chat", action="store_true", help="a chat turn asking for code (rendered as Markdown)")
    parser.add_argument("-n", "--tokens", type=int, default=N_TOKENS)
    parser.add_argument("--mode", choices=sorted(MODES), default="lookahead")
    parser.add_argument("--layers", type=int, default=0,
                        help="the default model cut to its first LAYERS layers (GPU-like step times; 0: whole)")
    parser.add_argument("--explain", choices=("both", "window", "off"), default="window",
                        help="which side explains its tokens: the window does by default (View → Explain tokens), "
                             "'both' compares like for like (the window alone), 'off' turns it off in the window")
    args = parser.parse_args()
    model = cut_model(args.layers) if args.layers else model_path("default")

    app = QtWidgets.QApplication([])
    settings = QtCore.QSettings(tempfile.mktemp(suffix=".ini"), QtCore.QSettings.IniFormat)
    settings.setValue("threads", THREADS)
    settings.setValue("auto_profile", "false")  # nothing but the runs on the engine thread
    window = MainWindow(str(model), settings=settings)
    window.show()
    while not window.model.models.loaded:
        app.processEvents()
    window.input.chat_mode.setChecked(args.chat)
    window.input.show_tokens.setChecked(False)  # finished answers rendered
    session = Session(model, n_ctx=4096, n_threads=THREADS)
    redraws: list[float] = []  # seconds of each redraw of the stream (the window's _render_all)
    render_all = window.runs.render

    def timed_render_all() -> None:
        t0 = time.perf_counter()
        render_all()
        redraws.append(time.perf_counter() - t0)

    window.runs.render = timed_render_all
    ours, gui, finished_redraw = [], [], []
    window.controls.set_values({**MODES[args.mode], "max_tokens": args.tokens, "temperature": 0.0})
    window.explain_action.setChecked(args.explain != "off")
    config = dataclasses.replace(window.controls.config(), explain=args.explain == "both")
    headless(session, config, args.chat)
    in_app(app, window, args.tokens, args.chat, args.mode)
    for r in range(ROUNDS):
        alone = headless(session, config, args.chat)
        n_redraws = len(redraws)
        shown = in_app(app, window, args.tokens, args.chat, args.mode)
        if alone.token_ids != shown.token_ids or alone.stats["steps"] != shown.stats["steps"]:
            raise SystemExit(f"round {r + 1}: not the same run ({alone.stats['steps']} steps headless, "
                             f"{shown.stats['steps']} in the app): the ratio would compare different work")
        ours.append(alone.stats["tokens_per_second"])
        gui.append(shown.stats["tokens_per_second"])
        finished_redraw.append(sum(redraws[n_redraws:]))  # the turn's redraws: its answer as Markdown among them
        print(f"round {r + 1}: headless {ours[-1]:7.2f} t/s   in the app {gui[-1]:7.2f} t/s   "
              f"({shown.stats['steps']} steps each)")
    print(f"gui/headless tokens-per-second ratio: {statistics.median(gui) / statistics.median(ours):.3f}")
    if args.chat:
        print(f"a turn's redraws (its finished answer rendered as Markdown among them): "
              f"{1e3 * statistics.median(finished_redraw):.1f} ms")
        long_chat_redraws(app, window, redraws)
    session.close()
    window.close()


def long_chat_redraws(app, window, redraws: list[float], n_turns: int = 50) -> None:
    """The redraws of a conversation of ``n_turns`` long answers, whole and after one more turn."""
    view = window.model.chat.conversation
    question, answer = view.messages[-2], view.messages[-1]
    long_answer = dataclasses.replace(answer, content=answer.content * 4, pieces=answer.pieces * 4)
    turns = (question, long_answer) * n_turns
    window.model.chat.update(conversation=dataclasses.replace(view, messages=turns))
    window.runs._drawn = None
    window.runs.render()
    app.processEvents()
    whole = redraws[-1]
    window.model.chat.update(conversation=dataclasses.replace(view, messages=turns + (question, long_answer)))
    window.runs.render()
    app.processEvents()
    one_more = redraws[-1]
    n_chars = len(long_answer.content)
    print(f"a {n_turns}-turn chat of {n_chars}-character answers: drawn whole in {1e3 * whole:.0f} ms, "
          f"redrawn after one more turn in {1e3 * one_more:.1f} ms (target: within 50 ms)")


if __name__ == "__main__":
    main()

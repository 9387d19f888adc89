"""What the token stream shows: the engine's conversation (chat) or the last completion, drawn
from the engine's own record so the window and the engine never disagree."""

from __future__ import annotations

from dataclasses import dataclass

from specdec_studio.app.model.turn import Turn, figures_line
from specdec_studio.app.widgets.token_stream import StreamMark, TokenStream

DROPPED_DIVIDER = "— the model no longer sees the messages above: the context was full —"


def render_run(stream: TokenStream, text: str, source: str, step: int, token_id: int, acceptance: float,
               proposer: str = "", why=None) -> None:
    if source == "rejected" and not stream.show_rejected:
        return
    stream.append_text(text, source, step, token_id, acceptance, proposer, why)


def _separate(stream: TokenStream, gap: str) -> None:
    if stream.document().characterCount() > 1:
        stream.append_text(gap, "meta", 0)


def render_completion(stream: TokenStream, turn: Turn) -> None:
    stream.append_text(turn.user, "prompt", 0)
    for run in turn.runs:
        render_run(stream, *run)
    if turn.stats is not None:
        stream.append_text("\n" + figures_line(turn.mode, turn.stats, turn.finish), "meta", 0)


@dataclass(frozen=True)
class Drawn:
    """What the stream shows of a conversation: the messages drawn, the stream's mark before each
    one and at the end (with the divider state there), and the look they were drawn with."""

    messages: tuple
    marks: tuple[tuple[StreamMark, bool], ...]
    look: tuple


def render_conversation(stream: TokenStream, view, live: Turn | None, drawn: Drawn | None = None) -> Drawn:
    """Draw ``view`` (an engine.chat.conversation.ConversationView) in ``stream``; ``live``: the
    answer streaming now, drawn in place of the conversation's (still empty) streaming message.

    With ``drawn`` (what this stream showed before, nothing appended since but the live answer),
    only the messages from the first one that changed are drawn again: at the end of a turn in a
    long chat that is the last question and its answer, not every answer rendered anew. Returns
    what is drawn now, for the next call."""
    messages = tuple(view.messages)
    first = 0
    if drawn is not None and drawn.look == stream.look():
        first = _first_change(drawn.messages, messages)
        mark, dropped_seen = drawn.marks[first]
        stream.truncate(mark)  # the live answer streamed after the last mark goes too
    else:
        stream.clear_stream()
        dropped_seen = False
    marks = list(drawn.marks[:first]) if first else []
    for m in messages[first:]:
        marks.append((stream.mark(), dropped_seen))
        if dropped_seen and not m.dropped and m.role != "system":
            stream.append_text("\n\n" + DROPPED_DIVIDER, "meta", 0)
            dropped_seen = False
        _separate(stream, "\n" if m.role == "assistant" else "\n\n")  # an answer follows its question
        source = "dropped" if m.dropped else ("meta" if m.role == "system" else "user")
        if m.role == "system":
            stream.append_text("System: " + m.content, source, 0)
        elif m.role == "user":
            stream.append_text("You: " + m.content, source, 0)
        else:
            _render_answer(stream, m, live)
        dropped_seen = dropped_seen or m.dropped
    marks.append((stream.mark(), dropped_seen))
    return Drawn(messages, tuple(marks), stream.look())


def _first_change(before: tuple, now: tuple) -> int:
    """The index of the first message of ``now`` to draw again: the first that differs from the
    one drawn, or is still streaming (its tokens are the live turn's); len(before) at most."""
    for i, (a, b) in enumerate(zip(before, now)):
        if a is not b and a != b or b.state == "streaming":
            return i
    return min(len(before), len(now))


def _render_answer(stream: TokenStream, m, live: Turn | None) -> None:
    if m.state == "streaming" and live is not None:
        for run in live.runs:
            render_run(stream, *run)
        return
    if m.dropped:
        stream.append_text(m.content, "dropped", 0)
        return
    runs = [(str(p[0]), str(p[1]), int(p[2]), int(p[3]), float(p[4]), str(p[5]) if len(p) > 5 else "",
             p[6] if len(p) > 6 else None)  # an explanation while the app that ran it is open
            for p in m.pieces] or [(m.content, "sampled", 0, -1, 0.0, "", None)]  # re-encoded: its text only
    if not stream.show_tokens:  # a finished answer as the reader wants it: rendered, still coloured
        stream.append_markdown([run for run in runs if run[1] != "rejected"])
    else:
        for run in runs:
            render_run(stream, *run)
    figures = dict(m.figures)
    if "n_predict" in figures:
        stream.append_text("\n" + figures_line(str(figures.get("mode", "")), figures, m.finish_reason), "meta", 0)
    if m.state == "interrupted":
        stream.append_text("\n[interrupted: the answer was stopped before it ended]", "meta", 0)

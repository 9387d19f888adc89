"""Defect 11 of issue 47: every answer of a chat was rendered and matched to its tokens (difflib,
quadratic in an answer's length) on every redraw, on the GUI thread. The matching is now one
bounded pass (engine.records.markdown_html.rendered_owner) and a redraw draws only the messages
that changed (app.widgets.transcript.Drawn). Timings are tests/bench/gui_overhead.py --chat's."""

from __future__ import annotations

import difflib
from dataclasses import dataclass

import numpy as np

from specdec_studio.app.qt import QtGui
from specdec_studio.app.widgets.transcript import render_conversation
from specdec_studio.app.widgets.token_stream import TokenStream
from specdec_studio.engine.records.markdown_html import rendered_owner, source_owner

SECTION = """## Step {n}: the **{n}th** part

Here is a [link to the docs](https://example.com/docs/section-{n}#anchor) and some `inline_code({n})`
that wraps across a soft
line break, with *emphasis* and a list:

- first item with **bold** text
- second item, `code` & an entity &amp; more
  1. nested ordered
  2. another one

| name | value |
|------|-------|
| a{n} | {n}   |
| b    | x < y |

```python
def function_{n}(a, b):
    \"\"\"Docstring {n}.\"\"\"
    return [x * {n} for x in range(a, b)]  # comment
```

> a quote with a <tag> inside and ![img](/tmp/p{n}.png) after.

"""


def _pieces(text: str, step0: int = 0) -> tuple:
    return tuple((text[i:i + 4], "accepted_ngram" if i % 12 == 0 else "sampled", step0 + i // 4, i, 0.5, "")
                 for i in range(0, len(text), 4))


@dataclass(frozen=True)
class Msg:  # what render_conversation reads of an engine.chat.conversation.MessageView
    role: str
    content: str
    pieces: tuple = ()
    state: str = "done"
    dropped: bool = False
    figures: tuple = ()
    finish_reason: str | None = "stop"


@dataclass(frozen=True)
class View:
    messages: tuple


def _chat(n_turns: int) -> tuple:
    messages = []
    for t in range(n_turns):
        answer = "".join(SECTION.format(n=10 * t + k) for k in range(2))
        messages += [Msg("user", f"question {t}"), Msg("assistant", answer, _pieces(answer, 1000 * t))]
    return tuple(messages)


def test_the_bounded_matching_finds_what_difflib_finds_in_order():
    text = "".join(SECTION.format(n=n) for n in range(6))
    texts = [piece[0] for piece in _pieces(text)]
    doc = QtGui.QTextDocument()
    features = QtGui.QTextDocument.MarkdownFeature
    doc.setMarkdown(text, features.MarkdownDialectGitHub | features.MarkdownNoHTML)
    rendered = doc.toRawText()
    owner = source_owner(texts)
    ours = rendered_owner(text, rendered, owner)
    reference = np.full(len(rendered), -1)
    for a, b, size in difflib.SequenceMatcher(None, text, rendered, autojunk=False).get_matching_blocks():
        reference[b:b + size] = owner[a:a + size]
    shown = np.array([c not in "\u2028\u2029\ufdd0\ufdd1\ufffc" for c in rendered])
    assert np.mean(ours[shown] >= 0) >= 0.97  # every visible character but list markers and the like
    assert np.mean(ours == reference) >= 0.99
    owned = ours[ours >= 0]
    assert np.all(np.diff(owned) >= 0)  # matches never cross
    for j in np.flatnonzero(ours >= 0):  # and each shows a character its token wrote
        assert rendered[j] in texts[ours[j]]


def test_a_long_chat_redraws_only_the_turn_that_changed(qtbot):
    stream = TokenStream()
    qtbot.addWidget(stream)
    rendered = []
    original = stream.append_markdown
    stream.append_markdown = lambda pieces: rendered.append(len(pieces)) or original(pieces)
    messages = _chat(50)
    drawn = render_conversation(stream, View(messages), None)
    assert len(rendered) == 50
    # a new turn: it streams live after what is drawn, then the engine's record replaces it
    question = Msg("user", "one more")
    answer = "".join(SECTION.format(n=999) for _ in range(2))
    streaming = Msg("assistant", "", state="streaming")
    drawn = render_conversation(stream, View(messages + (question, streaming)), None, drawn)
    stream.append_text("live tokens", "sampled", 1)
    rendered.clear()
    final = messages + (question, Msg("assistant", answer, _pieces(answer)))
    drawn = render_conversation(stream, View(final), None, drawn)
    assert rendered == [len(_pieces(answer))]  # the new answer alone was rendered
    fresh = TokenStream()
    qtbot.addWidget(fresh)
    render_conversation(fresh, View(final), None)
    assert stream.toPlainText() == fresh.toPlainText() and "live tokens" not in stream.toPlainText()
    assert stream._token_meta == fresh._token_meta and stream.generated_text() == fresh.generated_text()
    # an edit of an early question draws from there on; a change of look draws everything
    rendered.clear()
    edited = final[:2] + (Msg("user", "edited"),) + final[3:]
    drawn = render_conversation(stream, View(edited), None, drawn)
    assert len(rendered) == 50
    rendered.clear()
    stream.mark_steps = True
    render_conversation(stream, View(edited), None, drawn)
    assert len(rendered) == 51


def test_appends_in_one_edit_land_as_appends_one_by_one_and_a_redraw_closes_the_edit(qtbot):
    """The window appends a drain's step events in one edit (TokenStream.begin_appending): the
    text, the colours and each token's record are what separate appends make, and anything that
    redraws the stream (a truncate, a clear, a rendered answer) closes the edit first."""
    tokens = [("The", "sampled", 1), (" cat", "accepted_ngram", 2), (" sat", "accepted_ngram", 2), (".", "sampled", 3)]
    one_by_one, batched = TokenStream(), TokenStream()
    for stream in (one_by_one, batched):
        qtbot.addWidget(stream)
        stream.append_text("prompt ", "prompt", 0)
    mark = batched.mark()
    for text, source, step in tokens:
        one_by_one.append_text(text, source, step, token_id=step)
    batched.begin_appending()
    batched.begin_appending()  # already open: the same edit goes on
    for text, source, step in tokens:
        batched.append_text(text, source, step, token_id=step)
    batched.end_appending()
    assert batched.toPlainText() == one_by_one.toPlainText() == "prompt The cat sat."
    assert batched._token_meta == one_by_one._token_meta
    for position in range(len("prompt The cat sat.")):
        assert batched.token_at(position) == one_by_one.token_at(position)
        a, b = QtGui.QTextCursor(batched.document()), QtGui.QTextCursor(one_by_one.document())
        a.setPosition(position + 1)
        b.setPosition(position + 1)
        assert a.charFormat().foreground().color() == b.charFormat().foreground().color()
    batched.begin_appending()
    batched.append_text(" More", "sampled", 4)
    batched.truncate(mark)  # closes the edit, then removes what followed the mark
    assert batched._appending is None and batched.toPlainText() == "prompt "
    batched.append_text("again", "sampled", 5)
    assert batched.toPlainText() == "prompt again" and batched.generated_text() == "again"

"""The live token stream: text as it is decoded, each token coloured by where it came from."""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from specdec_studio.app.qt import QtCore, QtGui, QtWidgets
from specdec_studio.app.widgets.token_explain import tooltip_html
from specdec_studio.engine.events import Explanation

# Colours per token source; chosen to read on light and dark backgrounds.
SOURCE_COLOURS = {
    "sampled": None,  # the palette's text colour
    "accepted_ngram": "#0aa5c0",  # cyan, as llama-lookahead prints accepted tokens
    "accepted_draft": "#2e9d4f",  # green
    "rejected": "#9a9a9a",  # ghosted, struck out
    "prompt": "#7a7a7a",
    "user": None,
    "meta": "#8a8f98",
    "dropped": "#a5a8ad",  # messages the model no longer sees (context overflow)
}
# Presentation mode: high contrast on black, and the two accepted kinds told apart by a blue and an
# orange that colour-blind viewers separate too (Okabe and Ito's palette).
PRESENTATION_COLOURS = {
    **SOURCE_COLOURS,
    "sampled": "#ffffff",
    "accepted_ngram": "#56b4e9",  # sky blue
    "accepted_draft": "#e69f00",  # orange
    "rejected": "#d55e00",  # vermillion, struck out
    "prompt": "#bbbbbb",
    "user": "#ffffff",
    "meta": "#bbbbbb",
}
# the sources that are generated text (everything else is decoration: user turns, stats lines)
TOKEN_SOURCES = ("sampled", "accepted_ngram", "accepted_draft")
SOURCE_LABELS = {
    "sampled": "sampled by the target",
    "accepted_ngram": "accepted from an n-gram",
    "accepted_draft": "accepted from the draft",
    "rejected": "rejected draft (tried, not kept)",
}
# A per-token property so tests and tooltips can read back what a character came from.
SOURCE_PROPERTY = QtGui.QTextFormat.UserProperty + 1
STEP_PROPERTY = QtGui.QTextFormat.UserProperty + 2


@dataclass(frozen=True)
class StreamMark:
    """Where the stream ended at one moment: :meth:`TokenStream.truncate` goes back to it."""

    position: int
    n_tokens: int
    n_generated: int


class _DataOnlyDocument(QtGui.QTextDocument):
    """A document that loads no resource from disk or the network: an answer is data. (A QTextEdit's
    own loadResource override is not enough: the document reaches the edit's through Qt's meta
    object, which never sees a Python override; the document's own virtual is called directly.)"""

    def loadResource(self, kind: int, name):  # noqa: N802 - Qt's name
        return None


class _NoImage(QtGui.QPyTextObject):
    """An image in the stream takes no room and draws nothing. Qt's own image handler reads the file
    an image names straight from disk when the document gives it nothing, so it is replaced."""

    def intrinsicSize(self, doc, pos, fmt):  # noqa: N802 - Qt's name
        return QtCore.QSizeF(0, 0)

    def drawObject(self, painter, rect, doc, pos, fmt):  # noqa: N802 - Qt's name
        pass


class TokenStream(QtWidgets.QTextEdit):
    """Read-only rich text; tokens are appended with a char format per source."""

    def __init__(self, parent: QtWidgets.QWidget | None = None) -> None:
        super().__init__(parent)
        self.setDocument(_DataOnlyDocument(self))
        self._no_image = _NoImage(self)
        self.document().documentLayout().registerHandler(QtGui.QTextFormat.ImageObject, self._no_image)
        self.setReadOnly(True)
        self.setAcceptRichText(False)
        self.setMouseTracking(True)
        font = QtGui.QFontDatabase.systemFont(QtGui.QFontDatabase.FixedFont)
        font.setPointSize(max(font.pointSize(), 11))
        self.setFont(font)
        self.show_rejected = False
        self.mark_steps = False
        self.show_tokens = False  # finished answers as tokens instead of rendered Markdown
        self.colours = SOURCE_COLOURS  # or PRESENTATION_COLOURS
        # per token: (start, end, source, id, step, step acceptance, proposer, why); starts kept
        # apart for bisect. The proposer is the Auto source that proposed an accepted token (""
        # otherwise); why, the token's Explanation where the run made one (a rejected draft's: the
        # explanation of the token that replaced it).
        self._token_meta: list[tuple] = []
        self._generated: list[str] = []  # every generated token's text, in order, however it is shown
        self._token_starts: list[int] = []
        self._appending: QtGui.QTextCursor | None = None  # the open edit of begin_appending

    def begin_appending(self) -> None:
        """Open one edit for the appends that follow, until :meth:`end_appending`: the document
        lays itself out and tells the view once for the lot. At a thousand tokens a second, a layout
        per token was the window's largest cost after its plots."""
        if self._appending is None:
            cursor = QtGui.QTextCursor(self.document())
            cursor.movePosition(QtGui.QTextCursor.End)
            cursor.beginEditBlock()
            self._appending = cursor

    def end_appending(self) -> None:
        if self._appending is not None:
            self._appending.endEditBlock()
            self._appending = None

    def clear_stream(self) -> None:
        self.end_appending()
        self.clear()
        self._token_meta.clear()
        self._token_starts.clear()
        self._generated.clear()

    def mark(self) -> StreamMark:
        return StreamMark(self.document().characterCount() - 1, len(self._token_meta), len(self._generated))

    def truncate(self, mark: StreamMark) -> None:
        """Remove everything shown after ``mark`` (text and token records alike)."""
        self.end_appending()
        cursor = QtGui.QTextCursor(self.document())
        cursor.setPosition(mark.position)
        cursor.movePosition(QtGui.QTextCursor.End, QtGui.QTextCursor.KeepAnchor)
        cursor.removeSelectedText()
        del self._token_meta[mark.n_tokens:], self._token_starts[mark.n_tokens:], self._generated[mark.n_generated:]

    def look(self) -> tuple:
        """Everything that decides how a message is drawn: a change draws them all again."""
        return (self.show_tokens, self.show_rejected, self.mark_steps, id(self.colours), self.font().toString())

    def _format(self, source: str, step: int) -> QtGui.QTextCharFormat:
        fmt = QtGui.QTextCharFormat()
        colour = self.colours.get(source)
        if colour:
            fmt.setForeground(QtGui.QColor(colour))
        if source == "rejected":
            fmt.setFontStrikeOut(True)
        if source in ("accepted_ngram", "accepted_draft", "user"):
            fmt.setFontWeight(QtGui.QFont.DemiBold)
        if source == "meta":
            fmt.setFontItalic(True)
        if self.mark_steps and step % 2 == 1 and source in TOKEN_SOURCES:
            fmt.setFontUnderline(True)
        fmt.setProperty(SOURCE_PROPERTY, source)
        fmt.setProperty(STEP_PROPERTY, step)
        return fmt

    def append_text(self, text: str, source: str, step: int, token_id: int = -1, acceptance: float = 0.0,
                    proposer: str = "", why: Explanation | None = None) -> None:
        if not text:
            return
        cursor = self._appending
        if cursor is None:
            cursor = self.textCursor()
            cursor.movePosition(QtGui.QTextCursor.End)
        start = cursor.position()
        cursor.insertText(text, self._format(source, step))
        self._token_meta.append((start, cursor.position(), source, token_id, step, acceptance, proposer, why))
        self._token_starts.append(start)
        if source in TOKEN_SOURCES:
            self._generated.append(text)

    def append_markdown(self, pieces: list[tuple]) -> None:
        """A finished answer rendered as Markdown (:mod:`app.widgets.rendered_markdown`): its
        tokens (text, source, step, id, step acceptance, proposer, why) keep their colours and
        their tooltips where their text lands in the rendered document."""
        from specdec_studio.app.widgets import rendered_markdown

        self.end_appending()
        texts = [piece[0] for piece in pieces]
        formats = [self._format(piece[1], piece[2]) for piece in pieces]
        doc, runs = rendered_markdown.render(
            texts, formats, rendered_markdown.prose_font_like(self.font()), self.font()
        )
        cursor = self.textCursor()
        cursor.movePosition(QtGui.QTextCursor.End)
        offset = cursor.position()
        cursor.insertFragment(QtGui.QTextDocumentFragment(doc))
        for run in runs:
            text, source, step, token_id, acceptance, proposer, *why = pieces[run.piece]  # why: optional
            why = why[0] if why else None
            start = offset + run.start
            self._token_meta.append((start, offset + run.end, source, token_id, step, acceptance, proposer, why))
            self._token_starts.append(start)
        self._generated.extend(piece[0] for piece in pieces if piece[1] in TOKEN_SOURCES)

    def scroll_to_end(self) -> None:
        bar = self.verticalScrollBar()
        bar.setValue(bar.maximum())

    def generated_text(self) -> str:
        """The generated tokens only, in order (without user turns, ghosts or stats lines)."""
        return "".join(self._generated)

    def token_at(self, position: int):
        i = bisect.bisect_right(self._token_starts, position) - 1
        if i >= 0 and self._token_meta[i][0] <= position < self._token_meta[i][1]:
            return self._token_meta[i]
        return None

    def tooltip_of(self, meta: tuple) -> str:
        """The tooltip of one token (a ``token_at`` record): its step and source, and its
        explanation where the run made one."""
        start, end, source, token_id, step, acceptance, proposer, why = meta
        head = f"step {step} · {SOURCE_LABELS.get(source, source)}"
        if token_id >= 0:
            head += f" · token id {token_id}"
        head += f" · step acceptance {acceptance:.0%}"
        ghost = ""
        if source == "rejected":
            cursor = QtGui.QTextCursor(self.document())
            cursor.setPosition(start)
            cursor.setPosition(end, QtGui.QTextCursor.KeepAnchor)
            ghost = cursor.selectedText()
        return tooltip_html(head, why, self.colours, ghost=ghost, proposer=proposer)

    def event(self, ev):  # tooltips per token
        if ev.type() == ev.Type.ToolTip:
            cursor = self.cursorForPosition(ev.pos())
            meta = self.token_at(cursor.position())
            if meta and meta[2] in (*TOKEN_SOURCES, "rejected"):
                QtWidgets.QToolTip.showText(ev.globalPos(), self.tooltip_of(meta), self)
            else:
                QtWidgets.QToolTip.hideText()
            return True
        return super().event(ev)

"""A conversation as the model sees it: messages, and for each the exact token ids.

The one history in the program: the app renders it, the CLI's chat uses it, and it is saved as it
is (:mod:`engine.chat.store`). Token ids belong to one model (``model_key``); an
assistant message also keeps the ids the model produced, so the next turn feeds the model exactly
what it wrote instead of a re-tokenisation of its text (which can give other ids).

A turn's prompt is the concatenation of the visible messages' ids and the template's generation
prompt. Each message's ids come from the template rendered over the messages up to it: the text
it adds to the rendering of the messages before it. An assistant message's ids are the
generation prompt, the produced ids, then whatever closes the turn. A template that rewrites
earlier text when a message is added (the rendering is not a prefix of the next one) makes the
affected messages share one run of ids, held by the last of them.

Overflow: when a turn does not fit the context, the oldest turns after the system message are
dropped from what the model sees (``n_dropped``), enough to free half the context, so the
re-decoding this costs comes rarely; they stay in the conversation, shown as dropped.
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from specdec_studio.engine.chat.template import ChatTemplate
from specdec_studio.engine.errors import PromptError
from specdec_studio.engine.tokens import Vocab

FORMAT_VERSION = 1
DONE, STREAMING, INTERRUPTED = "done", "streaming", "interrupted"
TITLE_CHARS = 48


@dataclass
class Message:
    role: str  # "system", "user" or "assistant"
    content: str
    # the ids this message adds to the model's context (template parts included) for the
    # conversation's model; empty when another message of a shared run holds them
    tokens: list[int] = field(default_factory=list)
    produced: list[int] | None = None  # assistant: the ids the model generated (end token included)
    # assistant: what the stream showed, token by token: [text, source, step, id, step acceptance]
    # and, where they apply, [proposer] and [why] (an engine.events.Explanation, never saved)
    pieces: list[list] = field(default_factory=list)
    state: str = DONE  # DONE, STREAMING (a run is writing it) or INTERRUPTED (stopped, failed, killed)
    finish_reason: str | None = None
    figures: dict = field(default_factory=dict)  # the turn's figures (mode, speed, acceptance, reuse)
    created: float = field(default_factory=time.time)

    def to_dict(self) -> dict:
        return {"role": self.role, "content": self.content, "tokens": self.tokens, "produced": self.produced,
                # a piece's explanation (a seventh field) lives only in memory: a saved chat stays small
                "pieces": [p[:6] for p in self.pieces], "state": self.state, "finish_reason": self.finish_reason,
                "figures": self.figures, "created": self.created}

    @classmethod
    def from_dict(cls, d: dict) -> Message:
        return cls(role=str(d["role"]), content=str(d["content"]), tokens=[int(t) for t in d.get("tokens") or []],
                   produced=None if d.get("produced") is None else [int(t) for t in d["produced"]],
                   pieces=[_piece(p) for p in d.get("pieces") or []], state=str(d.get("state", DONE)),
                   finish_reason=d.get("finish_reason"), figures=_figures_from_file(d.get("figures")),
                   created=_time_from_file(d.get("created")))


# What a message's figures may hold, as the figures line, the sidebar and the exports read them
FIGURE_NUMBERS = ("n_predict", "tokens_per_second", "tokens_per_step", "n_drafted", "n_accept", "accept_rate",
                  "n_prompt", "n_prompt_reused", "n_prompt_decoded", "t_encode_s")
LATEST_TIME = 253402300799.0  # 9999-12-31: a time past it cannot be shown as a date


def _figures_from_file(value) -> dict:
    """A message's figures as a file gives them, kept to what the displays read: the mode as text
    and the known figures as finite numbers; anything else is left out."""
    if not isinstance(value, dict):
        return {}
    figures = {}
    if isinstance(value.get("mode"), str):
        figures["mode"] = value["mode"][:40]
    for key in FIGURE_NUMBERS:
        number = value.get(key)
        if isinstance(number, (int, float)) and not isinstance(number, bool) and math.isfinite(number):
            figures[key] = number
    return figures


def _time_from_file(value) -> float:
    """A time as a file gives it. Missing, or a number that is no date (JSON's NaN and Infinity
    load; they broke the sorting and the dates of every list that shows it): now. Not a number at
    all: a ValueError, which makes the file a damaged one."""
    if value is None:
        return time.time()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"a time is not a number: {str(value)[:40]}")
    return float(value) if 0.0 <= value <= LATEST_TIME else time.time()


def _piece(p) -> list:
    """One streamed token as read from a file, checked: [text, source, step, id, step acceptance]
    and, for a token Auto took from a proposer, the proposer's name. Anything else is a ValueError,
    which makes the file a damaged one (it costs only itself, never the window that shows it)."""
    if not isinstance(p, (list, tuple)) or len(p) not in (5, 6):
        raise ValueError(f"a token piece is not [text, source, step, id, acceptance(, proposer)]: {str(p)[:40]}")
    text, source, step, token_id, acceptance = p[:5]
    proposer = p[5] if len(p) == 6 else ""
    if not all(isinstance(v, str) for v in (text, source, proposer)) or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in (step, token_id)) or \
            not isinstance(acceptance, (int, float)) or isinstance(acceptance, bool):
        raise ValueError(f"a token piece has a value of the wrong kind: {str(p)[:40]}")
    return list(p)  # as written: a saved conversation reads back equal


@dataclass(frozen=True)
class MessageView:
    """A message as the window shows it (immutable: it crosses to the GUI thread)."""

    role: str
    content: str
    pieces: tuple[tuple, ...]
    state: str
    finish_reason: str | None
    figures: tuple[tuple[str, object], ...]
    dropped: bool  # the model no longer sees it (context overflow)
    n_tokens: int

    def figure(self, name: str, default=None):
        return dict(self.figures).get(name, default)


@dataclass(frozen=True)
class ConversationView:
    id: str
    title: str
    messages: tuple[MessageView, ...]
    n_dropped: int
    model_key: str | None


def new_id() -> str:
    """A fresh conversation id (also its file's name)."""
    return uuid.uuid4().hex[:12]


@dataclass
class Conversation:
    id: str = field(default_factory=new_id)
    title: str = ""
    messages: list[Message] = field(default_factory=list)
    model_key: str | None = None  # the model every message's ``tokens`` and ``produced`` belong to
    n_dropped: int = 0  # messages after the system message that the model no longer sees
    n_encoded: int = 0  # leading messages whose ``tokens`` are current (see ConversationEncoder)
    created: float = field(default_factory=time.time)
    updated: float = field(default_factory=time.time)

    # ----------------------------------------------------------------------------- structure
    @property
    def n_fixed(self) -> int:
        """Messages that are never dropped: a leading system message."""
        return 1 if self.messages and self.messages[0].role == "system" else 0

    def visible(self) -> list[Message]:
        """The messages the model sees, in order."""
        return self.messages[: self.n_fixed] + self.messages[self.n_fixed + self.n_dropped :]

    def is_dropped(self, index: int) -> bool:
        return self.n_fixed <= index < self.n_fixed + self.n_dropped

    def truncate(self, n_messages: int) -> None:
        """Keep the first ``n_messages`` (Regenerate, Edit)."""
        del self.messages[n_messages:]
        self.n_dropped = min(self.n_dropped, max(0, len(self.messages) - self.n_fixed))
        self.n_encoded = min(self.n_encoded, len(self.visible()))

    def token_state(self) -> tuple:
        """What fitting a turn may change (the dropped count and every message's ids), to put
        back with :meth:`restore_token_state` when the turn fails."""
        return (self.n_dropped, self.n_encoded, [list(m.tokens) for m in self.messages],
                [m.produced for m in self.messages])

    def restore_token_state(self, state: tuple) -> None:
        self.n_dropped, self.n_encoded = state[0], state[1]
        for m, tokens, produced in zip(self.messages, state[2], state[3]):
            m.tokens, m.produced = tokens, produced

    def forget_tokens(self) -> None:
        """The ids no longer fit the model (another model, another drop): encode again."""
        self.n_encoded = 0

    def add(self, message: Message) -> Message:
        self.messages.append(message)
        if not self.title and message.role == "user":
            line = message.content.strip().splitlines()[0] if message.content.strip() else ""
            self.title = line[:TITLE_CHARS] + ("…" if len(line) > TITLE_CHARS else "")
        return message

    # ----------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict:
        return {"format": FORMAT_VERSION, "id": self.id, "title": self.title, "model_key": self.model_key,
                "n_dropped": self.n_dropped, "n_encoded": self.n_encoded, "created": self.created,
                "updated": self.updated, "messages": [m.to_dict() for m in self.messages]}

    @classmethod
    def from_dict(cls, d: dict) -> Conversation:
        if int(d.get("format", 0)) > FORMAT_VERSION:
            raise ValueError(f"conversation format {d.get('format')} is newer than this app reads ({FORMAT_VERSION})")
        conv = cls(id=str(d["id"]), title=str(d.get("title", "")), model_key=d.get("model_key"),
                   n_dropped=int(d.get("n_dropped", 0)), n_encoded=int(d.get("n_encoded", 0)),
                   created=_time_from_file(d.get("created")), updated=_time_from_file(d.get("updated")),
                   messages=[Message.from_dict(m) for m in d.get("messages", [])])
        for m in conv.messages:  # a run that was writing when the app died
            if m.state == STREAMING:
                m.state = INTERRUPTED
                m.finish_reason = m.finish_reason or "interrupted"
        return conv

    def view(self) -> ConversationView:
        return ConversationView(
            self.id, self.title or "New conversation",
            tuple(MessageView(m.role, m.content, tuple(tuple(p) for p in m.pieces), m.state, m.finish_reason,
                              tuple(m.figures.items()), self.is_dropped(i), len(m.tokens))
                  for i, m in enumerate(self.messages)),
            self.n_dropped, self.model_key)


# --------------------------------------------------------------------------------- encoding
class ConversationEncoder:
    """Turns a conversation into the ids of a turn's prompt with the model's own template."""

    def __init__(self, template: ChatTemplate, vocab: Vocab) -> None:
        self.template = template
        self.vocab = vocab

    def _tokens(self, text: str) -> list[int]:
        # The template writes BOS itself where the model wants one.
        return self.vocab.tokenize(text, add_special=False, parse_special=True) if text else []

    def _render(self, messages: Sequence[Message], *, generation_prompt: bool) -> str | None:
        try:
            return self.template.render([(m.role, m.content) for m in messages],
                                        add_generation_prompt=generation_prompt)
        except PromptError:
            return None  # some templates refuse a partial conversation (a lone system message…)

    def encode(self, conv: Conversation) -> list[int]:
        """Bring every visible message's ``tokens`` up to date; return the ids of the next
        prompt: the visible messages' ids and the generation prompt."""
        visible = conv.visible()
        if conv.n_encoded > len(visible):
            conv.n_encoded = 0
        start = conv.n_encoded
        previous = self._render(visible[:start], generation_prompt=False) if start else ""
        if previous is None:
            start, previous = 0, ""
        held: list[Message] = []  # messages the template would not render on their own yet
        for j in range(start, len(visible)):
            message = visible[j]
            text = self._render(visible[: j + 1], generation_prompt=False)
            if text is None:
                held.append(message)
                continue
            if not text.startswith(previous):
                # The template rewrote earlier text: every message so far shares one run of ids.
                for m in visible[:j]:
                    m.tokens = []
                    m.produced = None
                message.tokens = self._tokens(text)
            elif held:  # the held messages' text is part of this one's
                for m in held:
                    m.tokens = []
                message.tokens = self._tokens(text[len(previous):])
            else:
                message.tokens = self._message_tokens(visible, j, previous, text)
            held = []
            previous = text
        if held:
            raise PromptError("the model's chat template cannot render this conversation")
        conv.n_encoded = len(visible)
        whole = self._render(visible, generation_prompt=True)
        if whole is None or not whole.startswith(previous):
            raise PromptError("the model's chat template cannot render this conversation")
        ids = [t for m in visible for t in m.tokens]
        return ids + self._tokens(whole[len(previous):])

    def _message_tokens(self, visible: Sequence[Message], j: int, previous: str, text: str) -> list[int]:
        message = visible[j]
        added = text[len(previous):]
        if message.role != "assistant" or message.produced is None:
            return self._tokens(added)
        opened = self._render(visible[:j], generation_prompt=True)
        opening = opened[len(previous):] if opened is not None and opened.startswith(previous) else None
        if opening is None or not added.startswith(opening) or not added[len(opening):].startswith(message.content):
            message.produced = None  # the template reshapes the answer: its text is all there is
            return self._tokens(added)
        closing = added[len(opening) + len(message.content):]
        produced = message.produced
        if produced and self.vocab.is_eog(produced[-1]):
            # the model's own end-of-turn token stands for the template's closing text
            end_text = self.vocab.special_text(produced[-1])
            if end_text and closing.startswith(end_text):
                closing = closing[len(end_text):]
            else:
                produced = produced[:-1]
        return self._tokens(opening) + list(produced) + self._tokens(closing)


# --------------------------------------------------------------------------------- overflow
@dataclass(frozen=True)
class Fit:
    """How a turn fits the context: its prompt and how many more messages it drops."""

    prompt: list[int]
    newly_dropped: int


def fit_turn(conv: Conversation, encoder: ConversationEncoder, n_ctx: int, answer_room: int) -> Fit:
    """The prompt of the next turn (the conversation ends with the user's message), dropping the
    oldest turns after the system message if the prompt and ``answer_room`` tokens do not fit.

    Dropping goes on until the prompt takes at most half the context (so that the next turns fit
    without dropping again) or only the last user message is left. Raises PromptError (and
    leaves ``conv`` as it was) if even that message alone does not fit.
    """
    prompt = encoder.encode(conv)
    if len(prompt) + answer_room <= n_ctx:
        return Fit(prompt, 0)
    saved = conv.token_state()
    goal = min(n_ctx - answer_room, n_ctx // 2)
    first = conv.n_dropped
    try:
        while len(prompt) > goal:
            nxt = _next_turn_start(conv, conv.n_fixed + conv.n_dropped)
            if nxt is None:
                break
            conv.n_dropped = nxt - conv.n_fixed
            conv.forget_tokens()  # the template may render the new first turn differently
            prompt = encoder.encode(conv)
        if len(prompt) >= n_ctx:
            raise PromptError(
                f"this message needs {len(prompt)} tokens with the system message and the template, but the "
                f"context holds only {n_ctx}; shorten it or raise the context size")
    except BaseException:
        conv.restore_token_state(saved)
        raise
    return Fit(prompt, conv.n_dropped - first)


def _next_turn_start(conv: Conversation, index: int) -> int | None:
    """The index of the next user message after ``index`` (the start of the next turn), if the
    turn being dropped is not the last one."""
    last_user = max((i for i, m in enumerate(conv.messages) if m.role == "user"), default=-1)
    for i in range(index + 1, len(conv.messages)):
        if conv.messages[i].role == "user":
            return i if i <= last_user else None
    return None


def reencoded(conv: Conversation, model_key: str) -> bool:
    """Make ``conv`` ready for ``model_key``'s model: produced ids of another model are dropped
    (the text is re-encoded). Returns whether anything had to be re-encoded."""
    if conv.model_key == model_key:
        return False
    changed = conv.model_key is not None and any(m.tokens or m.produced for m in conv.messages)
    for m in conv.messages:
        m.tokens, m.produced = [], None
    conv.n_encoded = 0
    conv.n_dropped = 0  # another context size may fit more; the next turn drops again if needed
    conv.model_key = model_key
    return changed


def set_system(conv: Conversation, text: str) -> None:
    """Set (or with empty ``text`` remove) the system message; the model reads it again."""
    if conv.n_fixed:
        if text.strip():
            conv.messages[0].content = text
        else:
            del conv.messages[0]
    elif text.strip():
        conv.messages.insert(0, Message("system", text))
    conv.forget_tokens()


def new_like(conv: Conversation | None) -> Conversation:
    """A new, empty conversation with ``conv``'s system message."""
    fresh = Conversation(model_key=conv.model_key if conv else None)
    if conv is not None and conv.n_fixed:
        fresh.add(Message("system", conv.messages[0].content))
    return fresh

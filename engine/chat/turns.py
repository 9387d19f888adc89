"""Chat turns over a :class:`engine.chat.conversation.Conversation` on a :class:`engine.session.Session`.

A turn renders the conversation with the model's template, drops the oldest turns if it does not
fit, and runs with prefix reuse, so only the tokens after what the KV cache already holds are
decoded. The answer is written into the conversation as it streams (saved at most every
``SAVE_INTERVAL_S`` during a run, and at the end): a turn that is stopped, fails or is killed
keeps what it produced, marked as interrupted.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.chat.conversation import (
    DONE,
    INTERRUPTED,
    STREAMING,
    Conversation,
    ConversationEncoder,
    ConversationView,
    Message,
    fit_turn,
    new_like,
    reencoded,
    set_system,
)
from specdec_studio.engine.chat.store import ConversationStore, not_saved
from specdec_studio.engine.errors import PromptError
from specdec_studio.engine.events import Event, RejectedDraft, RunFinished, StepDone

SAVE_INTERVAL_S = 2.0
MIN_ANSWER_ROOM = 64  # tokens an answer is given at least before older turns are dropped


@dataclass(frozen=True)
class ConversationChanged:
    """The conversation changed (a turn started or ended, a reload re-encoded it): the view to
    show, and a sentence for the user when something happened to it."""

    view: ConversationView
    note: str = ""


class Chat:
    def __init__(self, session, conversation: Conversation | None = None,
                 store: ConversationStore | None = None, model_key: str | None = None) -> None:
        self.session = session
        self.conversation = conversation or Conversation()
        self.store = store
        self.model_key = model_key or session.model.info.path
        self.encoder = ConversationEncoder(session.require_template(), session.vocab)
        self._saved_at = 0.0
        self.save_error = ""  # why the last save failed, while saves fail
        self.note = ""
        if reencoded(self.conversation, self.model_key):
            self.note = "the conversation was re-encoded for this model; its answers are kept as text"

    # ----------------------------------------------------------------------------- turns
    def send(self, config: RunConfig, text: str, *, fresh_cancel: bool = True) -> Iterator[Event]:
        """A user message and the answer to it."""
        if not text.strip():
            raise PromptError("the message is empty; type something to send")
        conv = self.conversation
        conv.add(Message("user", text))
        try:
            return self._turn(config, fresh_cancel)
        except BaseException:
            conv.truncate(len(conv.messages) - 1)  # nothing is lost: the text stays in the input box
            raise

    def regenerate(self, config: RunConfig, *, fresh_cancel: bool = True) -> Iterator[Event]:
        """Answer the last user message again (the answers after it are replaced)."""
        conv = self.conversation
        last_user = max((i for i, m in enumerate(conv.messages) if m.role == "user"), default=None)
        if last_user is None:
            raise PromptError("there is nothing to regenerate yet; send a message first")
        replaced = self._before_replacing()
        conv.truncate(last_user + 1)
        try:
            return self._turn(config, fresh_cancel, replaced)
        except BaseException:
            self._put_back(replaced)
            raise

    def edit(self, index: int, text: str, config: RunConfig, *, fresh_cancel: bool = True) -> Iterator[Event]:
        """Replace user message ``index`` with ``text``, forget everything after it, and answer."""
        conv = self.conversation
        if not (0 <= index < len(conv.messages)) or conv.messages[index].role != "user":
            raise PromptError("only your own messages can be edited")
        if not text.strip():
            raise PromptError("the message is empty; type something to send")
        replaced = self._before_replacing()
        conv.truncate(index)
        conv.add(Message("user", text))
        try:
            return self._turn(config, fresh_cancel, replaced)
        except BaseException:
            self._put_back(replaced)
            raise

    def _before_replacing(self) -> tuple[list[Message], tuple]:
        """The conversation as it stands (its messages and their ids), before a turn replaces some
        of it: Regenerate and Edit keep it until the new answer has its first token."""
        conv = self.conversation
        return list(conv.messages), conv.token_state()

    def _put_back(self, replaced: tuple[list[Message], tuple]) -> None:
        messages, token_state = replaced
        self.conversation.messages[:] = messages
        self.conversation.restore_token_state(token_state)

    def set_system(self, text: str) -> None:
        set_system(self.conversation, text)

    def clear(self) -> None:
        """Start a new, empty conversation (the old one stays saved)."""
        self.conversation = new_like(self.conversation)

    def save(self) -> str:
        """Save the conversation if it has a store. A disk that refuses (unwritable, full) never
        costs the answer: the conversation stays in memory, and the first failure returns the
        sentence to tell the user (later ones return ""; a save that works again says so)."""
        if self.store is None:
            return ""
        self._saved_at = time.monotonic()  # a failing disk is not asked again at every step
        try:
            note = self.store.save(self.conversation) or ""
        except OSError as exc:
            if self.save_error:
                return ""
            self.save_error = not_saved(exc, self.store.root)
            return self.save_error
        if self.save_error:
            self.save_error = ""
            return note or "the chat is saved again"
        return note

    # ----------------------------------------------------------------------------- one run
    def _turn(self, config: RunConfig, fresh_cancel: bool, replaced: tuple | None = None) -> Iterator[Event]:
        session, conv = self.session, self.conversation
        room = max(MIN_ANSWER_ROOM, min(config.max_tokens, session.n_ctx // 4))
        before = conv.token_state()
        fit = fit_turn(conv, self.encoder, session.n_ctx, room)
        try:
            events = session.run(config, fit.prompt, prompt_text=conv.messages[-1].content,
                                 fresh_cancel=fresh_cancel, reuse_prefix=True)
        except BaseException:
            conv.restore_token_state(before)  # a turn that never ran drops nothing
            raise
        note = ""
        if fit.newly_dropped:
            note = (f"the context was full: the model no longer sees the {fit.newly_dropped} oldest "
                    f"message{'s' if fit.newly_dropped != 1 else ''} (shown greyed)")
        return self._stream(events, config, note, replaced)

    def _stream(self, events: Iterator[Event], config: RunConfig, note: str,
                replaced: tuple | None) -> Iterator[Event]:
        """The turn's events, its answer written into the conversation as they come. ``replaced``:
        what Regenerate or Edit replace (:meth:`_before_replacing`), kept in memory and on disk
        until the answer has its first token; an answer stopped, failed or abandoned before it
        puts it back."""
        conv = self.conversation
        answer = conv.add(Message("assistant", "", produced=[], state=STREAMING,
                                  figures={"mode": config.mode}))
        saved = self.save() if replaced is None else ""  # the file keeps what is replaced, for now
        rejected: dict[int, tuple[str, ...]] = {}
        finished = False
        try:
            yield ConversationChanged(conv.view(), "; ".join(n for n in (note, saved) if n))
            for event in events:
                if isinstance(event, RejectedDraft):
                    rejected[event.step] = event.texts
                elif isinstance(event, StepDone):
                    _add_pieces(answer, event, rejected.pop(event.step, ()))
                    if replaced is not None and answer.pieces:  # the new answer has begun: saved at once
                        replaced, self._saved_at = None, 0.0
                    if time.monotonic() - self._saved_at >= SAVE_INTERVAL_S:
                        with self.session.off_the_clock():  # the run's t/s is the model's, not the disk's
                            saved = self.save()
                        if saved:
                            yield event
                            yield ConversationChanged(conv.view(), saved)
                            continue
                elif isinstance(event, RunFinished):
                    answer.content = event.text
                    answer.produced = list(event.token_ids) + _end_token(event)
                    answer.finish_reason = event.finish_reason
                    answer.state = DONE if event.finish_reason != "cancelled" else INTERRUPTED
                    answer.figures.update(_figures(event.stats))
                    finished = True
                    if answer.state == INTERRUPTED and not event.token_ids:
                        self._forget_empty(answer, replaced)  # stopped before its first token
                    saved = self.save()
                    full = ("the context is full; the next message drops the oldest turns"
                            if event.finish_reason == "context_full" else "")
                    # the conversation as it now stands comes first: whoever sees the run end sees it
                    yield ConversationChanged(conv.view(), "; ".join(n for n in (full, saved) if n))
                yield event
        finally:
            events.close()  # an abandoned turn ends its run now, while the session's contexts are alive
            if not finished:  # a failure or an abandoned run: keep what was produced
                answer.content = "".join(str(p[0]) for p in answer.pieces if p[1] != "rejected")
                answer.produced = None  # only its text is known for sure
                answer.state, answer.finish_reason = INTERRUPTED, "interrupted"
                if not answer.content:
                    self._forget_empty(answer, replaced)
                self.save()

    def _forget_empty(self, answer: Message, replaced: tuple | None) -> None:
        """An answer with nothing in it: what its turn replaced comes back, else it goes."""
        if replaced is not None:
            self._put_back(replaced)
        else:
            _drop_empty(self.conversation, answer)


def _drop_empty(conv: Conversation, answer: Message) -> None:
    """Take an answer that produced nothing out of the conversation (its question stays, to be
    answered by the next Regenerate): an empty "interrupted" message is no record of anything."""
    if conv.messages and conv.messages[-1] is answer:
        conv.truncate(len(conv.messages) - 1)


def _add_pieces(answer: Message, event: StepDone, rejected: tuple[str, ...]) -> None:
    acceptance = round(event.n_accepted / event.n_drafted, 3) if event.n_drafted else 0.0
    proposers = event.auto.proposers if event.auto is not None else ()
    pieces = [[t.text, t.source, event.step, t.id, acceptance] for t in event.tokens]
    for piece, proposer in zip(pieces, proposers):
        if proposer != "target":
            piece.append(proposer)
    if event.tokens and event.tokens[0].why is not None:
        # the explanation rides along while the app runs (Message.to_dict leaves it out of the file)
        for piece, t in zip(pieces, event.tokens):
            piece[5:] = [piece[5] if len(piece) > 5 else "", t.why]
    if rejected:  # the drafts were tried where the target's own token now stands
        why = event.tokens[-1].why if event.tokens else None
        pieces[-1:-1] = [[text, "rejected", event.step, -1, acceptance] + (["", why] if why else [])
                         for text in rejected]
    answer.pieces.extend(pieces)
    answer.content += "".join(t.text for t in event.tokens)


class AnswerInProgress:
    """A turn's answer as its events tell it, followed from outside the engine that writes it.

    The engine that runs a chat turn saves its answer at most every ``SAVE_INTERVAL_S``. Where that
    engine can die mid-turn (a process whose RPC server stopped answering), whoever reads its
    events follows the answer here, so that what the stream showed can be kept after the last save:
    :func:`keep_interrupted` writes it into the saved conversation."""

    def __init__(self) -> None:
        self.conv_id = ""
        self.answer: Message | None = None  # the answer being written, None between turns
        self._rejected: dict[int, tuple[str, ...]] = {}

    def follow(self, event: object) -> None:
        if isinstance(event, ConversationChanged):
            last = event.view.messages[-1] if event.view.messages else None
            if last is not None and last.role == "assistant" and last.state == STREAMING:
                self.conv_id = event.view.id
                self.answer = Message("assistant", last.content, pieces=[list(p) for p in last.pieces], state=STREAMING)
            else:
                self.answer = None
            self._rejected.clear()
        elif self.answer is None:
            return
        elif isinstance(event, RejectedDraft):
            self._rejected[event.step] = event.texts
        elif isinstance(event, StepDone):
            _add_pieces(self.answer, event, self._rejected.pop(event.step, ()))
        elif isinstance(event, RunFinished):  # the engine wrote the answer's end itself
            self.answer = None

    def interrupted(self) -> tuple[str, list[list]] | None:
        """The conversation id and the pieces (as saved: no explanations) of an answer cut short."""
        if self.answer is None or not self.answer.pieces:
            return None
        return self.conv_id, [p[:6] for p in self.answer.pieces]


def keep_interrupted(conv: Conversation, pieces: list[list]) -> bool:
    """Give ``conv``'s last answer the ``pieces`` an engine that died streamed before it could save
    them, marked interrupted: only an answer that was still being written, and only where the
    pieces go further than what was saved. Returns whether it changed."""
    answer = conv.messages[-1] if conv.messages else None
    if answer is None or answer.role != "assistant" or answer.state == DONE or len(pieces) <= len(answer.pieces):
        return False
    answer.pieces = [list(p) for p in pieces]
    answer.content = "".join(str(p[0]) for p in answer.pieces if p[1] != "rejected")
    answer.produced = None  # only its text is known for sure
    answer.state, answer.finish_reason = INTERRUPTED, "interrupted"
    return True


def _end_token(event: RunFinished) -> list[int]:
    """The end-of-generation token the model produced, which the run's ids leave out."""
    if event.finish_reason != "stop":
        return []
    return [event.end_token] if event.end_token is not None else []


def _figures(stats: dict) -> dict:
    keep = ("n_predict", "tokens_per_second", "tokens_per_step", "n_drafted", "n_accept", "accept_rate",
            "n_prompt", "n_prompt_reused", "n_prompt_decoded", "t_encode_s")
    return {k: stats[k] for k in keep if k in stats}

"""The conversation on the engine thread: its store, its binding to the loaded model, and the
window's conversation requests."""

from __future__ import annotations

from specdec_studio.app.worker.jobs.state import WorkerState
from specdec_studio.app.worker.messages import ConversationList, ConversationRequest


def rebind(state: WorkerState, session) -> None:
    """A new model keeps the conversation: its ids are re-encoded for the model now, and the
    window says so."""
    state.chat = None
    if state.conversation is None or not state.conversation.messages or not session.has_chat_template:
        return
    require_chat(state)


def store_of(state: WorkerState):
    if state.conversation_store is None:
        from specdec_studio.engine.chat.store import ConversationStore

        state.conversation_store = ConversationStore()
    return state.conversation_store


def require_chat(state: WorkerState):
    """The chat binding of the current conversation to the current model (re-encoded for it
    if another model wrote its ids; the window is told)."""
    from specdec_studio.engine.chat.turns import Chat, ConversationChanged
    from specdec_studio.engine.chat.conversation import Conversation

    session = state.require_session()
    if state.chat is None or state.chat.session is not session:
        if state.conversation is None:
            state.conversation = Conversation()
        state.chat = Chat(session, state.conversation, store=store_of(state),
                          model_key=session.model.info.path)
        if state.chat.note:
            state.emit(ConversationChanged(state.conversation.view(), state.chat.note))
    return state.chat


def show(state: WorkerState, note: str = "") -> None:
    from specdec_studio.engine.chat.turns import ConversationChanged

    state.emit(ConversationChanged(state.conversation.view(), note))
    emit_list(state)


def emit_list(state: WorkerState, query: str = "") -> None:
    """The saved conversations for the sidebar. A Stop ends a long listing at the next file and the
    sidebar keeps what it showed (the next listing reads only the files this one did not)."""
    from specdec_studio.engine.chat.store import ListingStopped

    current = state.conversation.id if state.conversation is not None else ""
    try:
        found, damaged = store_of(state).scan(query, stopped=state.cancel.is_set)
    except ListingStopped:
        return
    state.emit(ConversationList(tuple(found), current, query, tuple(damaged)))


def conversation(state: WorkerState, command: ConversationRequest) -> None:
    from specdec_studio.engine.chat.conversation import Conversation, new_like, set_system
    from specdec_studio.engine.chat.store import DamagedConversation, not_saved

    store = store_of(state)
    action = command.action
    if action == "list":
        emit_list(state, command.text)
        return
    current = state.conversation or Conversation()
    note = ""

    def save(conv) -> str:
        """A save the disk refuses keeps the conversation in memory and says why, once."""
        try:
            return store.save(conv) or ""
        except OSError as exc:
            return not_saved(exc, store.root)

    if action == "start":
        last = store.last_opened()
        try:
            current = store.load(last) if last else current
        except DamagedConversation:
            pass  # start afresh (the file stays for the user to look at; the list names it)
    elif action == "new":
        current = new_like(current)
    elif action == "open":
        current = store.load(command.conv_id)
    elif action == "rename":
        if command.conv_id == current.id:
            current.title = command.text.strip() or current.title
            note = save(current)
        else:
            store.rename(command.conv_id, command.text)
    elif action == "delete":
        store.delete(command.conv_id)
        if command.conv_id == current.id:
            current = Conversation()
    elif action == "system":
        set_system(current, command.text)
        if current.messages:
            note = save(current)
    elif action == "interrupted":  # an engine process died mid-answer: keep what its stream showed
        from specdec_studio.engine.chat.turns import keep_interrupted

        try:
            current = store.load(command.conv_id)
        except (DamagedConversation, OSError):
            return  # never saved, or unreadable: the window keeps what it shows
        if keep_interrupted(current, [list(p) for p in command.pieces]):
            note = save(current) or "the answer that was cut short is kept as far as it had come"
    state.conversation = current
    state.chat = None  # bound again (and re-encoded if needed) at the next turn
    if state.conversation.messages:
        store.set_last_opened(state.conversation.id)
    show(state, note)

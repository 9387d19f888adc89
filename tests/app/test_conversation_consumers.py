"""Damaged conversation files fed to what reads them (issue 79, item 5 and its weak test): the
sidebar, ``specdec chat``'s ``/list``, the stream's drawing of the conversation, its figures lines
and the Markdown and HTML exports. A file may load (then each of them works) or be skipped as
damaged (then it costs only itself, said in one sentence)."""

from __future__ import annotations

import argparse
import json

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from specdec_studio.app.widgets.conversation_list import ConversationSidebar
from specdec_studio.app.widgets.token_stream import TokenStream
from specdec_studio.app.widgets.transcript import render_conversation
from specdec_studio.engine.chat import transcript
from specdec_studio.engine.chat.conversation import Conversation, Message
from specdec_studio.engine.chat.store import ConversationStore, DamagedConversation
from specdec_studio.engine.cli.chat import _command
from tests.engine.test_trace import _JSON_VALUES, _paths, _replaced


def a_saved_conversation() -> dict:
    """A conversation as the window saves one: a system message, a question, an answer with its
    tokens' pieces and figures, one cut short."""
    conv = Conversation()
    conv.title = "Colours"
    conv.add(Message("system", "Be brief."))
    conv.add(Message("user", "Name a colour and a <b>shape</b>."))
    conv.add(Message("assistant", "Blue, and a **circle**.", pieces=[
        ["Blue", "sampled", 1, 12, 0.0, ""], [",", "accepted_ngram", 2, 13, 1.0, "ngram"],
        [" and a **circle**.", "sampled", 3, 14, 0.5, ""]], finish_reason="stop",
        figures={"mode": "auto", "n_predict": 3, "tokens_per_second": 41.5, "tokens_per_step": 1.5,
                 "n_drafted": 2, "n_accept": 1, "accept_rate": 0.5, "n_prompt": 30, "n_prompt_reused": 12}))
    conv.add(Message("user", "And another?"))
    conv.add(Message("assistant", "Gre", pieces=[["Gre", "sampled", 1, 15, 0.0, ""]], state="interrupted"))
    return conv.to_dict()


SAVED = a_saved_conversation()
PLACES = [path for path, _ in _paths(SAVED)]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_what_a_damaged_conversation_file_loads_is_shown_listed_and_exported(qtbot, tmp_path_factory, capsys,
                                                                            data):
    record = SAVED
    for _ in range(2):
        try:
            record = _replaced(record, data.draw(st.sampled_from(PLACES)), data.draw(_JSON_VALUES))
        except (KeyError, IndexError, TypeError):
            pass
    folder = tmp_path_factory.mktemp("data")
    store = ConversationStore(folder)
    (store.root).mkdir(parents=True)
    (store.root / "damaged.json").write_text(json.dumps(record))
    found, damaged = store.scan()
    sidebar = ConversationSidebar()
    qtbot.addWidget(sidebar)
    sidebar.set_items(found, "damaged")
    args = argparse.Namespace(no_save=False)
    _command("/list", None, None, store, None, args)  # specdec chat's listing
    assert "Traceback" not in capsys.readouterr().err
    if damaged:
        assert found == [] and damaged == ["damaged.json"]
        return
    try:
        conv = store.load("damaged")
    except DamagedConversation as exc:  # changed between the listing and the load: never here
        raise AssertionError(exc) from None
    view = conv.view()
    stream = TokenStream()
    qtbot.addWidget(stream)
    for show_tokens in (False, True):
        stream.show_tokens = show_tokens
        render_conversation(stream, view, None)
    assert isinstance(transcript.to_markdown(view), str) and isinstance(transcript.to_html(view), str)

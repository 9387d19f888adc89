"""What strategies keep of the context from one run to the next (Auto's index, prompt lookup's n-gram
cache): extended, it is what a fresh read of the prompt makes, so a chat turn plans and drafts
exactly as if it had read the whole conversation again."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_studio.engine.chat.turns import Chat
from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.strategies.auto.sources import ContextIndex
from specdec_studio.engine.strategies.lookup import NgramCacheDrafter
from tests.auto_plan import SHARED_PROFILES, load_curve, simulated_machine

TOKENS = st.lists(st.integers(0, 5), max_size=90)  # a small vocabulary: n-grams and matches repeat


def _state(index: ContextIndex) -> tuple:
    """Everything the index's answers depend on."""
    followers = {key: (dict(f.counts), f.total, f.best, f.best_count) for key, f in index.ngrams.followers.items()}
    sam = index.suffix.automaton
    return (followers, index.ngrams.n_seen, index.ngrams.counted, index.suffix.tokens, index.suffix.state,
            index.suffix.match_length,
            sam.next, sam.link, sam.length, sam.first_end, sam.last, sam.n)


@given(TOKENS, TOKENS, st.integers(0, 90), st.integers(0, 90), TOKENS)
@settings(max_examples=150, deadline=None)
def test_an_index_extended_is_the_index_read_afresh(prompt, answer, followed, counted, message):
    """A run reads its prompt, its matcher follows the answer token by token and its n-gram cache
    counts on the steps that plan (``counted`` ≤ ``followed`` tokens of it); the next prompt is that
    context and a new message."""
    index = ContextIndex()
    assert index.read(prompt) == 0
    context = [*prompt, *answer]
    followed = min(followed, len(answer))
    index.suffix.extend(answer[:followed])
    index.ngrams.count(context[: len(prompt) + min(counted, followed)])
    next_prompt = [*context, *message]
    kept = index.read(next_prompt)
    fresh = ContextIndex()
    fresh.read(next_prompt)
    assert kept == len(prompt) + followed
    assert _state(index) == _state(fresh)


@given(TOKENS, TOKENS)
@settings(max_examples=50, deadline=None)
def test_a_prompt_that_does_not_continue_the_index_is_read_afresh(first, second):
    index = ContextIndex()
    index.read(first)
    kept = index.read(second)
    fresh = ContextIndex()
    fresh.read(second)
    assert kept == (len(first) if second[: len(first)] == first else 0)
    assert _state(index) == _state(fresh)


@given(TOKENS, TOKENS, TOKENS, st.integers(1, 3), st.integers(0, 2))
@settings(max_examples=100, deadline=None)
def test_prompt_lookups_counts_extended_are_the_counts_made_afresh(prompt, answer, message, longest, shorter):
    def counts(drafter: NgramCacheDrafter) -> dict:
        return {key: (dict(f.counts), f.total, f.best, f.best_count) for key, f in drafter.followers.items()}

    kept = NgramCacheDrafter(max(1, longest - shorter), longest)
    kept.begin(prompt)
    kept.count([*prompt, *answer])  # the run's steps count its context as it grows
    next_prompt = [*prompt, *answer, *message]
    kept.begin(next_prompt)
    fresh = NgramCacheDrafter(max(1, longest - shorter), longest)
    fresh.begin(next_prompt)
    assert counts(kept) == counts(fresh) and kept.counted == fresh.counted == next_prompt
    kept.begin(message)  # a prompt that does not continue them: counted afresh
    fresh = NgramCacheDrafter(max(1, longest - shorter), longest)
    fresh.begin(message)
    assert counts(kept) == counts(fresh)


def _chat_plans(session, messages: list[str], fresh_index: bool, config: RunConfig | None = None) -> list:
    """Every step's plan and the tokens of a chat (Auto unless ``config``) from an empty cache and
    nothing kept of earlier runs."""
    session.target.forget()
    session._kept.clear()
    chat = Chat(session)
    plans = []
    for message in messages:
        if fresh_index:
            session._kept.clear()  # as before the index was kept: the whole conversation read again
        for event in chat.send(config or RunConfig(mode="auto", max_tokens=48), message):
            if isinstance(event, StepDone):  # the first token (the prompt's decode) has no plan
                auto = event.auto
                plans.append(("step", auto and auto.decision, auto and auto.k, auto and auto.predicted_gain,
                              event.n_drafted, event.n_accepted, [t.id for t in event.tokens]))
            elif isinstance(event, RunFinished):
                plans.append(("done", tuple(event.token_ids)))
    return plans


def test_chat_turns_plan_as_if_they_read_the_conversation_afresh(smollm_session, monkeypatch):
    """On a machine that keeps time (the shared smooth profile), so that only the index differs."""
    machine = load_curve(SHARED_PROFILES / "smollm2-q4_1-smooth.json")
    messages = ["List the first eight prime numbers, separated by commas.",
                "Now list them again, then the next four.", "Repeat the whole list once more."]
    read_before: list[int] = []  # each turn: how many of its prompt's tokens the index had read
    read = ContextIndex.read
    monkeypatch.setattr(ContextIndex, "read", lambda index, prompt: read_before.append(read(index, prompt))
                        or read_before[-1])
    with simulated_machine(smollm_session, machine, machine):
        kept = _chat_plans(smollm_session, messages, fresh_index=False)
        assert read_before[0] == 0 and all(n > 50 for n in read_before[1:])  # turns 2 and 3 extended it
        afresh = _chat_plans(smollm_session, messages, fresh_index=True)
    assert kept == afresh
    assert any(plan[0] == "step" and plan[2] for plan in kept)  # trees were planned: the index was read


def test_prompt_lookup_chat_turns_draft_as_if_they_read_the_conversation_afresh(smollm_session):
    messages = ["Write the numbers from one to twelve as words, one per line.", "Write them again, in the same way.",
                "Once more, please."]
    config = RunConfig(mode="lookup", max_tokens=48, speculative=SpeculativeParams(k=4))
    kept = _chat_plans(smollm_session, messages, fresh_index=False, config=config)
    assert len(smollm_session._kept[("lookup:cache", 1, 3)].counted) > 100  # kept from turn to turn
    afresh = _chat_plans(smollm_session, messages, fresh_index=True, config=config)
    assert kept == afresh
    assert any(plan[0] == "step" and plan[4] for plan in kept)  # it drafted

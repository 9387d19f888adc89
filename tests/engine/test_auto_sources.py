"""Auto's sources: the quick test a planning step starts with says what the full proposal would."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_studio.engine.strategies.auto.priors import WAKE_MATCH
from specdec_studio.engine.strategies.auto.sources import Sources
from specdec_studio.engine.strategies.ngram_memory import NgramMemory
from specdec_studio.engine.strategies.suffix_automaton import SuffixMatcher

TOKENS = st.lists(st.integers(0, 6), max_size=80)  # a small vocabulary: n-grams and matches repeat


@given(TOKENS, TOKENS, TOKENS, st.booleans(), st.lists(st.booleans(), max_size=80))
@settings(max_examples=150, deadline=None)
def test_proposes_anything_is_whether_the_chains_propose_a_token(prompt, answer, past_text, with_memory, plans):
    """At every token of an answer, as a run asks them (``plans``: the steps that plan in full;
    the others ask only ``repeats``, so the suffix matcher lags behind the text there):
    ``repeats`` is the whole text's matcher's verdict, ``proposes_anything`` is true exactly
    where ``chains`` (asked for one token, four, or many) proposes something, and the matcher,
    caught up, is the matcher of the whole text."""
    memory = None
    if with_memory:
        memory = NgramMemory(None, "test")
        memory.learn(past_text * 3, 0)  # followed often enough to be confident somewhere
    sources = Sources(prompt or [0], memory=memory)
    context = list(prompt or [0])
    for i, token in enumerate([None, *answer]):
        if token is not None:
            context.append(token)
        whole = SuffixMatcher(context).match_length
        assert sources.repeats(context, WAKE_MATCH) == (whole >= WAKE_MATCH), context
        quick = sources.proposes_anything(context)
        if i < len(plans) and not plans[i]:
            continue
        assert sources.repeats(context, 2) == (whole >= 2), context
        sources.advance(context)  # as a step that plans in full
        assert sources.suffix.match_length == whole
        for k in (1, 4, 16):
            assert quick == bool(sources.chains(context, k)), (context, k)

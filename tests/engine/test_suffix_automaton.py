"""The suffix automaton's longest earlier match, against brute force on generated texts."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from specdec_studio.engine.strategies.suffix_automaton import SuffixMatcher


def _longest_earlier_match(tokens: list[int]) -> int:
    """The longest L such that the last L tokens also occur ending before the last index."""
    n = len(tokens)
    best = 0
    for length in range(1, n):
        suffix = tokens[n - length:]
        if any(tokens[e - length + 1: e + 1] == suffix for e in range(length - 1, n - 1)):
            best = length
    return best


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 3), max_size=60))
def test_the_match_is_the_longest_earlier_occurrence(tokens):
    matcher = SuffixMatcher()
    for i, t in enumerate(tokens):
        matcher.add(t)
        text = tokens[: i + 1]
        assert matcher.match_length == _longest_earlier_match(text)
        proposal, length = matcher.continuation(4)
        if length:
            end = matcher.automaton.first_end[matcher.state]
            assert end < i and text[end - length + 1: end + 1] == text[i - length + 1:]
            period = i - end
            assert matcher.period() == period
            if length >= period:  # a periodic end: the proposal goes round the period
                assert proposal == [text[end + 1 + j % period] for j in range(4)]
                assert matcher.loop_length() == length
            else:
                assert proposal == text[end + 1: end + 5]
                assert matcher.loop_length() == 0
        else:
            assert proposal == []
            assert matcher.period() == 0 and matcher.loop_length() == 0


def test_a_repeated_phrase_is_continued():
    matcher = SuffixMatcher([5, 6, 7, 8, 9, 1, 2, 5, 6, 7])
    assert matcher.continuation(3) == ([8, 9, 1], 3)
    assert matcher.loop_length() == 0  # a phrase said again is not a loop: what follows it may differ


def test_a_loop_is_continued_round_its_period():
    # "a b c" three times: the longest earlier match is "a b c a b c", one period back
    matcher = SuffixMatcher([1, 2, 3, 1, 2, 3, 1, 2, 3])
    assert matcher.continuation(7) == ([1, 2, 3, 1, 2, 3, 1], 6)
    assert (matcher.period(), matcher.loop_length()) == (3, 6)  # gone round for 6 tokens past its first period

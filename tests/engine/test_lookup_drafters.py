"""Prompt lookup's two drafters on hand-made token sequences (no model needed)."""

from __future__ import annotations

from specdec_studio.engine.strategies.lookup import LatestMatchDrafter, NgramCacheDrafter


def cache_draft(context: list[int], k: int, ngram_min: int = 1, ngram_max: int = 4) -> list[int]:
    drafter = NgramCacheDrafter(ngram_min, ngram_max)
    drafter.begin(context[:-1])
    return drafter.propose(context, k).tokens


def test_cache_copies_a_repeated_phrase_and_stops_where_it_is_unsure():
    # "1 2 3" was always followed by 4, but "1 2 3 4" by 9, 8 and 7 once each: the draft stops
    # after 4, where latest-match would go on copying 7 1 2 ...
    context = [1, 2, 3, 4, 9, 1, 2, 3, 4, 8, 1, 2, 3, 4, 7, 1, 2, 3]
    assert cache_draft(context, 8) == [4]
    assert LatestMatchDrafter(1, 4).propose(context, 4).tokens == [4, 7, 1, 2]
    # a phrase seen once is copied for as long as k allows (a 3-gram needs one sighting)
    assert cache_draft([7, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3], 3) == [4, 5, 6]


def test_cache_needs_two_sightings_of_a_single_token():
    # only the 1-gram "5" matches, and it was followed by something once: not drafted
    assert cache_draft([5, 6, 1, 2, 5], 4) == []
    # twice, by the same token: drafted
    assert cache_draft([5, 6, 1, 5, 6, 2, 5], 1) == [6]


def test_cache_takes_the_most_frequent_follower_and_needs_a_dominant_one():
    # (1-grams only) "3" was followed by 8 twice and by 9 once: 8 holds 67 %, above the 66 %
    # a 1-gram needs
    assert cache_draft([3, 8, 0, 3, 9, 0, 3, 8, 0, 3], 1, ngram_max=1) == [8]
    # 8 and 9 once each: 50 % is not enough for a 1-gram
    assert cache_draft([3, 8, 0, 3, 9, 0, 3], 1, ngram_max=1) == []


def test_cache_prefers_the_longest_confident_ngram():
    # "1 3" was followed by 4 twice, while "3" alone was followed by 4 (2x) and 5 (2x)
    context = [1, 3, 4, 2, 3, 5, 1, 3, 4, 2, 3, 5, 1, 3]
    assert cache_draft(context, 1) == [4]
    # with 1-grams only, the tie between 4 and 5 (50 %) is not confident
    assert cache_draft(context, 1, ngram_max=1) == []


def test_cache_counts_generated_tokens_as_they_arrive():
    drafter = NgramCacheDrafter(1, 4)
    drafter.begin([1, 2, 3])
    assert drafter.propose([1, 2, 3, 4], 4).tokens == []
    # the generated 4 0 1 2 3 are counted too: "1 2 3" was followed by 4, "1 2 3 4" by 0, ...
    assert drafter.propose([1, 2, 3, 4, 0, 1, 2, 3], 4).tokens == [4, 0, 1, 2]


def test_latest_match_copies_the_most_recent_occurrence_regardless_of_counts():
    drafter = LatestMatchDrafter(1, 3)
    # "3" was last followed by 9 9: latest wins although 8 followed it twice
    assert drafter.propose([3, 8, 0, 3, 8, 0, 3, 9, 9, 3], 2).tokens == [9, 9]
    assert drafter.propose([1, 2, 3], 4).tokens == []

"""llama.cpp's draftless spec types as prompt lookup's sources, on hand-made token sequences."""

from __future__ import annotations

from specdec_studio.engine.config import SpeculativeParams
from specdec_studio.engine.strategies.lookup import make_drafter
from specdec_studio.engine.strategies.lookup_sources import MapDrafter, ModHashDrafter, SimpleMatchDrafter

PASSAGE = list(range(100, 130))  # 30 distinct tokens


def test_simple_copies_what_followed_the_newest_match_and_needs_a_long_enough_tail():
    drafter = SimpleMatchDrafter(size_key=3, size_value=5)
    # "1 2 3" occurred twice before: the newer occurrence (followed by 7 8 ...) is copied
    context = [0, 1, 2, 3, 4, 5, 6, 0, 0, 1, 2, 3, 7, 8, 9, 10, 11, 12, 0, 1, 2, 3]
    assert drafter.propose(context, 10).tokens == [7, 8, 9, 10, 11]
    assert drafter.propose(context, 2).tokens == [7, 8]  # k caps the copy
    # a loop closing on itself: the newest match of "5 6 7" leaves 2 tokens before the context's
    # newest one, fewer than the key, and is not drafted
    assert drafter.propose([0, 9, 9, 9, 9, 9, 9, 9, 9, 9, 5, 6, 7, 5, 6, 7], 10).tokens == []
    # nothing is drafted before the context is longer than key + value + 1
    assert SimpleMatchDrafter(3, 50).propose(context, 10).tokens == []


def test_map_k_drafts_as_many_tokens_as_the_key_last_had_accepted():
    drafter = MapDrafter(values_per_key=1, size_key=4, size_value=8)
    context = [0, *PASSAGE, 1, *PASSAGE[:4]]
    drafter.begin(context[:-1])
    assert drafter.propose(context, 20).tokens == PASSAGE[4:12]
    # the target kept three of them and then said 99: the next draft from that key is 3 long
    after = [*context, *PASSAGE[4:7], 99, 2, *PASSAGE[:4]]
    drafter.settle([*context, *PASSAGE[4:7], 99])
    assert drafter.propose(after, 20).tokens == PASSAGE[4:7]
    # every one rejected: the key never drafts again
    drafter.settle([*after, 98])
    assert drafter.propose([*after, 98, 3, *PASSAGE[:4]], 20).tokens == []


def test_map_k4v_drafts_only_a_dominant_continuation():
    n, m = 2, 3
    key = [7, 8]
    common, rare = [1, 2, 3], [4, 5, 6]

    def draft(*values):
        context = [0]
        for value in values:
            context += [*key, *value, 0]
        context += [9] * (n + m + 2) + key
        return MapDrafter(values_per_key=4, size_key=n, size_value=m).propose(context, 10).tokens

    assert draft(common, common, rare) == common  # 2 against 1: dominant
    assert draft(common, rare) == []  # 1 against 1: not
    assert draft(common, common, rare, rare) == []  # 2 against 2: not


def test_mod_chains_lookups_across_passages_and_needs_n_min_tokens():
    # "1 2 3" was followed by 4 5, and "3 4 5" (later) by 6 7 8: the chain runs on through both,
    # until "0 1 2", whose follower is not in the table yet (it is the newest text)
    context = [1, 2, 3, 4, 5, 0, 3, 4, 5, 6, 7, 8, 0, 1, 2, 3]
    drafter = ModHashDrafter(n_match=3, n_min=4, n_max=10)
    drafter.begin(context[:-1])
    assert drafter.propose(context, 10).tokens == [4, 5, 6, 7, 8, 0, 1, 2]
    assert drafter.propose(context, 3).tokens == [4, 5, 6]  # k caps the draft; n_min judges the whole chain
    # the context's last n-gram never occurred before: nothing to chain from
    assert drafter.propose([*context, 9, 9], 10).tokens == []
    # a chain of 8 is shorter than n_min 9: not drafted
    strict = ModHashDrafter(n_match=3, n_min=9, n_max=10)
    strict.begin(context[:-1])
    assert strict.propose(context, 10).tokens == []


def test_mod_takes_new_ngrams_in_chunks_of_32():
    drafter = ModHashDrafter(n_match=2, n_min=1, n_max=1)
    prompt = [7, 8, *range(100, 120)]
    drafter.begin(prompt)
    text = [*prompt, 5, 6, 9]  # "5 6" followed by 9, after the prompt
    assert drafter.propose([*text, 5, 6], 1).tokens == []  # 4 new tokens: not in the table yet
    text += range(200, 230)
    assert drafter.propose([*text, 5, 6], 1).tokens == [9]  # over 32 new: now they are


def test_mod_learns_the_newest_follower_of_each_ngram():
    drafter = ModHashDrafter(n_match=2, n_min=1, n_max=1)
    drafter.begin([1, 2, 3, 0, 1, 2, 4, 0])
    assert drafter.propose([1, 2, 3, 0, 1, 2, 4, 0, 1, 2], 1).tokens == [4]


def test_every_source_is_made_from_the_run_params():
    kinds = {source: type(make_drafter(SpeculativeParams(lookup=source)))
             for source in ("simple", "map-k", "map-k4v", "mod")}
    assert kinds == {"simple": SimpleMatchDrafter, "map-k": MapDrafter, "map-k4v": MapDrafter, "mod": ModHashDrafter}
    assert make_drafter(SpeculativeParams(lookup="map-k4v")).values_per_key == 4

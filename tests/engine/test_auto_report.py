"""Auto's report of its sources: what each proposed, was sent and accepted, and what ruled out one never sent."""

from __future__ import annotations

from specdec_studio.engine.strategies.auto.calibration import Calibrator
from specdec_studio.engine.strategies.auto.report import AutoReport, source_counts, source_lines, step_limit_line
from specdec_studio.engine.strategies.auto.sources import Proposal, Sources

KINDS = Sources([0]).kinds()  # a run without a draft or a memory: the n-gram cache's two kinds and the suffix match


def test_a_source_never_sent_is_ruled_out_by_its_chance_or_by_its_chains():
    report = AutoReport()
    suffix, ngram = Proposal("suffix", [5, 6], [(2,), (2,)]), Proposal("ngram", [5], [(1, 0, 0, 0)])
    report.consider([suffix, ngram], [0.30, 0.25], 0.40)
    report.consider([suffix], [0.55], 0.45)
    auto = report.as_dict(Calibrator(), KINDS)
    # the suffix match once offered a first token likelier than the step needed; the n-gram cache never did
    assert auto["sources"]["ngram"]["proposed"] == 1 and auto["sources"]["suffix"]["proposed"] == 2
    assert "a 25% chance, under the 40% a step needed" in auto["sources"]["ngram"]["ruled_out"]
    assert "no chain of it promised enough tokens" in auto["sources"]["suffix"]["ruled_out"]
    assert "ruled_out" not in auto["sources"]["ngram_alt"] and auto["sources"]["ngram_alt"]["proposed"] == 0
    assert "draft" not in auto["sources"]
    lines = source_lines(auto)
    assert lines[0].startswith(
        "n-gram cache: proposed on 1 step, 0 of 0 sent tokens accepted; never sent: its likeliest"
    )


def test_the_short_form_gives_counts_or_says_never_sent():
    report = AutoReport()
    report.consider([Proposal("suffix", [5], [(2,)])], [0.3], 0.4)
    auto = report.as_dict(Calibrator(), KINDS)
    assert source_counts(auto) == ("n-gram cache: never sent · n-gram cache's other followers: never sent · "
                                   "suffix match: never sent")


def test_the_step_limit_line_names_the_profile_cap_and_the_loops_past_it():
    assert step_limit_line({"step_tokens_max": 16, "loop_steps": 0}) == \
        "steps of at most 16 proposed tokens (the profile's price)"
    assert step_limit_line({"step_tokens_max": 16, "loop_steps": 3}).endswith(
        "; 3 steps went past that round a loop the text repeated")
    assert step_limit_line({"step_tokens_max": 9, "loop_steps": 1}).endswith(
        "; 1 step went past that round a loop the text repeated"
    )
    assert step_limit_line({"decisions": {}}) is None  # a trace from before runs reported it

"""The window's figures line reads a saved message's figures as its file kept them (issue 79: a
message without ``tokens_per_second`` raised on the GUI thread)."""

from __future__ import annotations

from specdec_studio.app.model.turn import figures_line


def test_a_full_run_reads_as_before():
    stats = {"n_predict": 12, "tokens_per_second": 40.0, "tokens_per_step": 1.5, "n_drafted": 8, "n_accept": 4,
             "n_prompt": 30, "n_prompt_reused": 20}
    assert figures_line("lookup", stats, "length") == ("[lookup · 12 tokens · 40.0 tok/s · 1.50 tokens/step · "
                                                      "accepted 4/8 · prompt 30 (20 reused) · length]")


def test_figures_a_file_left_out_are_left_out():
    assert figures_line("plain", {"n_predict": 2}, None) == "[plain · 2 tokens]"
    assert figures_line("auto", {"n_predict": 2, "n_drafted": 3}, "stop") == "[auto · 2 tokens · accepted 0/3 · stop]"

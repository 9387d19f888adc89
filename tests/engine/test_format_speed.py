"""The best mode on each weight format against plain on the original file, measured side by side."""

from __future__ import annotations

import json
import math

import pytest

from specdec_studio.engine.models import catalog
from specdec_studio.engine.tuning import format_speed
from specdec_studio.engine.tuning.prompts import shipped
from tests.conftest import N_THREADS


@pytest.fixture(scope="module")
def q4_0_copy(smollm_path):
    return catalog.make_derived("default-q4_0", log=lambda _m: None)  # the Q4_0 copy the set-up makes


def test_every_mode_on_every_file_is_measured_against_both_plains_and_stays_lossless(smollm_path, q4_0_copy):
    prompts = shipped(["code_editing", "chat"], per_category=1)
    # a "copy" in the original's own format is the original: measured once
    copies = [("Q4_0", q4_0_copy), ("Q4_1", smollm_path)]
    files = format_speed.measure(smollm_path, copies, prompts, max_tokens=16, n_threads=N_THREADS,
                                 n_ctx=1024, candidates=("auto", "lookup k=4"), predict=False)
    original, copy = files
    assert (original.format, copy.format) == ("Q4_1", "Q4_0")
    assert copy.path == str(q4_0_copy)
    for f in files:
        assert [m.mode for m in f.modes] == ["auto", "lookup k=4"]
        assert f.plain_tokens_per_second > 0
        for m in f.modes:
            assert [p["prompt"] for p in m.per_prompt] == [p.id for p in prompts]
            for p in m.per_prompt:
                assert p["vs_plain"] > 0 and math.isfinite(p["vs_original"]) and p["predicted"] is None
            # greedy: equal to plain on the same file, or parted only at a near-tie batching can flip
            assert m.lossless_within(f.deviation), (f.format, m.mode, m.divergences, f.deviation)
            if m.divergences:
                assert f.deviation is not None
        assert f.best() in f.modes
    result = json.loads(json.dumps([f.to_dict() for f in files]))
    assert result[1]["best"] == copy.best().mode
    assert "× plain on the Q4_1 original" in format_speed.sentence(files)


def test_each_ratio_divides_by_the_plain_run_it_names():
    """Two prompts, the original (file 0) and a copy (file 1), speeds chosen so that every ratio
    is a different number: dividing by the wrong plain run gives a wrong figure."""
    from types import SimpleNamespace

    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.tuning.prompts import Prompt

    prompts = [Prompt("a", "chat", "x"), Prompt("b", "code_editing", "y")]
    speed = {(0, "plain", 0): 100.0, (0, "auto", 0): 130.0, (1, "plain", 0): 150.0, (1, "auto", 0): 240.0,
             (0, "plain", 1): 80.0, (0, "auto", 1): 72.0, (1, "plain", 1): 120.0, (1, "auto", 1): 132.0}
    first = {key: SimpleNamespace(token_ids=(1, 2, 3), stats={}) for key in speed}
    session = SimpleNamespace(model=SimpleNamespace(info=SimpleNamespace(path="/m.gguf")), n_threads=1)
    configs = {"plain": RunConfig(), "auto": RunConfig(mode="auto")}
    original, copy = (format_speed._file_speed(session, label, f, configs, prompts, [[1], [1]], speed, first, None)
                      for f, label in ((0, "Q4_1"), (1, "Q4_0")))
    (auto_on_original,), (auto_on_copy,) = original.modes, copy.modes
    assert [p["vs_plain"] for p in auto_on_copy.per_prompt] == pytest.approx([240 / 150, 132 / 120])
    assert [p["vs_original"] for p in auto_on_copy.per_prompt] == pytest.approx([240 / 100, 132 / 80])
    assert [p["vs_original"] for p in auto_on_original.per_prompt] == pytest.approx([130 / 100, 72 / 80])
    assert copy.plain_vs_original == pytest.approx(math.sqrt(150 / 100 * 120 / 80))
    assert original.plain_vs_original == pytest.approx(1.0)
    assert auto_on_copy.vs_original == pytest.approx(math.sqrt(240 / 100 * 132 / 80))
    assert copy.plain_tokens_per_second == pytest.approx(135.0) and auto_on_copy.tokens_per_second == pytest.approx(
        186.0
    )


def test_a_candidate_is_named_as_the_user_names_it():
    assert format_speed.candidate_config("lookup k=6", 32).speculative.k == 6
    assert format_speed.candidate_config("auto", 32).mode == "auto"
    with pytest.raises(format_speed.SpecDecError):
        format_speed.candidate_config("lookahead", 32)


def test_a_copy_knows_the_file_it_was_made_from(smollm_path, q4_0_copy, tmp_path):
    assert catalog.original_of(q4_0_copy) == smollm_path
    assert catalog.original_of(smollm_path) is None  # the original is no copy
    orphan = tmp_path / "gone.draft-Q4_0.gguf"
    orphan.write_bytes(b"")
    assert catalog.original_of(orphan) is None  # its original is nowhere to be found


def test_stop_ends_the_comparison_with_a_clear_error(smollm_path, q4_0_copy):
    import threading

    stop = threading.Event()
    stop.set()  # pressed before the first run: nothing is measured
    with pytest.raises(format_speed.FormatSpeedCancelled, match="stopped"):
        format_speed.measure(smollm_path, [("Q4_0", q4_0_copy)], shipped(["chat"], per_category=1), max_tokens=8,
                             n_threads=N_THREADS, n_ctx=512, candidates=("auto",), predict=False, cancel=stop)


@pytest.mark.slow
def test_the_cli_prints_each_files_best_mode_against_the_original(tmp_path, q4_0_copy):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "sweep", "--formats", "Q4_0",
                           "--categories", "chat", "-n", "8", "-t", str(N_THREADS), "--json", "-o", str(tmp_path)],
                          capture_output=True, text=True, check=True)
    result = json.loads(done.stdout)
    assert [f["format"] for f in result["files"]] == ["Q4_1", "Q4_0"]
    assert result["files"][1]["path"] == str(q4_0_copy)
    assert all(m["predicted"] is not None for f in result["files"] for m in f["modes"])  # priced from each profile
    assert json.loads((tmp_path / "formats.json").read_text()) == result
    refused = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "sweep", "--formats", "-tb", "1"],
                             capture_output=True, text=True)
    assert refused.returncode != 0 and "leave out -tb" in refused.stderr


def test_the_sentence_names_plain_where_no_mode_beats_it():
    def mode(name, vs_plain, vs_original):
        return format_speed.ModeOnFile(name, 100.0, vs_plain, vs_original, None)

    original = format_speed.FileSpeed("Q4_1", "/m/a.gguf", 150.0, 1.0, (mode("lookup k=4", 0.94, 0.94),))
    copy = format_speed.FileSpeed("Q4_0", "/m/a.draft-Q4_0.gguf", 180.0, 1.2, (mode("lookup k=4", 0.97, 1.16),))
    said = format_speed.sentence([original, copy])
    assert said.startswith("Fastest here: plain decoding on the Q4_0 copy, 1.20× plain on the Q4_1 original")
    faster = format_speed.FileSpeed("Q4_0", "/m/a.draft-Q4_0.gguf", 180.0, 1.2, (mode("auto", 1.1, 1.32),))
    assert "auto on the Q4_0 copy, 1.32× plain on the Q4_1 original (1.10× plain" in \
        format_speed.sentence([original, faster])

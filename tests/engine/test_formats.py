"""The weight-format comparison: what a copy is recommended for, the thread pairs, and (slow) the
whole comparison of the default model with a copy, from the command line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning import formats
from tests.conftest import N_THREADS


def _figures(fmt: str, t1: float, agreement: float | None, four: float = 2.0) -> formats.FormatFigures:
    relative = tuple([1.0, 1.5, 1.9, four] + [2.0 + 0.3 * b for b in range(12)])
    return formats.FormatFigures(fmt, f"/models/m.{fmt}.gguf", 1000, t1, relative, relative, 0.5, 0.6, agreement, 900)


def test_only_a_faster_copy_that_agrees_often_enough_is_recommended():
    original = _figures("Q4_1", 0.006, None, four=2.7)
    fast_but_unfaithful = _figures("Q4_0", 0.0047, 0.76)
    faithful_and_faster = _figures("Q8_0", 0.0055, 0.97)
    faithful_but_slower = _figures("Q4_K_M", 0.0065, 0.95)
    assert formats.recommendation([original, fast_but_unfaithful, faithful_but_slower]) is None
    pick = formats.recommendation([original, fast_but_unfaithful, faithful_and_faster, faithful_but_slower])
    assert pick is faithful_and_faster
    sentence = formats.sentence(original, pick)
    # every figure of the sentence is a ratio of the two files' measurements
    assert f"{0.006 / 0.0055:.2f}× faster" in sentence
    assert f"verifies 4 tokens {0.006 * 2.7 / (0.0055 * 2.0):.2f}× cheaper" in sentence
    assert "97.0 % of greedy tokens" in sentence and "m.Q4_1.gguf" in sentence
    # a lead within the noise of the measurement, or a copy that verifies slower, is no reason to switch
    barely_faster = _figures("Q8_0", 0.00595, 0.97)
    slower_to_verify = _figures("IQ4_NL", 0.005, 0.95, four=3.5)
    assert formats.recommendation([original, barely_faster, slower_to_verify]) is None
    said = formats.sentence(original, slower_to_verify)
    assert "decodes 1.20× faster" in said and f"takes {0.005 * 3.5 / (0.006 * 2.7):.2f}× as long to verify 4" in said
    assert "the original stays the one to use" in formats.verdict([original, barely_faster])


def test_the_shipped_file_says_its_format(smollm_session):
    assert formats.format_of(smollm_session.model) == "Q4_1"


def test_thread_pairs_are_timed_and_the_context_keeps_its_own(smollm_path):
    import llama_cpp as llama

    other = 1 if N_THREADS != 1 else 2
    with Session(smollm_path, n_ctx=512, n_threads=N_THREADS) as session:
        times = formats.thread_pairs(session, [(other, other), (other, N_THREADS)], sizes=(1, 4))
        assert set(times) == {(other, other), (other, N_THREADS)}
        assert all(len(v) == 2 and 0 < v[0] < v[1] for v in times.values())
        # llama.cpp's own setting (not a Python attribute) is the context's again after the timing
        assert (llama.llama_n_threads(session.ctx), llama.llama_n_threads_batch(session.ctx)) == \
            (session.n_threads, session.n_threads_batch) == (N_THREADS, N_THREADS)
        from specdec_studio.engine.config import RunConfig
        from specdec_studio.engine.session import last_event

        assert last_event(session.run(RunConfig(max_tokens=4), session.tokenize_prompt("Hello"))).token_ids


def test_the_best_pair_takes_each_count_from_the_decodes_it_runs():
    # one token is fastest with 4 threads, the larger batches with 2: the pair mixes them
    times = {(1, 1): (9.0, 20.0, 30.0), (2, 2): (6.0, 10.0, 15.0), (4, 4): (5.0, 12.0, 18.0),
             (4, 2): (5.0, 10.5, 15.5)}
    assert formats.best_pair(times) == (4, 2)
    assert formats.best_pair({(3, 1): (1.0, 2.0)}) == (3, 1)


@pytest.mark.slow
def test_the_cli_compares_the_model_with_a_copy(tmp_path):
    import os

    env = {**os.environ}
    done = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "profile", "--formats", "Q8_0",
                           "-t", str(N_THREADS), "-c", "1024", "--json"], capture_output=True, text=True, env=env,
                          check=True, timeout=900)
    out = json.loads(done.stdout)
    original, copy = out["formats"]
    assert original["format"] == "Q4_1" and original["agreement"] is None
    assert copy["format"] == "Q8_0" and 0.9 < copy["agreement"] <= 1.0 and copy["n_agreement_tokens"] > 200
    for f in (original, copy):
        assert len(f["relative_all"]) == 16 and f["relative_all"][0] == 1.0 and f["t1_s"] > 0
        assert f["deviation"] >= 0 and f["size_bytes"] > 50e6
    # the offer follows the rule from the figures the command printed, whichever way they came out
    figures = [formats.FormatFigures(**{**f, "relative_all": tuple(f["relative_all"]),
                                        "relative_last": tuple(f["relative_last"])}) for f in out["formats"]]
    pick = formats.recommendation(figures)
    assert out["recommended"] == (pick.format if pick is not None else None)
    assert {(p["n_threads"], p["n_threads_batch"]) for p in out["thread_pairs"]} >= {(1, 1)}


def test_a_session_decodes_batches_with_its_own_thread_count(smollm_path, smollm_session):
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.session import last_event
    from specdec_studio.engine.tuning import profile

    prompt = smollm_session.tokenize_prompt("The capital of France is")
    with Session(smollm_path, n_ctx=512, n_threads=1, n_threads_batch=N_THREADS) as split:
        assert (split.n_threads, split.n_threads_batch) == (1, N_THREADS)
        key = profile.profile_key(split)
        assert key.n_threads_batch == (N_THREADS if N_THREADS != 1 else None)
        ids = last_event(split.run(RunConfig(mode="lookup", max_tokens=12), prompt)).token_ids
    with Session(smollm_path, n_ctx=512, n_threads=1) as same:
        assert same.n_threads_batch == 1 and profile.profile_key(same).n_threads_batch is None
        assert profile.profile_key(same).filename() != key.filename() or N_THREADS == 1
        assert last_event(same.run(RunConfig(max_tokens=12), prompt)).token_ids == ids


def test_a_pure_copy_quantises_the_tied_output_head_like_the_other_weights(smollm_path, smollm_session):
    """SmolLM2's output head is its token embedding; llama.cpp keeps that at Q8_0 in an IQ4_NL copy,
    and a _PURE copy puts it in IQ4_NL as well. The copy still loads, decodes and shares the vocabulary."""
    from collections import Counter

    from gguf import GGUFReader

    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.session import last_event

    def types(path):
        tensors = GGUFReader(path).tensors
        body = Counter(t.tensor_type.name for t in tensors if t.name.split(".")[-2] in ("attn_q", "ffn_up"))
        return next(t.tensor_type.name for t in tensors if t.name == "token_embd.weight"), body

    # the set-up made both copies; make_derived returns a copy already in the model cache as it is
    copies = {key: catalog.make_derived(key, log=lambda _m: None) for key in ("default-iq4_nl", "default-iq4_nl_pure")}
    head, body = types(copies["default-iq4_nl"])
    pure_head, pure_body = types(copies["default-iq4_nl_pure"])
    assert head == "Q8_0" and pure_head == "IQ4_NL"
    assert set(body) == set(pure_body) == {"IQ4_NL"}
    assert {"Q4_0_PURE", "IQ4_NL_PURE"} <= set(formats.known_formats()) & set(formats.FORMATS)
    assert catalog.original_of(copies["default-iq4_nl_pure"]) == smollm_path
    prompt = smollm_session.tokenize_prompt("The capital of France is")
    with Session(copies["default-iq4_nl_pure"], n_ctx=256, n_threads=N_THREADS) as pure:
        assert pure.vocab.n_tokens == smollm_session.vocab.n_tokens
        assert formats.format_of(pure.model) == "IQ4_NL"  # llama.cpp's file type: the _PURE is in the name
        assert len(last_event(pure.run(RunConfig(max_tokens=6), prompt)).token_ids) == 6

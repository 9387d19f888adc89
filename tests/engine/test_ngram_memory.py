"""The n-gram memory of past runs: what it learns and drafts, its bound, its file (damaged or
foreign files set aside), and Auto drafting from it from a new session's first token, losslessly."""

from __future__ import annotations

import json

import numpy as np

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished, RunWarning
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies.ngram_memory import NgramMemory
from tests.conftest import N_THREADS, PROSE_PROMPT

PROMPT = [1, 2, 3]
ANSWER = [10, 11, 12, 13, 14, 15, 16, 17]


def learnt(times: int, path=None) -> NgramMemory:
    memory = NgramMemory(path, "model-a")
    for _ in range(times):
        memory.learn(PROMPT + ANSWER, len(PROMPT))
    return memory


def test_it_drafts_only_followers_seen_often_enough():
    # a 4-gram needs 2 sightings, a 2-gram 4: once is not enough for anything
    assert learnt(1).propose([0, 10, 11, 12, 13], 4)[0] == []
    tokens, evidence = learnt(2).propose([0, 10, 11, 12, 13], 4)
    assert tokens == [14, 15, 16, 17] and evidence[0] == (4, 1.0, 2)
    # only what was generated is learnt: the prompt's own n-grams are not
    assert learnt(3).propose([0, 1, 2], 2)[0] == []


def test_the_least_recently_seen_ngrams_go_first_past_the_bound():
    memory = NgramMemory(None, "model-a", max_ngrams=30)
    memory.learn(PROMPT + ANSWER, len(PROMPT))
    memory.learn(PROMPT + ANSWER, len(PROMPT))
    memory.learn([5, 6, *range(40, 60)], 2)  # 20 followers, up to 3 n-grams each: the old ones go
    assert len(memory) == 30
    assert memory.propose([0, 10, 11, 12, 13], 1)[0] == []
    assert (57, 58) in memory.followers and (10, 11) not in memory.followers


def test_a_saved_memory_reads_back_and_a_damaged_or_foreign_one_is_set_aside(tmp_path):
    path = tmp_path / "m.npz"
    learnt(2, path).save()
    again = NgramMemory(path, "model-a")
    assert again.problem is None and again.followers == learnt(2).followers

    foreign = NgramMemory(path, "model-b")
    assert foreign.problem is not None and "another model" in foreign.problem and len(foreign) == 0
    assert not path.exists() and (tmp_path / "m.npz.damaged").exists()

    for damage in (b"", b"not a zip at all", (tmp_path / "m.npz.damaged").read_bytes()[:200]):
        path.write_bytes(damage)
        broken = NgramMemory(path, "model-a")
        assert broken.problem is not None and len(broken) == 0 and not path.exists()

    # tables that disagree (a follower count of 0) are damage too
    learnt(2, path).save()
    with np.load(path) as data:
        arrays = dict(data)
    arrays["counts"][0] = 0
    np.savez(path, **arrays)
    assert NgramMemory(path, "model-a").problem is not None
    meta = json.loads(bytes(arrays["meta"]).decode())
    assert meta == {"format": 1, "model": "model-a"}


def _auto(path, prompt: str, remember: bool):
    config = RunConfig(mode="auto", max_tokens=48, speculative=SpeculativeParams(ngram_memory=remember))
    with Session(path, n_ctx=1024, n_threads=N_THREADS) as session:
        tokens = session.tokenize_prompt(prompt)
        events = list(session.run(config, tokens))
        plain = session.complete(RunConfig(max_tokens=48), prompt).token_ids
    final = next(e for e in events if isinstance(e, RunFinished))
    return final, [e for e in events if isinstance(e, RunWarning)], plain


def test_auto_drafts_from_past_runs_from_a_new_sessions_first_token(smollm_path, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path))
    for _ in range(2):  # a 4-gram is drafted once two runs generated it (llama-lookup's strict rule)
        final, warnings, plain = _auto(smollm_path, PROSE_PROMPT, remember=True)
        assert not warnings and final.token_ids == plain
    assert final.stats["auto"]["sources"]["memory"]["accepted"] == 0  # nothing was confident yet
    assert len(list((tmp_path / "ngram-memory").glob("*.npz"))) == 1
    # a new session: the answer's n-grams are remembered, and Auto drafts from them at once
    again, warnings, plain = _auto(smollm_path, PROSE_PROMPT, remember=True)
    assert not warnings and again.token_ids == plain
    memory = again.stats["auto"]["sources"]["memory"]
    assert memory["proposed"] > 0 and memory["accepted"] > 10, again.stats["auto"]
    # without the setting, Auto neither reads nor lists it
    off, _, _ = _auto(smollm_path, PROSE_PROMPT, remember=False)
    assert "memory" not in off.stats["auto"]["sources"]


def test_a_damaged_memory_file_is_one_warning_and_the_run_goes_on(smollm_path, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path))
    folder = tmp_path / "ngram-memory"
    folder.mkdir()
    _auto(smollm_path, "Count: 1, 2, 3,", remember=True)  # names the file
    (path,) = folder.glob("*.npz")
    path.write_bytes(b"\x00" * 100)
    final, warnings, plain = _auto(smollm_path, "Count: 1, 2, 3,", remember=True)
    assert final.token_ids == plain
    assert len(warnings) == 1 and "could not be read" in warnings[0].message and "set aside" in warnings[0].message
    assert path.exists()  # a new memory, with this run's output


def test_a_memory_that_cannot_be_saved_is_one_warning_and_keeps_its_ngrams(smollm_path, monkeypatch, tmp_path):
    monkeypatch.setenv("SPECDEC_DATA", str(tmp_path))
    (tmp_path / "ngram-memory").write_text("a file where the memory's folder should be")
    config = RunConfig(mode="auto", max_tokens=24, speculative=SpeculativeParams(ngram_memory=True))
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS) as session:
        events = list(session.run(config, session.tokenize_prompt(PROSE_PROMPT)))
        plain = session.complete(RunConfig(max_tokens=24), PROSE_PROMPT).token_ids
        kept = len(session.ngram_memory())
    warnings = [e for e in events if isinstance(e, RunWarning)]
    assert len(warnings) == 1 and "could not be saved" in warnings[0].message
    assert events[-1].token_ids == plain and kept > 0  # the run and what it taught the memory are kept


def test_two_processes_saving_one_memory_keep_each_others_runs(tmp_path):
    """Issue 79, item 8: the second save wrote its own counts over the first's."""
    path = tmp_path / "memory.npz"
    first, second = NgramMemory(path, "model-a"), NgramMemory(path, "model-a")  # both read no file
    first.learn(PROMPT + ANSWER, len(PROMPT))
    first.learn(PROMPT + ANSWER, len(PROMPT))
    first.save()
    other = [1, 2, 3, 20, 21, 22, 23, 24]
    second.learn(other, 3)
    second.learn(other, 3)
    second.save()
    reread = NgramMemory(path, "model-a")
    assert reread.propose([0, 10, 11, 12, 13], 4)[0] == [14, 15, 16, 17]  # the first process's runs
    assert reread.propose([0, 20, 21, 22, 23], 1)[0] == [24]  # and the second's
    second.learn(other, 3)
    second.save()  # nobody else wrote since: its own file, counted once more
    assert NgramMemory(path, "model-a").followers[(20, 21, 22, 23)] == {24: 3}

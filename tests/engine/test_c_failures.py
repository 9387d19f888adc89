"""Defect 15 of issue 47: a llama.cpp call that fails reaches the user as its cause in one sentence
(which call, on which model, what llama.cpp said), never as "llama_decode failed with code -1"
alone. Each failure here is a real one, provoked in llama.cpp on the default model."""

from __future__ import annotations

import contextlib
import re
import subprocess

import numpy as np
import pytest

from specdec_studio.engine.errors import DecodeError
from specdec_studio.engine.sampling import logits_row


def _one_sentence(message: str) -> None:
    # one line, no second sentence ("i.e. the KV cache" inside llama.cpp's words is one)
    assert "\n" not in message and re.search(r"[.!?] [A-Z]", message) is None, message


def test_a_batch_llama_cpp_refuses_names_the_call_the_model_and_the_cause(smollm_session):
    target = smollm_session.target
    target.forget()
    batch, memory = target.batch, target.memory
    batch.clear()
    batch.add(1, 0, (target.n_seq_max + 3,), True)  # a sequence the context has no room for
    with pytest.raises(DecodeError) as failure:
        memory.decode(batch)
    message = str(failure.value)
    assert message.startswith("llama_decode refused a batch of 1 tokens on ")
    assert f"({smollm_session.model.info.arch})" in message
    assert f"invalid seq_id[0][0] = {target.n_seq_max + 3} >= {target.n_seq_max}" in message
    assert "code -1" not in message
    _one_sentence(message)


def test_positions_that_do_not_follow_the_cache_say_which_positions(smollm_session):
    target = smollm_session.target
    target.forget()
    tokens = smollm_session.tokenize_prompt("The capital of France is")
    target.memory.decode_tokens(target.batch, tokens, 0)
    target.batch.clear()
    target.batch.add(tokens[-1], len(tokens) + 5, (0,), True)  # a gap of five positions
    with pytest.raises(DecodeError) as failure:
        target.memory.decode(target.batch)
    message = str(failure.value)
    # llama.cpp's own words, on one line: the last position stored and the batch's first one
    assert "llama.cpp says: the tokens of sequence 0 in the input batch have inconsistent sequence positions" in message
    assert f"X = {len(tokens) - 1}" in message and f"Y = {len(tokens) + 5}" in message
    _one_sentence(message)
    target.forget()


def test_a_row_without_logits_is_named_not_a_null_pointer(smollm_session):
    target = smollm_session.target
    target.forget()
    target.batch.clear()
    target.batch.add(1, 0, (0,), False)
    target.batch.add(2, 1, (0,), True)
    target.memory.decode(target.batch)
    assert np.isfinite(logits_row(target.ctx, 1, smollm_session.vocab.n_tokens)).all()
    with pytest.raises(DecodeError) as failure:
        logits_row(target.ctx, 0, smollm_session.vocab.n_tokens)  # row 0 asked for no logits
    message = str(failure.value)
    assert message.startswith("llama_get_logits_ith has no logits for row 0")
    assert "llama.cpp says:" in message
    _one_sentence(message)
    target.forget()


@pytest.mark.archs
@pytest.mark.parametrize("name", ["lfm2-dense", "qwen35-dense", "nemotron_h-dense"])
def test_a_hybrid_model_with_snapshots_rolls_back_a_rejected_draft_exactly(tiny_archs, name):
    """llama.cpp keeps per-token snapshots of these models' recurrent state where a run asks for them
    (``n_rs_seq``: a run's longest draft, engine.kv.rollback.snapshots_to_keep): a verification's
    rejected tokens are dropped, and the next decode equals a fresh one."""
    from specdec_studio.engine.context import ModelContext
    from specdec_studio.engine.session import Session

    RS_SNAPSHOTS = 16
    with Session(tiny_archs / f"{name}.gguf", n_ctx=256, n_threads=2) as session, \
            contextlib.closing(ModelContext.create(session.model, session.settings, 1, session.budget,
                                                   rs_snapshots=RS_SNAPSHOTS)) as target:
        n_vocab = session.vocab.n_tokens
        tokens = list(range(10, 60))
        row = target.memory.decode_tokens(target.batch, tokens[:22], 0)
        fresh = logits_row(target.ctx, row, n_vocab).copy()
        target.forget()
        target.memory.decode_tokens(target.batch, tokens[:20], 0)
        target.batch.clear()
        for pos, token in enumerate([tokens[20], 5, 6, 7, 8, 9], start=20):  # one right, five rejected
            target.batch.add(token, pos, (0,), True)
        target.memory.decode(target.batch)
        assert target.memory.seq_rm(0, 21, -1)
        target.batch.clear()
        target.batch.add(tokens[21], 21, (0,), True)
        target.memory.decode(target.batch)
        assert np.abs(logits_row(target.ctx, 0, n_vocab) - fresh).max() < 1e-5
        # further back than the snapshots reach, with no checkpoint saved: refused, and said so
        target.memory.decode_tokens(target.batch, tokens[22:22 + RS_SNAPSHOTS + 2], 22)
        with pytest.raises(DecodeError, match=f"at most {RS_SNAPSHOTS} tokens of its last decode"):
            target.memory.seq_rm(0, 22, -1)


@pytest.mark.archs
@pytest.mark.parametrize("name, span", [("mamba2-dense", 6), ("granitehybrid-dense", 6), ("plamo2-dense", 6),
                                        ("qwen35-dense", 20)])
def test_a_checkpoint_rolls_back_where_snapshots_cannot(tiny_archs, name, span):
    """Where llama.cpp has no snapshots for the architecture (mamba2, granitehybrid, plamo2), or the
    draft is longer than they reach (qwen35, 20 > 16), the state saved before the verification is
    restored and the accepted tokens decoded again: the next decode equals a fresh one."""
    from specdec_studio.engine.session import Session

    with Session(tiny_archs / f"{name}.gguf", n_ctx=256, n_threads=2) as session:
        target, n_vocab = session.target, session.vocab.n_tokens
        memory = target.memory
        tokens = list(range(10, 60))
        row = memory.decode_tokens(target.batch, tokens[:23], 0)
        fresh = logits_row(target.ctx, row, n_vocab).copy()
        target.forget()
        memory.decode_tokens(target.batch, tokens[:20], 0)
        memory.prepare_rollback(0, 20, span)
        target.batch.clear()
        for pos, token in enumerate(tokens[20:22] + [5] * (span - 1), start=20):  # two right, the rest rejected
            target.batch.add(token, pos, (0,), True)
        memory.decode(target.batch)
        assert memory.seq_rm(0, 22, -1)
        assert memory.pos_max(0) == 21
        assert memory.checkpoints.n_restored == 1
        target.batch.clear()
        target.batch.add(tokens[22], 22, (0,), True)
        memory.decode(target.batch)
        assert np.abs(logits_row(target.ctx, 0, n_vocab) - fresh).max() < 1e-5


@pytest.mark.archs
@pytest.mark.parametrize("name", ["granitehybrid-dense", "mamba2-dense"])
def test_a_recurrent_memory_that_cannot_go_back_says_so(tiny_archs, name):
    """Where llama.cpp has no rollback for the architecture, a recurrent state cannot drop a
    sequence's last positions: the refusal names the call and the model's memory, and a run's
    prefix reuse falls back to an empty cache instead of failing."""
    from specdec_studio.engine.session import Session

    with Session(tiny_archs / f"{name}.gguf", n_ctx=256, n_threads=2) as session:
        info = session.model.info
        assert info.memory_kind in ("hybrid", "recurrent")
        target = session.target
        tokens = list(range(10, 30))
        target.memory.decode_tokens(target.batch, tokens, 0)
        with pytest.raises(DecodeError) as failure:
            target.memory.seq_rm(0, 12, -1)  # the last 8 positions: a rollback
        message = str(failure.value)
        assert message.startswith(f"llama_memory_seq_rm could not remove positions 12 to the end of sequence 0 "
                                  f"from the cache of {name}.gguf ({info.arch})")
        assert (f"which llama.cpp cannot roll back (it has no rollback for {info.arch}), and no checkpoint was saved "
                "before these tokens") in message
        _one_sentence(message)
        target.note_cached(tokens)
        assert target.keep_prefix(tokens[:15] + [1, 2]) == 0  # could not keep 15: starts afresh
        assert target.memory.pos_max(0) == -1


@pytest.mark.archs
@pytest.mark.parametrize("name", ["lfm2-dense", "mamba2-dense"])
def test_lookahead_on_a_recurrent_state_is_refused_before_decoding(tiny_archs, name):
    """Lookahead shares the prompt's cells between its sequences, which a recurrent state cannot:
    refused in one sentence before anything is decoded, on the command line with status 2."""
    import sys

    from specdec_studio.engine.config import LookaheadParams, RunConfig
    from specdec_studio.engine.errors import ConfigError
    from specdec_studio.engine.session import Session

    path = tiny_archs / f"{name}.gguf"
    with Session(path, n_ctx=256, n_threads=2) as session:
        with pytest.raises(ConfigError, match=f"lookahead needs KV cells that several sequences share, and "
                                              f"{session.model.info.arch} is a"):
            session.complete(RunConfig(mode="lookahead", max_tokens=8, lookahead=LookaheadParams(3, 3, 3)), "a b c a b")
        assert session.target.memory.pos_max(0) == -1  # nothing was decoded
        assert len(session.complete(RunConfig(mode="lookup", max_tokens=8), "a b c a b").token_ids) == 8
    done = subprocess.run([sys.executable, "-m", "specdec_studio.engine.cli", "run", "-m", str(path), "--mode",
                           "lookahead", "-p", "a b c a b", "-n", "8"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and done.stderr.startswith("specdec: lookahead needs KV cells"), done.stderr
    assert done.stderr.count("\n") == 1

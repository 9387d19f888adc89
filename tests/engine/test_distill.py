"""Draft training on llama.cpp's training API: a few steps on a tiny corpus of the target's own
text lower the loss and write a GGUF that loads as a draft and drafts losslessly."""

from __future__ import annotations

import math
import threading

import pytest

from specdec_studio.engine.models import catalog

from specdec_studio.engine.drafts import distill

from specdec_studio.engine.drafts import measure as draft_measure
from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.models.quantize import requantize
from specdec_studio.engine.session import Session
from tests.conftest import CODE_PROMPT, N_THREADS, PROSE_PROMPT

PROMPTS = [CODE_PROMPT, PROSE_PROMPT, "List three colours:\n1.", "The capital of France is"]
STEPS = 12  # three epochs of this corpus's four training windows


@pytest.fixture(scope="module")
def start(smollm_path, smollm_drafts, tmp_path_factory):
    """The target's text to train on and the start model (the q2_k draft, dequantised)."""
    out = tmp_path_factory.mktemp("distill")
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS) as session:
        prompts = [session.tokenize_prompt(p) for p in PROMPTS]
        corpus = distill.target_corpus(session, prompts, 96)
    start = distill.dequantised_copy(smollm_drafts["default-q2_k"], out / "start-f32.gguf")
    return {"corpus": corpus, "start": start, "out": out}


# Three whole epochs of the full draft take 40 s here: the quality checks below run under -m slow.
# The regular run trains too: the cut start's stopped run below and the window's training
# (tests/app/test_train_draft.py), which trains, stops, measures the agreement and loads the draft.
@pytest.fixture(scope="module")
def trained(start):
    out = start["out"]
    seen = []
    result = distill.train(start["start"], start["corpus"], STEPS, out / "trained-f32.gguf", n_threads=N_THREADS,
                           progress=seen.append)
    quantised = requantize(result.f32_path, out / "trained-q8_0.gguf", "Q8_0")
    return {"result": result, "path": quantised, "progress": seen, **start}


@pytest.mark.slow
def test_a_few_epochs_lower_the_loss(trained):
    result = trained["result"]
    assert result.steps == STEPS and not result.stopped
    assert len(result.losses) == STEPS
    # a step's loss is its epoch's mean so far: compare whole epochs, the last against the first
    per_epoch = STEPS // len(result.eval_losses)
    assert per_epoch * len(result.eval_losses) == STEPS and len(result.eval_losses) >= 3
    assert result.losses[-1] < 0.8 * result.losses[per_epoch - 1]
    assert all(later < earlier for earlier, later in zip(result.eval_losses, result.eval_losses[1:]))
    steps = [p for p in trained["progress"] if p.phase == "train"]
    assert [p.step for p in steps] == list(range(1, STEPS + 1)) and steps[-1].eta_s == 0.0
    assert trained["progress"][-1].phase == "done"


@pytest.mark.slow
def test_the_trained_draft_loads_and_drafts_losslessly(smollm_path, trained):
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS, draft_path=trained["path"]) as session:
        tokens = session.tokenize_prompt(CODE_PROMPT)
        plain = [e for e in session.run(RunConfig(max_tokens=40), tokens) if isinstance(e, RunFinished)][0]
        spec = [e for e in session.run(RunConfig(mode="speculative", max_tokens=40, speculative=SpeculativeParams(k=4)),
                                       tokens) if isinstance(e, RunFinished)][0]
        assert spec.token_ids == plain.token_ids
        assert spec.stats["n_accept"] > 0
        # it learnt the target's text: on the training prompts it agrees more than the draft it started from
        prompts = [session.tokenize_prompt(p) for p in PROMPTS[:2]]
        before = draft_measure.greedy_agreement(session, catalog.derived_path("default-q2_k"), prompts, 48)
        after = draft_measure.greedy_agreement(session, trained["path"], prompts, 48)
        assert after > before


@pytest.fixture(scope="module")
def cut_start(start):
    """The start model cut to its first 10 blocks: a third of the training step's cost."""
    return distill.keep_first_layers(start["start"], start["out"] / "start-10.gguf", 10)


def test_a_cheaper_start_keeps_the_first_layers(start, cut_start):
    with Session(cut_start, n_ctx=256, n_threads=N_THREADS) as session:
        assert session.model.info.n_layer == 10
        assert session.model.info.n_vocab > 0
        out = session.complete(RunConfig(max_tokens=4), "The capital of France is")
        assert len(out.token_ids) == 4
    with pytest.raises(Exception, match="between 1 and"):
        distill.keep_first_layers(start["start"], start["out"] / "bad.gguf", 99)


def test_stop_ends_training_after_the_current_window(start, cut_start):
    """llama_opt_epoch runs to its end in C: the windows are given one at a time, so a Stop waits
    for the window's STEPS_PER_WINDOW steps, not for the epoch's (minutes on a large corpus)."""
    corpus = list(start["corpus"]) * 3  # several training windows an epoch
    stop = threading.Event()

    def stop_at_the_first_step(progress):
        if progress.phase == "train":
            stop.set()

    result = distill.train(cut_start, corpus, 100, start["out"] / "stopped.gguf", n_threads=N_THREADS,
                           cancel=stop, progress=stop_at_the_first_step)
    assert result.n_corpus_tokens > 3 * distill.TRAIN_CTX  # an epoch would have been 3 windows or more
    assert result.stopped and result.steps == distill.STEPS_PER_WINDOW
    assert result.eval_losses == []  # the epoch stopped part-way is not evaluated
    assert (start["out"] / "stopped.gguf").exists()  # what was trained is written
    assert result.losses and all(math.isfinite(loss) for loss in result.losses)


def test_too_little_text_is_refused_in_one_sentence(start):
    with pytest.raises(distill.SpecDecError, match="needs at least"):
        distill.train(start["start"], start["corpus"][:100], 2, start["out"] / "x.gguf", n_threads=N_THREADS)


@pytest.mark.slow  # one thread decodes the long prompt slowly; the regular run has the case below
def test_agreement_past_one_batch_is_whole_on_one_thread(smollm_path):
    with Session(smollm_path, n_ctx=1024, n_threads=1) as session:
        long_prompt = session.tokenize_prompt(CODE_PROMPT * 8)
        assert len(long_prompt) + 8 > session.n_batch
        # one thread: SmolLM2's kernels are batch-invariant at any length, so the target agrees
        # with itself on every one of the 8 tokens
        assert draft_measure.greedy_agreement(session, smollm_path, [long_prompt], 8) == 1.0


def test_agreement_is_measured_on_prompts_longer_than_one_batch(smollm_path):
    """Prompt and text together exceed a decode's 512 tokens: they are measured in batches."""
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS) as session:
        long_prompt = session.tokenize_prompt(CODE_PROMPT * 8)
        assert len(long_prompt) + 8 > session.n_batch
        agreement = draft_measure.greedy_agreement(session, smollm_path, [long_prompt], 8)
    # with more threads, past 512 cells a one-token decode and a batch sum the KV in different
    # orders (shared/models/README.md): a near-tie may flip. Each position is scored on the
    # target's own text (teacher-forced), so one flip costs one token and no more: 7 of 8.
    assert agreement is not None and round(8 * agreement) >= 7


def test_a_stop_ends_the_agreement_measurement(smollm_path):
    """A Stop set before (or during) the measurement ends it: nothing clears it on the way."""
    with Session(smollm_path, n_ctx=1024, n_threads=N_THREADS) as session:
        prompts = [session.tokenize_prompt(p) for p in PROMPTS]
        session.cancel()
        assert draft_measure.greedy_agreement(session, smollm_path, prompts, 200, cancel=session.cancel_flag) is None
        assert session.cancel_flag.is_set()



def test_training_never_writes_over_a_model_it_uses(smollm_session, tmp_path):
    """Issue 79: the trained draft (or its cut start) could be written over the loaded target, the
    loaded draft or the draft it starts from. Refused in one sentence, before the target writes
    a token of training text."""
    from pathlib import Path

    from specdec_studio.engine.errors import SpecDecError

    target = Path(smollm_session.model.info.path)
    start = tmp_path / "start.gguf"
    start.write_bytes(b"GGUF")  # never read: the refusal comes first
    (tmp_path / "draft.start-2-layers.gguf").symlink_to(target)  # the cut start's file is the target
    began = []
    for out, keep_layers, over in ((target, None, target.name), (start, None, "start.gguf"),
                                   (tmp_path / "draft.gguf", 2, target.name)):
        with pytest.raises(SpecDecError, match=rf"^the trained draft would be written over {over}, .*; choose"):
            distill.distill_draft(smollm_session, start, [[1, 2, 3]], 1, out, keep_layers=keep_layers,
                                  progress=began.append)
    assert not began  # nothing started

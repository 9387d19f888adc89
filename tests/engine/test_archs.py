"""Every mode on llama.cpp's tiny random model of every architecture (tests/engine/archs_matrix.py).

Each mode's greedy tokens equal plain's on the same file, or the mode refuses before decoding in
one sentence with exit status 2; never "llama_decode failed", a traceback or an abort. A
five-model subset runs in ``make test``; every architecture under ``-m archs``.
"""

from __future__ import annotations

import pytest

from tests.conftest import tiny_archs_folder
from tests.engine import archs_matrix
from tests.gguf_edit import write_disagreeing_draft
from tests.engine.archs_matrix import FAST_SUBSET, MODES, run_model, run_model_in_process

# Modes that must work (not refuse) on every left-to-right model, hybrid and recurrent included.
MUST_WORK = ("plain", "lookup", "self-draft", "other draft", "auto", "auto + draft")


def _check(cells, diffusion: bool) -> None:
    bad = [f"{c.mode}: {c.outcome} {c.detail}" for c in cells if not c.ok]
    assert not bad, f"{cells[0].model}: " + "; ".join(bad)
    for cell in cells:
        if cell.outcome == "refused":
            # the other architecture's draft may not share the target's vocabulary (qwen3tts has
            # 3072 tokens): that refuses the pairing, not the mode
            foreign_draft = "{other}" in MODES[cell.mode] and "different vocabularies" in cell.detail
            assert cell.mode not in MUST_WORK or diffusion or foreign_draft, (
                f"{cell.model}: {cell.mode} refused: {cell.detail}"
            )
            assert cell.detail.count(". ") == 0, cell.detail  # one sentence


@pytest.mark.parametrize("name", FAST_SUBSET)
def test_every_mode_on_a_few_architectures(tiny_archs, name):
    """In one session per model (the CLI's exit status and one-line refusals: the full matrix)."""
    cells = run_model_in_process(tiny_archs / f"{name}.gguf")
    assert [c.mode for c in cells] == list(MODES)
    _check(cells, diffusion=False)


def _all_models() -> list[str]:
    """The folder's models, read at collection without building (the fixture builds them)."""
    folder = tiny_archs_folder()
    if folder is None:
        return ["(not built yet: run scripts/tiny_archs.sh)"]
    return [f.name.removesuffix(".gguf") for f in archs_matrix.model_files(folder)]


DIFFUSION = {"dream-dense", "llada-dense", "llada-moe-moe", "rnd1-moe"}


@pytest.mark.archs
@pytest.mark.parametrize("name", _all_models())
def test_every_mode_on_every_architecture(tiny_archs, name):
    path = tiny_archs / f"{name}.gguf"
    assert path.exists(), f"{name}: run scripts/tiny_archs.sh"
    cells = run_model(path)
    assert [c.mode for c in cells] == list(MODES)
    _check(cells, diffusion=name in DIFFUSION)


def test_the_kv_map_is_told_each_recurrent_state_and_how_it_went_back(tiny_archs, tmp_path):
    """On a recurrent model with a draft the target mostly rejects, every step's snapshot carries
    the state (tokens seen equal the cache's) and the rollbacks: by checkpoint where the run picks
    them (a draft model's, by default) or the model has no snapshots (mamba2, even when asked), by
    llama.cpp's snapshots where asked on a model that has them; a saved trace keeps them."""
    from specdec_studio.engine.config import RunConfig, SpeculativeParams
    from specdec_studio.engine.events import KvSnapshot, RunFinished
    from specdec_studio.engine.records import trace
    from specdec_studio.engine.session import Session

    for target, draft, rollback, how in (("mamba2-dense", "qwen35-dense", "snapshots", "checkpoint"),
                                         ("qwen35-dense", "mamba2-dense", "auto", "checkpoint"),
                                         ("qwen35-dense", "mamba2-dense", "snapshots", "snapshot")):
        with Session(tiny_archs / f"{target}.gguf", n_ctx=512, n_threads=1) as session:
            session.load_draft(
                write_disagreeing_draft(tiny_archs / f"{draft}.gguf", tmp_path / f"{draft}-shifted.gguf")
            )
            recorder = trace.TraceRecorder()
            snapshots, n_past = [], 0
            config = RunConfig(mode="speculative", max_tokens=48, speculative=SpeculativeParams(k=4, rollback=rollback))
            for event in session.run(config, session.tokenize_prompt(archs_matrix.PROMPT)):
                recorder.add(event)
                if isinstance(event, KvSnapshot):
                    snapshots.append(event)
                if isinstance(event, RunFinished):
                    n_past = session.memory.pos_max(0) + 1
            states = [s.states for s in snapshots]
            assert all(len(s) == 1 for s in states)
            assert states[-1][0].n_tokens == n_past
            rollbacks = [s[0] for s in states if s[0].rollback]
            assert rollbacks and {r.rollback for r in rollbacks} == {how}
            assert all(r.rolled_back >= 1 for r in rollbacks)
            assert all(s[0].snapshots_max == (4 if how == "snapshot" else 0) for s in states)
            path = tmp_path / f"{target}-{rollback}.jsonl"
            trace.save(recorder.trace(), path)
            replayed = [e.states for _t, e in trace.load(path).events if isinstance(e, KvSnapshot)]
            assert replayed == states


@pytest.mark.parametrize("target, draft", [("qwen35-dense", "mamba2-dense"), ("mamba2-dense", "qwen35-dense"),
                                           ("lfm2-dense", "mamba2-dense")])
def test_rollbacks_stay_lossless_past_512_cells(tiny_archs, tmp_path, target, draft):
    """700 greedy tokens (past 512 cells) of lookup and of speculation with a draft the target
    mostly rejects, on hybrid and recurrent models: hundreds of rollbacks, by snapshot and by
    checkpoint, and the tokens still equal plain's (these f32 models' batched logits differ from
    single-token ones by about 1e-7, measured: no near-tie excuse is needed)."""
    from specdec_studio.engine.config import RunConfig, SpeculativeParams
    from specdec_studio.engine.session import Session

    prompt = "a b c a b c a b"
    with Session(tiny_archs / f"{target}.gguf", n_ctx=1024, n_threads=1) as session:
        plain = session.complete(RunConfig(mode="plain", max_tokens=700), prompt).token_ids
        assert len(plain) == 700
        assert session.complete(RunConfig(mode="lookup", max_tokens=700), prompt).token_ids == plain
        session.load_draft(write_disagreeing_draft(tiny_archs / f"{draft}.gguf", tmp_path / f"{draft}-shifted.gguf"))
        spec = session.complete(
            RunConfig(mode="speculative", max_tokens=700, speculative=SpeculativeParams(k=4)), prompt
        )
        assert spec.token_ids == plain
        assert spec.stats["n_accept"] < spec.stats["n_drafted"]  # rejections: rollbacks happened


def _last_row_logits(model, tokens, every_row: bool):
    """Decode ``tokens`` in a fresh context, logits for the last row only (or for every row); the
    logits llama.cpp hands back for the last row."""
    import llama_cpp as llama
    import numpy as np

    from specdec_studio.engine.batch import Batch

    params = llama.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch = 64, 16, 1, 1
    ctx = llama.llama_init_from_model(model.ptr, params)
    batch = Batch(16, 1, logits_every_row=every_row)
    try:
        batch.add_run(tokens, 0, 0, logits_last=True)
        assert llama.llama_decode(ctx, batch.raw) == 0
        return np.ctypeslib.as_array(
            llama.llama_get_logits_ith(ctx, len(tokens) - 1), shape=(model.info.n_vocab,)
        ).copy()
    finally:
        batch.close()
        llama.llama_free(ctx)


@pytest.mark.parametrize("name, ignores_rows", [("cogvlm-dense", True), ("llama-dense", False)])
def test_which_graphs_ignore_the_rows_that_asked_for_logits(tiny_archs, name, ignores_rows):
    """llama.cpp's cogvlm graph hands back the first n_outputs rows' logits, not the rows asked
    for (so the engine asks for every row there); llama's selects them. If a llama.cpp update
    changes either, this fails and ARCHS_LOGITS_EVERY_ROW must follow."""
    import numpy as np

    from specdec_studio.engine import native
    from specdec_studio.engine.models.loading import ARCHS_LOGITS_EVERY_ROW, LoadedModel

    native.ensure_backend()
    with LoadedModel(tiny_archs / f"{name}.gguf") as model:
        assert model.info.logits_every_row == (model.info.arch in ARCHS_LOGITS_EVERY_ROW) == ignores_rows
        tokens = [5, 17, 29, 41, 53]
        asked_last = _last_row_logits(model, tokens, every_row=False)
        every_row = _last_row_logits(model, tokens, every_row=True)
        assert np.allclose(asked_last, every_row, atol=1e-4) != ignores_rows

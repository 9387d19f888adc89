"""A session nobody watches (``observe=False``: the CLI without --trace or --kv-dump) follows no
cells and describes no batches, and decodes exactly what a watched one does."""

from __future__ import annotations

import pytest

from specdec_studio.engine.batch import Batch
from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
from specdec_studio.engine.events import KvSnapshot, StepBatch, StepDone

PROMPT = "a b c a b c a b"
CONFIGS = {
    "plain": RunConfig(mode="plain", max_tokens=48),
    "lookup": RunConfig(mode="lookup", max_tokens=48, speculative=SpeculativeParams(k=3)),
    "lookup simple 2/3": RunConfig(mode="lookup", max_tokens=48,
                                   speculative=SpeculativeParams(k=3, lookup="simple", lookup_key=2, lookup_copy=3)),
    "auto": RunConfig(mode="auto", max_tokens=48),
    "lookahead": RunConfig(mode="lookahead", max_tokens=48, lookahead=LookaheadParams(4, 3, 4)),
}


@pytest.mark.parametrize("model", ["llama-dense", "qwen35-dense"])
def test_an_unwatched_session_decodes_the_same_and_sends_no_pictures(tiny_archs, model):
    from specdec_studio.engine.session import Session

    path = tiny_archs / f"{model}.gguf"
    with (
        Session(path, n_ctx=512, n_threads=1) as watched,
        Session(path, n_ctx=512, n_threads=1, observe=False) as headless,
    ):
        assert headless.memory.mirror is None and watched.memory.mirror is not None
        for name, config in CONFIGS.items():
            if name == "lookahead" and model == "qwen35-dense":
                continue  # refused on a recurrent model (tests/engine/test_archs.py)
            seen = [list(s.run(config, s.tokenize_prompt(PROMPT))) for s in (watched, headless)]
            ids = [events[-1].token_ids for events in seen]
            assert ids[0] == ids[1] and len(ids[0]) == 48, name
            kinds = [{type(e) for e in events} for events in seen]
            assert {StepBatch, KvSnapshot} <= kinds[0], name
            assert not {StepBatch, KvSnapshot} & kinds[1], name
            if name != "auto":  # Auto's plans follow the measured step times, which differ here
                assert sum(isinstance(e, StepDone) for e in seen[0]) == sum(isinstance(e, StepDone) for e in seen[1])
            assert any(isinstance(e, StepDone) for e in seen[1]), name
        with pytest.raises(RuntimeError, match="observe=False"):
            headless.kv_snapshot(1, 1)


def test_a_batch_knows_when_every_token_is_in_one_sequence():
    batch = Batch(8, 4)
    try:
        batch.add(5, 0, (2,), True)
        batch.add(6, 1, (2,), True)
        assert batch.single_seq == 2
        batch.add(7, 2, (1,), True)  # another sequence
        assert batch.single_seq == -1
        batch.clear()
        batch.add_run([1, 2, 3], 0, 3, logits_last=True)
        assert batch.single_seq == 3
        batch.add(4, 3, (3, 0), False)  # one token in two sequences
        assert batch.single_seq == -1
        batch.clear()
        batch.add(9, 0, (0, 1), False)
        assert batch.single_seq == -1
    finally:
        batch.close()

"""Which rollback a run on a recurrent or hybrid model gets (engine.kv.rollback), on llama.cpp's
tiny qwen35 with an MTP block: snapshots for an MTP head, checkpoints for the rest, as asked."""

from __future__ import annotations

import pytest

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.kv.rollback import longest_draft, snapshots_to_keep

PROMPT = "a b c a b c a b"


@pytest.mark.parametrize("how, mode, mtp, expected", [
    ("auto", "plain", False, 0),          # never rolls back
    ("snapshots", "plain", False, 0),
    ("auto", "lookup", False, 0),         # nearly every draft accepted: checkpoints
    ("auto", "speculative", False, 0),
    ("auto", "mtp", True, 5),             # cut short a third of the time: snapshots
    ("auto", "auto", True, 5),            # Auto drafting with the MTP head
    ("auto", "auto", False, 0),
    ("checkpoints", "mtp", True, 0),
    ("snapshots", "lookup", False, 5),
])
def test_snapshots_kept_per_run(how, mode, mtp, expected):
    assert snapshots_to_keep(how, mode, 5, mtp) == expected


def test_the_longest_draft_is_k_unless_k_adapts():
    assert longest_draft("mtp", 3, 16, "off") == 3
    assert longest_draft("lookup", 3, 12, "heuristic") == 12
    assert longest_draft("auto", 3, 16, "off") == 16


def test_a_session_keeps_the_snapshots_its_run_needs_and_stays_lossless(tiny_archs):
    """The context is made again only when a run needs other snapshots than it has (so a chat
    that keeps its mode keeps its cells), and every run's tokens equal plain's."""
    from specdec_studio.engine.session import Session

    with Session(tiny_archs / "qwen35-mtp.gguf", n_ctx=512, n_threads=1) as session:
        plain = session.complete(RunConfig(mode="plain", max_tokens=64), PROMPT).token_ids
        assert session.memory.n_snapshots == 0
        kept = session.target

        mtp = RunConfig(mode="mtp", max_tokens=64, speculative=SpeculativeParams(k=3))
        assert session.complete(mtp, PROMPT).token_ids == plain
        assert session.memory.n_snapshots == 3 and session.target is not kept
        kept = session.target
        assert session.complete(mtp, PROMPT).token_ids == plain
        assert session.target is kept  # same snapshots: the same context, its cells kept

        lookup = RunConfig(mode="lookup", max_tokens=64, speculative=SpeculativeParams(k=3))
        done = session.complete(lookup, PROMPT)
        assert done.token_ids == plain and session.memory.n_snapshots == 0

        forced = RunConfig(mode="lookup", max_tokens=64, speculative=SpeculativeParams(k=3, rollback="snapshots"))
        assert session.complete(forced, PROMPT).token_ids == plain
        assert session.memory.n_snapshots == 3


@pytest.mark.parametrize("params, words", [
    (dict(rollback="sometimes"), "rollback must be one of auto, snapshots, checkpoints"),
    (dict(lookup_key=-1), "key and copy sizes must be >= 0"),
    (dict(lookup_copy=-2), "key and copy sizes must be >= 0"),
])
def test_bad_rollback_and_lookup_sizes_are_one_sentence(params, words):
    from specdec_studio.engine.errors import ConfigError

    with pytest.raises(ConfigError, match=words) as refused:
        RunConfig(mode="lookup", speculative=SpeculativeParams(**params)).validate()
    assert str(refused.value).count(". ") == 0

"""The lossless contract itself can fail (issue 79's weak tests): an output cut short is not a
near-tie flip unless plain's next token was that close to an end of generation."""

from __future__ import annotations

import numpy as np
import pytest

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.tuning.probe import plain_logits, plain_top2_margin
from tests.conftest import PROSE_PROMPT
from tests.engine.lossless import assert_lossless, end_tokens

DEVIATION = 1.0  # about what 2 threads measure past 256 cells here (engine/tuning/probe.py)


def test_an_output_cut_short_is_refused_where_the_old_contract_let_it_through(smollm_session):
    session = smollm_session
    prompt = session.tokenize_prompt(PROSE_PROMPT)
    plain = list(session.complete(RunConfig(max_tokens=32), PROSE_PROMPT).token_ids)
    assert_lossless(session, prompt, plain, plain, DEVIATION, "plain against itself")
    cut = None
    for at in range(4, len(plain)):
        # the old contract took the shorter output's end for a flip wherever plain's top two were close
        if plain_top2_margin(session, prompt, plain[:at]) < DEVIATION:
            logits = plain_logits(session, prompt, plain[:at])
            if logits[plain[at]] - np.max(logits[end_tokens(session)]) >= DEVIATION:
                cut = at
                break
    assert cut is not None, "no place in the answer where the old contract would have been fooled"
    with pytest.raises(AssertionError, match="ended there"):
        assert_lossless(session, prompt, plain, plain[:cut], DEVIATION, "an output that lost its end")

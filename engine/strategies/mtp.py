"""Speculative decoding with the model's own MTP head (llama.cpp's ``--spec-type draft-mtp``).

The head drafts k tokens one at a time from the target's hidden state of the last accepted
token (:mod:`engine.drafts.mtp`); the target verifies them in one batch, as with a draft model.
Drafting is greedy like a draft model's, or sampled from the head's distribution at temperature
> 0 and verified by the speculative sampling rule, so the target's distribution is kept exactly.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np

from specdec_studio.engine.drafts.mtp import MtpHead, following
from specdec_studio.engine.events import Event
from specdec_studio.engine.sampling import Sampler
from specdec_studio.engine.strategies.common import Runtime
from specdec_studio.engine.strategies.speculative import DraftModelDrafter
from specdec_studio.engine.strategies.verify import run_draft_verify


class MtpDrafter(DraftModelDrafter):
    """Drafts with an :class:`MtpHead`: its first step brings the head's cache up to the accepted
    context and decodes the newest token with the target's hidden row before it; each further
    step decodes the last proposal with the head's own hidden row."""

    def __init__(self, head: MtpHead, sampler: Sampler, p_min: float, n_vocab_target: int,
                 is_eog=lambda _token: False, cancel=None, keep_probs: bool = False) -> None:
        self.head = head
        self._pos0 = 0
        self._idx = 0
        super().__init__(draft=None, sampler=sampler, p_min=p_min, n_vocab_target=n_vocab_target,
                         is_eog=is_eog, cancel=cancel, keep_probs=keep_probs)

    @property
    def n_vocab_draft(self) -> int:
        return self.head.n_vocab

    def begin(self, prompt: Sequence[int]) -> None:
        """Nothing to decode: the head followed the target's prompt decode as it happened."""

    def settle(self, context: Sequence[int]) -> None:
        """Nothing to trim now: the head drops its draft steps before it next decodes."""

    # Each of the head's decodes is timed (Auto prices the head by them); the first step's
    # catch-up is counted as one, what it costs on every step but the first.
    def _first_logits(self, context: Sequence[int]) -> np.ndarray:
        self._pos0 = len(context) - 1
        t0 = self.head.t_decode_s
        logits, self._idx = self.head.first_step(context)
        self.last_decode_times.append(self.head.t_decode_s - t0)
        return logits

    def _next_logits(self, token: int, i: int, k: int) -> np.ndarray:
        t0 = self.head.t_decode_s
        logits, self._idx = self.head.next_step(token, self._pos0 + 1 + i, self._idx)
        self.last_decode_times.append(self.head.t_decode_s - t0)
        return logits


def run_mtp(rt: Runtime, prompt: Sequence[int]) -> Iterator[Event]:
    assert rt.mtp is not None, "the session makes the MTP head before an MTP run"
    head = rt.mtp
    head.restart(rt.n_reused)
    drafter = MtpDrafter(head, rt.sampler, rt.config.speculative.p_min, rt.vocab.n_tokens,
                         rt.vocab.is_eog, rt.cancel)
    drafter.explainer = rt.explainer
    with following(head, rt.memory):
        yield from run_draft_verify(rt, prompt, drafter)

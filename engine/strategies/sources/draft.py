"""A model that drafts as a source: a draft model, or the target's own MTP head (each token a
decode of it); its signal is its probability for the token."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_studio.engine.strategies.auto.priors import DRAFT_PRIOR, bucket
from specdec_studio.engine.strategies.sources.base import Proposal, declare


class DraftSource:
    name = "draft"
    decodes = True
    # its signal: the draft's probability bucket (<.3, <.6, <.8, <.95, more)
    kinds = (declare("draft", "draft", "draft model", lambda signal: DRAFT_PRIOR[signal[0]]),)

    @classmethod
    def for_run(cls, index, options) -> DraftSource | None:
        return cls(options.draft) if options.draft is not None else None

    def __init__(self, drafter) -> None:
        self.drafter = drafter  # a DraftModelDrafter or an MtpDrafter made with keep_probs

    def propose(self, context: Sequence[int], k: int, stop=None) -> Proposal:
        draft = self.drafter.propose(context, k, stop)
        probs = self.drafter.last_probs
        return Proposal("draft", draft.tokens, [(bucket(p, (0.3, 0.6, 0.8, 0.95)),) for p in probs])

    def may_propose(self, context: Sequence[int]) -> bool:
        return True  # only a decode would tell: its price decides whether it is asked

    def siblings(self, context: Sequence[int], k: int, chains: list[Proposal]) -> list[Proposal]:
        return []

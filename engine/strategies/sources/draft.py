"""A model that drafts as a source: a draft model, or the target's own MTP head (each token a
decode of it); its signal is its probability for the token."""

from __future__ import annotations

from collections.abc import Sequence

from specdec_studio.engine.strategies.auto.priors import bucket
from specdec_studio.engine.strategies.sources.base import Proposal


class DraftSource:
    name = "draft"
    decodes = True

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

"""How a run on a recurrent or hybrid model undoes rejected drafts: llama.cpp's snapshots or our
checkpoints, picked per run.

- **Snapshots** (``n_rs_seq``): llama.cpp keeps each sequence's state after each of the last
  ``n_rs_seq`` tokens of a decode, so a rollback is free; but every decode writes them, a cost that
  grows with ``n_rs_seq`` whether or not anything is rolled back.
- **Checkpoints** (:mod:`engine.kv.checkpoints`): the state copied out before each verification;
  a rollback copies it back and decodes again the tokens that stay. Nothing is paid per decode.

Which is cheaper depends on how often a draft is cut short. Measured on llama.cpp's tiny qwen35
(``tests/bench/hybrid_vs_llama_cpp.py --rollback R``, 1,024 tokens, one thread, medians of 5 ABBA
rounds; llama.cpp's cost per step over ours): a self-draft, whose drafts are all accepted there, 0.96x
with snapshots and 1.01x with checkpoints; an MTP head, whose drafts are cut short a third of the
time, 0.96x with snapshots and 0.60x with checkpoints (every cut re-decodes the kept tokens).
llama.cpp's own tools decide the same way (``common_params_speculative::need_n_rs_seq``: snapshots
for MTP-style drafting, as many as the longest draft; checkpoints for n-gram and draft-model
speculation).
"""

from __future__ import annotations

from typing import Literal

from specdec_studio.engine.strategies import registry

Rollback = Literal["auto", "snapshots", "checkpoints"]
ROLLBACKS: tuple[str, ...] = ("auto", "snapshots", "checkpoints")


def longest_draft(mode: str, k: int, k_max: int, adaptive: str) -> int:
    """The most draft tokens one verification of the run can hold (and so roll back)."""
    if registry.mode(mode).plans or adaptive != "off":
        return k_max
    return k


def snapshots_to_keep(how: str, mode: str, longest: int, drafts_with_mtp: bool) -> int:
    """``n_rs_seq`` for the target context of a run: 0 where the run never rolls back (plain) or
    rolls back by checkpoint, else its longest draft."""
    if not registry.mode(mode).verifies:
        return 0
    if how == "snapshots" or (how == "auto" and drafts_with_mtp):
        return longest
    return 0

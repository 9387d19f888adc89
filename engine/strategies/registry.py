"""Every decoding mode, once: what it is called, which strategy runs it, what it needs and what it
reads. The config, the model checks, the session, batch decoding, tuning, the CLI and the window's
controls ask this table what a mode does instead of comparing its name.

Adding a mode is one :class:`Mode` entry here and its strategy module (a generator
``run_<name>(rt, prompt)`` that yields events, as ``strategies/plain.py`` does)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from specdec_studio.engine.errors import ConfigError


@dataclass(frozen=True)
class Mode:
    name: str
    label: str  # what the mode is called where a person reads it
    # "module:function" under engine/strategies/: imported on the mode's first run, so that loading
    # the table (the CLI's argument parser reads it) imports no strategy
    strategy: str
    # the RunConfig group of settings the mode reads ("" : none of them)
    settings: Literal["", "lookahead", "speculative"] = ""
    # what must be there beside the target: a draft model, or MTP layers in the target's own file
    needs: Literal["", "draft", "mtp"] = ""
    # drafts with the draft model where one is loaded, else the target's MTP head where it has one
    optional_draft: bool = False
    # verifies guesses for the next tokens against the target's own (everything but plain)
    verifies: bool = True
    # drafts k tokens a step from one source and verifies them (strategies.verify)
    draft_then_verify: bool = False
    # plans each step from the machine's measured batch cost, as a tree of several sequences (Auto)
    plans: bool = False
    # keeps several sequences that share the prompt's cells (a recurrent state cannot be shared)
    shared_cells: bool = False
    # what a slot of batch decoding (engine.parallel) drafts with; None: batch decoding cannot run it
    batch_slot: Literal["none", "lookup", "draft", "auto"] | None = None
    # what the Tune tab sweeps (empty: the mode is not swept)
    sweep_axes: tuple[str, ...] = ()
    # the source of a token verification accepted from this mode's proposals
    accepted_source: Literal["accepted_draft", "accepted_ngram"] = "accepted_draft"

    def run_function(self) -> Callable:
        module, function = self.strategy.split(":")
        return getattr(importlib.import_module(f"specdec_studio.engine.strategies.{module}"), function)


TABLE: tuple[Mode, ...] = (
    Mode("plain", "Plain", "plain:run_plain", verifies=False, batch_slot="none"),
    Mode("lookahead", "Lookahead", "lookahead:run_lookahead", settings="lookahead", shared_cells=True,
         sweep_axes=("W", "N", "G"), accepted_source="accepted_ngram"),
    Mode("speculative", "Speculative (draft model)", "speculative:run_speculative", settings="speculative",
         needs="draft", draft_then_verify=True, batch_slot="draft", sweep_axes=("k",)),
    Mode("lookup", "Prompt lookup", "lookup:run_lookup", settings="speculative", draft_then_verify=True,
         batch_slot="lookup", sweep_axes=("k",)),
    Mode("mtp", "MTP head (the model's own)", "mtp:run_mtp", settings="speculative", needs="mtp",
         draft_then_verify=True),
    Mode("auto", "Auto", "auto:run_auto", settings="speculative", optional_draft=True, plans=True,
         batch_slot="auto", accepted_source="accepted_ngram"),
)
BY_NAME: dict[str, Mode] = {m.name: m for m in TABLE}
NAMES: tuple[str, ...] = tuple(BY_NAME)


def mode(name: str) -> Mode:
    """The mode called ``name``; a ConfigError in one sentence for a name no mode has."""
    if not isinstance(name, str) or name not in BY_NAME:
        raise ConfigError(f"unknown mode {name!r}; choose one of {', '.join(NAMES)}")
    return BY_NAME[name]


def get(name: str) -> Callable:
    """The strategy generator that runs the mode called ``name``."""
    return mode(name).run_function()

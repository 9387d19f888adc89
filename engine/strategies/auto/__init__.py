"""Auto: each step verifies whatever set of candidate tokens is expected to emit the most tokens
per second, and nothing (a plain step) when no candidate pays for itself.

Candidate sources, each proposing a continuation of the context:

- ``ngram``: llama-lookup's context n-gram cache (every n-gram of the context counts its followers);
  each proposed token's signal is the n-gram size it came from and its follower share and count;
- ``ngram_alt``: the same cache's other frequent followers wherever along the n-gram branch the
  text went another way before, each continued by the cache: sibling branches that fork off the
  n-gram branch at that depth;
- ``suffix``: the longest suffix of the context that occurred earlier (a suffix automaton over the
  prompt, which holds the earlier turns of a chat, and the output so far) and what followed it;
  the signal is the match length (SAM-Decoding, SuffixDecoding: speculate more on a long match);
- ``draft``: a draft model's greedy proposals, when one is loaded; the signal is its probability.

Every proposed token gets a probability of being accepted, calibrated online from the run's own
verifications of tokens with the same source, signal and draft position, and whether a source of
another family proposed the same token after the same path (a beta-binomial mean that leans on
the signal's prior until its bin has data). A step's candidates form a tree:
continuations that share a prefix share its tokens (each such token carries every branch's
sequence id, as in llama.cpp's ``examples/speculative``). The tree grows one token at a time while
that raises expected emitted tokens ÷ predicted step cost, where a decode of B tokens costs
T(B)/T(1) from the batch-cost profile (or, without one, from the decodes the run makes). An empty
tree is a plain step.

A plain step costs what a step of plain decoding costs: the sources give their first tokens, and
a bound on the tree's gain (``tree.could_pay``) must pass before they give more and the tree is
built; while nothing could pay, they are asked less often. Proposals not sent, and the tokens a
tree left out of those it sent, are judged in hindsight against the target's tokens
(``hindsight``), so the calibration learns on every step and at every depth.
The guard (``guard``) compares what the trees realised, by the run's own clock, with what they
promised, and makes the planner warier while they do not pay.

Verification is lookahead's: the target's own token at each position (argmax, or a draw from its
distribution), kept while some branch has it next. Every emitted token is the target's choice,
drawn once per token in plain decoding's order, so a seeded stochastic run equals plain's too.
The winning branch's cells stay; the others are removed; if the winner was not the first branch
in the batch, its cells are re-decoded with the next step so the cache stays in position order.
"""

from specdec_studio.engine.strategies.auto.calibration import Calibrator, StepCost
from specdec_studio.engine.strategies.auto.report import AutoReport
from specdec_studio.engine.strategies.auto.run import run_auto
from specdec_studio.engine.strategies.auto.sources import Proposal, Sources
from specdec_studio.engine.strategies.auto.tree import Node, build_tree, could_pay

__all__ = ["AutoReport", "Calibrator", "Node", "Proposal", "Sources", "StepCost", "build_tree", "could_pay", "run_auto"]

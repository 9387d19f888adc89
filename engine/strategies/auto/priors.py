"""What Auto believes before a run has verified anything: each source's prior chance of being
right by its signal, and the constants of the planner."""

from __future__ import annotations

from collections.abc import Sequence


NGRAM_MIN, NGRAM_MAX = 1, 4
ALT_BRANCHES = 2  # the n-gram cache's 2nd and 3rd followers
ALT_MIN_COUNT = 2  # a follower seen once is no evidence of a second way
MIN_SUFFIX_MATCH = 2
# What a proposal's signal says about its chance before the run has verified any like it: a long
# suffix match or a frequent, dominant n-gram follower is usually right (llama-lookup's thresholds
# and SAM-Decoding's observation), a draft model's probability is roughly its acceptance. The prior
# weighs as much as PRIOR_WEIGHT verifications; the run's own outcomes take over from there.
PRIOR_WEIGHT = 4.0
# A position without outcomes of its own leans on the one above it, discounted by CHAIN_DECAY: a
# chain's later tokens are less sure than its first until they have been judged (on the shipped
# code-editing answers a copied line is right for a few tokens, then the edit starts).
# For a suffix match the discount is not what its chains do, but a guard: over the shipped prompts'
# plain outputs a match's later tokens, given those before were right, are righter than its first
# (9-16 tokens: 0.89 at depth 1, 0.91-0.95 at depths 2-8), since each right token makes the match
# longer. Dropping the discount from 9 tokens raised the simulated machine's averages (code prompt
# 1.413 -> 1.477, chat 1.0577 -> 1.0605 at 2 threads) but let a run's first tree bet 5-11 tokens on
# a copy that then broke (chat-1 1.000 -> 0.980; translation-1 -> 0.929 at 1 thread): kept until a
# run's first bet can be bounded by what it may lose (capping its length or its gain stalls Auto at
# 1 thread, where only a long tree pays). Measured again on a settled profile (profile.PLAIN_SETTLE,
# MIN_GAIN 1.1): a third of the prompts 1.0251 -> 1.0320, code 1.262 -> 1.302, but qa_passage-3 0.914.
CHAIN_DECAY = 0.9
# ... except along a suffix match of LONG_MATCH_BUCKET's length or more (33 tokens and up): there
# a chain that has been right so far has only made its match longer, and the answer is copying.
# On the code prompt at 1 llama.cpp thread, where a batch costs nearly its tokens' worth and only a
# long sure chain pays, the decay held Auto to plain steps through most of a 60-token copy of the
# prompt that ngram-mod took in one step (in process, 256 tokens: 97.3 -> 101.8 tokens/s, our port of
# ngram-mod 104.7; at 2 threads 167.7 -> 172.8). From 17 tokens (bucket 4) the chat prompts lost on the
# simulated machine (geometric mean 1.060 -> 1.052 at 128 tokens); from 33 they held (1.059).
LONG_MATCH_BUCKET = 5
# A text that has written the same stretch three times running (its suffix match reaches back
# LOOP_SURE_ROUNDS periods) is going round a loop, and greedy decoding seldom leaves one: its match
# counts as a long one whatever its length (a 7-token line written a third time matches 14). On the
# simulated machine, every shipped prompt at 128 tokens, chat geometric mean: this machine's profile
# at 2 threads 1.0569 -> 1.0577, the shared smooth one 1.0490 -> 1.0499 (two prompts 0.1-0.2 %
# slower), a GPU-like curve 1.5919 -> 1.5942; at 1 thread (every 2nd prompt) 1.0146 -> 1.0171. The
# code prompt (256): 1.243 -> 1.263 at 1 thread, 1.421 -> 1.430 smooth. Counted from a loop's first
# round instead, the loops that broke cost more than the others won (at 1 thread 0.940 -> 0.821 on one).
LOOP_SURE_ROUNDS = 2
SUFFIX_PRIOR = (0.35, 0.45, 0.6, 0.75, 0.85, 0.92)  # by match-length bucket: 2, 3-4, 5-8, 9-16, 17-32, 33+
DRAFT_PRIOR = (0.2, 0.45, 0.7, 0.85, 0.93)  # by the draft's probability: <.3, <.6, <.8, <.95, more
ALT_PRIOR = (0.08, 0.15, 0.25, 0.35)  # a 2nd or 3rd follower, by its share: <.15, <.3, <.45, more
# A run's first tokens of a source, set against the priors of their signals, scale that source's
# priors for the rest of the run (Calibrator._signal_prior): how a run's text copies is much the
# same from one signal to the next, and a bin fine enough to tell them apart fills slowly. The
# scale leans on SCALE_WEIGHT outcomes as the prior expects; a scaled prior stays below PRIOR_MAX.
SCALE_WEIGHT = 8.0
PRIOR_MAX = 0.95
# Each run starts from these priors, not from what the session's earlier runs verified. Carrying
# the calibration bins from run to run (each bin worth up to 12 earlier outcomes, or 4) was
# measured on the simulated machine (this CPU's settled 2-thread profile, every shipped prompt
# once, in order, one session): 16-token answers gained (geometric mean 1.0015 -> 1.006-1.010,
# each category's first 1.000 -> 1.014-1.019; on this machine qa_passage's first prompt, run
# again, sent a tree at step 6, where its first run sent none), but 128-token answers were slower
# (1.0359 -> 1.031-1.034, prompts under 0.98: 2 -> 7-14). An answer that copies less than the ones
# before it bets early on their record and loses. Scaling the carried outcomes by the run's own
# first tokens (SCALE_WEIGHT), or believing them only while the run's first tokens keep up with
# them, did not remove that; carrying only the first position, or only the deeper ones, lost the
# short answers' gain too (16 tokens: 1.0020, 1.0009).
# Agreement between families (sources.base.FAMILY): measured over
# the shipped prompts' plain outputs, a first token that both the cache and the suffix match proposed
# was right 90 % of the time, one that only one of them proposed 50 %: a token's bins are split by
# whether another family agreed. (Raising the prior of an agreed token did not pay: the short
# answers, where the prior decides, lost more than the long ones won.)

# Without a profile, a decode of B tokens is assumed to cost 1 + COST_SLOPE·(B - 1) plain steps
# until the run has timed decodes of that size (measured on this CPU: T(8)/T(1) ≈ 1.3).
COST_SLOPE = 0.04
# A tree must beat a plain step by a margin: its prediction errs, a plain step cannot. 1.1 and a
# start trust of 0.8 (below) were tuned against profiles whose one-token time was read too high
# (profile.PLAIN_SETTLE): every batch looked 1.2-1.6x cheaper than it was, and the margins held
# back a planner that was too hopeful. Priced right, the same margins held it back from bets that
# pay. On the simulated machine with this CPU's settled profile (2 threads), every shipped prompt at
# 128 tokens, 1.1 and 0.8 against 1.05 and 0.9: geometric mean 1.0224 -> 1.0359, worst prompt
# 0.930 -> 0.971, prompts under 0.98 6 -> 2, each category's first 1.0248 -> 1.0406 (worst 0.968
# -> 1.000), code prompt 1.262 -> 1.296; at 1 thread (a third of the prompts) 1.1219 -> 1.1318; on
# a GPU-like curve 1.5960 -> 1.5969, code 4.776 -> 4.971. At 16 and 32 tokens the firsts hold or
# gain (1.000 -> 1.000, 1.0042 -> 1.0194), and two other prompts lose an early bet (code_editing-5,
# roleplay-3: 0.94-0.97). Each of the two changes alone did less (1.0308 and 1.0332 on a third of
# the prompts).
MIN_GAIN = 1.05
# No step is bet on more than MAX_STEP_COST plain steps' worth of decode: the calibration of a
# chain's deep tokens is the planner's weakest guess, and a copy that breaks early wastes every row
# after the break. On this 2-core CPU a 17-token decode of SmolLM2 costs 8.3-8.5 plain steps (the
# shipped profiles; about 10 by a settled one, where the cap is 12 tokens and a cap of 40 changed
# nothing on the code prompt's simulated run), and 16 proposed tokens measured best there (on the
# code prompt 64 lost, 32 did no better); where a batch costs less per token the same bet buys a
# longer step: the model cut to one layer, a GPU-like step time, gets 23 (code prompt, 256 tokens,
# in process: 1,219 -> 1,462 tokens/s). Without a profile a run cannot price long steps before it
# has made them, and keeps UNPRICED_STEP_TOKENS. A loop the text keeps repeating is the exception
# (auto.run): there a step may propose as many tokens as the loop has gone on.
MAX_STEP_COST = 8.6
UNPRICED_STEP_TOKENS = 16
SHAPE_CHANGE_PRIOR = 0.05  # the graph rebuild a tree step causes, in plain steps, until measured
MIN_REACH = 0.02  # candidates less likely than this to be reached are not worth a row
# The guard (auto.guard): a run starts as if GUARD_START_TREES tree steps had realised
# GUARD_START_TRUST of their predicted gain, and forgets an old tree step's outcome at GUARD_DECAY
# per tree step (about the last ten weigh).
GUARD_START_TRUST = 0.9  # (see MIN_GAIN)
GUARD_START_TREES = 4
GUARD_DECAY = 0.9
GUARD_REST_DECAY = 0.95  # per plain step, while trust is below the start's (Guard.rest)
# While the sources propose nothing that could pay, they are asked every step for IDLE_STRETCH
# steps, then every 2nd step for as many, and so on, up to every PLAN_INTERVAL_MAX-th step: on an
# ordinary chat answer, asking them every step costs about 1 % of a plain step
# (tests/bench/auto_overhead.py). Between, a match of WAKE_MATCH tokens or more (the answer has
# started to copy something) asks them at once; the suffix matcher follows the text only once the
# match could be that long (Sources.repeats).
IDLE_STRETCH = 4
PLAN_INTERVAL_MAX = 8
WAKE_MATCH = 8


def bucket(value: float, edges: Sequence[float]) -> int:
    """The index of the first of ``edges`` that ``value`` is below (len(edges) past the last)."""
    for i, edge in enumerate(edges):
        if value < edge:
            return i
    return len(edges)

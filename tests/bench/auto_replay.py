"""Auto's planner against llama-lookup's drafting and the oracle, replayed on plain decoding's
output with every step priced alike, so the comparison has none of the machine's run-to-run noise.

    .venv/bin/python tests/bench/auto_replay.py [-n 256] [--all] [--slope S]

Greedy decoding is deterministic: every lossless strategy emits plain decoding's tokens, so once
plain's output for a prompt is known, which tokens a step would accept follows from the text alone.
For the code prompt of the side-by-side benches and the first prompt of each category (``--all``:
every shipped prompt), this decodes plain's output once, then replays on it:

- **Auto**: its own sources, calibration, hindsight and tree builder (the code ``--mode auto``
  runs, without a draft model), step by step, learning from each step's verdicts as a run does;
  the guard and the planner's pacing are left out (they follow the run's clock, which a replay
  does not have), so it asks the sources every step and trusts its predictions;
- **lookup k**: llama-lookup's drafting (the context n-gram cache, n-grams of 1 to 4 tokens) with
  a fixed draft length k from 1 to 8: the best k of each prompt (chosen knowing the outcome), and
  the best single k over all prompts;
- **oracle**: the bound of ``auto_bound.py``, the longest correct run any source proposes.

Every step is priced in one-token decodes from the batch-cost profile: T(B)/T(1) for a batch of B
tokens, plus the graph rebuild a one-token decode after a larger one costs (Auto's prior for it).
``--slope S`` prices (and lets Auto plan) with T(B)/T(1) = 1 + S·(B - 1) instead: what a machine
whose batches cost less (a GPU) would see. Time outside decodes is not priced. A real run's speed-up
is this one less its overhead and noise:
``auto.py`` and ``lookup_vs_llama_cpp.py`` measure those. Prints each prompt's speed-up over plain
for each, Auto over the best fixed k, and geometric means; then, pooled over the prompts, how often
the first token the n-gram cache or the suffix match proposed was right, by whether the other one
proposed the same token (why Auto calibrates agreed tokens apart). Not a test.
"""

from __future__ import annotations

import argparse
import sys

from _common import CODE_PROMPT, THREADS, model_path
from auto_bound import oracle_cost

from specdec_studio.engine.config import AUTO_SEQUENCES, RunConfig
from specdec_studio.engine.events import StepDone
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies import auto
from specdec_studio.engine.strategies.auto.hindsight import Hindsight, sent_lengths
from specdec_studio.engine.strategies.auto.priors import SHAPE_CHANGE_PRIOR
from specdec_studio.engine.strategies.lookup import NgramCacheDrafter
from specdec_studio.engine.tuning import profile
from specdec_studio.engine.tuning.cost_model import geometric_mean
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

LOOKUP_KS = range(1, 9)
K_MAX = 16


class LinearCurve:
    """T(B)/T(1) = 1 + slope·(B - 1)."""

    def __init__(self, slope: float) -> None:
        self.slope = slope

    def relative(self, n_tokens: int, _n_outputs: int) -> float:
        return 1.0 + self.slope * (n_tokens - 1)


def plain_output(session: Session, tokens: list[int], n: int) -> list[int]:
    return [t.id for e in session.run(RunConfig(max_tokens=n), tokens) if isinstance(e, StepDone) for t in e.tokens]


class Pricing:
    """One step's cost in one-token decodes: the profile's T(B)/T(1), and the rebuild of the
    one-token graph after a larger batch."""

    def __init__(self, curve) -> None:
        self.curve = curve
        self.previous = 1

    def step(self, n_tokens: int) -> float:
        cost = self.curve.relative(n_tokens, n_tokens)
        if n_tokens == 1 and self.previous != 1:
            cost += SHAPE_CHANGE_PRIOR
        self.previous = n_tokens
        return cost


def replay_auto(prompt: list[int], output: list[int], curve) -> float:
    """The decode cost of Auto's run over ``output``: its loop, with the target's choices read
    from ``output`` instead of sampled."""
    calibrator, cost, price = auto.Calibrator(), auto.StepCost(curve), Pricing(curve)
    hindsight = Hindsight(calibrator)
    sources = auto.Sources(prompt)
    context, i, total, n_redecode = [*prompt, output[0]], 1, 0.0, 0
    while i < len(output):
        sources.advance(context)
        room = min(K_MAX, len(output) - i - 1 - n_redecode)
        proposals = sources.propose(context, room) if room > 0 else []
        proposals = proposals[:AUTO_SEQUENCES]
        nodes, _ = auto.build_tree(proposals, calibrator, cost, max(0, room))
        hindsight.keep(proposals, sent_lengths(proposals, nodes))
        total += price.step(n_redecode + 1 + len(nodes))
        accepted, parent = [], -1
        while True:  # verification: the target's token at each depth, following the nodes that have it
            chosen = output[i]
            children = [j for j, node in enumerate(nodes) if node.parent == parent]
            match = next((j for j in children if nodes[j].token == chosen), None)
            for j in children:
                n = nodes[j]
                calibrator.observe(n.source, n.signal, n.depth - 1, n.p, j == match, n.agreed)
            context.append(chosen)
            hindsight.see(chosen)
            i += 1
            if match is None or i >= len(output):
                break
            accepted.append(match)
            parent = match
        # a winning path that is not the first branch in the batch is decoded again with the next step
        n_redecode = len(accepted) if accepted != list(range(len(accepted))) else 0
    return total


def replay_lookup(prompt: list[int], output: list[int], curve, k: int) -> float:
    """The decode cost of llama-lookup's drafting with draft length ``k`` over ``output``."""
    ngrams, price = NgramCacheDrafter(1, 4), Pricing(curve)
    ngrams.begin(prompt)
    context, i, total = [*prompt, output[0]], 1, 0.0
    while i < len(output):
        draft = ngrams.propose(context, min(k, len(output) - i - 1)).tokens
        n_accepted = 0
        while n_accepted < len(draft) and draft[n_accepted] == output[i + n_accepted]:
            n_accepted += 1
        total += price.step(1 + len(draft))
        context.extend(output[i:i + n_accepted + 1])
        i += n_accepted + 1
    return total


def first_token_agreement(prompt: list[int], output: list[int], counts: dict[str, list[int]]) -> None:
    """Add, for every position of ``output``, whether the n-gram cache's and the suffix match's
    first proposed token was right, keyed by whether they agreed: [proposals, right]."""
    sources = auto.Sources(prompt, alternatives=False)
    context = [*prompt, output[0]]
    for i in range(1, len(output)):
        sources.advance(context)
        first = {p.source: p.tokens[0] for p in sources.propose(context, 1)}
        if first:
            agreed = len(first) == 2 and first["ngram"] == first["suffix"]
            key = "both, agreeing" if agreed else ("both, differing" if len(first) == 2 else "one only")
            for token in set(first.values()):
                counts[key][0] += 1
                counts[key][1] += token == output[i]
        context.append(output[i])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=256, help="tokens per prompt")
    ap.add_argument("--all", action="store_true", help="every shipped prompt, not the first of each category")
    ap.add_argument("--slope", type=float, default=None,
                    help="price batches as 1 + SLOPE·(B-1) one-token decodes instead of the profile's curve")
    args = ap.parse_args()
    with Session(model_path(), n_ctx=4096, n_threads=THREADS) as session:
        if args.slope is None:
            profile.load_or_measure(session)
            curve, priced_by = session.cost_curve(), "the profile"
        else:
            curve, priced_by = LinearCurve(args.slope), f"T(B)/T(1) = 1 + {args.slope:g}·(B-1)"
        prompts = [("code (bench prompt)", session.tokenize_prompt(CODE_PROMPT))]
        prompts += [(p.category, prompt_tokens(session, p, chat=True))
                    for p in (shipped() if args.all else shipped(per_category=1))]
        print(f"{model_path().name}, {THREADS} threads, up to {args.n} tokens, each step priced by {priced_by}; "
              "speed-up over plain:")
        print(f"{'prompt':<22}{'tokens':>7}{'auto':>8}{'best k':>8}{'lookup':>8}{'auto/lookup':>13}{'oracle':>8}")
        ratios: dict[str, list[float]] = {"auto": [], "lookup": [], "auto/lookup": [], "oracle": []}
        agreement = {key: [0, 0] for key in ("both, agreeing", "both, differing", "one only")}
        fixed: dict[int, list[float]] = {k: [] for k in LOOKUP_KS}  # each k's speed-up, every prompt
        for name, tokens in prompts:
            output = plain_output(session, tokens, args.n)
            if len(output) < 2:
                continue
            plain = float(len(output) - 1)  # the first token comes from the prompt's decode in every mode
            auto_x = plain / replay_auto(tokens, output, curve)
            by_k = {k: plain / replay_lookup(tokens, output, curve, k) for k in LOOKUP_KS}
            best_k = max(by_k, key=by_k.get)
            for k, value in by_k.items():
                fixed[k].append(value)
            oracle_x = plain / oracle_cost(tokens, output, curve)
            first_token_agreement(tokens, output, agreement)
            for key, value in (("auto", auto_x), ("lookup", by_k[best_k]), ("auto/lookup", auto_x / by_k[best_k]),
                               ("oracle", oracle_x)):
                ratios[key].append(value)
            print(f"{name:<22}{len(output):7d}{auto_x:8.3f}{best_k:8d}{by_k[best_k]:8.3f}{auto_x / by_k[best_k]:13.3f}"
                  f"{oracle_x:8.3f}")
        print(f"{'geometric mean':<22}{'':7}{geometric_mean(ratios['auto']):8.3f}{'':8}"
              f"{geometric_mean(ratios['lookup']):8.3f}{geometric_mean(ratios['auto/lookup']):13.3f}"
              f"{geometric_mean(ratios['oracle']):8.3f}")
        single = max(LOOKUP_KS, key=lambda k: geometric_mean(fixed[k]))
        print(f"the best single fixed setting, lookup k={single}: geometric mean {geometric_mean(fixed[single]):.3f}, "
              f"worst prompt {min(fixed[single]):.3f}x plain")
        print(f"Auto's worst prompt: {min(ratios['auto']):.3f}x plain; "
              f"{sum(r < 0.97 for r in ratios['auto'])} of {len(ratios['auto'])} prompts below 0.97x")
        print("\nfirst proposed token of the n-gram cache and the suffix match, every position, all prompts:")
        for key, (proposed, right) in agreement.items():
            print(f"  {key:<16} {proposed:6d} proposed, {right:6d} right ({100 * right / max(1, proposed):4.1f} %)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

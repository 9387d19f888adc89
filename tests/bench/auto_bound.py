"""How far Auto could go with the candidates this machine offers: its speed against an oracle that
knows which candidates the target will accept, and how often a source could have turned one of
Auto's plain steps into a longer one.

    .venv/bin/python tests/bench/auto_bound.py [-n 256] [--runs 3] [--categories C,...] [--prompts 1]

For each prompt (the code prompt of the side-by-side benches, then the first ``--prompts`` of each
category):

- **Auto's speed** and its steps, drafted and accepted tokens.
- **Oracle bound**: a decoder that walks the same output and, at every step, sends exactly the
  longest run of tokens that some source proposes correctly (the n-gram cache's chain, its chains
  from the second and third followers, the suffix match, the most recent match; up to 16 tokens),
  and nothing when none is right. Each step is priced with the batch-cost profile (T(1+m)/T(1)
  times the run's median one-token decode), plus Auto's own time outside decodes. No planner that
  chooses among these candidates, in a chain or a tree, can beat it.
- **Calibrated bounds**: Auto's own planner (its sources, their signals, its tree) believing each
  calibration bin's chance as measured in hindsight, from the first token, and asking no margin of
  a tree: the best a planner that knows how often each kind of proposal is right, but not which
  one will be, can do with these signals. Fitted over all the prompts' answers together
  (``fit/all``: what exactly right fixed priors would give) and on each answer alone
  (``fit/answer``: exactly right for the answer in hand from its first token, more than a run can
  learn as it goes). Scored on the answers they were fitted on, so if anything optimistic.
- **Coverage of plain steps**: at the start of every step Auto decoded plain, whether a source
  proposed the token the target then chose: the n-gram cache's most frequent follower (with
  llama-lookup's thresholds), its second and third followers (the branches a tree could add), the
  suffix automaton's match, and the most recent match (transformers' prompt lookup). A plain step
  only gets faster with a source that covers it.

Not a test: it prints figures, with nothing else running on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys

from _common import CODE_PROMPT, THREADS, model_path

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies.auto.calibration import Calibrator, StepCost
from specdec_studio.engine.strategies.auto.sources import Proposal, Sources
from specdec_studio.engine.strategies.auto.tree import build_tree, support_of
from specdec_studio.engine.strategies.lookup import LatestMatchDrafter, NgramCacheDrafter
from specdec_studio.engine.strategies.suffix_automaton import SuffixMatcher
from specdec_studio.engine.tuning import profile
from specdec_studio.engine.tuning.cost_model import geometric_mean
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

CODE_LABEL = "code (bench prompt)"
SOURCES = ("ngram best", "ngram 2nd", "ngram 3rd", "suffix", "latest match")


def first_proposals(context: list[int], ngrams: NgramCacheDrafter, suffix: SuffixMatcher,
                    latest: LatestMatchDrafter) -> dict[str, int | None]:
    """Each source's proposal for the token after ``context``."""
    best = ngrams.propose(context, 1).tokens
    ranked: list[int] = []
    for size in range(min(ngrams.ngram_max, len(context)), ngrams.ngram_min - 1, -1):
        entry = ngrams.followers_of(tuple(context[len(context) - size:]))
        if entry is not None:
            ranked = [t for t, _ in sorted(entry.counts.items(), key=lambda kv: -kv[1])]
            break
    suffix.extend(context[len(suffix.tokens):])
    follow, _ = suffix.continuation(1, 2)
    recent = latest.propose(context, 1).tokens
    return {"ngram best": best[0] if best else None,
            "ngram 2nd": ranked[1] if len(ranked) > 1 else None,
            "ngram 3rd": ranked[2] if len(ranked) > 2 else None,
            "suffix": follow[0] if follow else None,
            "latest match": recent[0] if recent else None}


def chain(ngrams: NgramCacheDrafter, context: list[int], first: int | None, k: int) -> list[int]:
    """``first`` then the n-gram cache's most frequent followers (llama-lookup's thresholds)."""
    if first is None:
        return []
    seq = [*context, first]
    out = [first]
    while len(out) < k:
        found = ngrams.confident(seq[-ngrams.ngram_max:])
        if found is None:
            break
        token = found[1].best
        seq.append(token)
        out.append(token)
    return out


def oracle_cost(prompt: list[int], output: list[int], curve, k: int = 16) -> float:
    """Decode cost (in one-token decodes) of the oracle decoder over ``output``."""
    ngrams = NgramCacheDrafter(1, 4)
    ngrams.begin(prompt)
    suffix, latest = SuffixMatcher(prompt), LatestMatchDrafter(1, 4)
    cost, i = 0.0, 1  # output[0] came from the prompt's decode
    while i < len(output):
        context = [*prompt, *output[:i]]
        first = first_proposals(context, ngrams, suffix, latest)
        suffix_chain, _ = suffix.continuation(k, 2)
        candidates = [ngrams.propose(context, k).tokens, suffix_chain, latest.propose(context, k).tokens,
                      chain(ngrams, context, first["ngram 2nd"], k), chain(ngrams, context, first["ngram 3rd"], k)]
        # the step emits the target's token after the longest correct run of proposed tokens
        room = len(output) - i - 1
        m = 0
        for proposal in candidates:
            run = 0
            for a, b in zip(proposal[:room], output[i:]):
                if a != b:
                    break
                run += 1
            m = max(m, run)
        cost += curve.relative(1 + m, 1 + m)
        i += 1 + m
    return cost


class HindsightCalibrator(Calibrator):
    """Each bin's chance as the whole output shows it: ``counts`` maps a calibration key to
    [accepted, offered]; a bin the output never offered keeps the run's starting estimate."""

    def __init__(self, counts: dict[tuple, list[int]]) -> None:
        super().__init__()
        self.counts = counts

    def probability(self, source: str, signal: tuple, position: int, agreed: bool = False) -> float:
        accepted, offered = self.counts.get(self._key(source, signal, position, agreed), (0, 0))
        return accepted / offered if offered else super().probability(source, signal, position, agreed)


class DecodesOnly(StepCost):
    """The profile's T(B)/T(1), with nothing charged for returning to one-token decodes."""

    def return_penalty(self) -> float:
        return 0.0


def proposals_and_outcomes(prompt: list[int], output: list[int], n_seq: int, k: int = 16
                           ) -> tuple[list[list[Proposal]], dict[tuple, list[int]]]:
    """What Auto's sources propose at every output position i >= 1 (after ``output[:i]``; index 0
    is empty), and per calibration bin [accepted, offered] over all of them, each proposed token
    judged while its branch was still right."""
    sources = Sources(prompt)
    proposed: list[list[Proposal]] = [[]]
    counts: dict[tuple, list[int]] = {}
    for i in range(1, len(output)):
        context = [*prompt, *output[:i]]
        sources.advance(context)
        chains = sources.chains(context, k, False)
        proposals = (chains + sources.siblings(context, k, chains))[:n_seq]
        proposed.append(proposals)
        for prop, support in zip(proposals, support_of(proposals)):
            for d, token in enumerate(prop.tokens):
                right = i + d < len(output) and token == output[i + d]
                entry = counts.setdefault(Calibrator._key(prop.source, prop.signals[d], d, len(support[d]) > 1), [0, 0])
                entry[0] += right
                entry[1] += 1
                if not right:
                    break
    return proposed, counts


def calibrated_cost(proposed: list[list[Proposal]], output: list[int], counts: dict[tuple, list[int]],
                    curve, k: int = 16) -> float:
    """Decode cost (in one-token decodes) over ``output`` of Auto's planner believing the bins'
    chances in ``counts``: it walks the output sending, at each step, the tree with the best
    expected gain (no margin asked), or nothing."""
    calibrator, step_cost = HindsightCalibrator(counts), DecodesOnly(curve)
    cost, i = 0.0, 1
    while i < len(output):
        room = min(k, len(output) - i - 1)
        proposals = [Proposal(p.source, p.tokens[:room], p.signals[:room]) for p in proposed[i]]
        nodes, _ = build_tree([p for p in proposals if p.tokens], calibrator, step_cost, room, min_gain=1.0)
        accepted, parent = 0, -1
        while i + accepted < len(output):
            child = next(
                (j for j, n in enumerate(nodes) if n.parent == parent and n.token == output[i + accepted]), None
            )
            if child is None:
                break
            accepted, parent = accepted + 1, child
        cost += curve.relative(1 + len(nodes), 1 + len(nodes))
        i += 1 + accepted
    return cost


def measure(session, curve, tokens: list[int], n: int) -> dict:
    steps: list[tuple[int, int, float, list[int]]] = []
    for event in session.run(RunConfig(mode="auto", max_tokens=n), tokens):
        if isinstance(event, StepDone):
            steps.append((event.n_drafted, event.n_accepted, event.t_decode_s, [t.id for t in event.tokens]))
        elif isinstance(event, RunFinished):
            stats = event.stats
    one = statistics.median(t for d, _, t, _ in steps[1:] if d == 0) if any(d == 0 for d, *_ in steps[1:]) \
        else curve.relative(1, 1) * stats["t_decode_s"] / max(1, len(steps) - 1)
    output = [t for *_, emitted in steps for t in emitted]
    outside = stats["t_generate_s"] - stats["t_decode_s"]
    oracle_decodes = oracle_cost(tokens, output, curve)
    oracle_s = oracle_decodes * one + outside
    # Auto's own steps priced the same way: how well the pricing reproduces the measured speed
    auto_decodes = sum(curve.relative(1 + d, 1 + d) for d, *_ in steps[1:])
    modelled_s = auto_decodes * one + outside
    # plain makes one one-token decode per token after the first; priced by decodes alone (no time
    # outside them, which only lowers a real decoder's gain), the oracle's gain is an upper bound
    return {"stats": stats, "steps": steps, "oracle_tps": stats["n_predict"] / oracle_s,
            "modelled_tps": stats["n_predict"] / modelled_s,
            "oracle_vs_plain": (len(output) - 1) / oracle_decodes if oracle_decodes else 1.0,
            "auto_vs_plain": (len(output) - 1) / auto_decodes if auto_decodes else 1.0, "output": output}


def coverage(prompt: list[int], steps) -> dict[str, list[int]]:
    """For the plain steps of one run: [proposed, right] per source."""
    ngrams = NgramCacheDrafter(1, 4)
    ngrams.begin(prompt)
    suffix, latest = SuffixMatcher(prompt), LatestMatchDrafter(1, 4)
    counts = {s: [0, 0] for s in SOURCES}
    context = list(prompt)
    for n_drafted, _, _, emitted in steps:
        if n_drafted == 0 and emitted and len(context) > len(prompt):
            for source, token in first_proposals(context, ngrams, suffix, latest).items():
                if token is not None:
                    counts[source][0] += 1
                    counts[source][1] += token == emitted[0]
        context.extend(emitted)
    return counts


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", type=int, default=256, help="tokens per run")
    ap.add_argument("--runs", type=int, default=3, help="runs per prompt (the median run is reported)")
    ap.add_argument("--categories", help="comma-separated shipped categories (default: all, and the code prompt)")
    ap.add_argument("--prompts", type=int, default=1, help="prompts per category (the first N of each)")
    args = ap.parse_args()
    wanted = args.categories.split(",") if args.categories else None
    with Session(model_path(), n_ctx=4096, n_threads=THREADS) as session:
        profile.load_or_measure(session)
        curve = session.cost_curve()
        prompts = [] if wanted else [(CODE_LABEL, session.tokenize_prompt(CODE_PROMPT))]
        prompts += [
            (p.category, prompt_tokens(session, p, chat=True)) for p in shipped(wanted, per_category=args.prompts)
        ]
        print(f"{model_path().name}, {THREADS} threads, {args.n} tokens, median of {args.runs} Auto runs\n")
        chosen = []
        n_seq = RunConfig(mode="auto").n_sequences
        totals = {s: [0, 0] for s in SOURCES}
        n_plain = 0
        for name, tokens in prompts:
            runs = sorted((measure(session, curve, tokens, args.n) for _ in range(args.runs)),
                          key=lambda r: r["stats"]["tokens_per_second"])
            run = runs[len(runs) // 2]
            # the calibrated bounds of the run reported (the others' are never shown)
            output = run["output"]
            run["proposed"], run["counts"] = proposals_and_outcomes(tokens, output, n_seq)
            run["calibrated_vs_plain"] = (len(output) - 1) / calibrated_cost(
                run["proposed"], output, run["counts"], curve
            )
            chosen.append((name, run))
            n_plain += sum(1 for d, *_ in run["steps"] if d == 0)
            for source, (offered, right) in coverage(tokens, run["steps"]).items():
                totals[source][0] += offered
                totals[source][1] += right
        # one set of chances for every answer: what a planner with perfect fixed priors would hold
        pooled: dict[tuple, list[int]] = {}
        for _, run in chosen:
            for key, (accepted, offered) in run["counts"].items():
                entry = pooled.setdefault(key, [0, 0])
                entry[0] += accepted
                entry[1] += offered
        for _, run in chosen:
            run["pooled_vs_plain"] = (len(run["output"]) - 1) / calibrated_cost(
                run["proposed"], run["output"], pooled, curve
            )
        print("auto t/s: measured; priced: Auto's own steps priced like the oracle's; bound: oracle t/s ÷ priced.\n"
              "Then each decoder's gain over plain (plain's decodes ÷ its own, both priced by the profile alone):\n"
              "  auto: the run above;\n"
              "  fit/all: Auto's planner believing each bin's chance as all these answers together show it (a\n"
              "    planner whose fixed priors are exactly right for this set);\n"
              "  fit/answer: the same, fitted on each answer alone (right from the first token for the answer\n"
              "    in hand: the most a planner that trusts these signals could learn);\n"
              "  oracle: sends exactly the right run (an upper bound on any planner with these sources)")
        columns = ("auto_vs_plain", "pooled_vs_plain", "calibrated_vs_plain", "oracle_vs_plain")
        print(
            f"{'prompt':<22}{'auto t/s':>9}{'priced':>9}{'oracle t/s':>11}{'bound':>8}{'auto':>8}"
            f"{'fit/all':>9}{'fit/answer':>11}"
            f"{'oracle':>9}{'steps':>7}{'plain':>7}{'drafted':>9}{'accepted':>9}"
        )
        for name, run in chosen:
            stats, steps = run["stats"], run["steps"]
            print(
                f"{name:<22}{stats['tokens_per_second']:9.1f}{run['modelled_tps']:9.1f}{run['oracle_tps']:11.1f}"
                f"{run['oracle_tps'] / run['modelled_tps']:7.3f}x{run['auto_vs_plain']:7.3f}x"
                f"{run['pooled_vs_plain']:8.3f}x"
                f"{run['calibrated_vs_plain']:10.3f}x{run['oracle_vs_plain']:8.3f}x{len(steps):7d}"
                f"{sum(1 for d, *_ in steps if d == 0):7d}{sum(d for d, *_ in steps):9d}"
                f"{sum(a for _, a, *_ in steps):9d}"
            )
        # a category's gain is the geometric mean of its prompts'; the code prompt is not a category
        by_category: dict[str, list[dict]] = {}
        for name, run in chosen:
            if name != CODE_LABEL:
                by_category.setdefault(name, []).append(run)
        means = [geometric_mean([geometric_mean([run[c] for run in runs]) for runs in by_category.values()])
                 for c in columns]
        print(f"{'geometric mean':<22}{'':37}{means[0]:7.3f}x{means[1]:8.3f}x{means[2]:10.3f}x{means[3]:8.3f}x"
              f"   (over the {len(by_category)} categories)")
        print(f"\nAuto's {n_plain} plain steps (all prompts): how often a source proposed the target's next token")
        for source, (offered, right) in totals.items():
            share = right / offered if offered else 0.0
            print(f"  {source:<14} proposed on {offered:5d}, right on {right:4d} ({100 * share:4.1f} %)")
        print("\nbatch cost T(B)/T(1) from the profile: "
              + ", ".join(f"B={b} {curve.relative(b, b):.2f}" for b in (2, 3, 4, 6, 8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

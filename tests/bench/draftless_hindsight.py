"""What llama.cpp's draftless spec types would propose that Auto's own sources do not, in hindsight.

For each shipped category's first prompt (chat template, 128 tokens) and the code prompt (256),
plain decoding's answer is generated once; then at every position of it each source proposes up
to 64 tokens from the text before, and what the answer holds there says how many of them a
greedy verification would have accepted. Printed per category: the accepted tokens summed over
positions for Auto's draftless sources (the better of its suffix match and its n-gram cache
chain at each position), for each of ngram-simple, -map-k, -map-k4v and -mod (ours, at
llama.cpp's sizes), and how many of theirs go *beyond* Auto's at the same position. A type
that never goes beyond adds no proposal Auto misses: where it drafts, Auto's sources already
propose at least as many right tokens, and what remains is how Auto prices them.

No timing here: it only decodes plain answers, so it can run beside other work.

    .venv/bin/python tests/bench/draftless_hindsight.py
"""

from __future__ import annotations

from _common import CODE_PROMPT, THREADS, model_path

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.session import Session
from specdec_studio.engine.strategies.auto.priors import MIN_SUFFIX_MATCH, NGRAM_MAX, NGRAM_MIN
from specdec_studio.engine.strategies.lookup import NgramCacheDrafter
from specdec_studio.engine.strategies.lookup_sources import MapDrafter, ModHashDrafter, SimpleMatchDrafter
from specdec_studio.engine.strategies.suffix_automaton import SuffixMatcher
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

REACH = 64  # tokens each source may propose at a position


def accepted(proposal: list[int], truth: list[int]) -> int:
    n = 0
    for proposed, actual in zip(proposal, truth):
        if proposed != actual:
            break
        n += 1
    return n


def main() -> None:
    with Session(model_path(), n_ctx=4096, n_threads=THREADS) as session:
        cases: dict[str, tuple[list[int], int]] = {}
        for p in shipped():
            cases.setdefault(p.category, (prompt_tokens(session, p, chat=True), 128))
        cases["code"] = (session.tokenize_prompt(CODE_PROMPT), 256)
        beyond_all: dict[str, int] = {}
        for category, (prompt, n) in cases.items():
            answer: list[int] = []
            for event in session.run(RunConfig(max_tokens=n), prompt):
                if isinstance(event, RunFinished):
                    answer = list(event.token_ids)
            text = prompt + answer
            suffix = SuffixMatcher(text[:len(prompt) + 1])
            cache = NgramCacheDrafter(NGRAM_MIN, NGRAM_MAX)
            theirs = {"simple": SimpleMatchDrafter(), "map-k": MapDrafter(1), "map-k4v": MapDrafter(4),
                      "mod": ModHashDrafter()}
            cache.begin(text[:len(prompt)])
            for drafter in theirs.values():
                drafter.begin(text[:len(prompt)])
            ours_total = 0
            their_total = dict.fromkeys(theirs, 0)
            beyond = dict.fromkeys(theirs, 0)
            # a position's context ends with the token just emitted (the input token of that step)
            for i in range(len(prompt) + 1, len(text)):
                context, truth = text[:i], text[i:i + REACH]
                ours = max(accepted(suffix.continuation(REACH, MIN_SUFFIX_MATCH)[0], truth),
                           accepted(cache.propose(context, REACH).tokens, truth))
                ours_total += ours
                for name, drafter in theirs.items():
                    right = accepted(drafter.propose(context, REACH).tokens, truth)
                    drafter.settle(text[:i + right + 1])  # as verification would have left the context
                    their_total[name] += right
                    beyond[name] += max(0, right - ours)
                suffix.add(text[i])
            print(f"{category:<16} {len(answer):3d} tokens  Auto's sources {ours_total:5d}  "
                  + "  ".join(f"{name} {their_total[name]:5d} (beyond {beyond[name]})" for name in theirs), flush=True)
            for name in theirs:
                beyond_all[name] = beyond_all.get(name, 0) + beyond[name]
        print("accepted tokens beyond Auto's sources, all categories: "
              + ", ".join(f"{name} {count}" for name, count in beyond_all.items()))


if __name__ == "__main__":
    main()

"""Chat that lasts, measured: time to first token of turn 10 of a ~1,500-token conversation with
prefix reuse against a full decode of the same prompt, and what saving the conversation during a
run costs in tokens per second. Both sides run one after the other in one process, alternating.

    .venv/bin/python tests/bench/chat_reuse.py [--repeats 5]

Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

from _common import THREADS, model_path

from specdec_studio.engine.chat.turns import Chat
from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.chat.store import ConversationStore
from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning.prompts import shipped

TARGET_TOKENS = 1500


def _first_token_s(events) -> tuple[float, dict]:
    t0 = time.perf_counter()
    first = None
    stats = {}
    for event in events:
        if isinstance(event, StepDone) and first is None:
            first = time.perf_counter() - t0
        elif isinstance(event, RunFinished):
            stats = event.stats
    return first or float("nan"), stats


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    texts = [p.as_text() for p in shipped() if len(p.as_text()) > 200]
    with Session(model_path(), n_ctx=4096, n_threads=THREADS) as session:
        chat = Chat(session)
        answer = RunConfig(max_tokens=48)
        turn = 0
        while len(session.last_prompt_tokens) < TARGET_TOKENS - 200 and turn < 9:
            _first_token_s(chat.send(answer, texts[turn % len(texts)][:700] + "\n\nSummarise that in two sentences."))
            turn += 1
        config = RunConfig(max_tokens=8)
        reuse, full = [], []
        prompt_size = 0
        for _ in range(args.repeats):
            # turn 10, with reuse (Regenerate keeps everything before the answer) …
            t, stats = _first_token_s(chat.regenerate(config) if reuse else chat.send(config, "And in one word?"))
            reuse.append(t)
            prompt_size = stats["n_prompt"]
            prompt = list(session.last_prompt_tokens)
            # … and the same prompt decoded from an empty cache
            t, stats = _first_token_s(session.run(config, prompt, reuse_prefix=False))
            full.append(t)
            list(session.run(RunConfig(max_tokens=1), prompt))  # put the conversation back in the cache
        r, f = statistics.median(reuse), statistics.median(full)
        print(f"turn {turn + 1} of a {prompt_size}-token conversation, {THREADS} threads, median of {args.repeats}:")
        print(f"  time to first token with reuse     {1000 * r:8.1f} ms")
        print(f"  time to first token, full decode   {1000 * f:8.1f} ms")
        print(f"  reuse is {f / r:.1f}x faster")

        # saving during a run: the same answer with and without a store, alternating
        with tempfile.TemporaryDirectory() as tmp:
            store = ConversationStore(Path(tmp))
            long_answer = RunConfig(max_tokens=400)
            speeds = {"no store": [], "saving every 2 s": []}
            save_ms = []
            for _ in range(args.repeats):
                for label, st in (("no store", None), ("saving every 2 s", store)):
                    chat.store = st
                    _, stats = _first_token_s(chat.regenerate(long_answer))
                    speeds[label].append(stats["tokens_per_second"])
                t0 = time.perf_counter()
                store.save(chat.conversation)
                save_ms.append(1000 * (time.perf_counter() - t0))
            chat.store = None
            a, b = (statistics.median(v) for v in speeds.values())
            print(f"a 400-token answer: {a:.1f} tok/s without saving, {b:.1f} tok/s saving every 2 s "
                  f"({b / a:.3f}x); one save of this conversation takes {statistics.median(save_ms):.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())

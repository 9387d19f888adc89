"""``specdec replay``: a recorded trace played back in the terminal, no model needed."""

from __future__ import annotations

import argparse
import json
import sys
import time

from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.cli.common import print_stats, write_tokens


def cmd_replay(args: argparse.Namespace) -> int:
    """Play a recorded trace back in the terminal at ``--speed`` times its recorded pace."""
    from specdec_studio.engine.records import trace
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.events import RunFinished, StepDone

    recorded = trace.load(args.trace)
    if args.speed <= 0:
        raise SpecDecError("--speed must be above 0 (1 = as recorded, 4 = four times faster)")
    replay = trace.Replay(recorded, args.speed)
    config = RunConfig.from_dict(recorded.config)
    if not args.json:
        print(f"replaying {recorded.title} recorded {recorded.header.get('created', '?')} "
              f"({recorded.duration_s:.2f} s at {args.speed:g}x)", file=sys.stderr)
    last = time.perf_counter()
    final = None
    while not replay.done:
        time.sleep(0.01)
        now = time.perf_counter()
        for event in replay.advance(now - last):
            if isinstance(event, StepDone) and not args.json:
                write_tokens(event, args.color)
            elif isinstance(event, RunFinished):
                final = event
        last = now
    if final is None:
        print("\nspecdec: the recorded run failed", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"text": final.text, "token_ids": list(final.token_ids), "finish_reason": final.finish_reason,
                          "config": recorded.config, "model": recorded.header.get("model", {}),
                          "stats": final.stats}, indent=2))
    else:
        print_stats(config, final.stats, final.finish_reason)
    return 0


def add_parser(sub) -> None:
    """``replay``: the trace and its pace."""
    rp = sub.add_parser("replay", help="play a recorded trace (specdec run --trace) back without the model")
    rp.add_argument("trace", help="a .jsonl trace file")
    rp.add_argument("--speed", type=float, default=1.0, help="times the recorded pace (0.25 to 4)")
    rp.add_argument("--color", action="store_true", help="colour the tokens by source")
    rp.add_argument("--json", action="store_true")
    rp.set_defaults(handler=cmd_replay)

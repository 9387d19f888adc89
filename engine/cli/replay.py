"""``specdec replay``: a recorded trace played back in the terminal, no model needed."""

from __future__ import annotations

import argparse
import json
import math
import sys
import time

from specdec_studio.engine.cli.common import flush_tokens, print_stats, write_tokens


def cmd_replay(args: argparse.Namespace) -> int:
    """Play a recorded trace back in the terminal at ``--speed`` times its recorded pace."""
    from specdec_studio.engine.records import trace
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.events import RunFinished, StepDone

    if args.export:
        # The frames are the window's own pictures, which only Qt draws: the app's exporter makes
        # them (imported here only, so the engine itself still never imports Qt).
        from specdec_studio.app.video_cli import export_from_command_line

        return export_from_command_line(args.trace, args.export, args.size, args.speed, args.fps)
    recorded = trace.load(args.trace)
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
        flush_tokens()  # what this tick delivered shows now, however long the next gap
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


def positive_speed(text: str) -> float:
    """``--speed``: a finite number above 0 (a NaN or infinite pace would never end the replay)."""
    try:
        speed = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not (math.isfinite(speed) and speed > 0):
        raise argparse.ArgumentTypeError(f"{text} is not a finite number above 0 (1 = as recorded)")
    return speed


def add_parser(sub) -> None:
    """``replay``: the trace and its pace."""
    rp = sub.add_parser("replay", help="play a recorded trace (specdec run --trace) back without the model")
    rp.add_argument("trace", help="a .jsonl trace file")
    rp.add_argument("--speed", type=positive_speed, default=1.0,
                    help="times the recorded pace, a finite number above 0 (1 = as recorded, 4 = four times faster)")
    rp.add_argument("--color", action="store_true", help="colour the tokens by source")
    rp.add_argument("--json", action="store_true")
    rp.add_argument("--export", metavar="VIDEO", default=None,
                    help="write the replay as a video instead (.mp4: H.264, .gif), headless: a title card, "
                         "then the window as it draws the replay at --speed, then its end held for 2 s")
    rp.add_argument("--size", choices=("1280x720", "1920x1080"), default="1280x720", help="the video's size")
    rp.add_argument("--fps", type=int, default=0, help="frames a second (default 30 for MP4, 10 for GIF)")
    rp.set_defaults(handler=cmd_replay)

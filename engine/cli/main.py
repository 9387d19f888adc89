"""``specdec``'s parser and dispatch: each subcommand's module adds its flags and names its handler."""

from __future__ import annotations

import argparse
import sys

from specdec_studio.engine.cli import batch, chat, distill, models, replay, run, tuning
from specdec_studio.engine.errors import SpecDecError

SUBCOMMANDS = (run, models, tuning, batch, distill, replay, chat)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="llama.cpp plain, lookahead and speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input is one sentence on standard error and status 2."""
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except SpecDecError as exc:
        print(f"specdec: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"specdec: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2

"""``specdec``'s parser and dispatch: each subcommand's module adds its flags and names its handler."""

from __future__ import annotations

import argparse
import io
import os
import signal
import sys

from specdec_studio.engine.cli import batch, chat, distill, models, replay, rpc_server, run, serve, tuning
from specdec_studio.engine.errors import SpecDecError, not_utf8

SUBCOMMANDS = (run, models, tuning, batch, distill, replay, chat, rpc_server, serve)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="llama.cpp plain, lookahead and speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMANDS:
        module.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; bad input is one sentence on standard error and status 2, Ctrl+C one
    line and status 130, a reader that closed the pipe (``| head``) a quiet SIGPIPE exit."""
    # Piped text that is not UTF-8 is read with replacement characters, never a traceback mid-chat.
    if isinstance(sys.stdin, io.TextIOWrapper):
        sys.stdin.reconfigure(errors="replace")
    raw = sys.argv[1:] if argv is None else list(argv)
    refused = _argument_not_utf8(raw)
    if refused:
        print(f"specdec: {refused}", file=sys.stderr)
        return 2
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except SpecDecError as exc:
        print(f"specdec: {exc}", file=sys.stderr)
        return 2
    except UnicodeDecodeError as exc:  # a prompt or batch file that is not text
        print(f"specdec: {not_utf8('a file given', exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        _exit_on_closed_pipe()
    except OSError as exc:
        print(f"specdec: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("specdec: interrupted", file=sys.stderr)
        return 130


def _argument_not_utf8(argv: list[str]) -> str | None:
    """The sentence for a command-line argument that is not UTF-8 text (Python keeps its bytes as
    lone surrogates, which llama.cpp's tokenizer cannot take); None if every one is text."""
    for i, value in enumerate(argv):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            offset = len(value[:exc.start].encode("utf-8", "surrogateescape"))
            byte = value.encode("utf-8", "surrogateescape")[offset]
            flag = argv[i - 1] if i and argv[i - 1].startswith("-") else f"argument {i + 1}"
            return (f"{flag} is not UTF-8 text (byte 0x{byte:02x} at offset {offset}); "
                    "give the text in UTF-8, or in a file with -f")
    return None


def _exit_on_closed_pipe() -> None:
    """End as a shell tool does when its reader goes away: by SIGPIPE, with nothing printed.

    The run's generators and the session were closed as the error unwound (``with`` blocks and
    ``finally``), so nothing native is left to tidy. Python's own flush of the dead stdout at exit
    is pointed at /dev/null first, so it cannot print a second error."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    if hasattr(signal, "SIGPIPE"):
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGPIPE)
    sys.exit(1)

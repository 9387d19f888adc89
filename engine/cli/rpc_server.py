"""``specdec rpc-server``: serve this machine's CPU to a model on another machine, with llama.cpp's
own RPC server (the loop ``rpc-server`` runs), from the llama.cpp this install already has."""

from __future__ import annotations

import argparse
import sys


def cmd_rpc_server(args: argparse.Namespace) -> int:
    from specdec_studio.engine.config import default_threads
    from specdec_studio.engine.models import rpc

    if args.host not in ("127.0.0.1", "localhost", "::1"):
        # rpc-server's own warning: the protocol has no authentication
        print("specdec: warning: an RPC server has no authentication; expose it on trusted networks only",
              file=sys.stderr)
    print(f"serving llama.cpp RPC on {args.host}:{args.port} with {args.threads or default_threads()} threads "
          f"(Ctrl+C stops)", file=sys.stderr, flush=True)
    rpc.serve(args.host, args.port, args.threads or default_threads(), args.cache)
    return 1  # serve() returns only by raising


def add_parser(sub: argparse._SubParsersAction) -> None:
    from specdec_studio.engine.models.rpc import DEFAULT_PORT

    p = sub.add_parser("rpc-server", help="serve this machine's CPU to a model over llama.cpp's RPC backend")
    p.add_argument("-H", "--host", default="127.0.0.1", help="address to listen on (default: this machine only)")
    p.add_argument("-p", "--port", type=int, default=DEFAULT_PORT)
    p.add_argument("-t", "--threads", type=int, default=None, help="CPU threads for the layers served here")
    p.add_argument("--cache", metavar="DIR", default=None,
                   help="keep received tensors in DIR so that a model loads faster the next time")
    p.set_defaults(handler=cmd_rpc_server)

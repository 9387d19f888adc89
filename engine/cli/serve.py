"""``specdec serve``: the model behind an OpenAI-compatible HTTP API (engine.server), on 127.0.0.1 by
default; ``--parallel`` requests decode together, each with its own drafting (Auto unless a
request or ``--mode`` says otherwise)."""

from __future__ import annotations

import argparse
import ipaddress
import sys
import threading
from pathlib import Path

from specdec_studio.engine.cli.common import add_run_args, run_setup, session_from_args
from specdec_studio.engine.errors import SpecDecError

LOOPBACK = ("127.0.0.1", "::1", "localhost")


def cmd_serve(args: argparse.Namespace) -> int:
    import uvicorn  # the server stack: only this command needs it

    from specdec_studio.engine.server.app import make_app
    from specdec_studio.engine.server.decoder import Decoder

    if args.prompt is not None or args.file is not None:
        raise SpecDecError("serve answers requests; -p and -f are for `specdec run`")
    if args.parallel < 1 or args.queue < args.parallel:
        raise SpecDecError(f"--queue ({args.queue}) must be at least --parallel ({args.parallel}), and that at least 1")
    if args.cache_ram < 0:
        raise SpecDecError(f"--cache-ram is MiB of RAM for prompts (0: none), got {args.cache_ram}")
    if not _is_loopback(args.host):
        if not args.api_key:
            raise SpecDecError(f"serving on {args.host} opens the model to other machines: pass --api-key KEY "
                               "(clients send it as Authorization: Bearer KEY), or serve on 127.0.0.1")
        print(f"specdec: serving on {args.host}: any machine that reaches it and knows the key can use the model",
              file=sys.stderr)
    config, model_path, draft_path = run_setup(args)
    stop = threading.Event()
    decoder = Decoder(lambda: session_from_args(args, model_path, draft_path, stop, observe=False,
                                                prompt_cache_mib=args.cache_ram), config,
                      args.parallel, args.queue)
    router = decoder.start()
    name = args.served_name or Path(model_path).stem
    app = make_app(router, model_name=name, base=config, api_key=args.api_key,
                   max_tokens_cap=args.max_tokens_cap)
    print(f"specdec: serving {name} at http://{args.host}:{args.port}/v1 ({config.mode}, {args.parallel} at a "
          f"time, {router.slot_cells} cells each)", file=sys.stderr)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    finally:
        decoder.close()
    return 0


def _is_loopback(host: str) -> bool:
    if host in LOOPBACK:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def add_parser(sub) -> None:
    p = sub.add_parser("serve", help="serve the model over an OpenAI-compatible HTTP API (Auto by default)")
    add_run_args(p)
    p.set_defaults(n_predict=256)  # a request's max_tokens when it names none
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=int, default=8080)
    p.add_argument("--parallel", "-np", type=int, default=4, help="requests decoded at once (slots)")
    p.add_argument("--queue", type=int, default=16,
                   help="requests waiting or decoding at most; one more is refused with 429 at once")
    p.add_argument("--api-key", default=None, help="require Authorization: Bearer KEY (needed off 127.0.0.1)")
    p.add_argument("--max-tokens-cap", type=int, default=4096, help="the largest max_tokens a request may ask")
    p.add_argument("--cache-ram", type=int, default=2048, metavar="MIB",
                   help="keep the prompts that slots give up in this much RAM, for the clients that come back to "
                        "them (as llama-server's; default 2048, 0: off)")
    p.add_argument("--served-name", default=None, help="the model's name in the API (default: the file's)")
    p.set_defaults(handler=cmd_serve)

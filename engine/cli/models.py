"""``specdec models``: fetch the known models, list the cache, requantise a model."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_studio.engine.errors import SpecDecError


def cmd_models(args: argparse.Namespace) -> int:
    from specdec_studio.engine.models import catalog

    if args.action == "fetch":
        known = [*catalog.KNOWN_MODELS, *catalog.DERIVED_DRAFTS]
        # "all" is what the tests use; the large pair is fetched only when named
        keys = [k for k in known if not getattr(catalog.KNOWN_MODELS.get(k), "on_request", False)] \
            if args.names == ["all"] else args.names
        log = lambda msg: print(msg, file=sys.stderr)  # noqa: E731
        for key in keys:
            key = catalog.ALIASES.get(key, key)
            if key in catalog.DERIVED_DRAFTS:
                catalog.make_derived(key, log=log)
            elif key in catalog.KNOWN_MODELS:
                catalog.fetch(key, log=log)
            else:
                raise SpecDecError(f"unknown model {key!r}; known: {', '.join(known)}, all")
        return 0
    if args.action == "list":
        return _list_models(args.json)
    if args.action == "requantize":
        from specdec_studio.engine.models.quantize import requantize

        requantize(Path(args.src), Path(args.dst), args.type)
        print(f"wrote {args.dst}", file=sys.stderr)
        return 0
    raise SpecDecError(f"unknown models action {args.action!r}")


def _list_models(as_json: bool) -> int:
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.models.loading import LoadedModel

    rows = []
    for path in catalog.cached_models():
        try:
            with LoadedModel(path) as model:
                rows.append(model.info.summary())
        except SpecDecError as exc:
            rows.append({"path": str(path), "error": str(exc)})
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    if not rows:
        print(f"no models in {catalog.cache_dir()}; run `specdec models fetch default`")
        return 0
    width = max(38, *(len(Path(r["path"]).name) for r in rows))  # the longest file name sets the column
    print(f"{'file':{width}} {'size':>8} {'arch':10} {'params':>8} {'quant':16} {'vocab':>7} {'n_ctx':>7} chat")
    for r in rows:
        if "error" in r:
            print(f"{Path(r['path']).name:{width}} {r['error']}")
            continue
        print(f"{Path(r['path']).name:{width}} {r['size_bytes'] / 2**20:6.0f}MB {r['arch']:10} "
              f"{r['n_params'] / 1e6:7.0f}M {r['quant']:16} {r['n_vocab']:7d} {r['n_ctx_train']:7d} "
              f"{'yes' if r['chat_template'] else 'no'}")
    return 0


def add_parser(sub) -> None:
    """``models fetch | list | requantize``."""
    models = sub.add_parser("models", help="fetch, list or requantize models")
    msub = models.add_subparsers(dest="action", required=True)
    fetch = msub.add_parser("fetch", help="download a known model into the cache")
    fetch.add_argument("names", nargs="*", default=["default"], metavar="NAME",
                       help="default, gemma, coder and coder-draft (Qwen2.5-Coder 1.5B and its 0.5B draft, "
                            "1.6 GB together, fetched only when named), a requantised draft or copy "
                            "(default-q8_0, default-q4_0, default-iq4_nl_pure, …) or all (everything but the "
                            "coder pair)")
    lst = msub.add_parser("list", help="models in the cache")
    lst.add_argument("--json", action="store_true")
    from specdec_studio.engine.models.quantize import QUANT_TYPES

    rq = msub.add_parser("requantize", help="make a draft or a copy in another weight format by requantising a model")
    rq.add_argument("src")
    rq.add_argument("dst")
    rq.add_argument("--type", required=True, choices=tuple(QUANT_TYPES),
                    help="_PURE: the token embedding (a tied output head too) in the same format as the rest")
    models.set_defaults(handler=cmd_models)

"""``specdec profile``, ``sweep`` and ``probe-exactness``: what this machine's llama.cpp costs and does."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_studio.engine.config import DEFAULT_N_BATCH
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.cli.common import add_context_args, ctrl_c_stops, session_from_args


def cmd_probe(args: argparse.Namespace) -> int:
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.tuning.probe import exactness_note, probe_exactness

    result = probe_exactness(catalog.resolve(args.model), n_threads=args.threads)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for size, dev in result["max_abs_diff_by_batch"].items():
            print(f"batch {size:>3}: max |logit difference| = {dev:.6f}")
        long = result["long_context"]
        for size, dev in long["max_abs_diff_by_batch"].items():
            print(f"batch {size:>3} after {long['n_cells']} cells: max |logit difference| = {dev:.6f}")
        if long.get("deviation_from_cells"):
            print(f"batched logits start to differ from single-token ones at {long['deviation_from_cells']} cells")
        verdict = "batch-invariant" if result["batch_invariant"] else "NOT batch-invariant"
        print(f"{Path(result['model']).name}: {verdict} with {result['n_threads']} threads "
              f"(max deviation {result['max_abs_diff']:.6f}, past {long['n_cells']} cells {long['max_abs_diff']:.6f})")
        print(exactness_note(result))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.tuning import profile

    if args.formats is not None:
        return _compare_formats(args)
    draft_path = catalog.resolve(args.model_draft) if args.model_draft else None
    with (
        ctrl_c_stops() as stop,
        session_from_args(args, catalog.resolve(args.model), draft_path, stop) as session,
    ):
        found = [("target", profile.load_or_measure(session, remeasure=args.remeasure))]
        if draft_path is not None:
            found.append(("draft", profile.load_or_measure(session, draft=True, remeasure=args.remeasure)))
    if args.json:
        print(json.dumps({role: p.to_dict() for role, p in found}, indent=2))
        return 0
    for role, p in found:
        c = p.curve
        k = p.key
        print(f"{role}: {p.model_name} · n_ctx {k.n_ctx} · {k.n_threads} threads · KV filled to {k.kv_fill} cells "
              f"· measured in {p.t_measure_s:.1f} s · build {k.build}")
        print(f"{'B':>5} {'T(B) ms':>9} {'T(B)/T(1)':>10} {'last-row ms':>12} {'per token':>10}")
        for b, t_all, t_last in zip(c.sizes, c.t_all_logits, c.t_last_logit):
            print(f"{b:5d} {1e3 * t_all:9.2f} {c.relative(b):10.2f} {1e3 * t_last:12.2f} {c.relative(b) / b:10.3f}")
    return 0


def _compare_formats(args: argparse.Namespace) -> int:
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.config import default_threads
    from specdec_studio.engine.session import Session
    from specdec_studio.engine.tuning import formats
    from specdec_studio.engine.tuning.prompts import shipped
    from specdec_studio.engine.tuning.sweep import prompt_tokens

    if args.threads_batch is not None:
        raise SpecDecError("a format comparison times the thread pairs itself: leave out -tb")
    if args.gpu_layers:
        raise SpecDecError("a format comparison measures the CPU's kernels for each format: leave out -ngl")
    if args.batch_size != DEFAULT_N_BATCH:
        raise SpecDecError("a format comparison decodes at most 16 tokens a batch: leave out -b")
    # --remeasure is what a comparison always does: every file is measured afresh, side by side
    wanted = _format_list(args.formats, formats.FORMATS, formats.FORMATS)
    path = catalog.resolve(args.model)
    n_threads = args.threads or default_threads()
    log = (lambda _m: None) if args.json else (lambda m: print(m, file=sys.stderr))
    with ctrl_c_stops() as stop:
        with Session(path, n_ctx=args.ctx_size, n_threads=n_threads) as session:
            prompts = [prompt_tokens(session, p, chat=True) for p in shipped(per_category=1)]
            pairs = [(t, tb) for t in sorted({1, n_threads}) for tb in sorted({1, n_threads})]
            times = formats.thread_pairs(session, pairs, cancel=stop)
        figures = formats.compare(path, wanted, n_threads=n_threads, n_ctx=args.ctx_size, prompts=prompts,
                                  cancel=stop, log=log)
    best = formats.best_pair(times)
    pick = formats.recommendation(figures)
    if args.json:
        print(json.dumps({"formats": [f.to_dict() for f in figures],
                          "thread_pairs": [{"n_threads": t, "n_threads_batch": tb, "t_all_logits": list(v)}
                                           for (t, tb), v in times.items()],
                          "best_thread_pair": list(best),
                          "recommended": pick.format if pick else None}, indent=2))
        return 0
    original = figures[0]
    print(f"{path.name}, {n_threads} threads, n_ctx {args.ctx_size}; agreement: the original's greedy tokens the "
          f"copy's argmax predicts ({figures[-1].n_agreement_tokens if len(figures) > 1 else 0} tokens, "
          "one prompt per shipped category)")
    width = max(8, *(len(f.format) for f in figures))  # the longest format name sets the first column
    print(f"{'format':<{width}} {'size MB':>8} {'T(1) ms':>8} {'speed':>6} {'verify 4':>9} {'deviation':>10} "
          f"{'past 512':>9} {'agreement':>10}")
    for f in figures:
        agree = "original" if f.agreement is None else f"{100 * f.agreement:.1f} %"
        print(f"{f.format:<{width}} {f.size_bytes / 1e6:8.1f} {1e3 * f.t1_s:8.2f} {original.t1_s / f.t1_s:5.2f}x "
              f"{1e3 * f.t1_s * f.relative_all[3]:7.2f}ms {f.deviation:10.4f} {f.deviation_long:9.4f} {agree:>10}")
    for label, attr in (("every row's logits", "relative_all"), ("last row's logits", "relative_last")):
        print(f"\nT(B)/T(1), {label}, B = 1..16:")
        print(f"{'format':<{width}}" + "".join(f"{b:>6}" for b in formats.EVERY_B))
        for f in figures:
            print(f"{f.format:<{width}}" + "".join(f"{r:6.2f}" for r in getattr(f, attr)))
    print("\nthreads (one-token decodes use n_threads, larger batches n_threads_batch), T(B) in ms:")
    for (t, tb), v in times.items():
        print(
            f"  n_threads {t}, n_threads_batch {tb}: " + ", ".join(f"B={b} {1e3 * x:.2f}" for b, x in zip((1, 4, 8), v))
        )
    print(f"  best pair: n_threads {best[0]}, n_threads_batch {best[1]}"
          + (f" (run with -t {best[0]} -tb {best[1]})" if best != (n_threads, n_threads) else " (the default)"))
    print()
    print(formats.verdict(figures))
    return 0


def cmd_sweep(args: argparse.Namespace) -> int:
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.tuning import profile, prompts, sweep

    if args.file:
        prompt_set = prompts.load_file(args.file)
    else:
        categories = (None if args.categories == "all" else args.categories.split(",") if args.categories
                      else list(sweep.DEFAULT_CATEGORIES))
        prompt_set = prompts.shipped(categories, args.per_category)
    if args.formats is not None:
        return _sweep_formats(args, prompt_set)
    axes = _sweep_axes(args)
    spec = sweep.SweepSpec(args.mode, axes, tuple(prompt_set), args.n_predict, args.plain_every, not args.raw)
    spec.validate()
    draft_path = catalog.resolve(args.model_draft) if args.model_draft else None
    if args.mode == "speculative" and draft_path is None:
        raise SpecDecError("a speculative sweep needs a draft model: pass -md PATH (or -md default)")
    out_dir = Path(args.output)
    with (
        ctrl_c_stops() as stop,
        session_from_args(args, catalog.resolve(args.model), draft_path, stop) as session,
    ):
        curve = profile.load_or_measure(session).curve
        draft_curve = profile.load_or_measure(session, draft=True).curve if draft_path else None
        finished = None
        for event in sweep.run_sweep(session, spec, curve=curve, draft_curve=draft_curve):
            if isinstance(event, sweep.SweepStarted):
                print(f"{len(event.settings)} settings × {len(spec.prompts)} prompts, "
                      f"{event.n_runs} runs with the plain ones", file=sys.stderr)
            elif isinstance(event, sweep.SweepProgress) and not args.json:
                print(f"\r[{event.done}/{event.total}] {event.label[:50]:50} ETA {event.eta_s:5.0f} s",
                      end="", file=sys.stderr, flush=True)
            elif isinstance(event, sweep.SweepCell) and not args.json:
                print(f"\r{sweep.setting_label(event.setting):32} measured {event.measured:5.2f}x  "
                      f"predicted {event.predicted:5.2f}x  tokens/step {event.tokens_per_step:4.2f}"
                      f"{'' if event.lossless else '  DIVERGED ' + str(event.divergences)}" + " " * 20,
                      file=sys.stderr)
            elif isinstance(event, sweep.SweepFinished):
                finished = event
    result = finished.result
    json_path, csv_path = sweep.write_results(result, out_dir)
    pngs = _plot_sweep(json_path, out_dir)
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        best = sweep.best_cell(result["cells"])
        state = "stopped early" if finished.cancelled else "done"
        print(f"\n{state} in {result['t_sweep_s']:.0f} s; wrote {json_path}, {csv_path}"
              + "".join(f", {p}" for p in pngs), file=sys.stderr)
        if best is not None:
            predicted = f" (predicted {best['predicted']:.2f}x)" if best["predicted"] is not None else ""
            print(f"best: {sweep.setting_label(best['setting'])} measured {best['measured']:.2f}x{predicted}")
    return 0


def _sweep_formats(args: argparse.Namespace, prompt_set) -> int:
    """``sweep --formats``: plain, Auto and prompt lookup on the model and on copies of it in other
    weight formats, each against plain on the same file and on the original."""
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.config import default_threads
    from specdec_studio.engine.jsonfile import write_json
    from specdec_studio.engine.tuning import format_speed, formats

    if args.threads_batch is not None:
        raise SpecDecError("sweep --formats runs every file with one thread count (-t): leave out -tb")
    wanted = _format_list(args.formats, formats.SPEED_FORMATS, formats.FORMATS)
    path = catalog.resolve(args.model)
    n_threads = args.threads or default_threads()
    log = (lambda _m: None) if args.json else (lambda m: print(m, file=sys.stderr))
    with ctrl_c_stops() as stop:
        copies = [(fmt, formats.make_copy(path, fmt, n_threads=n_threads, log=log)) for fmt in wanted]

        def progress(done: int, total: int, label: str) -> None:
            if not args.json:
                print(f"\r[{done}/{total}] {label[:50]:50}", end="", file=sys.stderr, flush=True)

        files = format_speed.measure(path, copies, prompt_set, max_tokens=args.n_predict, n_threads=n_threads,
                                     n_ctx=args.ctx_size, rounds=args.rounds, cancel=stop, progress=progress)
    result = {"model": str(path), "n_threads": n_threads, "max_tokens": args.n_predict, "rounds": args.rounds,
              "prompts": [p.id for p in prompt_set], "files": [f.to_dict() for f in files],
              "sentence": format_speed.sentence(files)}
    out = Path(args.output) / "formats.json"
    write_json(out, result)
    if args.json:
        print(json.dumps(result, indent=1))
        return 0
    original = files[0]
    print(f"\r{path.name} and its copies, {n_threads} threads, {args.n_predict} tokens, {len(prompt_set)} prompts, "
          f"{args.rounds} round(s); speed-ups are geometric means over the prompts" + " " * 20)
    width = max(8, *(len(f.format) for f in files))
    print(f"{'file':<{width}} {'mode':<12} {'tokens/s':>9} {'x plain':>8} {'x ' + original.format + ' plain':>13} "
          f"{'predicted':>10}  lossless")
    for f in files:
        print(
            f"{f.format:<{width}} {'plain':<12} {f.plain_tokens_per_second:9.1f} {1.0:8.2f} {f.plain_vs_original:13.2f}"
        )
        best = f.best()
        for m in f.modes:
            predicted = f"{m.predicted:10.2f}" if m.predicted is not None else f"{'-':>10}"
            if not m.divergences:
                exact = "yes"
            else:  # a divergence always has the file's deviation measured next to it
                exact = (f"{len(m.divergences)} flip(s), margin <= {max(d['margin'] for d in m.divergences):.3f}"
                         f" vs deviation {f.deviation:.3f}")
            mark = " *" if m is best else ""
            print(
                f"{'':<{width}} {m.mode + mark:<12} {m.tokens_per_second:9.1f} {m.vs_plain:8.2f} {m.vs_original:13.2f} "
                f"{predicted}  {exact}"
            )
    print(f"(* the file's best lossless mode; wrote {out})")
    print(format_speed.sentence(files))
    return 0


def _format_list(text: str, default: tuple[str, ...], every: tuple[str, ...]) -> tuple[str, ...]:
    """A ``--formats`` value: ``default`` for the bare flag, ``every`` format for "all", else a
    comma-separated list of formats the comparison knows."""
    if text == "":
        return default
    if text.strip().lower() == "all":
        return every
    wanted = tuple(f.strip().upper() for f in text.split(",") if f.strip())
    unknown = [f for f in wanted if f not in every]
    if unknown or not wanted:
        raise SpecDecError(f"unknown format {', '.join(unknown) or repr(text)}; choose from {', '.join(every)} or all")
    return wanted


def _sweep_axes(args: argparse.Namespace) -> dict[str, tuple]:
    from specdec_studio.engine.tuning import sweep

    axes = dict(sweep.DEFAULT_AXES[args.mode])
    given = {"W": args.W, "N": args.N, "G": args.G, "k": args.draft}
    for name, text in given.items():
        if text is not None:
            if name not in sweep.AXES[args.mode]:
                raise SpecDecError(f"-{name} is not an axis of a {args.mode} sweep")
            axes[name] = sweep.parse_values(text)
    for name, text in (("lookup", args.lookup), ("adaptive", args.adaptive)):
        if text is not None:
            if name not in sweep.AXES[args.mode]:
                raise SpecDecError(f"--{name} is not an axis of a {args.mode} sweep")
            axes[name] = sweep.parse_values(text, str)
    return axes


def _plot_sweep(json_path: Path, out_dir: Path) -> list[Path]:
    """The heatmaps and k curves, drawn offscreen by the app's plotting module in a child process
    (the engine never imports Qt); an install without the GUI gets JSON and CSV only."""
    import os
    import subprocess

    from specdec_studio.engine.models import frozen

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    # a frozen app has no `python -m`: its GUI executable draws the plots instead
    plotter = ([str(frozen.sibling_executable("specdec-studio")), "--sweep-plots"] if frozen.is_frozen()
               else [sys.executable, "-m", "specdec_studio.app.sweep_plots"])
    done = subprocess.run([*plotter, str(json_path), str(out_dir)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"specdec: no PNG plots ({(done.stderr.strip().splitlines() or ['the GUI is not installed'])[-1]})",
              file=sys.stderr)
        return []
    return [Path(line) for line in done.stdout.split()]


def add_parser(sub) -> None:
    """``profile``, ``sweep`` and ``probe-exactness``."""
    from specdec_studio.engine.tuning.formats import FORMATS, SPEED_FORMATS

    prof = sub.add_parser("profile", help="measure (or show the cached) time of one decode of B tokens")
    prof.add_argument("-m", "--model", default="default")
    prof.add_argument("-md", "--model-draft", default=None, help="profile this draft model too")
    add_context_args(prof)
    prof.add_argument("--remeasure", action="store_true", help="measure again even if a profile is cached")
    prof.add_argument("-ngl", "--gpu-layers", type=int, default=0, help="layers offloaded to a GPU (a GPU build)")
    prof.add_argument("-ngld", "--draft-gpu-layers", type=int, default=0,
                      help="draft model layers offloaded to a GPU (its own setting, as llama.cpp's -ngld)")
    prof.add_argument("--formats", nargs="?", const="", default=None,
                      help="compare the model with copies requantised to these formats (comma-separated, or all; "
                           f"the bare flag: {','.join(FORMATS)}): size, T(1), T(B) for every B to 16, exactness, "
                           "agreement with the original; and the thread pairs (on the CPU: not with -ngl, -b, -tb)")
    prof.add_argument("--json", action="store_true")
    prof.set_defaults(handler=cmd_profile)
    sw = sub.add_parser("sweep", help="measure a grid of settings against plain decoding")
    sw.add_argument("-m", "--model", default="default")
    sw.add_argument("--mode", choices=("lookahead", "lookup", "speculative"), default="lookahead")
    sw.add_argument("-W", default=None, help="lookahead windows: list or range, e.g. 1,2,4 or 1..4")
    sw.add_argument("-N", default=None, help="lookahead n-gram sizes")
    sw.add_argument("-G", default=None, help="lookahead verification n-grams")
    sw.add_argument("-k", "--draft", default=None, help="draft lengths, e.g. 0..10 (0 = plain)")
    sw.add_argument("--lookup", default=None, help="prompt lookup policies: cache,latest")
    sw.add_argument("--adaptive", default=None, help="adaptive k rules: off,tutorial,heuristic")
    sw.add_argument("-md", "--model-draft", default=None, help="draft model for a speculative sweep")
    sw.add_argument("-f", "--file", default=None, help="prompt set: a .jsonl file, or a text file with one prompt")
    sw.add_argument("--categories", default=None,
                    help="shipped prompt categories, comma-separated, or all (default: code_editing,chat)")
    sw.add_argument("--per-category", type=int, default=1, help="prompts taken from each shipped category")
    sw.add_argument("--raw", action="store_true", help="do not wrap prompts in the model's chat template")
    sw.add_argument("-n", "--n-predict", type=int, default=48, help="tokens generated per run")
    sw.add_argument("-ngl", "--gpu-layers", type=int, default=0, help="layers offloaded to a GPU (a GPU build)")
    sw.add_argument("-ngld", "--draft-gpu-layers", type=int, default=0,
                    help="draft model layers offloaded to a GPU (its own setting, as llama.cpp's -ngld)")
    sw.add_argument("--plain-every", type=int, default=3, help="settings between two plain runs")
    add_context_args(sw)
    sw.add_argument("-o", "--output", default="sweep-results", help="folder for results.json/.csv and the PNGs")
    sw.add_argument("--json", action="store_true", help="print the results as JSON")
    sw.add_argument("--formats", nargs="?", const="", default=None,
                    help="instead of a grid: plain, Auto and prompt lookup on the model and on copies in these "
                         f"weight formats (the bare flag: {','.join(SPEED_FORMATS)}; all: {','.join(FORMATS)}), "
                         "against plain on the same file and on the original")
    sw.add_argument("--rounds", type=int, default=1, help="rounds of a --formats comparison")
    sw.set_defaults(handler=cmd_sweep)
    probe = sub.add_parser("probe-exactness", help="measure whether batched decoding changes logits")
    probe.add_argument("-m", "--model", default="default")
    probe.add_argument("-t", "--threads", type=int, default=None,
                       help="threads for every decode (the probe compares one-token and batched decodes on the "
                            "same threads, so it takes no -tb)")
    probe.add_argument("--json", action="store_true")
    probe.set_defaults(handler=cmd_probe)

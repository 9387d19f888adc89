"""``specdec``: the headless command line. Every figure is also available as JSON."""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import threading
import time
from pathlib import Path

from engine.errors import SpecDecError

CYAN, GREEN, RESET = "\033[0;96m", "\033[0;92m", "\033[0m"


@contextlib.contextmanager
def _ctrl_c_stops():
    """A Stop flag that Ctrl+C sets from the moment the command starts, model loading included:
    a run, profile or sweep then ends cleanly at its next check instead of with a traceback."""
    stop = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


def write_tokens(event, color: bool) -> None:
    """A step's tokens to standard output, accepted ones coloured (cyan: n-gram, green: draft)."""
    for tok in event.tokens:
        colour = {"accepted_ngram": CYAN, "accepted_draft": GREEN}.get(tok.source) if color else None
        sys.stdout.write(f"{colour}{tok.text}{RESET}" if colour else tok.text)
    sys.stdout.flush()


def _add_context_args(p: argparse.ArgumentParser) -> None:
    from engine.config import DEFAULT_N_BATCH, DEFAULT_N_CTX

    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("-c", "--ctx-size", type=int, default=DEFAULT_N_CTX)
    p.add_argument("-b", "--batch-size", type=int, default=DEFAULT_N_BATCH)


def _add_run_args(p: argparse.ArgumentParser) -> None:
    from engine.config import DEFAULT_K, DEFAULT_MAX_TOKENS_CLI, LOOKAHEAD_CLI_DEFAULTS, MODES

    p.add_argument("-m", "--model", default="default", help="default, gemma, or a path to a .gguf file")
    p.add_argument("--mode", choices=MODES, default="plain")
    p.add_argument("-p", "--prompt", help="prompt text (or use -f)")
    p.add_argument("-f", "--file", help="read the prompt from this file")
    p.add_argument("-n", "--n-predict", type=int, default=DEFAULT_MAX_TOKENS_CLI, help="maximum tokens to generate")
    _add_context_args(p)
    p.add_argument("-ngl", "--gpu-layers", type=int, default=0)
    p.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy")
    p.add_argument("--top-k", type=int, default=0)
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--min-p", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.add_argument("--color", action="store_true", help="colour accepted tokens (cyan: n-gram, green: draft)")
    p.add_argument("--kv-dump", action="store_true", help="print the KV cache cells after each step")
    p.add_argument("--trace", metavar="FILE", default=None,
                   help="record the run (every event, a KV snapshot after every step) as a JSON-lines trace "
                        "that the app and `specdec replay` play back without the model")
    p.add_argument("--verify-kv", action="store_true",
                   help="check the KV mirror against llama.cpp's own dump before every decode")
    p.add_argument("--baseline", action="store_true",
                   help="also run plain decoding on the same prompt and print the measured speed-up")
    p.add_argument("--no-predict", action="store_true",
                   help="skip the predicted speed-up (it measures the batch-cost profile once if none is cached)")
    la = p.add_argument_group("lookahead")
    w, n, g = LOOKAHEAD_CLI_DEFAULTS
    la.add_argument("-W", type=int, default=w, help="Jacobi window")
    la.add_argument("-N", type=int, default=n, help="n-gram size")
    la.add_argument("-G", type=int, default=g, help="verification n-grams per step")
    la.add_argument("--no-prompt-pool", action="store_true", help="do not seed the n-gram pool from the prompt")
    la.add_argument("--window-from-prompt", action="store_true", help="initialise the window with prompt tokens")
    la.add_argument("--reference-kv", action="store_true",
                    help="keep matched n-gram cells in place as llama-lookahead does (fragments the cache)")
    sp = p.add_argument_group("speculative / lookup")
    sp.add_argument("-md", "--model-draft", default=None, help="draft model (default, gemma or a path)")
    sp.add_argument("-k", "--draft", type=int, default=DEFAULT_K, help="tokens drafted per step")
    sp.add_argument("--adaptive", choices=("off", "tutorial", "heuristic"), default="off")
    sp.add_argument("--k-min", type=int, default=1)
    sp.add_argument("--k-max", type=int, default=16)
    sp.add_argument("--p-min", type=float, default=0.0)
    sp.add_argument("--ngram-max", type=int, default=3, help="prompt lookup: longest n-gram matched")
    sp.add_argument("--ngram-min", type=int, default=1, help="prompt lookup: shortest n-gram matched")
    sp.add_argument("--lookup", choices=("cache", "latest"), default="cache",
                    help="prompt lookup: confident continuations from n-gram counts (llama-lookup) "
                         "or whatever followed the latest match (transformers)")


def _config_from(args: argparse.Namespace):
    from engine.config import LookaheadParams, RunConfig, SpeculativeParams
    from engine.sampling import SamplingParams

    return RunConfig(
        mode=args.mode,
        max_tokens=args.n_predict,
        sampling=SamplingParams(args.temp, args.top_k, args.top_p, args.min_p, args.seed),
        lookahead=LookaheadParams(
            args.W, args.N, args.G, not args.no_prompt_pool, args.window_from_prompt, not args.reference_kv
        ),
        speculative=SpeculativeParams(
            k=args.draft, adaptive=args.adaptive, k_min=args.k_min, k_max=args.k_max,
            p_min=args.p_min, ngram_max=args.ngram_max, ngram_min=args.ngram_min, lookup=args.lookup,
        ),
    )


def cmd_run(args: argparse.Namespace) -> int:
    from engine import trace
    from engine.events import RunFinished, RunStarted, RunWarning, StepDone
    from engine.session import Session
    from engine.trace import TraceRecorder
    from engine.tuning.profile import model_sha256

    if args.file:
        prompt = Path(args.file).read_text(encoding="utf-8")
    elif args.prompt is not None:
        prompt = args.prompt
    else:
        raise SpecDecError("no prompt given; pass -p TEXT or -f FILE")
    config, model_path, draft_path = run_setup(args)
    with _ctrl_c_stops() as stop, Session(model_path, n_ctx=args.ctx_size, n_batch=args.batch_size,
                                          n_threads=args.threads, n_gpu_layers=args.gpu_layers,
                                          draft_path=draft_path, verify_kv=args.verify_kv, cancel=stop) as session:
        if args.chat and session.has_chat_template:
            tokens = session.chat_tokens([("user", prompt)])
        else:
            if args.chat:
                print(f"specdec: {Path(model_path).name} has no chat template; running the prompt as plain "
                      "completion", file=sys.stderr)
            tokens = session.tokenize_prompt(prompt)
        if config.mode == "auto" and not args.no_predict:
            _ensure_profile(session)  # Auto prices its steps with it
        final: RunFinished | None = None
        recorder = TraceRecorder() if args.trace else None
        for event in session.run(config, tokens, prompt_text=prompt, fresh_cancel=False):
            if recorder is not None:
                recorder.add(event)
                if isinstance(event, StepDone) and session.memory.mirror_ok:
                    recorder.add(session.kv_snapshot(event.step, config.n_sequences))
            if isinstance(event, RunStarted) and not args.json and config.mode == "lookahead":
                la = config.lookahead
                print(f"W = {la.W:2d}\nN = {la.N:2d}\nG = {la.G:2d}\n", file=sys.stderr)
            elif isinstance(event, StepDone) and not args.json:
                write_tokens(event, args.color)
                if args.kv_dump:
                    view = session.memory.mirror.base.render_view(config.n_sequences)
                    print(f"\n--- after step {event.step}\n{view}", file=sys.stderr)
            elif isinstance(event, RunWarning):
                print(f"\nspecdec: warning: {event.message}", file=sys.stderr)
            elif isinstance(event, RunFinished):
                final = event
        assert final is not None
        if recorder is not None:
            trace.save(recorder.trace(), args.trace)
            print(f"specdec: trace written to {args.trace}", file=sys.stderr)
        info = session.model.info
        stats = final.stats
        if args.verify_kv:
            stats["kv_checks"] = session.memory.verifier.n_checked
        if final.finish_reason != "cancelled":
            stats.update(_speedups(session, config, tokens, stats, args))
        if args.json:
            print(json.dumps({
                "text": final.text,
                "token_ids": list(final.token_ids),
                "finish_reason": final.finish_reason,
                "model": {
                    "path": str(model_path),
                    "sha256": model_sha256(model_path)[:16],
                    "arch": info.arch,
                    "n_vocab": info.n_vocab,
                    "quant": info.quant,
                },
                "config": {**config.as_dict(), "n_ctx": args.ctx_size, "n_batch": args.batch_size,
                           "n_threads": session.n_threads, "chat": args.chat and session.has_chat_template},
                "stats": stats,
            }, indent=2))
        else:
            _print_stats(config, stats, final.finish_reason)
    return 0


def cmd_batch(args: argparse.Namespace) -> int:
    """Decode every prompt of a JSON-lines file, ``--parallel`` at a time in one context."""
    from engine import parallel
    from engine.session import Session

    if not args.file:
        raise SpecDecError("batch needs its prompts: -f FILE.jsonl, one {\"id\": …, \"prompt\": …} per line")
    if args.prompt is not None:
        raise SpecDecError("batch reads its prompts from -f FILE.jsonl; -p is for `specdec run`")
    records = _read_batch_file(Path(args.file))
    config, model_path, draft_path = run_setup(args)
    with _ctrl_c_stops() as stop, Session(model_path, n_ctx=args.ctx_size, n_batch=args.batch_size,
                                          n_threads=args.threads, n_gpu_layers=args.gpu_layers,
                                          draft_path=draft_path, verify_kv=args.verify_kv, cancel=stop) as session:
        jobs = []
        for record in records:
            text = str(record["prompt"])
            tokens = session.chat_tokens([("user", text)]) if args.chat and session.has_chat_template \
                else session.tokenize_prompt(text)
            limit = record.get("max_tokens")
            jobs.append(parallel.BatchJob(str(record["id"]), tuple(tokens), int(limit) if limit else None))
        results: dict[str, dict] = {}
        summary = None
        for event in parallel.run_batch(session, config, jobs, args.parallel):
            if isinstance(event, parallel.JobFinished):
                results[event.job_id] = {"id": event.job_id, "text": event.text, "token_ids": list(event.token_ids),
                                         "finish_reason": event.finish_reason, "stats": event.stats}
                if not args.json:
                    print(f"[{len(results)}/{len(jobs)}] {event.job_id}: {len(event.token_ids)} tokens, "
                          f"{event.finish_reason}", file=sys.stderr)
            elif isinstance(event, parallel.BatchFinished):
                summary = event.stats
    lines = "".join(json.dumps(results[str(r["id"])], ensure_ascii=False) + "\n" for r in records)
    if args.output:
        from engine.jsonfile import write_text

        write_text(Path(args.output), lines, shared=True)
    else:
        sys.stdout.write(lines)
    s = summary or {}
    print(f"{len(jobs)} prompts, {args.parallel} at a time: {s.get('n_predict', 0)} tokens in "
          f"{s.get('t_total_s', 0.0):.2f} s = {s.get('tokens_per_second', 0.0):.1f} tokens/s together "
          f"({s.get('steps', 0)} steps, {s.get('mean_batch_tokens', 0.0):.2f} tokens a batch)", file=sys.stderr)
    return 1 if stop.is_set() else 0


def _read_batch_file(path: Path) -> list[dict]:
    records, seen = [], set()
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecDecError(f"{path.name} line {number} is not JSON ({exc.msg})") from None
        if not isinstance(record, dict) or "prompt" not in record or "id" not in record:
            raise SpecDecError(f"{path.name} line {number} needs an \"id\" and a \"prompt\"")
        if str(record["id"]) in seen:
            raise SpecDecError(f"{path.name} line {number}: the id {record['id']!r} is used twice")
        seen.add(str(record["id"]))
        records.append(record)
    if not records:
        raise SpecDecError(f"{path.name} has no prompts")
    return records


def cmd_distill(args: argparse.Namespace) -> int:
    """Train a draft to agree with the target on the target's own text, then measure both drafts."""
    from engine import catalog, distill
    from engine.session import Session
    from engine.tuning import prompts as prompt_sets
    from engine.tuning.sweep import prompt_tokens

    target_path, draft_path = catalog.resolve(args.target), catalog.resolve(args.draft)
    out = Path(args.output)
    chosen = prompt_sets.load_file(args.prompts)
    held_out = prompt_sets.load_file(args.eval) if args.eval else chosen[3::4]
    train_prompts = chosen if args.eval else [p for i, p in enumerate(chosen) if i % 4 != 3]
    if not train_prompts or not held_out:
        raise SpecDecError("distill needs prompts to train on and held-out ones to measure (--eval FILE, or 4+ prompts)")
    with _ctrl_c_stops() as stop, Session(target_path, n_ctx=args.ctx_size, n_threads=args.threads,
                                          cancel=stop) as session:
        print(f"the target writes the training text: {len(train_prompts)} prompts × {args.n_predict} tokens…",
              file=sys.stderr)

        def show(p) -> None:
            if p.phase == "train":
                print(f"\rtraining: step {p.step}/{p.n_steps} · loss {p.loss:.3f} · ETA {p.eta_s:.0f} s   ",
                      end="", file=sys.stderr, flush=True)

        result = distill.distill_draft(session, draft_path, [prompt_tokens(session, p, True) for p in train_prompts],
                                       args.steps, out, n_tokens=args.n_predict, keep_layers=args.keep_layers,
                                       quant=args.quant, lr=args.lr, cancel=stop, progress=show)
        print(file=sys.stderr)
        stop.clear()  # a Ctrl+C that ended the training early does not skip the measurement; a second one does
        held = [prompt_tokens(session, p, True) for p in held_out]
        report = {"corpus_tokens": result.n_corpus_tokens, "steps": result.steps, "stopped": result.stopped,
                  "t_train_s": result.t_train_s, "loss_first": result.losses[0] if result.losses else None,
                  "loss_last": result.losses[-1] if result.losses else None, "eval_losses": result.eval_losses,
                  "output": str(out), "before": _measure_draft(session, result.start_path, held, args, stop)}
        report["after"] = _measure_draft(session, out, held, args, stop) if report["before"] else None
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"trained {report['steps']} steps in {report['t_train_s']:.1f} s on {report['corpus_tokens']} tokens: "
              f"loss {report['loss_first']:.3f} → {report['loss_last']:.3f}; held-out loss "
              + " → ".join(f"{x:.3f}" for x in report["eval_losses"]) + f"\nwrote {out}", file=sys.stderr)
        for when in ("before", "after"):
            m = report[when]
            if m is None:
                print(f"{when:6s}: not measured (stopped)", file=sys.stderr)
                continue
            print(f"{when:6s}: greedy agreement {100 * m['agreement']:.1f} % · acceptance by position "
                  + " ".join(f"{100 * a:.0f}%" for a in m["accept_per_position"])
                  + f" · speculative k={args.draft_k} {m['speedup_measured']:.2f}× plain here"
                  + (f" (predicted {m['speedup_predicted']:.2f}×)" if m["speedup_predicted"] else "")
                  + f" · {m['speedup_flat']:.2f}× on a flat batch-cost curve", file=sys.stderr)
    return 1 if stop.is_set() else 0


def _measure_draft(session, draft_path: Path, prompts: list[list[int]], args, stop) -> dict | None:
    """A draft on held-out prompts: greedy agreement, speculative decoding's acceptance per
    position and its speed-up over plain measured here, and predicted for this machine's
    batch-cost profile and for hardware where a batch costs what one token does. None if
    ``stop`` was set before it finished."""
    from engine import distill
    from engine.config import RunConfig, SpeculativeParams
    from engine.session import last_event
    from engine.tuning import cost_model, profile

    agreement = distill.greedy_agreement(session, draft_path, prompts, args.n_predict, cancel=stop)
    if agreement is None:
        return None
    session.load_draft(draft_path)
    try:
        plain_cfg = RunConfig(max_tokens=args.n_predict)
        spec_cfg = RunConfig(mode="speculative", max_tokens=args.n_predict, speculative=SpeculativeParams(k=args.draft_k))
        t_plain = t_spec = 0.0
        n_plain = n_spec = 0
        rates: list[list[float]] = [[] for _ in range(args.draft_k)]  # acceptance at each draft position
        stats_all = []
        for tokens in prompts:
            for config in (plain_cfg, spec_cfg):
                final = last_event(session.run(config, tokens, fresh_cancel=False))
                if final.finish_reason == "cancelled":
                    return None
                s = final.stats
                if config is plain_cfg:
                    t_plain += s["t_generate_s"]
                    n_plain += s["n_predict"]
                else:
                    t_spec += s["t_generate_s"]
                    n_spec += s["n_predict"]
                    stats_all.append(s)
                    for i, rate in enumerate(s.get("accept_per_position", [])[: args.draft_k]):
                        rates[i].append(rate)
        draft_tps = _tokens_per_second_alone(session, prompts[0], args.n_predict, stop)
        if draft_tps is None:
            return None
    finally:
        session.unload_draft()
    measured = (n_spec / t_spec) / (n_plain / t_plain) if t_spec and t_plain else 0.0
    merged = stats_all[-1]
    known = profile.cached(profile.profile_key(session))
    predicted = cost_model.predict_from_stats(merged, known.curve, mode="speculative",
                                              draft_curve=_flat(1.0 / draft_tps)) if known else None
    flat = cost_model.predict_from_stats(merged, _flat(t_plain / max(n_plain, 1)), mode="speculative",
                                         draft_curve=_flat(1.0 / draft_tps))
    return {"agreement": agreement, "accept_per_position": [sum(r) / len(r) if r else 0.0 for r in rates],
            "speedup_measured": measured, "speedup_predicted": predicted, "speedup_flat": flat or 0.0,
            "tokens_per_step": merged.get("tokens_per_step")}


def _flat(seconds: float):
    """A batch-cost curve where a decode of any size costs one token's time (a GPU, roughly)."""
    from engine.tuning.cost_model import CostCurve

    return CostCurve((1, 512), (seconds, seconds), (seconds, seconds))


def _tokens_per_second_alone(session, tokens: list[int], n: int, stop) -> float | None:
    """The draft model's own plain decoding speed (for the cost model's price of a draft token);
    None if ``stop`` ended it."""
    from engine.config import RunConfig
    from engine.session import Session, last_event

    with Session(session.draft_model.info.path, n_ctx=session.n_ctx, n_threads=session.n_threads,
                 cancel=stop) as alone:
        final = last_event(alone.run(RunConfig(max_tokens=n), tokens, fresh_cancel=False))
    return None if final.finish_reason == "cancelled" else final.stats["tokens_per_second"]


def cmd_replay(args: argparse.Namespace) -> int:
    """Play a recorded trace back in the terminal at ``--speed`` times its recorded pace."""
    from engine import trace
    from engine.config import RunConfig
    from engine.events import RunFinished, StepDone

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
        _print_stats(config, final.stats, final.finish_reason)
    return 0


def _ensure_profile(session) -> None:
    from engine.tuning import profile

    if profile.cached(profile.profile_key(session)) is None:
        print("measuring the batch-cost profile for this model, context and thread count "
              "(once; about 20 s for SmolLM2 on 2 cores)…", file=sys.stderr)
        try:
            profile.load_or_measure(session)
        except profile.ProfileCancelled:
            pass


def run_setup(args: argparse.Namespace):
    """The run config of ``run``'s flags, checked, and the target and draft model paths they name."""
    from engine import catalog

    config = _config_from(args)
    config.validate(args.batch_size)
    model_path = catalog.resolve(args.model)
    if config.mode == "speculative" and not args.model_draft:
        raise SpecDecError("--mode speculative needs a draft model: pass -md PATH (or -md default)")
    # Auto proposes with a draft model too when one is given (its tree's "draft" source)
    draft_path = catalog.resolve(args.model_draft) if args.model_draft and config.mode in ("speculative", "auto") \
        else None
    return config, model_path, draft_path


def _speedups(session, config, tokens: list[int], stats: dict, args: argparse.Namespace) -> dict:
    """Predicted speed-up (cost model on the batch-cost profile and the run's own counters) and,
    with ``--baseline``, the speed-up measured against a plain run of the same prompt."""
    from engine.config import RunConfig
    from engine.session import last_event
    from engine.tuning import cost_model, profile
    from engine.tuning.profile import ProfileCancelled

    out: dict = {}
    if not args.no_predict and not session.cancel_flag.is_set():
        if config.mode != "plain" and profile.cached(profile.profile_key(session)) is None:
            print("measuring the batch-cost profile for this model, context and thread count "
                  "(once; about 20 s for SmolLM2 on 2 cores)…", file=sys.stderr)
        try:
            curve = profile.load_or_measure(session).curve
            draft_curve = profile.load_or_measure(session, draft=True).curve if config.mode == "speculative" else None
        except ProfileCancelled:
            print("specdec: profile stopped; no predicted speed-up", file=sys.stderr)
        else:
            out["predicted_speedup"] = cost_model.predict_from_stats(stats, curve, mode=config.mode,
                                                                     draft_curve=draft_curve)
    if args.baseline and not session.cancel_flag.is_set():
        plain = RunConfig(mode="plain", max_tokens=config.max_tokens, sampling=config.sampling)
        base = last_event(session.run(plain, tokens, fresh_cancel=False))
        if base.finish_reason != "cancelled" and base.stats["tokens_per_second"]:
            out["plain_tokens_per_second"] = base.stats["tokens_per_second"]
            out["measured_speedup"] = stats["tokens_per_second"] / base.stats["tokens_per_second"]
    return out




def _print_stats(config, stats: dict, finish_reason: str) -> None:
    err = sys.stderr
    print("\n", file=err)
    print(f"encoded {stats['n_prompt']:4d} tokens in {stats['t_encode_s']:8.3f} seconds, "
          f"speed: {stats['encode_tokens_per_second']:8.3f} t/s", file=err)
    print(f"decoded {stats['n_predict']:4d} tokens in {stats['t_generate_s']:8.3f} seconds, "
          f"speed: {stats['tokens_per_second']:8.3f} t/s", file=err)
    print(file=err)
    if config.mode == "lookahead":
        la = config.lookahead
        print(f"W = {la.W:2d}\nN = {la.N:2d}\nG = {la.G:2d}\n", file=err)
    if config.mode in ("speculative", "lookup"):
        print(f"n_draft   = {config.speculative.k}", file=err)
    print(f"n_predict = {stats['n_predict']}", file=err)
    if config.mode != "plain":
        print(f"n_drafted = {stats['n_drafted']}", file=err)
        print(f"n_accept  = {stats['n_accept']}", file=err)
        if stats["n_drafted"]:
            print(f"accept    = {100.0 * stats['accept_rate']:.3f}%", file=err)
    if config.mode == "auto" and "auto" in stats:
        auto = stats["auto"]
        print("decisions = " + ", ".join(f"{d} {n}" for d, n in auto["decisions"].items()), file=err)
        for source, c in auto["sources"].items():
            rate = c["accepted"] / c["offered"] if c["offered"] else 0.0
            print(f"  {source:7s} offered {c['offered']:4d}, accepted {c['accepted']:4d} ({100 * rate:.1f}%)", file=err)
        agreed = auto.get("agreed", {})
        if agreed.get("offered"):
            print(f"  of these, proposed by several sources: offered {agreed['offered']}, "
                  f"accepted {agreed['accepted']}", file=err)
    print(f"steps     = {stats['steps']}", file=err)
    print(f"tokens/step = {stats['tokens_per_step']:.3f}", file=err)
    print(f"finish    = {finish_reason}", file=err)
    if stats.get("predicted_speedup") is not None or "measured_speedup" in stats:
        predicted = stats.get("predicted_speedup")
        measured = stats.get("measured_speedup")
        print(f"speed-up  = predicted {predicted:.2f}x" if predicted is not None else "speed-up  = predicted –",
              f"· measured {measured:.2f}x (plain {stats['plain_tokens_per_second']:.1f} t/s)"
              if measured is not None else "· measured – (pass --baseline)", file=err)
    if "kv_checks" in stats:
        print(f"kv mirror = equal to llama.cpp's dump before all {stats['kv_checks']} decodes", file=err)


def cmd_models(args: argparse.Namespace) -> int:
    from engine import catalog

    if args.action == "fetch":
        known = [*catalog.KNOWN_MODELS, *catalog.DERIVED_DRAFTS]
        keys = known if args.name == "all" else [args.name]
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
        from engine.quantize import requantize

        requantize(Path(args.src), Path(args.dst), args.type)
        print(f"wrote {args.dst}", file=sys.stderr)
        return 0
    raise SpecDecError(f"unknown models action {args.action!r}")


def _list_models(as_json: bool) -> int:
    from engine import catalog
    from engine.models import LoadedModel

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
    print(f"{'file':38} {'size':>8} {'arch':10} {'params':>8} {'quant':16} {'vocab':>7} {'n_ctx':>7} chat")
    for r in rows:
        if "error" in r:
            print(f"{Path(r['path']).name:38} {r['error']}")
            continue
        print(f"{Path(r['path']).name:38} {r['size_bytes'] / 2**20:6.0f}MB {r['arch']:10} "
              f"{r['n_params'] / 1e6:7.0f}M {r['quant']:16} {r['n_vocab']:7d} {r['n_ctx_train']:7d} "
              f"{'yes' if r['chat_template'] else 'no'}")
    return 0


def cmd_probe(args: argparse.Namespace) -> int:
    from engine import catalog
    from engine.probe import exactness_note, probe_exactness

    result = probe_exactness(catalog.resolve(args.model), n_threads=args.threads)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for size, dev in result["max_abs_diff_by_batch"].items():
            print(f"batch {size:>3}: max |logit difference| = {dev:.6f}")
        long = result["long_context"]
        for size, dev in long["max_abs_diff_by_batch"].items():
            print(f"batch {size:>3} after {long['n_cells']} cells: max |logit difference| = {dev:.6f}")
        verdict = "batch-invariant" if result["batch_invariant"] else "NOT batch-invariant"
        print(f"{Path(result['model']).name}: {verdict} with {result['n_threads']} threads "
              f"(max deviation {result['max_abs_diff']:.6f}, past {long['n_cells']} cells {long['max_abs_diff']:.6f})")
        print(exactness_note(result))
    return 0


def cmd_profile(args: argparse.Namespace) -> int:
    from engine import catalog
    from engine.session import Session
    from engine.tuning import profile

    draft_path = catalog.resolve(args.model_draft) if args.model_draft else None
    with _ctrl_c_stops() as stop, Session(catalog.resolve(args.model), n_ctx=args.ctx_size, n_batch=args.batch_size,
                                          n_threads=args.threads, draft_path=draft_path, cancel=stop) as session:
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


def cmd_sweep(args: argparse.Namespace) -> int:
    from engine import catalog
    from engine.session import Session
    from engine.tuning import profile, prompts, sweep

    axes = _sweep_axes(args)
    if args.file:
        prompt_set = prompts.load_file(args.file)
    else:
        categories = args.categories.split(",") if args.categories else list(sweep.DEFAULT_CATEGORIES)
        prompt_set = prompts.shipped(categories, args.per_category)
    spec = sweep.SweepSpec(args.mode, axes, tuple(prompt_set), args.n_predict, args.plain_every, not args.raw)
    spec.validate()
    draft_path = catalog.resolve(args.model_draft) if args.model_draft else None
    if args.mode == "speculative" and draft_path is None:
        raise SpecDecError("a speculative sweep needs a draft model: pass -md PATH (or -md default)")
    out_dir = Path(args.output)
    with _ctrl_c_stops() as stop, Session(catalog.resolve(args.model), n_ctx=args.ctx_size, n_batch=args.batch_size,
                                          n_threads=args.threads, draft_path=draft_path, cancel=stop) as session:
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


def _sweep_axes(args: argparse.Namespace) -> dict[str, tuple]:
    from engine.tuning import sweep

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

    from engine import frozen

    env = {**os.environ, "QT_QPA_PLATFORM": "offscreen"}
    # a frozen app has no `python -m`: its GUI executable draws the plots instead
    plotter = ([str(frozen.sibling_executable("specdec-studio")), "--sweep-plots"] if frozen.is_frozen()
               else [sys.executable, "-m", "app.sweep_plots"])
    done = subprocess.run([*plotter, str(json_path), str(out_dir)], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        print(f"specdec: no PNG plots ({(done.stderr.strip().splitlines() or ['the GUI is not installed'])[-1]})",
              file=sys.stderr)
        return []
    return [Path(line) for line in done.stdout.split()]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="specdec", description="llama.cpp plain, lookahead and speculative decoding")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_args(sub.add_parser("run", help="generate text with one strategy"))
    models = sub.add_parser("models", help="fetch, list or requantize models")
    msub = models.add_subparsers(dest="action", required=True)
    fetch = msub.add_parser("fetch", help="download a known model into the cache")
    fetch.add_argument("name", nargs="?", default="default",
                       help="default, gemma, a requantised draft (default-q8_0, default-q3_k_m, default-q2_k) or all")
    lst = msub.add_parser("list", help="models in the cache")
    lst.add_argument("--json", action="store_true")
    rq = msub.add_parser("requantize", help="make a draft by requantising a model")
    rq.add_argument("src")
    rq.add_argument("dst")
    rq.add_argument("--type", required=True, choices=("Q2_K", "Q3_K_M", "Q4_K_M", "Q8_0"))
    prof = sub.add_parser("profile", help="measure (or show the cached) time of one decode of B tokens")
    prof.add_argument("-m", "--model", default="default")
    prof.add_argument("-md", "--model-draft", default=None, help="profile this draft model too")
    _add_context_args(prof)
    prof.add_argument("--remeasure", action="store_true", help="measure again even if a profile is cached")
    prof.add_argument("--json", action="store_true")
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
                    help="shipped prompt categories, comma-separated (default: code_editing,chat)")
    sw.add_argument("--per-category", type=int, default=1, help="prompts taken from each shipped category")
    sw.add_argument("--raw", action="store_true", help="do not wrap prompts in the model's chat template")
    sw.add_argument("-n", "--n-predict", type=int, default=48, help="tokens generated per run")
    sw.add_argument("--plain-every", type=int, default=3, help="settings between two plain runs")
    _add_context_args(sw)
    sw.add_argument("-o", "--output", default="sweep-results", help="folder for results.json/.csv and the PNGs")
    sw.add_argument("--json", action="store_true", help="print the results as JSON")
    bt = sub.add_parser("batch", help="decode many prompts (a JSON-lines file) together in one context")
    _add_run_args(bt)
    bt.add_argument("--parallel", "-np", type=int, default=4, help="prompts decoded at once (sequences)")
    bt.add_argument("-o", "--output", default=None, help="write the results here (JSON lines); default stdout")
    ds = sub.add_parser("distill", help="train a draft to agree with a target (llama.cpp's training API)")
    ds.add_argument("--target", default="default", help="the target model")
    ds.add_argument("--draft", required=True, help="the draft to start from (e.g. default-q2_k, or the target)")
    ds.add_argument("--prompts", required=True, help="training prompts: a .jsonl file ({\"id\", \"prompt\"} per line)")
    ds.add_argument("--eval", default=None, help="held-out prompts (default: every 4th training prompt)")
    ds.add_argument("--steps", type=int, default=40, help="optimizer steps (64 tokens each)")
    ds.add_argument("--keep-layers", type=int, default=None, help="start from the draft's first L blocks only")
    ds.add_argument("--lr", type=float, default=1e-5, help="AdamW learning rate")
    ds.add_argument("--quant", default="Q8_0", choices=("Q8_0", "Q4_K_M", "Q3_K_M", "Q2_K"),
                    help="quantisation of the trained draft")
    ds.add_argument("-n", "--n-predict", type=int, default=96, help="tokens the target writes per prompt")
    ds.add_argument("-k", "--draft-k", type=int, default=4, help="k for the before/after speculative runs")
    ds.add_argument("-o", "--output", required=True, help="the trained draft (.gguf)")
    ds.add_argument("--json", action="store_true")
    _add_context_args(ds)
    rp = sub.add_parser("replay", help="play a recorded trace (specdec run --trace) back without the model")
    rp.add_argument("trace", help="a .jsonl trace file")
    rp.add_argument("--speed", type=float, default=1.0, help="times the recorded pace (0.25 to 4)")
    rp.add_argument("--color", action="store_true", help="colour the tokens by source")
    rp.add_argument("--json", action="store_true")
    probe = sub.add_parser("probe-exactness", help="measure whether batched decoding changes logits")
    probe.add_argument("-m", "--model", default="default")
    probe.add_argument("-t", "--threads", type=int, default=None)
    probe.add_argument("--json", action="store_true")
    from engine import chat_cli

    chat_cli.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    from engine.chat_cli import cmd_chat

    handlers = {"run": cmd_run, "models": cmd_models, "probe-exactness": cmd_probe, "profile": cmd_profile,
                "sweep": cmd_sweep, "chat": cmd_chat, "replay": cmd_replay, "batch": cmd_batch,
                "distill": cmd_distill}
    try:
        return handlers[args.command](args)
    except SpecDecError as exc:
        print(f"specdec: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:
        print(f"specdec: {exc.strerror or exc}: {exc.filename or ''}".rstrip(": "), file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

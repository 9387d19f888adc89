"""``specdec run``: one prompt, one strategy; the text streamed, then llama.cpp's figures (or one JSON
object), with the predicted and measured speed-ups."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.cli.common import (add_run_args, ctrl_c_stops, ensure_profile, flush_tokens,
                                               load_or_measure_said, print_after_tokens, print_stats, read_text_file,
                                               run_setup, session_from_args, write_tokens)


def cmd_run(args: argparse.Namespace) -> int:
    from specdec_studio.engine.records import trace
    from specdec_studio.engine.events import RunFinished, RunStarted, RunWarning, StepDone
    from specdec_studio.engine.records.trace import TraceRecorder
    from specdec_studio.engine.models.identity import model_sha256

    if args.file:
        prompt = read_text_file(args.file)
    elif args.prompt is not None:
        prompt = args.prompt
    else:
        raise SpecDecError("no prompt given; pass -p TEXT or -f FILE")
    config, model_path, draft_path = run_setup(args)
    with (
        ctrl_c_stops() as stop,
        # the cells are followed only for what shows them
        session_from_args(args, model_path, draft_path, stop, observe=bool(args.trace or args.kv_dump)) as session,
    ):
        if args.chat and session.has_chat_template:
            tokens = session.chat_tokens([("user", prompt)])
        else:
            if args.chat:  # one sentence: why there is no chat, and what runs instead
                why = session.template_problem or f"{Path(model_path).name} has no chat template"
                print(f"specdec: {why.removesuffix('; the model opens in completion mode')}; running the prompt "
                      "as plain completion", file=sys.stderr)
            tokens = session.tokenize_prompt(prompt)
        session.check_prompt(tokens)  # before a profile is measured for a prompt that cannot run
        if config.mode == "auto" and not args.no_predict:
            ensure_profile(session)  # Auto prices its steps with it
        final: RunFinished | None = None
        recorder = TraceRecorder() if args.trace else None
        explained: list[dict] = []  # --explain --json: every generated token's explanation
        try:
            for event in session.run(config, tokens, prompt_text=prompt, fresh_cancel=False):
                if recorder is not None:
                    recorder.add(event)
                    if isinstance(event, StepDone) and session.memory.mirror_ok:
                        recorder.add(session.kv_snapshot(event.step, config.n_sequences))
                if isinstance(event, RunStarted) and not args.json and config.mode == "lookahead":
                    la = config.lookahead
                    print(f"W = {la.W:2d}\nN = {la.N:2d}\nG = {la.G:2d}\n", file=sys.stderr)
                if isinstance(event, StepDone) and config.explain and args.json:
                    explained.extend({"id": t.id, "text": t.text, "source": t.source,
                                      "why": trace.why_record(t.why) if t.why else None} for t in event.tokens)
                elif isinstance(event, StepDone) and not args.json:
                    write_tokens(event, args.color)
                    if args.kv_dump:
                        view = session.memory.mirror.base.render_view(config.n_sequences)
                        print_after_tokens(f"\n--- after step {event.step}\n{view}")
                elif isinstance(event, RunWarning):
                    print_after_tokens(f"\nspecdec: warning: {event.message}")
                elif isinstance(event, RunFinished):
                    final = event
        finally:
            flush_tokens()  # the tokens before the figures, or before the sentence of an error
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
                           "n_threads": session.n_threads, "chat": args.chat and session.has_chat_template,
                           # the loaded draft, whether or not the mode (Auto) chose to run it
                           "draft": session.draft_model.info.path if session.draft_model is not None else None},
                "stats": stats,
                **({"tokens": explained} if config.explain else {}),
            }, indent=2))
        else:
            print_stats(config, stats, final.finish_reason)
    return 0


def _speedups(session, config, tokens: list[int], stats: dict, args: argparse.Namespace) -> dict:
    """Predicted speed-up (cost model on the batch-cost profile and the run's own counters) and,
    with ``--baseline``, the speed-up measured against a plain run of the same prompt."""
    from specdec_studio.engine.config import RunConfig
    from specdec_studio.engine.session import last_event
    from specdec_studio.engine.tuning import cost_model
    from specdec_studio.engine.tuning.profile import ProfileCancelled, ProfileUnavailable

    out: dict = {}
    if config.mode == "plain" and not args.no_predict:
        out["predicted_speedup"] = 1.0  # by definition: no profile to measure for it
    elif not args.no_predict and not session.cancel_flag.is_set():
        try:
            curve = load_or_measure_said(session).curve
            draft_curve = load_or_measure_said(session, draft=True).curve if config.mode == "speculative" else None
        except ProfileCancelled:
            print("specdec: profile stopped; no predicted speed-up", file=sys.stderr)
        except ProfileUnavailable as exc:
            if config.mode != "auto":  # Auto's run said so before it started (ensure_profile)
                print(f"specdec: note: {exc}; no predicted speed-up", file=sys.stderr)
        else:
            out["predicted_speedup"] = cost_model.predict_from_stats(stats, curve, mode=config.mode,
                                                                     draft_curve=draft_curve)
            if draft_curve is not None:
                out["break_even"] = cost_model.draft_break_even_words(curve, draft_curve, config.speculative.k)
    if args.baseline and not session.cancel_flag.is_set():
        plain = RunConfig(mode="plain", max_tokens=config.max_tokens, sampling=config.sampling)
        base = last_event(session.run(plain, tokens, fresh_cancel=False))
        if base.finish_reason != "cancelled" and base.stats["tokens_per_second"]:
            out["plain_tokens_per_second"] = base.stats["tokens_per_second"]
            out["measured_speedup"] = stats["tokens_per_second"] / base.stats["tokens_per_second"]
    return out


def add_parser(sub) -> None:
    """``run``: every run flag."""
    p = sub.add_parser("run", help="generate text with one strategy")
    add_run_args(p)
    p.set_defaults(handler=cmd_run)

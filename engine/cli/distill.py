"""``specdec distill``: train a draft to agree with its target, then measure it before and after."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.cli.common import add_context_args, ctrl_c_stops


def cmd_distill(args: argparse.Namespace) -> int:
    """Train a draft to agree with the target on the target's own text, then measure both drafts."""
    from specdec_studio.engine.models import catalog
    from specdec_studio.engine.drafts import distill
    from specdec_studio.engine.drafts.measure import held_out_split, measure_draft
    from specdec_studio.engine.session import Session
    from specdec_studio.engine.tuning import prompts as prompt_sets
    from specdec_studio.engine.tuning.sweep import prompt_tokens

    target_path, draft_path = catalog.resolve(args.target), catalog.resolve(args.draft)
    out = Path(args.output)
    chosen = prompt_sets.load_file(args.prompts)
    train_prompts, held_out = (chosen, prompt_sets.load_file(args.eval)) if args.eval else held_out_split(chosen)
    if not train_prompts or not held_out:
        raise SpecDecError(
            "distill needs prompts to train on and held-out ones to measure (--eval FILE, or 4+ prompts)"
        )
    with ctrl_c_stops() as stop, Session(target_path, n_ctx=args.ctx_size, n_threads=args.threads,
                                         n_threads_batch=args.threads_batch, cancel=stop) as session:
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
        report = {
            "corpus_tokens": result.n_corpus_tokens,
            "steps": result.steps,
            "stopped": result.stopped,
            "t_train_s": result.t_train_s,
            "loss_first": result.losses[0] if result.losses else None,
            "loss_last": result.losses[-1] if result.losses else None,
            "eval_losses": result.eval_losses,
            "output": str(out),
            "before": measure_draft(session, result.start_path, held, args.n_predict, args.draft_k, stop),
        }
        report["after"] = measure_draft(session, out, held, args.n_predict, args.draft_k, stop) \
            if report["before"] else None
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


def add_parser(sub) -> None:
    """``distill``: target, draft, prompts and training settings."""
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
    add_context_args(ds)
    ds.set_defaults(handler=cmd_distill)

"""What every ``specdec`` subcommand that runs a model shares: the run flags and the config they
make, Ctrl+C as a Stop flag, streaming tokens and printing llama.cpp-style figures."""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import sys
import threading
import time
from pathlib import Path

from specdec_studio.engine.errors import SpecDecError, not_utf8


CYAN, GREEN, RESET = "\033[0;96m", "\033[0;92m", "\033[0m"


SECOND_CTRL_C = ("stopped at the second Ctrl+C without waiting for llama.cpp to return "
                 "(an RPC server may have stopped answering)")
HANDLED_WITHIN_S = 0.5  # a main thread that runs Python handles a Ctrl+C well within this


@contextlib.contextmanager
def ctrl_c_stops():
    """A Stop flag that Ctrl+C sets from the moment the command starts, model loading included:
    a run, profile or sweep then ends cleanly at its next check instead of with a traceback.

    A step waiting on an RPC server that stalled never returns to Python (llama.cpp's RPC client
    has no time limit), so neither the flag's check nor a Python signal handler would ever run.
    Python's C-level handler still writes each signal to a wakeup pipe, and a thread reading it
    sets the flag at once; two presses in a row that the main thread has not handled (the second
    given HANDLED_WITHIN_S) end the process with one sentence (exit status 130). So on a stalled
    step the second Ctrl+C ends it; where the first was handled and the command then stalls (its
    model's buffers freed on the servers), the next two do. While another handler is in place (the
    chat's prompt, where Ctrl+C ends the chat), the thread leaves it alone."""
    stop = threading.Event()
    handled = [0]  # times the main thread ran the handler (Python runs it once for presses that pile up)

    def on_ctrl_c(*_) -> None:
        handled[0] += 1
        stop.set()

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)  # the C-level handler must never block on it

    def ours() -> bool:
        return signal.getsignal(signal.SIGINT) is on_ctrl_c

    def watch() -> None:
        seen, presses = handled[0], 0  # presses read since the handler was last seen to run
        while True:
            try:
                got = os.read(read_end, 64)
            except OSError:
                return
            if not got:  # the write end closed: the command is done
                return
            if signal.SIGINT not in got or not ours():
                continue
            stop.set()
            if handled[0] != seen:
                seen, presses = handled[0], 0
            presses += 1
            if presses < 2:
                continue
            time.sleep(HANDLED_WITHIN_S)
            if handled[0] == seen and ours():  # two presses and no handler: stuck in native code
                flush_tokens()
                print(f"\nspecdec: {SECOND_CTRL_C}", file=sys.stderr, flush=True)
                os._exit(130)

    previous = signal.signal(signal.SIGINT, on_ctrl_c)
    previous_fd = signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
    watcher = threading.Thread(target=watch, name="specdec-ctrl-c", daemon=True)
    watcher.start()
    try:
        yield stop
    finally:
        signal.set_wakeup_fd(previous_fd)
        signal.signal(signal.SIGINT, previous)
        os.close(write_end)
        watcher.join(1.0)
        os.close(read_end)


def read_text_file(path: str | Path) -> str:
    """A prompt or batch file's text; a missing file or one that is not UTF-8 is one sentence."""
    path = Path(path)
    try:
        return path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        raise SpecDecError(f"there is no file {path}") from None
    except UnicodeDecodeError as exc:
        raise SpecDecError(not_utf8(path.name, exc)) from None


# Streamed text goes to standard output at most this often. A write per step is a system call
# wherever Python's stdout is unbuffered (PYTHONUNBUFFERED, as on this project's machines) and,
# into a pipe, wakes the reader: on llama.cpp's tiny qwen35 (~0.4 ms a step) the CLI's host time
# per step was 0.064-0.073 ms streaming a write per step against 0.049-0.052 ms with --json (no
# stream), and 0.037-0.054 ms streaming with the writes held back here
FLUSH_EVERY_S = 0.05
_pending: list[str] = []
_last_flush = [0.0]
_COLOUR_OF_SOURCE = {"accepted_ngram": CYAN, "accepted_draft": GREEN}


def write_tokens(event, color: bool) -> None:
    """A step's tokens to standard output, accepted ones coloured (cyan: n-gram, green: draft);
    held until :func:`flush_tokens` or the next write that is due."""
    if color:
        for tok in event.tokens:
            colour = _COLOUR_OF_SOURCE.get(tok.source)
            _pending.append(f"{colour}{tok.text}{RESET}" if colour else tok.text)
    else:
        _pending.extend([tok.text for tok in event.tokens])
    if time.monotonic() - _last_flush[0] >= FLUSH_EVERY_S:
        flush_tokens()


def flush_tokens() -> None:
    """Write and flush the tokens held back: before anything else is printed, and at a run's end."""
    if _pending:
        sys.stdout.write("".join(_pending))
        _pending.clear()
    sys.stdout.flush()
    _last_flush[0] = time.monotonic()


def print_after_tokens(text: str) -> None:
    """A line on standard error after the tokens held back, so a terminal shows the two in order."""
    flush_tokens()
    print(text, file=sys.stderr)


def add_context_args(p: argparse.ArgumentParser) -> None:
    from specdec_studio.engine.config import DEFAULT_N_BATCH, DEFAULT_N_CTX

    p.add_argument("-t", "--threads", type=int, default=None)
    p.add_argument("-tb", "--threads-batch", type=int, default=None,
                   help="threads for batches of more than one token (default: --threads)")
    p.add_argument("-c", "--ctx-size", type=int, default=DEFAULT_N_CTX)
    p.add_argument("-b", "--batch-size", type=int, default=DEFAULT_N_BATCH)
    p.add_argument("--rpc", metavar="HOST:PORT,...", default=None,
                   help="llama.cpp rpc-server processes that hold the model's layers (split as llama.cpp "
                        "splits them; every layer unless -ngl says how many); the draft stays here")


def rpc_servers_of(args: argparse.Namespace) -> tuple[str, ...]:
    """``--rpc``'s servers. With any, llama.cpp's abort on a server lost mid-run becomes one
    sentence and exit code 75 (engine.models.rpc.on_lost_server)."""
    from specdec_studio.engine.models import rpc

    servers = rpc.parse_servers(getattr(args, "rpc", None))
    if servers:
        rpc.on_lost_server()
    return servers


def session_from_args(args: argparse.Namespace, model_path, draft_path, cancel: threading.Event, **extra):
    """The Session the run flags describe: the model and its draft, context, batch, threads, GPU
    layers and RPC servers (``extra``: what a subcommand adds, such as ``observe``)."""
    from specdec_studio.engine.session import Session  # heavy (llama.cpp): only a command that runs a model

    return Session(model_path, n_ctx=args.ctx_size, n_batch=args.batch_size, n_threads=args.threads,
                   n_threads_batch=args.threads_batch, n_gpu_layers=args.gpu_layers, rpc_servers=rpc_servers_of(args),
                   draft_gpu_layers=args.draft_gpu_layers, draft_path=draft_path,
                   verify_kv=getattr(args, "verify_kv", False), cancel=cancel, **extra)


def add_run_args(p: argparse.ArgumentParser) -> None:
    from specdec_studio.engine.config import (
        DEFAULT_K,
        DEFAULT_MAX_TOKENS_CLI,
        DEFAULT_MODE,
        LOOKAHEAD_CLI_DEFAULTS,
        LOOKUP_SOURCES,
        MODES,
    )
    from specdec_studio.engine.kv.rollback import ROLLBACKS

    p.add_argument("-m", "--model", default="default", help="default, gemma, or a path to a .gguf file")
    p.add_argument("--mode", choices=MODES, default=DEFAULT_MODE, help=f"decoding (default {DEFAULT_MODE})")
    p.add_argument("-p", "--prompt", help="prompt text (or use -f)")
    p.add_argument("-f", "--file", help="read the prompt from this file")
    p.add_argument("-n", "--n-predict", type=int, default=DEFAULT_MAX_TOKENS_CLI, help="maximum tokens to generate")
    add_context_args(p)
    p.add_argument("-ngl", "--gpu-layers", type=int, default=0, help="target layers offloaded to a GPU (a GPU build)")
    p.add_argument("-ngld", "--draft-gpu-layers", type=int, default=0,
                   help="draft model layers offloaded to a GPU (its own setting, as llama.cpp's -ngld)")
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
    p.add_argument("--explain", action="store_true",
                   help="explain every token (the target's top 8, the proposer's, the verdict in numbers): in "
                        "--json's tokens and the trace (which --trace always records); 0.2-0.4 ms a token")
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
    sp.add_argument("--k-max", type=int, default=16,
                    help="the longest draft: adaptive -k's, and a draft model's inside Auto and --parallel Auto")
    sp.add_argument("--auto-k-max", type=int, default=64,
                    help="Auto: the longest step in proposed tokens; the machine's profile may cap it lower "
                         "(16 on a 2-core CPU), except round a loop the text has already repeated")
    sp.add_argument("--p-min", type=float, default=0.0)
    sp.add_argument("--ngram-max", type=int, default=3, help="prompt lookup: longest n-gram matched")
    sp.add_argument("--ngram-min", type=int, default=1, help="prompt lookup: shortest n-gram matched")
    sp.add_argument("--ngram-memory", action="store_true",
                    help="Auto: draft also from the n-grams past runs of this model generated (kept in the data "
                         "folder, SPECDEC_DATA), and learn this run's output into them")
    sp.add_argument("--lookup", choices=LOOKUP_SOURCES, default="cache",
                    help="prompt lookup's source: confident continuations from n-gram counts (cache, as "
                         "llama-lookup), whatever followed the latest match (latest, as transformers), or "
                         "llama.cpp's spec types ngram-simple, ngram-map-k, ngram-map-k4v, ngram-mod at their "
                         "own sizes (simple, map-k, map-k4v, mod; they copy up to 48 or 64 tokens, so give "
                         "them a large -k)")
    sp.add_argument("--lookup-key", type=int, default=0,
                    help="simple, map-k, map-k4v: the key n-gram's length (llama.cpp's --spec-ngram-*-size-n; "
                         "default 0: its own, 12)")
    sp.add_argument("--lookup-copy", type=int, default=0,
                    help="simple, map-k, map-k4v: the longest copy after the key (--spec-ngram-*-size-m; "
                         "default 0: its own, 48)")
    sp.add_argument("--rollback", choices=ROLLBACKS, default="auto",
                    help="recurrent and hybrid models: undo rejected drafts by llama.cpp's per-token snapshots "
                         "(n_rs_seq: a cost on every decode) or by checkpoints (a state copy per verification, "
                         "and a re-decode after a rejection); auto: snapshots for an MTP head, checkpoints else")


def config_from(args: argparse.Namespace):
    from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams
    from specdec_studio.engine.sampling import SamplingParams

    return RunConfig(
        mode=args.mode,
        max_tokens=args.n_predict,
        sampling=SamplingParams(args.temp, args.top_k, args.top_p, args.min_p, args.seed),
        lookahead=LookaheadParams(
            args.W, args.N, args.G, not args.no_prompt_pool, args.window_from_prompt, not args.reference_kv
        ),
        speculative=SpeculativeParams(
            k=args.draft, adaptive=args.adaptive, k_min=args.k_min, k_max=args.k_max, auto_k_max=args.auto_k_max,
            p_min=args.p_min, ngram_max=args.ngram_max, ngram_min=args.ngram_min, lookup=args.lookup,
            ngram_memory=args.ngram_memory, lookup_key=args.lookup_key, lookup_copy=args.lookup_copy,
            rollback=args.rollback,
        ),
        # a trace is recorded to be replayed and explained: it always holds the explanations
        explain=bool(getattr(args, "explain", False) or getattr(args, "trace", None)),
    )


def run_setup(args: argparse.Namespace):
    """The run config of ``run``'s flags, checked, and the target and draft model paths they name."""
    from specdec_studio.engine.models import catalog

    config = config_from(args)
    config.validate(args.batch_size)
    model_path = catalog.resolve(args.model)
    if config.mode == "speculative" and not args.model_draft:
        raise SpecDecError("--mode speculative needs a draft model: pass -md PATH (or -md default)")
    # Auto proposes with a draft model too when one is given (its tree's "draft" source)
    draft_path = catalog.resolve(args.model_draft) if args.model_draft and config.mode in ("speculative", "auto") \
        else None
    return config, model_path, draft_path


def load_or_measure_said(session, *, draft: bool = False):
    """``profile.load_or_measure``, saying on stderr when it is about to measure (a wait of its own)."""
    from specdec_studio.engine.tuning import profile

    key = profile.profile_key(session, draft=draft)
    if profile.cached(key) is None and key.kv_fill >= 1:  # a context too small is refused at once
        print("measuring the batch-cost profile for this model, context and thread count "
              "(once; about 20 s for SmolLM2 on 2 cores)…", file=sys.stderr)
    return profile.load_or_measure(session, draft=draft)


def ensure_profile(session) -> None:
    from specdec_studio.engine.tuning import profile

    try:
        load_or_measure_said(session)
    except profile.ProfileCancelled:
        pass
    except profile.ProfileUnavailable as exc:
        print(f"specdec: note: {exc}; Auto prices its steps with this run's own timings", file=sys.stderr)


def print_stats(config, stats: dict, finish_reason: str) -> None:
    err = sys.stderr
    print("\n", file=err)
    print(f"encoded {stats['n_prompt']:4d} tokens in {stats['t_encode_s']:8.3f} seconds, "
          f"speed: {stats['encode_tokens_per_second']:8.3f} t/s", file=err)
    print(f"decoded {stats['n_predict']:4d} tokens in {stats['t_generate_s']:8.3f} seconds, "
          f"speed: {stats['tokens_per_second']:8.3f} t/s", file=err)
    print(file=err)
    mode = config.mode_entry
    if mode.settings == "lookahead":
        la = config.lookahead
        print(f"W = {la.W:2d}\nN = {la.N:2d}\nG = {la.G:2d}\n", file=err)
    if mode.draft_then_verify:
        print(f"n_draft   = {config.speculative.k}", file=err)
    print(f"n_predict = {stats['n_predict']}", file=err)
    if mode.verifies:
        print(f"n_drafted = {stats['n_drafted']}", file=err)
        print(f"n_accept  = {stats['n_accept']}", file=err)
        if stats["n_drafted"]:
            print(f"accept    = {100.0 * stats['accept_rate']:.3f}%", file=err)
    if config.mode == "auto" and "auto" in stats:
        from specdec_studio.engine.strategies.auto.report import source_lines, step_limit_line

        auto = stats["auto"]
        print("decisions = " + ", ".join(f"{d} {n}" for d, n in auto["decisions"].items()), file=err)
        for line in [*source_lines(auto), step_limit_line(auto)]:
            if line:
                print(f"  {line}", file=err)
        agreed = auto.get("agreed", {})
        if agreed.get("offered"):
            print(f"  of these, proposed by several sources: offered {agreed['offered']}, "
                  f"accepted {agreed['accepted']}", file=err)
    print(f"steps     = {stats['steps']}", file=err)
    if stats.get("steps", 0) > 1 and stats.get("t_generate_s"):
        step_ms = 1e3 * stats["t_generate_s"] / (stats["steps"] - 1)
        print(f"host      = {stats['host_ms_per_step']:.3f} ms/step outside the target's decodes "
              f"({100 * stats['host_ms_per_step'] / step_ms:.0f}% of a step)", file=err)
    print(f"tokens/step = {stats['tokens_per_step']:.3f}", file=err)
    print(f"finish    = {finish_reason}", file=err)
    if stats.get("predicted_speedup") is not None or "measured_speedup" in stats:
        predicted = stats.get("predicted_speedup")
        measured = stats.get("measured_speedup")
        print(f"speed-up  = predicted {predicted:.2f}x" if predicted is not None else "speed-up  = predicted –",
              f"· measured {measured:.2f}x (plain {stats['plain_tokens_per_second']:.1f} t/s)"
              if measured is not None else "· measured – (pass --baseline)", file=err)
    if stats.get("break_even"):
        print(f"break-even: {stats['break_even']}", file=err)
    if "kv_checks" in stats:
        print(f"kv mirror = equal to llama.cpp's dump before all {stats['kv_checks']} decodes", file=err)

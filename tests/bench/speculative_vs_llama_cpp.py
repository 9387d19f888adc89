"""Draft-model speculation against llama.cpp's own ``llama-speculative-simple``, side by side.

Both run as fresh processes on the same target and draft files (default: the ``coder`` pair), the
same prompt text (a code request in the target's chat template, written out so that both tokenise
the same characters with special tokens parsed), the same threads, greedy, a fixed draft length k
(no probability cut-off on either side: ``--spec-draft-p-min 0`` and ``--p-min 0``) and 128
tokens, in ABBA order per k (theirs, ours, ours, theirs) so that a drift of the machine's speed hits
both alike. Prints every run, each round's ratio, the median ratio per k and the time per step.

    scripts/build_llama_tools.sh                 # once: builds llama-speculative-simple (about 5 minutes)
    specdec models fetch coder coder-draft       # once: the pair (1.6 GB)
    .venv/bin/python tests/bench/speculative_vs_llama_cpp.py [--rounds 4] [-k 3 -k 5] [-m coder -md coder-draft]

Without a llama-speculative-simple build, or without the pair, it says how to get them and exits 0.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import THREADS, model_path
from specdec_studio.engine.errors import ModelFileError
from lookup_vs_llama_cpp import REPO, find_tools, parse

N_TOKENS = 128
MESSAGE = ("Write a Python function that parses a CSV file of (name, score) rows and returns the three "
           "best scores per name, with a docstring and type hints.")


def prompt_text(target: Path) -> str:
    """The message in the target's chat template, as text (the template writes its own BOS)."""
    from specdec_studio.engine.session import Session

    with Session(target, n_ctx=512, n_threads=THREADS) as session:
        return session.require_template().render([("user", MESSAGE)])


def run_theirs(binary: Path, target: Path, draft: Path, prompt_file: Path, k: int) -> dict:
    cmd = [
        str(binary),
        "-m",
        str(target),
        "-md",
        str(draft),
        "-f",
        str(prompt_file),
        "-n",
        str(N_TOKENS),
        "--temp",
        "0",
        "--top-k",
        "1",
        "-t",
        str(THREADS),
        "-td",
        str(THREADS),
        "-c",
        "4096",
        "--spec-type",
        "draft-simple",
        "--spec-draft-n-max",
        str(k),
        "--spec-draft-n-min",
        "0",
        "--spec-draft-p-min",
        "0",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)})
    if out.returncode != 0:
        raise RuntimeError(f"{binary.name} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    return parse(out.stdout + out.stderr)


def run_ours(target: Path, draft: Path, prompt_file: Path, k: int) -> dict:
    cmd = [sys.executable, "-m", "specdec_studio.engine.cli", "run", "-m", str(target), "-md", str(draft),
           "-f", str(prompt_file), "--mode", "speculative", "-k", str(k), "--p-min", "0", "-n", str(N_TOKENS),
           "--temp", "0", "-t", str(THREADS), "--no-predict"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    return parse(out.stdout + out.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=4, help="ABBA rounds per k (4 runs each)")
    ap.add_argument("-k", type=int, action="append", help="draft lengths (default 3 and 5)")
    ap.add_argument("-m", "--model", default="coder", help="the target: a catalog name or a path")
    ap.add_argument("-md", "--draft", default="coder-draft", help="the draft: a catalog name or a path")
    ap.add_argument(
        "--bin", default=None, help="folder with llama-speculative-simple (default: scripts/build_llama_tools.sh)"
    )
    args = ap.parse_args()
    ks = args.k or [3, 5]

    tools = find_tools(args.bin)
    binary = tools / "llama-speculative-simple" if tools else None
    if binary is None or not binary.exists():
        print("llama-speculative-simple is not built: run scripts/build_llama_tools.sh first (about 5 minutes)")
        return
    try:
        target, draft = model_path(args.model), model_path(args.draft)
    except ModelFileError as exc:  # the pair is fetched only when asked for (1.6 GB)
        print(f"{exc}; `make bench` leaves it out until then")
        return
    with tempfile.TemporaryDirectory() as tmp:
        ours_prompt, theirs_prompt = Path(tmp, "ours.txt"), Path(tmp, "theirs.txt")
        text = prompt_text(target)
        ours_prompt.write_text(text)
        theirs_prompt.write_text(text + "\n")  # llama.cpp drops one trailing newline of -f
        print(f"{target.name} drafted by {draft.name}, {THREADS} threads, greedy, {N_TOKENS} tokens, "
              "a code request in the chat template")
        for k in ks:
            ratios, theirs_step, ours_step, theirs_tps, ours_tps = [], [], [], [], []
            for r in range(args.rounds):
                a1 = run_theirs(binary, target, draft, theirs_prompt, k)
                b1 = run_ours(target, draft, ours_prompt, k)
                b2 = run_ours(target, draft, ours_prompt, k)
                a2 = run_theirs(binary, target, draft, theirs_prompt, k)
                ratios.append((b1["tps"] + b2["tps"]) / (a1["tps"] + a2["tps"]))
                theirs_tps += [a1["tps"], a2["tps"]]
                ours_tps += [b1["tps"], b2["tps"]]
                theirs_step += [a1["ms_per_step"], a2["ms_per_step"]]
                ours_step += [b1["ms_per_step"], b2["ms_per_step"]]
                print(f"k={k} round {r + 1}: llama-speculative-simple {a1['tps']:6.2f} {a2['tps']:6.2f} t/s   "
                      f"ours {b1['tps']:6.2f} {b2['tps']:6.2f} t/s   ratio {ratios[-1]:5.3f}", flush=True)
            for name, run in (("llama", a1), ("ours", b1)):
                print(f"  {name + ':':<6} {run['tokens']} tokens, n_drafted {run['n_drafted']}, "
                      f"n_accept {run['n_accept']} ({100 * run['n_accept'] / max(1, run['n_drafted']):.0f} %)")
            print(
                f"  median t/s: llama {statistics.median(theirs_tps):.2f}, ours {statistics.median(ours_tps):.2f}; "
                f"median ms per step: llama {statistics.median(theirs_step):.1f}, "
                f"ours {statistics.median(ours_step):.1f}"
            )
            print(f"k={k}: ours / llama-speculative-simple, median of round ratios {statistics.median(ratios):.3f} "
                  f"(min {min(ratios):.3f}, max {max(ratios):.3f})", flush=True)


if __name__ == "__main__":
    main()

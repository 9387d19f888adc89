"""Prompt lookup against llama.cpp's own ``llama-lookup``, side by side in one run.

Both run as fresh processes on the same model, prompt (the code prompt, 144 tokens), threads,
draft length and 256 greedy tokens, in ABBA order (llama-lookup, ours, ours, llama-lookup) so
that a drift of the machine's speed hits both alike. Prints every run's t/s and draft counts,
each round's ratio, and the median ratio. Ours runs with ``--lookup cache --ngram-max 4``, the
drafting llama-lookup does (context n-gram cache, n-grams of 1 to 4 tokens).

    scripts/build_llama_tools.sh                 # once: builds llama-lookup from the same sdist
    .venv/bin/python tests/bench/lookup_vs_llama_cpp.py [--rounds 6] [-k 3] [--bin DIR]
    .venv/bin/python tests/bench/lookup_vs_llama_cpp.py --auto    # our Auto against llama-lookup's best k
    .venv/bin/python tests/bench/lookup_vs_llama_cpp.py --auto -m default-q4_0   # both on the Q4_0 copy

With ``--auto`` llama-lookup first runs once at every draft length from 1 to 8; the fastest is
its setting for the rounds, against our ``--mode auto`` (which chooses its drafts per step).

Without a llama-lookup build it says how to make one and exits 0 (``make bench`` runs it too).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import CODE_PROMPT, THREADS, model_path

REPO = Path(__file__).resolve().parents[2]
N_TOKENS = 256
SPEED = re.compile(r"decoded\s+(\d+) tokens in\s+([\d.]+) seconds, speed:\s+([\d.]+) t/s")
COUNT = re.compile(r"\b(n_drafted|n_accept)\s*=\s*(\d+)")


def find_tools(given: str | None) -> Path | None:
    if given:
        return Path(given)
    if os.environ.get("LLAMA_TOOLS"):
        return Path(os.environ["LLAMA_TOOLS"])
    try:
        out = subprocess.run([str(REPO / "scripts/build_llama_tools.sh")], capture_output=True, text=True,
                             check=True, env={**os.environ, "SPECDEC_TOOLS_NO_BUILD": "1"})
        return Path(out.stdout.strip())
    except subprocess.CalledProcessError:
        return None


def parse(output: str) -> dict:
    speed = SPEED.search(output)
    if speed is None:
        raise RuntimeError("no speed line in the output:\n" + output[-2000:])
    counts = {name: int(value) for name, value in COUNT.findall(output)}
    tokens, seconds = int(speed.group(1)), float(speed.group(2))
    # every step ends with one token of the target's own (the rest were accepted drafts)
    steps = tokens - counts["n_accept"]
    return {"tokens": tokens, "tps": float(speed.group(3)), "ms_per_step": 1e3 * seconds / steps, **counts}


def run_llama_lookup(binary: Path, model: Path, prompt_file: Path, k: int) -> dict:
    cmd = [str(binary), "-m", str(model), "-f", str(prompt_file), "-n", str(N_TOKENS), "--temp", "0",
           "--top-k", "1", "-t", str(THREADS), "--spec-draft-n-max", str(k)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True,
                         env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)})
    return parse(out.stdout + out.stderr)


def run_ours(model: Path, prompt_file: Path, k: int, auto: bool = False) -> dict:
    mode = ["--mode", "auto"] if auto else ["--mode", "lookup", "--lookup", "cache", "--ngram-max", "4", "-k", str(k)]
    cmd = [sys.executable, "-m", "specdec_studio.engine.cli", "run", "-m", str(model), "-f", str(prompt_file), *mode,
           "-n", str(N_TOKENS), "--temp", "0", "-t", str(THREADS), "--no-predict"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    return parse(out.stdout + out.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6, help="ABBA rounds (4 runs each)")
    ap.add_argument("-k", type=int, default=3, help="draft length (llama-lookup's --spec-draft-n-max)")
    ap.add_argument("--bin", default=None, help="folder with llama-lookup (default: scripts/build_llama_tools.sh)")
    ap.add_argument("--auto", action="store_true", help="ours in Auto mode, against llama-lookup's best k of 1..8")
    ap.add_argument("-m", "--model", default="default",
                    help="the file both run on: a catalog name (default, default-q4_0, …) or a path")
    args = ap.parse_args()

    tools = find_tools(args.bin)
    binary = tools / "llama-lookup" if tools else None
    if binary is None or not binary.exists():
        print("llama-lookup is not built: run scripts/build_llama_tools.sh first (about 5 minutes)")
        return
    model = model_path(args.model)
    with tempfile.TemporaryDirectory() as tmp:
        ours_prompt, theirs_prompt = Path(tmp, "ours.txt"), Path(tmp, "theirs.txt")
        ours_prompt.write_text(CODE_PROMPT)
        theirs_prompt.write_text(CODE_PROMPT + "\n")  # llama.cpp drops one trailing newline of -f

        if args.auto:
            by_k = {k: run_llama_lookup(binary, model, theirs_prompt, k)["tps"] for k in range(1, 9)}
            args.k = max(by_k, key=by_k.get)
            print("llama-lookup by draft length: " + ", ".join(f"k={k} {t:.1f} t/s" for k, t in by_k.items())
                  + f"; best k={args.k}; ours: --mode auto")
        print(f"{model.name}, code prompt, k={args.k}, {THREADS} threads, greedy, {N_TOKENS} tokens")
        ratios, theirs_tps, ours_tps, theirs_step, ours_step = [], [], [], [], []
        for r in range(args.rounds):
            a1 = run_llama_lookup(binary, model, theirs_prompt, args.k)
            b1 = run_ours(model, ours_prompt, args.k, args.auto)
            b2 = run_ours(model, ours_prompt, args.k, args.auto)
            a2 = run_llama_lookup(binary, model, theirs_prompt, args.k)
            ratio = (b1["tps"] + b2["tps"]) / (a1["tps"] + a2["tps"])
            ratios.append(ratio)
            theirs_tps += [a1["tps"], a2["tps"]]
            ours_tps += [b1["tps"], b2["tps"]]
            theirs_step += [a1["ms_per_step"], a2["ms_per_step"]]
            ours_step += [b1["ms_per_step"], b2["ms_per_step"]]
            print(f"round {r + 1}: llama-lookup {a1['tps']:7.1f} {a2['tps']:7.1f} t/s   "
                  f"ours {b1['tps']:7.1f} {b2['tps']:7.1f} t/s   ratio {ratio:5.3f}")
        for name, run in (("llama-lookup", a1), ("ours", b1)):
            print(f"{name + ':':<13} {run['tokens']} tokens in {run['tokens'] - run['n_accept']} steps, "
                  f"n_drafted {run['n_drafted']}, n_accept {run['n_accept']}")
        # llama-lookup keeps the drafts accepted on its last step past -n, so it reports a few
        # more tokens for the same steps; the time per step compares the work itself
        print(f"median ms per step: llama-lookup {statistics.median(theirs_step):.2f}, "
              f"ours {statistics.median(ours_step):.2f}")
        print(f"median t/s: llama-lookup {statistics.median(theirs_tps):.1f}, ours {statistics.median(ours_tps):.1f}")
        print(f"ours / llama-lookup: median of round ratios {statistics.median(ratios):.3f} "
              f"(min {min(ratios):.3f}, max {max(ratios):.3f})")


if __name__ == "__main__":
    main()

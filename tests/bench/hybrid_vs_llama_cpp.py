"""Drafting on a hybrid model against llama.cpp's ``llama-speculative-simple``, side by side.

On llama.cpp's tiny qwen35 (linear-attention layers with a recurrent state between attention
layers; from scripts/tiny_archs.sh) and the same model with an MTP block (tests/mtp_model.py):

- prompt lookup (ours, its ``simple`` source at the same sizes) against ``--spec-type ngram-simple``;
- self-draft speculation (the file drafts for itself) against ``--spec-type draft-simple``;
- MTP drafting against ``--spec-type draft-mtp``.

Each pair runs as fresh processes on the same file and prompt text, greedy, one thread, the same
k and no probability cut-off, in ABBA order (theirs, ours, ours, theirs). The two sides' sources
differ in what they propose (and llama.cpp counts one more token), so what is compared is the cost
of a verified step: generation time over steps, steps being tokens minus accepted drafts. Prints
each round, the median ratio llama ms per step / ours (>= 1: ours costs no more) and both sides'
acceptance, and the ratio of each side's fastest run (noise from other processes only ever adds time).

    scripts/build_llama_tools.sh && scripts/tiny_archs.sh      # once
    .venv/bin/python tests/bench/hybrid_vs_llama_cpp.py [--rounds 3] [-n 256] [--rollback snapshots]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

from lookup_vs_llama_cpp import REPO, find_tools, parse

from specdec_studio.engine.kv.rollback import ROLLBACKS

PROMPT = "a b c a b c a b c a b c a b"
THREADS = 1

# name -> (the file, our arguments after `specdec run -m FILE`, llama-speculative-simple's)
CASES = {
    # our ngram-simple source at llama.cpp's sizes here, so both sides draft the same tokens at the
    # same steps and a step's cost is compared like for like
    "lookup simple k=3 / ngram-simple": (
        "qwen35-dense",
        ["--mode", "lookup", "--lookup", "simple", "--lookup-key", "2", "--lookup-copy", "3", "-k", "3"],
        ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "2", "--spec-ngram-simple-size-m", "3"],
    ),
    "self-draft k=4 / draft-simple": (
        "qwen35-dense",
        ["--mode", "speculative", "-md", "{model}", "-k", "4", "--p-min", "0"],
        [
            "--spec-type",
            "draft-simple",
            "-md",
            "{model}",
            "--spec-draft-n-max",
            "4",
            "--spec-draft-n-min",
            "0",
            "--spec-draft-p-min",
            "0",
        ],
    ),
    "mtp k=3 / draft-mtp": (
        "qwen35-mtp",
        ["--mode", "mtp", "-k", "3", "--p-min", "0"],
        ["--spec-type", "draft-mtp", "--spec-draft-n-max", "3", "--spec-draft-p-min", "0"],
    ),
}


def tiny_models() -> Path | None:
    done = subprocess.run([str(REPO / "scripts/tiny_archs.sh")], capture_output=True, text=True,
                          env={**os.environ, "SPECDEC_TOOLS_NO_BUILD": "1"})
    return Path(done.stdout.strip()) if done.returncode == 0 else None


def run_theirs(binary: Path, model: Path, args: list[str], n: int) -> dict:
    cmd = [
        str(binary),
        "-m",
        str(model),
        "-p",
        PROMPT,
        "-n",
        str(n),
        "--temp",
        "0",
        "--top-k",
        "1",
        "-t",
        str(THREADS),
        "-td",
        str(THREADS),
        "-c",
        str(n + 128),
        *[a.replace("{model}", str(model)) for a in args],
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)})
    if out.returncode != 0:
        raise RuntimeError(f"{binary.name} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    return parse(out.stdout + out.stderr)


def run_ours(model: Path, args: list[str], n: int, rollback: str = "auto") -> dict:
    cmd = [sys.executable, "-m", "specdec_studio.engine.cli", "run", "-m", str(model), "-p", PROMPT,
           *[a.replace("{model}", str(model)) for a in args], "-n", str(n), "--temp", "0", "-t", str(THREADS),
           "-c", str(n + 128), "--no-predict", "--rollback", rollback]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=REPO)
    return parse(out.stdout + out.stderr)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="ABBA rounds per case (4 runs each)")
    ap.add_argument("-n", type=int, default=1024, help="tokens to generate (a tiny model's run of 256 takes 0.1 s: "
                    "too short to time)")
    ap.add_argument(
        "--bin", default=None, help="folder with llama-speculative-simple (default: scripts/build_llama_tools.sh)"
    )
    ap.add_argument("--rollback", choices=ROLLBACKS, default="auto",
                    help="how our runs undo rejected drafts (specdec run --rollback): what each costs per step")
    ap.add_argument("--only", default=None, help="the cases whose name contains this")
    args = ap.parse_args()
    tools = find_tools(args.bin)
    binary = tools / "llama-speculative-simple" if tools else None
    models = tiny_models()
    if binary is None or not binary.exists() or models is None:
        print(
            "needs llama-speculative-simple and the tiny models: "
            "run scripts/build_llama_tools.sh and scripts/tiny_archs.sh"
        )
        return
    print(f"llama.cpp's tiny qwen35, {THREADS} thread, greedy, {args.n} tokens, prompt {PROMPT!r}, "
          f"our rollback: {args.rollback}")
    for name, (model_name, ours_args, theirs_args) in CASES.items():
        if args.only and args.only not in name:
            continue
        model = models / f"{model_name}.gguf"
        ratios, accept = [], {"llama": [], "ours": []}
        steps_ms: dict[str, list[float]] = {"llama": [], "ours": []}  # every run's, for the best of each side
        for r in range(args.rounds):
            a1 = run_theirs(binary, model, theirs_args, args.n)
            b1 = run_ours(model, ours_args, args.n, args.rollback)
            b2 = run_ours(model, ours_args, args.n, args.rollback)
            a2 = run_theirs(binary, model, theirs_args, args.n)
            theirs_ms, ours_ms = (
                (a1["ms_per_step"] + a2["ms_per_step"]) / 2,
                (b1["ms_per_step"] + b2["ms_per_step"]) / 2,
            )
            ratios.append(theirs_ms / ours_ms)
            steps_ms["llama"] += [a1["ms_per_step"], a2["ms_per_step"]]
            steps_ms["ours"] += [b1["ms_per_step"], b2["ms_per_step"]]
            for side, run in (("llama", a1), ("ours", b1)):
                accept[side].append(run["n_accept"] / max(1, run["n_drafted"]))
            print(f"{name} round {r + 1}: ms per step llama {theirs_ms:.3f}, ours {ours_ms:.3f}, "
                  f"ratio {ratios[-1]:.3f}", flush=True)
        print(
            f"{name}: llama ms per step / ours, median {statistics.median(ratios):.3f} "
            f"(min {min(ratios):.3f}, max {max(ratios):.3f}); "
            f"accepted: llama {100 * statistics.median(accept['llama']):.1f} %, "
            f"ours {100 * statistics.median(accept['ours']):.1f} %",
            flush=True,
        )
        # what another process took from a run only ever adds time: each side's fastest run is
        # the least disturbed measure of what its step costs
        best_llama, best_ours = min(steps_ms["llama"]), min(steps_ms["ours"])
        print(f"{name}: fastest of {len(steps_ms['ours'])} runs each: llama {best_llama:.3f} ms per step, "
              f"ours {best_ours:.3f}, ratio {best_llama / best_ours:.3f}", flush=True)


if __name__ == "__main__":
    main()

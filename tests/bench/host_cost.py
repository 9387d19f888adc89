"""Host cost per step at GPU-like step times: every mode against its llama.cpp peer on the default
model cut to its first layers, side by side in one run.

A GPU decodes a step of a small model in 1-5 ms, where the Python around each decode decides the
speed; cutting SmolLM2 to its first 1 or 3 transformer blocks (``engine.drafts.distill.
keep_first_layers``, made once into the bench cache) gives such step times on this CPU. For each
model (1 layer, 3 layers, the full model) and each pair:

- prompt lookup k=3 (our n-gram cache, 1-4-grams) / ``llama-lookup --spec-draft-n-max 3``;
- self-draft speculation k=3 (the file drafts for itself) / ``llama-speculative-simple --spec-type draft-simple``;
- lookahead W=15 N=5 G=15, no prompt pool / ``llama-lookahead`` (its fixed setting, its pool empty at the start);
- Auto / ``llama-speculative-simple --spec-type ngram-mod``;

both sides run as fresh processes on the code prompt (256 tokens, greedy, the same threads) in ABBA
order (theirs, ours, ours, theirs). Printed per row: the median over rounds of ours / theirs in
tokens per second, and our host time per step (``stats.host_ms_per_step`` of ``specdec run
--json``: the generation's wall time outside the target's decodes, per step; a speculative run's
includes the draft's decodes) in ms and as a share of our mean step.

    scripts/build_llama_tools.sh                       # once
    .venv/bin/python tests/bench/host_cost.py [--rounds 2] [--layers 1,3,0] [--only lookup,auto]

``--layers 0`` is the full model. Run it with nothing else on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from _common import CODE_PROMPT, THREADS, model_path
from lookup_vs_llama_cpp import REPO, find_tools, parse

from specdec_studio.engine.paths import cache_root

N_TOKENS = 256
# name -> (our `specdec run` arguments, the llama.cpp binary, its arguments); {model} is the file
PAIRS = {
    "lookup": (
        ["--mode", "lookup", "--lookup", "cache", "--ngram-max", "4", "-k", "3"],
        "llama-lookup",
        ["--spec-draft-n-max", "3"],
    ),
    "self-draft": (
        ["--mode", "speculative", "-md", "{model}", "-k", "3", "--p-min", "0"],
        "llama-speculative-simple",
        [
            "--spec-type",
            "draft-simple",
            "-md",
            "{model}",
            "--spec-draft-n-max",
            "3",
            "--spec-draft-n-min",
            "0",
            "--spec-draft-p-min",
            "0",
        ],
    ),
    # without our prompt pool: llama-lookahead starts its pool empty, and on the code prompt the
    # prompt's n-grams made every batch 20 tokens longer (87 against 67) for one step fewer
    "lookahead": (
        ["--mode", "lookahead", "-W", "15", "-N", "5", "-G", "15", "--no-prompt-pool"],
        "llama-lookahead",
        [],
    ),
    "auto": (["--mode", "auto"], "llama-speculative-simple", ["--spec-type", "ngram-mod"]),
}


def cut_model(layers: int) -> Path:
    """The default model with its first ``layers`` blocks (0: the whole model), made once."""
    full = model_path()
    if layers == 0:
        return full
    from specdec_studio.engine.drafts.distill import keep_first_layers

    dst = cache_root() / "bench" / f"{full.stem}.first-{layers}.gguf"
    if not dst.exists():
        dst.parent.mkdir(parents=True, exist_ok=True)
        keep_first_layers(full, dst, layers)
    return dst


def ensure_profile(model: Path) -> None:
    """The model's batch-cost profile, measured once (untimed) as ``specdec run --mode auto`` does
    before its first run: Auto prices its steps with it, and the runs here pass --no-predict."""
    from specdec_studio.engine.session import Session
    from specdec_studio.engine.tuning import profile

    with Session(model, n_threads=THREADS, observe=False) as session:
        profile.load_or_measure(session)


def run_ours(model: Path, prompt_file: Path, args: list[str]) -> dict:
    cmd = [sys.executable, "-m", "specdec_studio.engine.cli", "run", "-m", str(model), "-f", str(prompt_file),
           "-n", str(N_TOKENS), "--temp", "0", "-t", str(THREADS), "--no-predict", "--json",
           *[a.replace("{model}", str(model)) for a in args]]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    if out.returncode != 0:
        raise RuntimeError(f"specdec run failed ({out.returncode}):\n{out.stderr[-3000:]}")
    stats = json.loads(out.stdout)["stats"]
    step_ms = 1e3 * stats["t_generate_s"] / max(1, stats["steps"] - 1)
    return {"tps": stats["tokens_per_second"], "host_ms": stats["host_ms_per_step"], "step_ms": step_ms}


def run_theirs(binary: Path, model: Path, prompt_file: Path, args: list[str]) -> dict:
    cmd = [str(binary), "-m", str(model), "-f", str(prompt_file), "-n", str(N_TOKENS), "--temp", "0",
           "--top-k", "1", "-t", str(THREADS), "-tb", str(THREADS), "-c", "4096",
           *[a.replace("{model}", str(model)) for a in args]]
    out = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)})
    if out.returncode != 0:
        raise RuntimeError(f"{binary.name} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    return parse(out.stdout + out.stderr)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="ABBA rounds (4 runs each)")
    ap.add_argument("--layers", default="1,3,0", help="comma-separated blocks kept (0: the full model)")
    ap.add_argument("--only", help=f"comma-separated pairs of {', '.join(PAIRS)}")
    ap.add_argument("--bin", default=None, help="folder with llama.cpp's tools (default: scripts/build_llama_tools.sh)")
    args = ap.parse_args()
    tools = find_tools(args.bin)
    if tools is None or not all((tools / binary).exists() for _, binary, _ in PAIRS.values()):
        print("llama.cpp's tools are not built: run scripts/build_llama_tools.sh first (about 5 minutes)")
        return 0
    pairs = {name: PAIRS[name] for name in (args.only.split(",") if args.only else PAIRS)}
    layers = [int(x) for x in args.layers.split(",")]
    with tempfile.TemporaryDirectory() as tmp:
        ours_prompt, theirs_prompt = Path(tmp, "ours.txt"), Path(tmp, "theirs.txt")
        ours_prompt.write_text(CODE_PROMPT)
        theirs_prompt.write_text(CODE_PROMPT + "\n")  # llama.cpp drops one trailing newline of -f
        print(f"code prompt, {N_TOKENS} tokens, {THREADS} threads, greedy, {args.rounds} ABBA rounds; "
              "ours / theirs in tokens/s (median of rounds), our host ms per step and its share of a step")
        print(f"{'pair':<12}" + "".join(f"{('full' if n == 0 else f'{n} layer' + 's' * (n > 1)):>34}" for n in layers))
        table: dict[str, list[str]] = {name: [] for name in pairs}
        for n in layers:
            model = cut_model(n)
            for name, (ours_args, binary, their_args) in pairs.items():
                if "auto" in ours_args:
                    ensure_profile(model)
                ratios, host, share = [], [], []
                for _ in range(args.rounds):
                    a1 = run_theirs(tools / binary, model, theirs_prompt, their_args)
                    b1 = run_ours(model, ours_prompt, ours_args)
                    b2 = run_ours(model, ours_prompt, ours_args)
                    a2 = run_theirs(tools / binary, model, theirs_prompt, their_args)
                    ratios.append((b1["tps"] + b2["tps"]) / (a1["tps"] + a2["tps"]))
                    for b in (b1, b2):
                        host.append(b["host_ms"])
                        share.append(b["host_ms"] / b["step_ms"])
                table[name].append(f"{statistics.median(ratios):.2f}x, host {statistics.median(host):.2f} ms "
                                   f"({100 * statistics.median(share):.0f} %)")
                print(f"  {name} on {model.name}: {table[name][-1]}", flush=True)
        print()
        for name, cells in table.items():
            print(f"{name:<12}" + "".join(f"{cell:>34}" for cell in cells))
    return 0


if __name__ == "__main__":
    sys.exit(main())

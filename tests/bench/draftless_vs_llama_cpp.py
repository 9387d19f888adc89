"""Draftless drafting against llama.cpp's own spec types, side by side in one run.

Ours: plain, Auto, and prompt lookup with each of its sources (our n-gram cache and latest
match, and our versions of llama.cpp's ngram-simple, -map-k, -map-k4v and -mod). Theirs:
``llama-speculative-simple --spec-type T`` for T in ngram-simple, ngram-map-k, ngram-map-k4v,
ngram-mod and ngram-cache (built by scripts/build_llama_tools.sh from the same sdist). Every
setting runs on the same prompt tokens (each shipped category's first prompt in the model's chat
template, 128 tokens; the code prompt, raw, 256 tokens), greedy, the same threads, in rounds of
every setting forward and then back, so a drift of the machine's speed hits all alike.

Ours run in this process on one loaded model (no load time either way: both sides report
the generation alone), theirs as fresh processes. "llama plain" is llama-speculative-simple's
own loop with nothing ever drafted (ngram-simple with sizes no context of the bench reaches).

The two sides do not generate the same text. SmolLM2's kernels are not batch-invariant with 2
threads: llama.cpp decodes the prompt but its last token in one batch and that token with the
first step, we decode the prompt in one batch, and a greedy choice with a small top-2 margin goes
the other way some tokens in (measured on the chat category: "left alone. It's a sign of a
healthy cat" there, "left alone. The shelter used to" here, 71 tokens against 128). So every
output is checked against its own side's plain: ours token by token, theirs as text (its printed
continuation must start with llama plain's, up to the shorter of the two, since llama.cpp may
keep accepted drafts past -n). And every setting's speed is given two ways, from each round's
runs: over our plain's tokens/s, and over its own side's plain (the speed-up it brings to its
own loop on its own text); the second is the fair comparison of the two sides' drafting, the
first adds the difference of the loops and of the texts' lengths (mean tokens per run printed).

Their runs can go past -n: a draft made with one token left to generate is kept whole (a
llama-speculative-simple quirk, see their_lengths), so ngram-mod's code run generates 321 tokens
for -n 256, its last 65 in one step. Where a type does, the bench sets Auto against it two ways:
Auto runs again to that length in the same rounds ("at T's length": the same text, but the last
65 tokens cost T one step, which no run stopped at its own length gets), and T's speed over its
steps up to -n + 1 tokens is read from its debug log's step times ("over T's first n": the
same text as Auto's run of -n, each side's own steps).

Lookup's k: 64 for the llama.cpp-style sources (their own caps, 48 or 64, apply inside), 8 for
the n-gram cache and latest match (llama.cpp's ngram-cache drafts 8).

    scripts/build_llama_tools.sh                                      # once
    .venv/bin/python tests/bench/draftless_vs_llama_cpp.py [--rounds 2] [--category code_editing ...]
    .venv/bin/python tests/bench/draftless_vs_llama_cpp.py --only auto,ngram-mod,ngram-map-k

Run it with nothing else on the machine; it measures the batch-cost profile first if none is
cached (Auto prices its steps with it).
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from _common import CODE_PROMPT, THREADS, model_path
from lookup_vs_llama_cpp import find_tools, parse

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.session import Session
from specdec_studio.engine.tuning import profile
from specdec_studio.engine.tuning.cost_model import geometric_mean
from specdec_studio.engine.tuning.prompts import shipped
from specdec_studio.engine.tuning.sweep import prompt_tokens

CHAT_TOKENS, CODE_TOKENS = 128, 256
THEIR_TYPES = ("ngram-simple", "ngram-map-k", "ngram-map-k4v", "ngram-mod", "ngram-cache")
LLAMA_PLAIN = "llama plain"
# llama-speculative-simple needs a spec type: ngram-simple never drafts before the context holds
# more than key + copy + 1 tokens (1026 here; a run of the bench holds at most about 420). The copy
# stays 1 long: the longest draft a type may make sizes its batch and output buffers, and a plain
# loop should not carry those of a 1024-token draft
THEIR_ARGS = {**{t: ["--spec-type", t] for t in THEIR_TYPES},
              LLAMA_PLAIN: ["--spec-type", "ngram-simple", "--spec-ngram-simple-size-n", "1024",
                            "--spec-ngram-simple-size-m", "1"]}
OUR_LOOKUPS = {"cache": 8, "latest": 8, "simple": 64, "map-k": 64, "map-k4v": 64, "mod": 64}
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def our_settings() -> dict[str, RunConfig]:
    settings = {"plain": RunConfig(), "auto": RunConfig(mode="auto")}
    for source, k in OUR_LOOKUPS.items():
        settings[f"lookup {source}"] = RunConfig(mode="lookup", speculative=SpeculativeParams(k=k, lookup=source))
    return settings


def run_ours(session, config: RunConfig, tokens: list[int], n: int) -> tuple[float, int, list[int]]:
    final = None
    for event in session.run(RunConfig(mode=config.mode, max_tokens=n, speculative=config.speculative), tokens):
        if isinstance(event, RunFinished):
            final = event
    stats = final.stats
    return stats["n_predict"] / stats["t_generate_s"], stats["n_predict"], list(final.token_ids)


def run_theirs(binary: Path, model: Path, prompt_file: Path, name: str, n: int) -> tuple[float, int, str, float]:
    """Their tokens/s as they report it, tokens, text, and tokens/s over their steps up to n + 1
    tokens (:func:`first_tokens_speed`)."""
    cmd = [str(binary), "-m", str(model), "-f", str(prompt_file), "-n", str(n), "--temp", "0", "--top-k", "1",
           "-t", str(THREADS), "-tb", str(THREADS), "-c", "4096", "-b", "2048", "-lv", "5", *THEIR_ARGS[name]]
    out = subprocess.run(cmd, capture_output=True, text=True, errors="replace",
                         env={**os.environ, "LD_LIBRARY_PATH": str(binary.parent)})
    if out.returncode != 0:
        raise RuntimeError(f"{name} failed ({out.returncode}):\n{(out.stdout + out.stderr)[-3000:]}")
    run = parse(out.stdout + out.stderr)
    generated = ANSI.sub("", out.stdout).split(prompt_file.read_text(), 1)[-1].rstrip("\n")  # logs go to stderr
    return run["tps"], run["tokens"], generated, first_tokens_speed(out.stdout + out.stderr, n + 1)


def departure(output: Sequence, plain: Sequence | None, unit: str) -> str | None:
    """Where ``output`` leaves ``plain`` ("at token 105 of 256"), None where it does not (or there
    is no plain yet)."""
    if plain is None or list(output) == list(plain):
        return None
    at = next((i for i, (a, b) in enumerate(zip(output, plain)) if a != b), min(len(output), len(plain)))
    return f"at {unit} {at} of {len(plain)}"


STEP = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+) D accepted (\d+)/(\d+) draft tokens")
DECODED = re.compile(r"(\d+)\.(\d+)\.(\d+)\.(\d+) I decoded\s+(\d+) tokens in\s+([\d.]+) seconds")


def _seconds(minutes: str, seconds: str, ms: str, us: str) -> float:
    return int(minutes) * 60 + int(seconds) + int(ms) / 1e3 + int(us) / 1e6


def first_tokens_speed(log: str, n_first: int) -> float:
    """Tokens/s of a ``-lv 5`` run over its steps up to ``n_first`` tokens: each step's debug line
    ("accepted a/b draft tokens", a + 1 tokens) is stamped when it ends, and the "decoded" line
    when the generation does, ``seconds`` after it began. A run that ends at n_first (-n + 1)
    reads as its own tokens/s; one whose last step overshot drops that step."""
    done = DECODED.search(log)
    t_end, seconds = _seconds(*done.groups()[:4]), float(done.group(6))
    tokens, at = 0, None
    for match in STEP.finditer(log):
        step_tokens = int(match.group(5)) + 1
        if tokens + step_tokens > n_first:
            break
        tokens += step_tokens
        at = _seconds(*match.groups()[:4])
    if at is None:
        raise RuntimeError("no step of the run fits in its first tokens: was it run with -lv 5?")
    return tokens / (at - (t_end - seconds))


def their_lengths(binary: Path, model: Path, prompt_file: Path, types: list[str], n: int) -> dict[str, int]:
    """The types whose run of -n ``n`` generates more than n tokens, and how many: one untimed run of
    each. llama-speculative-simple caps a draft at the tokens still to generate, but a cap of 0
    (one token left) reads as no cap, so a draft made then is kept whole: ngram-mod's 64-token
    draft turns a 256-token run into 321 tokens, the last 65 for one step's price."""
    lengths = {}
    for name in types:
        _, n_tokens, _, _ = run_theirs(binary, model, prompt_file, name, n)
        if n_tokens > n + 1:  # every run ends one token past -n (llama plain: 257 for 256)
            lengths[name] = n_tokens
    return lengths


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2, help="forward-and-back rounds")
    ap.add_argument(
        "--category", action="append", help="only these chat categories (repeatable; 'code' is the code prompt)"
    )
    ap.add_argument("--only", help="comma-separated settings to run besides plain (e.g. auto,ngram-mod)")
    ap.add_argument(
        "--bin", default=None, help="folder with llama-speculative-simple (default: scripts/build_llama_tools.sh)"
    )
    args = ap.parse_args()

    tools = find_tools(args.bin)
    binary = tools / "llama-speculative-simple" if tools else None
    if binary is None or not binary.exists():
        print("llama-speculative-simple is not built: run scripts/build_llama_tools.sh first (about 5 minutes)")
        return 0
    model = model_path()
    ours = our_settings()
    names = [*ours, LLAMA_PLAIN, *THEIR_TYPES]
    if args.only:
        wanted = {"plain", LLAMA_PLAIN, *args.only.split(",")}
        unknown = wanted - set(names)
        if unknown:
            ap.error(f"unknown settings {sorted(unknown)}; choose from {', '.join(names)}")
        names = [name for name in names if name in wanted]

    with Session(model, n_ctx=4096, n_threads=THREADS) as session, tempfile.TemporaryDirectory() as tmp:
        profile.load_or_measure(session)
        # category -> (tokens, n, the same prompt as text for llama.cpp)
        prompts: dict[str, tuple[list[int], int, Path]] = {}
        firsts = {}
        for p in shipped():
            firsts.setdefault(p.category, p)
        for category, p in firsts.items():
            prompts[category] = (prompt_tokens(session, p, chat=True), CHAT_TOKENS, None)
        prompts["code"] = (session.tokenize_prompt(CODE_PROMPT), CODE_TOKENS, None)
        if args.category:
            prompts = {c: v for c, v in prompts.items() if c in args.category}
        for category, (tokens, n, _) in list(prompts.items()):
            # the prompt as text that llama.cpp tokenizes back to the same ids (specials parsed, BOS added as ours)
            text = "".join(session.vocab.special_text(t) for t in tokens)
            path = Path(tmp, f"{category}.txt")
            path.write_text(text)
            if session.tokenize_prompt(text) != tokens:
                print(f"{category}: the prompt's text does not tokenize back to its ids; skipped")
                del prompts[category]
                continue
            prompts[category] = (tokens, n, path)

        print(f"{model.name}, {THREADS} threads, greedy; chat categories {CHAT_TOKENS} tokens, code {CODE_TOKENS}; "
              f"{args.rounds} rounds of every setting forward and back")
        # category -> setting -> per round: tokens/s over our plain's, and over its own side's plain
        over_ours: dict[str, dict[str, list[float]]] = {c: {name: [] for name in names} for c in prompts}
        over_own: dict[str, dict[str, list[float]]] = {c: {name: [] for name in names} for c in prompts}
        n_generated: dict[str, list[int]] = {name: [] for name in names}
        mismatches: dict[str, str] = {}  # "category setting" -> where its output left its side's plain
        # category -> their type -> the length it generated, where past -n (see their_lengths)
        longer: dict[str, dict[str, int]] = {}
        for category, (tokens, n, path) in prompts.items():
            our_plain: list[int] | None = None
            their_plain: str | None = None
            longer[category] = their_lengths(binary, model, path, [t for t in THEIR_TYPES if t in names], n)
            # Auto again at each of those lengths, in the same rounds: the same text as theirs
            at_length = {f"auto@{length}": length for length in sorted(set(longer[category].values()))
                         if "auto" in names}
            # and each of those types' speed over its own steps up to n + 1 tokens, from the same runs
            firsts_of = {f"{t} first": t for t in longer[category]}
            category_names = names + list(at_length)
            for name in [*at_length, *firsts_of]:
                over_ours[category][name], over_own[category][name] = [], []
            for _ in range(args.rounds):
                speeds: dict[str, list[float]] = {name: [] for name in [*category_names, *firsts_of]}
                for order in (category_names, category_names[::-1]):
                    for name in order:
                        departs = None  # where the output leaves its side's plain, if it does
                        if name in at_length:
                            tps, n_tokens, ids = run_ours(session, ours["auto"], tokens, at_length[name])
                            if our_plain is not None:
                                departs = departure(ids[: len(our_plain)], our_plain, "token")
                        elif name in ours:
                            tps, n_tokens, ids = run_ours(session, ours[name], tokens, n)
                            if our_plain is None and name == "plain":
                                our_plain = ids
                            departs = departure(ids, our_plain, "token")
                        else:
                            tps, n_tokens, text, tps_first = run_theirs(binary, model, path, name, n)
                            if name in longer[category]:
                                speeds[f"{name} first"].append(tps_first)
                            if their_plain is None and name == LLAMA_PLAIN:
                                their_plain = text
                            if their_plain is not None:
                                common = min(len(text), len(their_plain))
                                departs = departure(text[:common], their_plain[:common], "character")
                        if departs is not None:
                            mismatches.setdefault(f"{category} {name}", departs)
                        speeds[name].append(tps)
                        if name not in at_length:
                            n_generated[name].append(n_tokens)
                mean = {name: statistics.mean(values) for name, values in speeds.items()}
                for name in [*category_names, *firsts_of]:
                    theirs = name in THEIR_TYPES or name in firsts_of
                    over_ours[category][name].append(mean[name] / mean["plain"])
                    over_own[category][name].append(mean[name] / mean[LLAMA_PLAIN if theirs else "plain"])
            row = "  ".join(f"{name} {statistics.median(over_own[category][name]):.3f}"
                            for name in names if name not in ("plain", LLAMA_PLAIN))
            if at_length or firsts_of:
                row += "  " + "  ".join(f"{name} {statistics.median(over_own[category][name]):.3f}"
                                        for name in [*at_length, *firsts_of])
            print(
                f"{category:<16} plain {mean['plain']:6.1f} t/s, llama plain {mean[LLAMA_PLAIN] / mean['plain']:.3f}x; "
                f"over own plain: {row}",
                flush=True,
            )

        chat = [c for c in prompts if c != "code"]

        def same_length(table: dict[str, dict[str, list[float]]], category: str, theirs: str) -> float:
            """Auto over ``theirs`` where both generated as many tokens: Auto run to their length
            wherever theirs went past -n (the same rounds, so the ratio is of one round's runs)."""
            length = longer[category].get(theirs)
            auto_ratios = table[category]["auto" if length is None else f"auto@{length}"]
            return statistics.median(a / t for a, t in zip(auto_ratios, table[category][theirs]))

        def first_tokens(table: dict[str, dict[str, list[float]]], category: str, theirs: str) -> float:
            """Auto's run of -n over ``theirs``' steps up to -n + 1 tokens, where theirs went past -n."""
            first = f"{theirs} first" if theirs in longer[category] else theirs
            return statistics.median(a / t for a, t in zip(table[category]["auto"], table[category][first]))

        def summary(table: dict[str, dict[str, list[float]]], name: str) -> tuple[float, float, str]:
            medians = [statistics.median(table[c][name]) for c in chat]
            worst, where = min(zip(medians, chat))
            return geometric_mean(medians), worst, where

        print(f"\nmedian of rounds; chat: geometric mean over {len(chat)} categories (worst category); "
              "code: the code prompt")
        for label, table in (("over our plain", over_ours), ("over its own side's plain", over_own)):
            print(f"-- {label}")
            for name in names:
                if name == "plain" or (name == LLAMA_PLAIN and table is over_own):
                    continue
                line = f"{name:<16} mean {statistics.mean(n_generated[name]):5.1f} tokens/run"
                if chat:
                    gm, worst, where = summary(table, name)
                    line += f"  chat {gm:.3f} (worst {worst:.3f} {where})"
                if "code" in prompts:
                    line += f"  code {statistics.median(table['code'][name]):.3f}"
                print(line)
            theirs = [t for t in THEIR_TYPES if t in names]
            if "auto" in names and theirs:
                if chat:
                    best = max(theirs, key=lambda t: summary(table, t)[0])
                    print(
                        f"auto / best llama.cpp type ({best}) on chat: "
                        f"{summary(table, 'auto')[0] / summary(table, best)[0]:.3f}; "
                        f"at {best}'s lengths: {geometric_mean([same_length(table, c, best) for c in chat]):.3f}; "
                        f"over {best}'s first tokens: "
                        f"{geometric_mean([first_tokens(table, c, best) for c in chat]):.3f}"
                    )
                if "code" in prompts and "ngram-mod" in names:
                    code = table["code"]
                    code_ratio = statistics.median(code["auto"]) / statistics.median(code["ngram-mod"])
                    print(
                        "auto / ngram-mod on code: "
                        f"{code_ratio:.3f}; "
                        f"at ngram-mod's length: {same_length(table, 'code', 'ngram-mod'):.3f}; "
                        f"over ngram-mod's first {CODE_TOKENS + 1} tokens: "
                        f"{first_tokens(table, 'code', 'ngram-mod'):.3f}"
                    )
        if mismatches:
            # on SmolLM2 with 2 threads a long verification batch can flip a near-tie (see the module's
            # docstring): a type whose text leaves plain's there ran another text, and its speed is that text's
            print("OUTPUT DIFFERS FROM ITS SIDE'S PLAIN: " + ", ".join(f"{k} ({v})" for k, v in mismatches.items()))
            return 1
        print("every output equals its side's plain")
    return 0


if __name__ == "__main__":
    sys.exit(main())

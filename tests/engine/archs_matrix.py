"""Every mode on llama.cpp's tiny random model of every architecture: the matrix of issue 48.

Each cell is one ``specdec run`` process (an abort in llama.cpp must not take the others with it),
greedy, 64 tokens, on a repetitive prompt so that drafts get proposed and accepted. A cell passes
when the mode's tokens equal plain's on the same file, or when the mode refused before decoding
with one sentence and exit status 2.

    .venv/bin/python -m tests.engine.archs_matrix [--only REGEX] [--jobs N] [--markdown docs/models.md]

``tests/engine/test_archs.py`` runs it under pytest (a fast subset in ``make test``, all of it under
``-m archs``); ``--markdown`` rewrites the table in ``docs/models.md`` from the run's own outcomes.
"""

from __future__ import annotations

import argparse
import atexit
import json
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from tests.gguf_edit import write_disagreeing_draft

ROOT = Path(__file__).resolve().parents[2]
PROMPT = "a b c a b c a b c a b c a b"
N_TOKENS = 64

# mode name in the table -> the command-line arguments after `specdec run -m FILE`;
# "{model}" is the file itself (self-draft: the target drafts for itself and agrees with every
# proposal); "{other}" a draft of another architecture whose head is shifted by one token
# (tests/gguf_edit.py), so the target rejects nearly every proposal and every step rolls back:
# mamba2 (a recurrent draft llama.cpp cannot roll back), or for mamba2 itself qwen35 (a hybrid
# one it can)
MODES: dict[str, tuple[str, ...]] = {
    "plain": ("--mode", "plain"),
    "lookup": ("--mode", "lookup"),
    "self-draft": ("--mode", "speculative", "-md", "{model}", "-k", "4"),
    "other draft": ("--mode", "speculative", "-md", "{other}", "-k", "4"),
    "auto": ("--mode", "auto"),
    "auto + draft": ("--mode", "auto", "-md", "{other}"),
    "lookahead": ("--mode", "lookahead", "-W", "5", "-N", "3", "-G", "5"),
    # the model's own MTP head: refused (one sentence) by every model without MTP layers
    "mtp": ("--mode", "mtp", "-k", "3"),
}


_drafts_lock = threading.Lock()
_drafts_folder: Path | None = None


def other_draft(model: Path) -> Path:
    """The disagreeing draft for ``model``, written once per process into a temporary folder (never
    into the tiny models' own)."""
    global _drafts_folder
    name = "qwen35-dense" if model.name == "mamba2-dense.gguf" else "mamba2-dense"
    with _drafts_lock:
        if _drafts_folder is None:
            _drafts_folder = Path(tempfile.mkdtemp(prefix="specdec-drafts-"))
            atexit.register(shutil.rmtree, _drafts_folder, True)
        shifted = _drafts_folder / f"{name}-shifted.gguf"
        if not shifted.exists():
            write_disagreeing_draft(model.with_name(f"{name}.gguf"), shifted)
    return shifted

# The subset `make test` runs: a dense transformer, a hybrid with rollback, a recurrent model and
# a hybrid without, a model with learned absolute positions, the qwen35 with an MTP block, and a
# graph that ignores which rows asked for logits (engine.models.loading.ARCHS_LOGITS_EVERY_ROW).
FAST_SUBSET = ("llama-dense", "qwen35-dense", "mamba2-dense", "lfm2-dense", "gpt2-dense", "qwen35-mtp",
               "cogvlm-dense")


@dataclass(frozen=True)
class Cell:
    model: str
    mode: str
    outcome: str  # "equal", "refused", "differs", "failed" (exit 2, not a refusal), "aborted"
    detail: str  # the refusal's or failure's sentence, or how the tokens differ

    @property
    def ok(self) -> bool:
        return self.outcome in ("equal", "refused")


def run_mode(model: Path, mode: str, timeout_s: float = 300.0) -> tuple[int, dict | None, str]:
    """One ``specdec run --json``: (exit status, the JSON object or None, stderr)."""
    args = [a.replace("{model}", str(model)).replace("{other}", str(other_draft(model))) for a in MODES[mode]]
    cmd = [sys.executable, "-m", "specdec_studio.engine.cli", "run", "-m", str(model), *args,
           "-p", PROMPT, "-n", str(N_TOKENS), "-t", "1", "-c", "512", "--json", "--no-predict"]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout_s)
    result = None
    if done.returncode == 0:
        result = json.loads(done.stdout)
    return done.returncode, result, done.stderr


def judge(model: str, mode: str, plain_ids: list[int] | None, rc: int, result: dict | None, stderr: str) -> Cell:
    lines = [line for line in stderr.strip().splitlines() if line.startswith("specdec: ")]
    if rc == 0 and result is not None:
        if plain_ids is None or result["token_ids"] == plain_ids:
            return Cell(model, mode, "equal", "")
        ids = result["token_ids"]
        first = next((i for i, (a, b) in enumerate(zip(ids, plain_ids)) if a != b), min(len(ids), len(plain_ids)))
        return Cell(model, mode, "differs", f"from token {first} of {len(plain_ids)}")
    if rc == 2 and len(lines) == 1:
        sentence = lines[0].removeprefix("specdec: ")
        # a refusal is said before anything is decoded; a failure names the llama.cpp call
        failed = re.search(r"llama_\w+ (failed|could not)|Traceback", stderr)
        return Cell(model, mode, "failed" if failed else "refused", sentence)
    tail = stderr.strip().splitlines()[-1:] or [f"exit {rc}"]
    return Cell(model, mode, "aborted", f"exit {rc}: {tail[0][:200]}")


def run_model(path: Path, modes: tuple[str, ...] = tuple(MODES)) -> list[Cell]:
    name = path.name.removesuffix(".gguf")
    rc, plain, stderr = run_mode(path, "plain")
    plain_ids = plain["token_ids"] if plain is not None else None
    cells = [judge(name, "plain", None, rc, plain, stderr)]
    for mode in modes:
        if mode == "plain":
            continue
        cells.append(judge(name, mode, plain_ids, *run_mode(path, mode)))
    return cells


def _in_process_config(mode: str):
    from specdec_studio.engine.config import LookaheadParams, RunConfig, SpeculativeParams

    args = MODES[mode]
    name = args[1]
    if name == "lookahead":
        return RunConfig(mode=name, max_tokens=N_TOKENS, lookahead=LookaheadParams(W=5, N=3, G=5))
    k = int(args[args.index("-k") + 1]) if "-k" in args else SpeculativeParams().k
    return RunConfig(mode=name, max_tokens=N_TOKENS, speculative=SpeculativeParams(k=k))


def run_model_in_process(path: Path) -> list[Cell]:
    """:func:`run_model` on one session in this process (the fast subset of ``make test``: no
    process start per cell); a refusal is the ConfigError the session raises before decoding."""
    from specdec_studio.engine.errors import ConfigError
    from specdec_studio.engine.session import Session

    name = path.name.removesuffix(".gguf")
    cells: list[Cell] = []
    plain_ids = None
    with Session(path, n_ctx=512, n_threads=1) as session:
        for mode, args in MODES.items():
            draft = None
            if "-md" in args:
                draft = path if args[args.index("-md") + 1] == "{model}" else other_draft(path)
            try:
                if draft is None:
                    session.unload_draft()
                else:
                    session.load_draft(draft)
                ids = list(session.complete(_in_process_config(mode), PROMPT).token_ids)
            except ConfigError as exc:
                cells.append(Cell(name, mode, "refused", str(exc)))
                continue
            except Exception as exc:  # noqa: BLE001 - a cell's failure is its outcome
                cells.append(Cell(name, mode, "failed", f"{type(exc).__name__}: {exc}"))
                continue
            if plain_ids is None:
                plain_ids = ids
            cells.append(judge(name, mode, plain_ids if mode != "plain" else None, 0, {"token_ids": ids}, ""))
    return cells


def model_files(folder: Path, only: str | None = None) -> list[Path]:
    files = sorted(folder.glob("*.gguf"))
    return [f for f in files if only is None or re.search(only, f.name.removesuffix(".gguf"))]


def markdown_table(cells: list[Cell]) -> str:
    models = sorted({c.model for c in cells})
    modes = [m for m in MODES if any(c.mode == m for c in cells)]
    by_key = {(c.model, c.mode): c for c in cells}
    short = {"equal": "works", "refused": "refuses", "differs": "**differs**", "failed": "**fails**",
             "aborted": "**aborts**"}
    reasons: dict[str, int] = {}
    rows = ["| architecture | " + " | ".join(modes) + " |", "|---" * (len(modes) + 1) + "|"]
    for model in models:
        row = []
        for mode in modes:
            cell = by_key.get((model, mode))
            if cell is None:
                row.append("")
                continue
            text = short[cell.outcome]
            if cell.detail:
                number = reasons.setdefault(cell.detail, len(reasons) + 1)
                text += f" ({number})"
            row.append(text)
        rows.append(f"| {model} | " + " | ".join(row) + " |")
    notes = [f"{n}. {reason}" for reason, n in reasons.items()]
    return "\n".join(rows) + "\n\n" + "\n".join(notes) + "\n"


BEGIN, END = "<!-- archs-matrix:begin -->", "<!-- archs-matrix:end -->"


def write_markdown(path: Path, cells: list[Cell]) -> None:
    text = path.read_text(encoding="utf-8")
    start, end = text.index(BEGIN) + len(BEGIN), text.index(END)
    path.write_text(text[:start] + "\n" + markdown_table(cells) + text[end:], encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--folder", type=Path, help="the tiny models (default: scripts/tiny_archs.sh's)")
    parser.add_argument("--only", help="a regular expression on the model names")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--markdown", type=Path, help="rewrite the matrix in this file")
    parser.add_argument("--json", type=Path, help="write every cell here")
    args = parser.parse_args(argv)
    folder = args.folder
    if folder is None:
        done = subprocess.run(
            [str(ROOT / "scripts" / "tiny_archs.sh")], cwd=ROOT, capture_output=True, text=True, check=True
        )
        folder = Path(done.stdout.strip())
    files = model_files(folder, args.only)
    cells: list[Cell] = []
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for model_cells in pool.map(run_model, files):
            for cell in model_cells:
                print(f"{cell.model:24} {cell.mode:13} {cell.outcome:8} {cell.detail}", flush=True)
            cells.extend(model_cells)
    if args.json:
        args.json.write_text(json.dumps([c.__dict__ for c in cells], indent=1), encoding="utf-8")
    if args.markdown:
        write_markdown(args.markdown, cells)
    bad = [c for c in cells if not c.ok]
    print(f"{len(cells) - len(bad)} of {len(cells)} cells pass ({len(files)} models)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

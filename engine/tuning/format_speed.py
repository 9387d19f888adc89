"""What a weight format and a mode buy together, measured side by side in one run.

The app's speed-ups are same-file figures: a mode against plain decoding on the file it runs on.
A user choosing a copy of the model in another format wants the other figure too: the best mode
on the copy against plain on the *original* file. For the original and each copy, every prompt
runs plain and each candidate mode (Auto, prompt lookup) on every file, the files all loaded at
once and visited forward then back, so a drift of the machine's speed hits every figure alike.

Per file this gives plain's tokens/s, and for each mode its speed-up over plain on the same file
and over plain on the original, the cost model's prediction from that file's own batch-cost
curve, and where its greedy tokens part from plain's on the same file, plain's top-2 logit margin
there next to the file's measured batching deviation (a flip below it is a near-tie that batching
can turn; one above it would be a bug).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from contextlib import ExitStack
from dataclasses import asdict, dataclass, field
from pathlib import Path

from specdec_studio.engine.config import RunConfig, SpeculativeParams
from specdec_studio.engine.errors import SpecDecError
from specdec_studio.engine.tuning.cost_model import geometric_mean
from specdec_studio.engine.tuning.prompts import Prompt

CANDIDATES = ("auto", "lookup k=2", "lookup k=4", "lookup k=8")


class FormatSpeedCancelled(SpecDecError):
    pass


def candidate_config(name: str, max_tokens: int) -> RunConfig:
    """The greedy run config a candidate's name stands for: "plain", "auto" or "lookup k=K"."""
    if name in ("plain", "auto"):
        return RunConfig(mode=name, max_tokens=max_tokens)
    if name.startswith("lookup k="):
        k = int(name.removeprefix("lookup k="))
        return RunConfig(mode="lookup", max_tokens=max_tokens, speculative=SpeculativeParams(k=k, k_max=max(k, 8)))
    raise SpecDecError(f"unknown candidate {name!r}; candidates are auto and lookup k=K")


@dataclass(frozen=True)
class ModeOnFile:
    """One mode on one file, over the prompts (each prompt's figure the geometric mean is taken of)."""

    mode: str
    tokens_per_second: float  # mean over prompts
    vs_plain: float  # over plain on the same file, geometric mean over prompts
    vs_original: float  # over plain on the original file
    predicted: float | None  # the cost model's same-file speed-up from the runs' own decodes
    divergences: tuple[dict, ...] = ()  # {"prompt", "token", "margin"} where greedy ids part from plain's
    per_prompt: tuple[dict, ...] = field(default=(), repr=False)  # {"prompt", "category", "vs_plain", …}

    def lossless_within(self, deviation: float | None) -> bool:
        """Every divergence is a near-tie batching can flip: plain's margin there is below ``deviation``."""
        if not self.divergences:
            return True
        return deviation is not None and all(d["margin"] <= deviation for d in self.divergences)


@dataclass(frozen=True)
class FileSpeed:
    """The original file or a copy: plain's speed and every candidate mode's."""

    format: str
    path: str
    plain_tokens_per_second: float
    plain_vs_original: float  # plain on this file over plain on the original
    modes: tuple[ModeOnFile, ...]
    deviation: float | None = None  # the exactness probe's, measured only where a mode diverged

    def best(self) -> ModeOnFile | None:
        """The fastest mode against plain on this file among those that stay lossless."""
        pool = [m for m in self.modes if m.lossless_within(self.deviation)]
        return max(pool, key=lambda m: m.vs_plain, default=None)

    def to_dict(self) -> dict:
        out = asdict(self)
        best = self.best()
        out["best"] = best.mode if best else None
        return out


def measure(original: Path, copies: Sequence[tuple[str, Path]], prompts: Sequence[Prompt], *, max_tokens: int,
            n_threads: int, n_ctx: int = 4096, candidates: Sequence[str] = CANDIDATES, rounds: int = 1,
            predict: bool = True,
            cancel: threading.Event | None = None, progress: Callable[[int, int, str], None] | None = None,
            ) -> list[FileSpeed]:
    """The original file (first in the result) and each ``(format, path)`` copy, with plain and
    every candidate on every prompt. Each round visits every (file, mode) pair for a prompt, then
    the same in reverse order; a prompt's tokens/s for a pair is its tokens over its seconds summed
    over the visits. ``predict`` prices each run with its file's batch-cost profile (measured
    first where none is cached)."""
    from specdec_studio.engine.session import Session, last_event
    from specdec_studio.engine.tuning import formats, profile
    from specdec_studio.engine.tuning.sweep import prompt_tokens

    if not prompts:
        raise SpecDecError("a format speed comparison needs at least one prompt")
    names = ["plain", *candidates]
    configs = {name: candidate_config(name, max_tokens) for name in names}
    with ExitStack() as stack:
        sessions = [stack.enter_context(Session(original, n_ctx=n_ctx, n_threads=n_threads, cancel=cancel))]
        own = formats.format_of(sessions[0].model)
        copies = [(fmt, path) for fmt, path in copies if fmt != own]  # the original is measured once
        sessions += [stack.enter_context(Session(path, n_ctx=n_ctx, n_threads=n_threads, cancel=cancel))
                     for _fmt, path in copies]
        labels = [own] + [fmt for fmt, _path in copies]
        curves = [profile.load_or_measure(s).curve if predict else None for s in sessions]
        tokens = [prompt_tokens(sessions[0], p, chat=True) for p in prompts]  # copies share the vocabulary
        pairs = [(f, name) for f in range(len(sessions)) for name in names]
        visits = [pairs, pairs[::-1]]
        total, done = rounds * len(prompts) * len(pairs) * len(visits), 0
        sums = {(f, name, i): [0, 0.0] for f, name in pairs for i in range(len(prompts))}
        first: dict[tuple[int, str, int], object] = {}  # the first run of each: its ids and its counters
        for _ in range(rounds):
            for i, prompt_ids in enumerate(tokens):
                for order in visits:
                    for f, name in order:
                        if cancel is not None and cancel.is_set():
                            raise FormatSpeedCancelled("the format speed comparison was stopped")
                        # the caller owns the Stop flag: a run must not forget a Stop pressed between runs
                        final = last_event(sessions[f].run(configs[name], prompt_ids, fresh_cancel=False))
                        if final.finish_reason == "cancelled":
                            raise FormatSpeedCancelled("the format speed comparison was stopped")
                        sums[(f, name, i)][0] += final.stats["n_predict"]
                        sums[(f, name, i)][1] += final.stats["t_generate_s"]
                        first.setdefault((f, name, i), final)
                        done += 1
                        if progress is not None:
                            progress(done, total, f"{labels[f]} {name} · {prompts[i].id}")
        speed = {key: n / seconds for key, (n, seconds) in sums.items()}
        out = []
        for f, session in enumerate(sessions):
            out.append(_file_speed(session, labels[f], f, configs, prompts, tokens, speed, first, curves[f]))
    return out


def _file_speed(session, label: str, f: int, configs: dict[str, RunConfig], prompts: Sequence[Prompt], tokens, speed,
                first, curve) -> FileSpeed:
    from specdec_studio.engine.tuning.probe import plain_top2_margin, probe_exactness
    from specdec_studio.engine.tuning import cost_model

    n = len(prompts)
    modes = []
    for name, config in configs.items():
        if name == "plain":
            continue
        per_prompt, divergences = [], []
        for i, prompt in enumerate(prompts):
            run, plain_run = first[(f, name, i)], first[(f, "plain", i)]
            ids, reference = list(run.token_ids), list(plain_run.token_ids)
            if ids != reference:
                at = next((j for j, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))
                divergences.append({"prompt": prompt.id, "token": at,
                                    "margin": plain_top2_margin(session, tokens[i], reference[:at])})
            per_prompt.append({"prompt": prompt.id, "category": prompt.category,
                               "vs_plain": speed[(f, name, i)] / speed[(f, "plain", i)],
                               "vs_original": speed[(f, name, i)] / speed[(0, "plain", i)],
                               "predicted": None if curve is None else
                               cost_model.predict_from_stats(run.stats, curve, mode=config.mode)})
        predictions = [p["predicted"] for p in per_prompt]
        modes.append(ModeOnFile(
            name, sum(speed[(f, name, i)] for i in range(n)) / n,
            geometric_mean([p["vs_plain"] for p in per_prompt]),
            geometric_mean([p["vs_original"] for p in per_prompt]),
            geometric_mean(predictions) if all(p is not None for p in predictions) else None,
            tuple(divergences), tuple(per_prompt)))
    deviation = None
    if any(m.divergences for m in modes):
        probe = probe_exactness(session.model.info.path, n_threads=session.n_threads)
        deviation = max(probe["max_abs_diff"], probe["long_context"]["max_abs_diff"])
    return FileSpeed(label, str(session.model.info.path), sum(speed[(f, "plain", i)] for i in range(n)) / n,
                     geometric_mean([speed[(f, "plain", i)] / speed[(0, "plain", i)] for i in range(n)]),
                     tuple(modes), deviation)


def sentence(files: Sequence[FileSpeed]) -> str:
    """The fastest way to decode found, in one sentence: a file and its best lossless mode, or
    plain decoding on a file where no mode beats it, against plain on the original file."""
    original = files[0]
    # (figure against the original's plain, file, mode or None for plain on that file)
    ways = [(f.plain_vs_original, f, None) for f in files]
    ways += [(m.vs_original, f, m) for f in files if (m := f.best()) is not None and m.vs_plain > 1.0]
    figure, f, m = max(ways, key=lambda way: way[0])
    where = "the original" if f is original else f"the {f.format} copy"
    if m is None:
        return (f"Fastest here: plain decoding on {where}, {figure:.2f}× plain on the {original.format} original; "
                "no mode beat plain decoding on it.")
    return (f"Fastest here: {m.mode} on {where}, {figure:.2f}× plain on the {original.format} original "
            f"({m.vs_plain:.2f}× plain on the same file).")

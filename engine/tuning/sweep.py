"""Sweeps: measure a grid of settings against plain decoding on a prompt set, on this machine.

Every setting runs on every prompt with greedy decoding. Plain runs of the same prompts bracket
each block of a few settings (plain, block, plain, block, …, plain), and a setting's speed-up on a
prompt is its tokens per second over the mean of the two plain runs around its block, so a drift
of the machine's speed hits both sides alike. The speed-up of a setting is the geometric mean over
prompts. Every run's token ids are compared with plain's; where they part, plain's top-2 logit
margin at that token is reported (a near-tie that batching can flip, or a real bug).

Each result also carries the cost model's prediction from the run's own counters and the batch-cost
profile, so measured and predicted can be read side by side.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from specdec_studio.engine.config import RunConfig
from specdec_studio.engine.errors import ConfigError, SpecDecError
from specdec_studio.engine.events import RunFinished
from specdec_studio.engine.jsonfile import write_text
from specdec_studio.engine.sampling import SamplingParams
from specdec_studio.engine.tuning import cost_model
from specdec_studio.engine.tuning.cost_model import CostCurve
from specdec_studio.engine.tuning.prompts import Prompt
from specdec_studio.engine.strategies import registry

FORMAT_VERSION = 1
SWEEP_MODES = ("lookahead", "lookup", "speculative")
# Axes each mode can sweep, in the order a grid is laid out.
AXES: dict[str, tuple[str, ...]] = {
    "lookahead": ("N", "W", "G"),
    "lookup": ("lookup", "adaptive", "k"),
    "speculative": ("adaptive", "k"),
}
# The coarse default: finishes in about 2-3 minutes with SmolLM2 on 2 cores (2 prompts, 48 tokens).
DEFAULT_AXES: dict[str, dict[str, tuple]] = {
    "lookahead": {"N": (2, 3, 4), "W": (1, 2, 4), "G": (0, 1, 2, 4)},
    "lookup": {"lookup": ("cache",), "adaptive": ("off",), "k": tuple(range(0, 11))},
    "speculative": {"adaptive": ("off",), "k": tuple(range(0, 11))},
}
DEFAULT_MAX_TOKENS = 48
DEFAULT_CATEGORIES = ("code_editing", "chat")
PLAIN_EVERY = 3


@dataclass(frozen=True)
class SweepSpec:
    mode: str
    axes: dict[str, tuple]
    prompts: tuple[Prompt, ...]
    max_tokens: int = DEFAULT_MAX_TOKENS
    plain_every: int = PLAIN_EVERY
    chat: bool = True  # wrap prompts in the model's chat template where it has one

    def validate(self) -> None:
        if self.mode not in SWEEP_MODES:
            raise ConfigError(f"a sweep runs lookahead, lookup or speculative, not {self.mode!r}")
        unknown = set(self.axes) - set(AXES[self.mode])
        if unknown:
            raise ConfigError(f"{self.mode} has no axis {', '.join(sorted(unknown))}; "
                              f"its axes are {', '.join(AXES[self.mode])}")
        if any(len(values) == 0 for values in self.axes.values()):
            raise ConfigError("every axis needs at least one value")
        if not self.prompts:
            raise ConfigError("a sweep needs at least one prompt")
        if self.max_tokens < 2:
            raise ConfigError("a sweep needs at least 2 tokens per run")
        for setting in self.settings():
            config_for(self, setting).validate()

    def settings(self) -> list[dict]:
        """Every combination of the axes' values, in axis order (the last axis varies fastest).
        k = 0 is plain decoding whatever the drafter: it is measured once, with the first values
        of the other axes."""
        names = [a for a in AXES[self.mode] if a in self.axes]
        out = []
        for combo in itertools.product(*(self.axes[n] for n in names)):
            setting = dict(zip(names, combo))
            if setting.get("k") == 0 and any(setting[n] != self.axes[n][0] for n in names if n != "k"):
                continue
            out.append(setting)
        return out

    def to_dict(self) -> dict:
        return {"mode": self.mode, "axes": {k: list(v) for k, v in self.axes.items()},
                "prompts": [p.id for p in self.prompts], "max_tokens": self.max_tokens,
                "plain_every": self.plain_every, "chat": self.chat}


def config_for(spec: SweepSpec, setting: dict, base: RunConfig | None = None) -> RunConfig:
    """The greedy run config of one setting. k = 0 is plain decoding (the noise floor)."""
    base = base or RunConfig()
    common = dict(max_tokens=spec.max_tokens, sampling=SamplingParams())
    if registry.mode(spec.mode).settings == "lookahead":
        la = replace(base.lookahead, **{k: int(v) for k, v in setting.items()})
        return RunConfig(mode="lookahead", lookahead=la, **common)
    sp_values = {k: v for k, v in setting.items()}
    k = int(sp_values.pop("k", base.speculative.k))
    if k == 0:
        return RunConfig(mode="plain", **common)
    sp = replace(base.speculative, k=k, k_max=max(base.speculative.k_max, k), **sp_values)
    return RunConfig(mode=spec.mode, speculative=sp, **common)


def setting_label(setting: dict) -> str:
    if setting.get("k") == 0:
        return "plain (k=0)"
    return " ".join(f"{k}={v}" for k, v in setting.items())


# ------------------------------------------------------------------------- events
@dataclass(frozen=True)
class SweepStarted:
    spec: dict
    settings: tuple[dict, ...]
    n_runs: int


@dataclass(frozen=True)
class SweepProgress:
    done: int
    total: int
    elapsed_s: float
    eta_s: float
    label: str


@dataclass(frozen=True)
class SweepCell:
    """One setting's result, final: measured against the plain runs around it."""

    index: int
    setting: dict
    measured: float  # speed-up over plain, geometric mean over prompts
    predicted: float | None  # the cost model's, from the runs' own counters
    tokens_per_step: float
    acceptance: float | None
    tokens_per_second: float
    plain_tokens_per_second: float
    lossless: bool  # every prompt's greedy ids equal plain's
    divergences: tuple[dict, ...] = ()  # {"prompt", "token", "margin"} where ids parted
    per_prompt: tuple[dict, ...] = field(default=(), repr=False)

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class SweepFinished:
    result: dict  # everything, as written to results.json
    cancelled: bool = False


class _Cancelled(Exception):
    pass


# ------------------------------------------------------------------------- running
def prompt_tokens(session, prompt: Prompt, chat: bool) -> list[int]:
    """The token ids a prompt is decoded from: the model's chat template where it has one."""

    if chat and session.has_chat_template:
        return session.chat_tokens(list(prompt.as_messages()))
    return session.tokenize_prompt(prompt.as_text())


def run_sweep(session, spec: SweepSpec, *, curve: CostCurve | None = None, draft_curve: CostCurve | None = None,
              base: RunConfig | None = None) -> Iterator[object]:
    """Measure every setting of ``spec`` on ``session``; yield sweep events, ending with
    :class:`SweepFinished`. Stop (``session.cancel()``) ends it within the current run, with the
    cells measured so far; a Stop already set when the sweep starts ends it at once (the caller
    clears the flag when it starts a job)."""
    spec.validate()
    if registry.mode(spec.mode).needs == "draft" and session.draft is None:
        raise ConfigError("a speculative sweep needs a draft model; load one first")
    settings = spec.settings()
    configs = [config_for(spec, s, base) for s in settings]
    for config in configs:  # a setting the batch cannot hold is refused now, not mid-sweep
        config.validate(session.n_batch)
    tokens = [prompt_tokens(session, p, spec.chat) for p in spec.prompts]
    for p, t in zip(spec.prompts, tokens):
        if len(t) + spec.max_tokens + 1 > session.n_ctx:
            raise ConfigError(f"prompt {p.id} ({len(t)} tokens) and {spec.max_tokens} new tokens do not fit "
                              f"the context of {session.n_ctx}; raise the context size or lower the tokens")
    blocks = [
        list(range(i, min(i + spec.plain_every, len(settings)))) for i in range(0, len(settings), spec.plain_every)
    ]
    n_prompts = len(tokens)
    total = n_prompts * (len(settings) + len(blocks) + 1)
    plain_config = RunConfig(mode="plain", max_tokens=spec.max_tokens, sampling=SamplingParams())
    t0 = time.perf_counter()
    done = 0
    cancel = session.cancel_flag
    yield SweepStarted(spec.to_dict(), tuple(settings), total)

    def one_run(config: RunConfig, label: str):
        nonlocal done
        results = []
        for i, prompt in enumerate(tokens):
            if cancel.is_set():
                raise _Cancelled
            final = None
            for event in session.run(config, prompt, fresh_cancel=False):
                final = event
            if not isinstance(final, RunFinished) or final.finish_reason == "cancelled":
                raise _Cancelled
            results.append(final)
            done += 1
            elapsed = time.perf_counter() - t0
            yield SweepProgress(done, total, elapsed, elapsed / done * (total - done),
                                f"{label} · {spec.prompts[i].id}")
        return results

    cells: list[SweepCell] = []
    plain_ids: list[tuple[int, ...]] = []
    cancelled = False
    try:
        before = yield from one_run(plain_config, "plain")
        plain_ids = [r.token_ids for r in before]
        for block in blocks:
            runs = {}
            for index in block:
                runs[index] = yield from one_run(configs[index], setting_label(settings[index]))
            after = yield from one_run(plain_config, "plain")
            for index in block:
                cell = _cell(session, index, settings[index], configs[index].mode, runs[index], before, after,
                             plain_ids, tokens, spec, curve, draft_curve)
                cells.append(cell)
                yield cell
            before = after
    except _Cancelled:
        cancelled = True
    result = _result(session, spec, settings, cells, time.perf_counter() - t0, curve is not None)
    yield SweepFinished(result, cancelled)


def _cell(session, index: int, setting: dict, mode: str, runs: Sequence[RunFinished], before: Sequence[RunFinished],
          after: Sequence[RunFinished], plain_ids, tokens, spec: SweepSpec, curve, draft_curve) -> SweepCell:
    from specdec_studio.engine.tuning.probe import plain_top2_margin

    per_prompt, divergences = [], []
    for i, run in enumerate(runs):
        stats = run.stats
        plain_tps = (before[i].stats["tokens_per_second"] + after[i].stats["tokens_per_second"]) / 2
        measured = stats["tokens_per_second"] / plain_tps if plain_tps else 0.0
        predicted = cost_model.predict_from_stats(stats, curve, mode=mode, draft_curve=draft_curve) if curve else None
        ids, reference = list(run.token_ids), list(plain_ids[i])
        if ids != reference:
            first = next((j for j, (a, b) in enumerate(zip(ids, reference)) if a != b), min(len(ids), len(reference)))
            margin = plain_top2_margin(session, tokens[i], reference[:first])
            divergences.append({"prompt": spec.prompts[i].id, "token": first, "margin": margin})
        per_prompt.append({"prompt": spec.prompts[i].id, "measured": measured, "predicted": predicted,
                           "tokens_per_second": stats["tokens_per_second"], "plain_tokens_per_second": plain_tps,
                           "tokens_per_step": stats["tokens_per_step"], "n_predict": stats["n_predict"],
                           "n_drafted": stats["n_drafted"], "n_accept": stats["n_accept"], "steps": stats["steps"]})
    drafted = sum(p["n_drafted"] for p in per_prompt)
    predictions = [p["predicted"] for p in per_prompt]
    return SweepCell(
        index=index,
        setting=dict(setting),
        measured=cost_model.geometric_mean([p["measured"] for p in per_prompt]),
        predicted=cost_model.geometric_mean(predictions) if all(v is not None for v in predictions) else None,
        tokens_per_step=sum(p["tokens_per_step"] for p in per_prompt) / len(per_prompt),
        acceptance=sum(p["n_accept"] for p in per_prompt) / drafted if drafted else None,
        tokens_per_second=sum(p["tokens_per_second"] for p in per_prompt) / len(per_prompt),
        plain_tokens_per_second=sum(p["plain_tokens_per_second"] for p in per_prompt) / len(per_prompt),
        lossless=not divergences,
        divergences=tuple(divergences),
        per_prompt=tuple(per_prompt),
    )


def _result(session, spec: SweepSpec, settings: list[dict], cells: list[SweepCell], t_sweep_s: float,
            predicted: bool) -> dict:
    info = session.model.info
    best = best_cell(cells)
    return {
        "format": FORMAT_VERSION,
        "model": {"path": info.path, "name": info.name, "arch": info.arch, "quant": info.quant},
        "draft": session.draft_model.info.path if session.draft_model and registry.mode(spec.mode).needs == "draft"
        else None,
        "n_ctx": session.n_ctx,
        "n_threads": session.n_threads,
        "spec": spec.to_dict(),
        "settings": settings,
        "cells": [c.to_dict() for c in cells],
        "best": best.index if best is not None else None,
        "t_sweep_s": t_sweep_s,
        "finished_at": time.time(),
        "has_predictions": predicted,
    }


def best_cell(cells: Sequence[SweepCell | dict]) -> SweepCell | dict | None:
    """The lossless cell with the highest measured speed-up (any cell if none is lossless)."""
    def get(c, name):
        return c[name] if isinstance(c, dict) else getattr(c, name)

    pool = [c for c in cells if get(c, "lossless")] or list(cells)
    return max(pool, key=lambda c: get(c, "measured"), default=None)


# ------------------------------------------------------------------------- results on disk
CSV_FIELDS = ("measured", "predicted", "tokens_per_step", "acceptance", "tokens_per_second",
              "plain_tokens_per_second", "lossless", "divergences")


def write_results(result: dict, out_dir: str | Path) -> tuple[Path, Path]:
    """``results.json`` (everything) and ``results.csv`` (one row per setting) in ``out_dir``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    json_path, csv_path = out / "results.json", out / "results.csv"
    axes = list(result["spec"]["axes"])
    table = io.StringIO(newline="")
    writer = csv.writer(table)
    writer.writerow([*axes, *CSV_FIELDS])
    for cell in result["cells"]:
        row = [cell["setting"][a] for a in axes]
        for name in CSV_FIELDS:
            value = cell[name]
            if name == "divergences":
                value = ";".join(f"{d['prompt']}@{d['token']} margin {d['margin']:.4f}" for d in value)
            elif isinstance(value, float):
                value = f"{value:.4f}" if math.isfinite(value) else ""
            row.append("" if value is None else value)
        writer.writerow(row)
    write_text(json_path, json.dumps(result, indent=1), shared=True)
    write_text(csv_path, table.getvalue(), shared=True)
    return json_path, csv_path


def sweeps_dir() -> Path:
    from specdec_studio.engine.paths import cache_root

    return cache_root() / "sweeps"


def saved_path(model_sha256: str, mode: str) -> Path:
    """Where the app keeps the latest sweep of ``mode`` for a model (reopened with the model)."""
    return sweeps_dir() / f"{model_sha256[:16]}-{mode}.json"


def load_saved(model_sha256: str, mode: str) -> dict | None:
    try:
        result = json.loads(saved_path(model_sha256, mode).read_text())
    except (OSError, ValueError):
        return None
    return result if result.get("format") == FORMAT_VERSION else None


def save(result: dict, model_sha256: str) -> Path:
    from specdec_studio.engine.jsonfile import write_json

    path = saved_path(model_sha256, result["spec"]["mode"])
    write_json(path, result)
    return path


def parse_values(text: str, kind: type = int) -> tuple:
    """``"1,2,4"``, ``"0..10"`` or ``"1-4"`` (inclusive ranges, mixed with commas) into a tuple."""
    out: list = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if kind is int and (".." in part or (part.count("-") == 1 and not part.startswith("-"))):
            lo, hi = part.split("..") if ".." in part else part.split("-")
            try:
                lo_i, hi_i = int(lo), int(hi)
            except ValueError:
                raise SpecDecError(f"not a range of whole numbers: {part!r}") from None
            if hi_i < lo_i:
                raise SpecDecError(f"empty range {part!r}")
            out.extend(range(lo_i, hi_i + 1))
        else:
            try:
                out.append(kind(part))
            except ValueError:
                raise SpecDecError(f"not a whole number: {part!r}") from None
    if not out:
        raise SpecDecError(f"no values in {text!r}")
    return tuple(dict.fromkeys(out))

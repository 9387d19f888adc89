"""One run as documents: a coloured transcript, its figures as JSON, and a single-file HTML report
(prompt, coloured text with a legend, settings, figures, per-step table, plots embedded as PNG
data URIs) that opens in any browser with no other file. Built from a trace alone."""

from __future__ import annotations

import base64
import json

from specdec_studio.engine.events import RunFinished, StepDone
from specdec_studio.engine.records.html_pages import render
from specdec_studio.engine.records.trace import Trace
from specdec_studio.engine.chat.transcript import SOURCE_STYLES

FIGURES = [("n_predict", "tokens generated"), ("tokens_per_second", "tokens per second"),
           ("tokens_per_step", "tokens per step"), ("steps", "target decodes (steps)"),
           ("n_drafted", "tokens drafted"), ("n_accept", "drafts accepted"), ("accept_rate", "acceptance"),
           ("n_prompt", "prompt tokens"), ("t_encode_s", "prompt time (s)"), ("t_generate_s", "generation time (s)")]


def _steps(trace: Trace) -> list[StepDone]:
    return [e for _, e in trace.events if isinstance(e, StepDone)]


def _tokens(trace: Trace) -> list[dict]:
    """Every generated token with its colour and tooltip (raw values: the template escapes them)."""
    out = []
    for step in _steps(trace):
        for t in step.tokens:
            label, style = SOURCE_STYLES.get(t.source, (t.source, ""))
            out.append({"source": t.source, "id": t.id, "style": style, "text": t.text,
                        "title": f"step {step.step} · {label} · token {t.id}"})
    return out


def _legend() -> list[tuple[str, str]]:
    return [(label, style or "color:inherit") for source, (label, style) in SOURCE_STYLES.items()
            if source != "rejected"]


def figures_json(trace: Trace, speedup: dict | None = None) -> str:
    """The run's figures, settings and model facts as JSON; ``speedup``: this machine's speed-up
    curve and the run's point on it (:func:`speedup_section`), where a profile was measured."""
    final = trace.finished
    if final is None:
        raise ValueError("the run did not finish, so it has no figures")
    return json.dumps({"config": trace.config, "model": trace.header.get("model", {}),
                       "finish_reason": final.finish_reason, "stats": final.stats,
                       "recorded": trace.header.get("created"),
                       **({"speedup_curve": speedup} if speedup else {})}, indent=2)


def speedup_section(curves, point) -> dict | None:
    """The speed-up curve (:class:`engine.tuning.speedup_curve.SpeedupCurves`) and the run's
    point (:class:`~engine.tuning.speedup_curve.RunPoint` or None) as plain data."""
    if curves is None:
        return None
    out = curves.as_dict()
    if point is not None:
        out["run"] = {"k": point.k, "alpha": round(point.alpha, 3), "speedup": round(point.speedup, 3),
                      "measured_against": point.measured_against}
    return out


def _speedup_rows(speedup: dict | None) -> list[tuple[str, str]]:
    if not speedup:
        return []
    rows = [(f"break-even acceptance at k = {k}", "never" if a is None else f"α > {a:.2f}")
            for k, a in zip(speedup["k"], speedup["break_even_alpha"])]
    run = speedup.get("run")
    if run:
        rows.append(("this run on the curve", f"k = {run['k']}, α {run['alpha']:.2f}, {run['speedup']:.2f}× "
                                              f"(against the {run['measured_against']})"))
    return rows


def transcript_html(trace: Trace) -> str:
    """The prompt and the generated text, each token coloured by its source, with a legend."""
    started = trace.events[0][1]
    return render("run", report=False, title=f"SpecDec Studio — {trace.title}", legend=_legend(),
                  prompt=started.prompt_text, tokens=_tokens(trace))


def run_report(trace: Trace, images: dict[str, bytes] | None = None, speedup: dict | None = None) -> str:
    """The whole run on one page. ``images``: caption -> PNG bytes (the KV map, the plots);
    ``speedup``: the speed-up curve's break-evens and the run's point (:func:`speedup_section`)."""
    started = trace.events[0][1]
    final: RunFinished | None = trace.finished
    stats = final.stats if final is not None else {}
    steps = [{"step": s.step, "n_tokens": len(s.tokens), "n_drafted": s.n_drafted, "n_accepted": s.n_accepted,
              "decode_ms": f"{s.t_decode_s * 1000:.2f}", "text": "".join(t.text for t in s.tokens)}
             for s in _steps(trace)]
    return render(
        "run", report=True, title=f"SpecDec Studio run report — {trace.title}",
        created=str(trace.header.get("created", "?")), app=str(trace.header.get("app", "")),
        finish=final.finish_reason if final is not None else "did not finish",
        legend=_legend(), prompt=started.prompt_text, tokens=_tokens(trace),
        figures=[(label, _fmt(stats[key], key)) for key, label in FIGURES if key in stats] + _speedup_rows(speedup),
        settings=[(str(k), str(v)) for k, v in trace.config.items()],
        model=[(str(k), str(v)) for k, v in trace.header.get("model", {}).items()],
        plots=[(caption, base64.b64encode(png).decode()) for caption, png in (images or {}).items()],
        steps=steps)


def _fmt(value, key: str) -> str:
    if key == "accept_rate":
        return f"{100 * float(value):.1f} %"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)

"""One run as documents: a coloured transcript, its figures as JSON, and a single-file HTML report
(prompt, coloured text with a legend, settings, figures, per-step table, plots embedded as PNG
data URIs) that opens in any browser with no other file. Built from a trace alone."""

from __future__ import annotations

import base64
import html
import json

from engine.events import RunFinished, StepDone
from engine.trace import Trace
from engine.transcript import SOURCE_STYLES

FIGURES = [("n_predict", "tokens generated"), ("tokens_per_second", "tokens per second"),
           ("tokens_per_step", "tokens per step"), ("steps", "target decodes (steps)"),
           ("n_drafted", "tokens drafted"), ("n_accept", "drafts accepted"), ("accept_rate", "acceptance"),
           ("n_prompt", "prompt tokens"), ("t_encode_s", "prompt time (s)"), ("t_generate_s", "generation time (s)")]


def _steps(trace: Trace) -> list[StepDone]:
    return [e for _, e in trace.events if isinstance(e, StepDone)]


def _coloured_tokens(trace: Trace) -> str:
    out = []
    for step in _steps(trace):
        for t in step.tokens:
            style = SOURCE_STYLES.get(t.source, ("", ""))[1]
            text = html.escape(t.text)
            title = f"step {step.step} · {SOURCE_STYLES.get(t.source, (t.source,))[0]} · token {t.id}"
            out.append(f'<span class="tok {t.source}" data-source="{t.source}" data-id="{t.id}" '
                       f'style="{style}" title="{html.escape(title)}">{text}</span>')
    return "".join(out)


def _legend() -> str:
    return "".join(f'<span class="swatch" style="{style or "color:inherit"}">{html.escape(label)}</span>'
                   for source, (label, style) in SOURCE_STYLES.items() if source != "rejected")


def figures_json(trace: Trace) -> str:
    """The run's figures, settings and model facts as JSON."""
    final = trace.finished
    if final is None:
        raise ValueError("the run did not finish, so it has no figures")
    return json.dumps({"config": trace.config, "model": trace.header.get("model", {}),
                       "finish_reason": final.finish_reason, "stats": final.stats,
                       "recorded": trace.header.get("created")}, indent=2)


def transcript_html(trace: Trace) -> str:
    """The prompt and the generated text, each token coloured by its source, with a legend."""
    started = trace.events[0][1]
    title = f"SpecDec Studio — {trace.title}"
    return _page(title, f"""<h1>{html.escape(title)}</h1>
<p class="legend">{_legend()}</p>
<div class="prompt">{html.escape(started.prompt_text)}</div>
<div class="output" id="output">{_coloured_tokens(trace)}</div>""")


def run_report(trace: Trace, images: dict[str, bytes] | None = None) -> str:
    """The whole run on one page. ``images``: caption -> PNG bytes (the KV map, the plots)."""
    started = trace.events[0][1]
    final: RunFinished | None = trace.finished
    stats = final.stats if final is not None else {}
    model = trace.header.get("model", {})
    settings = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                       for k, v in trace.config.items())
    model_rows = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>"
                         for k, v in model.items())
    figures = "".join(f"<tr><th>{label}</th><td>{_fmt(stats[key], key)}</td></tr>"
                      for key, label in FIGURES if key in stats)
    step_rows = "".join(
        f"<tr><td>{s.step}</td><td>{len(s.tokens)}</td><td>{s.n_drafted}</td><td>{s.n_accepted}</td>"
        f"<td>{s.t_decode_s * 1000:.2f}</td><td class='text'>{html.escape(''.join(t.text for t in s.tokens))}</td></tr>"
        for s in _steps(trace))
    plots = "".join(
        f'<figure><img alt="{html.escape(caption)}" src="data:image/png;base64,{base64.b64encode(png).decode()}">'
        f"<figcaption>{html.escape(caption)}</figcaption></figure>"
        for caption, png in (images or {}).items())
    finish = html.escape(final.finish_reason) if final is not None else "did not finish"
    title = f"SpecDec Studio run report — {trace.title}"
    body = f"""<h1>{html.escape(title)}</h1>
<p class="meta">Recorded {html.escape(str(trace.header.get('created', '?')))} with SpecDec Studio
{html.escape(str(trace.header.get('app', '')))} · finished: {finish}</p>
<h2>Prompt</h2>
<div class="prompt">{html.escape(started.prompt_text)}</div>
<h2>Output</h2>
<p class="legend">{_legend()}</p>
<div class="output" id="output">{_coloured_tokens(trace)}</div>
<h2>Figures</h2>
<table id="figures">{figures}</table>
<h2>Settings</h2>
<table id="settings">{settings}</table>
<h2>Model</h2>
<table id="model">{model_rows}</table>
<h2>Plots</h2>
<div id="plots">{plots or '<p>No plots were exported with this report.</p>'}</div>
<h2>Steps</h2>
<table id="steps"><tr><th>step</th><th>tokens</th><th>drafted</th><th>accepted</th><th>decode (ms)</th><th>text</th></tr>
{step_rows}</table>"""
    return _page(title, body)


def _fmt(value, key: str) -> str:
    if key == "accept_rate":
        return f"{100 * float(value):.1f} %"
    if isinstance(value, float):
        return f"{value:.3f}"
    return html.escape(str(value))


def _page(title: str, body: str) -> str:
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 60em; margin: 2em auto; padding: 0 1em; line-height: 1.5; }}
.legend .swatch {{ margin-right: 1.5em; }}
.prompt {{ white-space: pre-wrap; font-family: ui-monospace, monospace; color: #666; background: #f4f5f7;
           padding: .6em .9em; border-radius: 8px; }}
.output {{ white-space: pre-wrap; font-family: ui-monospace, monospace; padding: .6em .9em; }}
table {{ border-collapse: collapse; margin: .5em 0; }}
th, td {{ text-align: left; padding: .15em .8em .15em 0; vertical-align: top; }}
td.text {{ white-space: pre-wrap; font-family: ui-monospace, monospace; }}
figure {{ display: inline-block; margin: .5em 1em .5em 0; }}
figure img {{ max-width: 100%; border: 1px solid #ddd; }}
.meta {{ color: #777; font-size: .9em; }}
</style></head><body>
{body}
</body></html>
"""

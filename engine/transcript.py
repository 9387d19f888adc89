"""A conversation as a document: Markdown, or a standalone HTML page with each generated token
coloured by where it came from and a legend. Works from the saved view alone (no model needed)."""

from __future__ import annotations

import html
import time

from engine.conversation import ConversationView, MessageView

# The same meaning (and colours) as the app's token stream.
SOURCE_STYLES = {
    "sampled": ("sampled by the target", ""),
    "accepted_ngram": ("accepted from an n-gram", "color:#0a8fa8;font-weight:600"),
    "accepted_draft": ("accepted from the draft", "color:#2e9d4f;font-weight:600"),
    "rejected": ("rejected draft (tried, not kept)", "color:#9a9a9a;text-decoration:line-through"),
}
ROLE_NAMES = {"system": "System", "user": "You", "assistant": "Assistant"}


def _figures_line(m: MessageView) -> str:
    f = dict(m.figures)
    if "n_predict" not in f:
        return ""
    parts = [str(f.get("mode", "")), f"{f['n_predict']} tokens", f"{f.get('tokens_per_second', 0.0):.1f} tok/s",
             f"{f.get('tokens_per_step', 0.0):.2f} tokens/step"]
    if f.get("n_drafted"):
        parts.append(f"accepted {f['n_accept']}/{f['n_drafted']}")
    if "n_prompt_reused" in f:
        parts.append(f"prompt {f['n_prompt']} ({f['n_prompt_reused']} reused)")
    return " · ".join(p for p in parts if p)


def _state_note(m: MessageView) -> str:
    if m.state == "interrupted":
        return "interrupted"
    if m.finish_reason in ("length", "context_full"):
        return {"length": "stopped at the token limit", "context_full": "the context filled up"}[m.finish_reason]
    return ""


def to_markdown(view: ConversationView) -> str:
    lines = [f"# {view.title}", ""]
    for m in view.messages:
        heading = f"**{ROLE_NAMES.get(m.role, m.role)}**"
        if m.dropped:
            heading += " _(no longer in the model's context)_"
        lines += [heading, "", m.content.rstrip(), ""]
        notes = [n for n in (_figures_line(m), _state_note(m)) if n]
        if notes:
            lines += [f"<sub>{' · '.join(notes)}</sub>", ""]
    return "\n".join(lines).rstrip() + "\n"


def _assistant_html(m: MessageView) -> str:
    if not m.pieces:
        return html.escape(m.content)
    out = []
    for piece in m.pieces:
        text, source = str(piece[0]), str(piece[1])
        style = SOURCE_STYLES.get(source, ("", ""))[1]
        step = piece[2] if len(piece) > 2 else ""
        token = html.escape(text)
        out.append(f'<span style="{style}" title="step {step} · {html.escape(source)}">{token}</span>' if style
                   else f'<span title="step {step}">{token}</span>')
    return "".join(out)


def to_html(view: ConversationView) -> str:
    legend = "".join(f'<span style="{style or "color:inherit"}">{html.escape(label)}</span>'
                     for label, style in SOURCE_STYLES.values())
    body = []
    for m in view.messages:
        cls = f"msg {m.role}" + (" dropped" if m.dropped else "")
        content = _assistant_html(m) if m.role == "assistant" else html.escape(m.content)
        notes = " · ".join(n for n in (_figures_line(m), _state_note(m)) if n)
        dropped = '<div class="note">no longer in the model\'s context</div>' if m.dropped else ""
        body.append(f'<div class="{cls}"><div class="role">{ROLE_NAMES.get(m.role, m.role)}</div>'
                    f'<div class="text">{content}</div>{dropped}'
                    + (f'<div class="note">{html.escape(notes)}</div>' if notes else "") + "</div>")
    when = time.strftime("%Y-%m-%d %H:%M")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(view.title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 52em; margin: 2em auto; padding: 0 1em; line-height: 1.5; }}
.legend span {{ margin-right: 1.5em; }}
.msg {{ margin: 1em 0; padding: .6em .9em; border-radius: 8px; background: #f4f5f7; }}
.msg.user {{ background: #e8f0fe; }}
.msg.dropped {{ opacity: .5; }}
.role {{ font-weight: 600; font-size: .85em; color: #555; }}
.text {{ white-space: pre-wrap; font-family: ui-monospace, monospace; }}
.note {{ font-size: .8em; color: #777; font-style: italic; }}
</style></head><body>
<h1>{html.escape(view.title)}</h1>
<p class="legend">{legend}</p>
{"".join(body)}
<p class="note">Exported from SpecDec Studio on {when}.</p>
</body></html>
"""

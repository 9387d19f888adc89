"""A conversation as a document: Markdown, or a standalone HTML page with each generated token
coloured by where it came from and a legend. Works from the saved view alone (no model needed)."""

from __future__ import annotations

import html
import time

from markupsafe import Markup

from specdec_studio.engine.chat.conversation import ConversationView, MessageView
from specdec_studio.engine.records.html_pages import render
from specdec_studio.engine.records.markdown_html import render_coloured

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
        parts.append(f"accepted {f.get('n_accept', 0)}/{f['n_drafted']}")
    if "n_prompt_reused" in f and "n_prompt" in f:
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


def _pieces(m: MessageView) -> list[dict] | None:
    """An answer's tokens with their colours and tooltips; None for a message shown as plain text."""
    if m.role != "assistant" or not m.pieces:
        return None
    out = []
    for piece in m.pieces:
        source = str(piece[1])
        step = piece[2] if len(piece) > 2 else ""
        style = SOURCE_STYLES.get(source, ("", ""))[1]
        out.append({"text": str(piece[0]), "style": style,
                    "title": f"step {step} · {source}" if style else f"step {step}"})
    return out


def _rendered(m: MessageView):
    """A finished answer's Markdown rendered as HTML with its tokens' colours; None otherwise."""
    pieces = _pieces(m)
    if pieces is None or m.state == "streaming":
        return None
    kept = [
        p for p, piece in zip(pieces, m.pieces) if str(piece[1]) != "rejected"
    ]  # a rejected draft is not the answer
    # every value escaped for an attribute (a title carries a piece's step and source, which a
    # crafted file may have made markup)
    attributes = [
        " ".join(f'{name}="{html.escape(str(p[name]), quote=True)}"' for name in ("style", "title") if p[name])
        for p in kept
    ]
    return Markup(render_coloured([p["text"] for p in kept], attributes))


def to_html(view: ConversationView) -> str:
    messages = [{"role": m.role, "role_name": ROLE_NAMES.get(m.role, m.role), "dropped": m.dropped,
                 "content": m.content, "pieces": _pieces(m), "rendered": _rendered(m),
                 "notes": " · ".join(n for n in (_figures_line(m), _state_note(m)) if n)}
                for m in view.messages]
    return render("conversation", title=view.title, messages=messages,
                  legend=[(label, style or "color:inherit") for label, style in SOURCE_STYLES.values()],
                  exported=time.strftime("%Y-%m-%d %H:%M"))

"""A token's explanation as the stream's tooltip shows it: who proposed it, the target's top tokens
beside the proposer's, and verification's verdict in numbers (from
:class:`engine.events.Explanation`, live or from a replayed trace)."""

from __future__ import annotations

from html import escape

from specdec_studio.engine.events import Explanation
from specdec_studio.engine.strategies.explain import proposer_name, shown, verdict


def _cell(text: str, style: str = "") -> str:
    return f"<td style='padding: 0 6px; {style}'>{text}</td>"


def top_table(why: Explanation, colours: dict[str, str | None]) -> str:
    """The target's top tokens (p) beside the proposer's probability of each (q) where a draft
    model or MTP head proposed; the chosen token in bold, the proposal in the accepted or rejected
    colour."""
    q_of = {t: q for t, _, q in why.proposer_top}
    draft_q = bool(why.proposer_top)
    accepted_colour = colours.get("accepted_draft" if why.proposer in ("draft", "mtp") else "accepted_ngram") or ""
    rejected_colour = colours.get("rejected") or ""
    head = _cell("<b>target p</b>", "text-align: right") + _cell("<b>token</b>")
    if draft_q:
        head += _cell(f"<b>{escape(proposer_name(why.proposer))} q</b>", "text-align: right")
    rows = [f"<tr>{head}</tr>"]
    listed = {t for t, _, _ in why.top}
    entries = list(why.top)
    if draft_q:  # the proposer's own top tokens that the target ranks below its top 8
        entries += [(t, text, None) for t, text, _ in why.proposer_top if t not in listed]
    for token, text, p in entries:
        label = escape(shown(text))
        style = ""
        if text == why.chosen_text and (p is not None and p == why.p_chosen):
            label = f"<b>{label}</b> ← chosen"
        if token == why.proposed:
            style = f"color: {accepted_colour if why.accepted else rejected_colour};"
            label += " ← proposed"
        row = _cell("" if p is None else f"{p:.3f}", "text-align: right") + _cell(label, style)
        if draft_q:
            row += _cell(f"{q_of[token]:.3f}" if token in q_of else "", "text-align: right")
        rows.append(f"<tr>{row}</tr>")
    return "<table cellspacing='0'>" + "".join(rows) + "</table>"


def tooltip_html(head: str, why: Explanation | None, colours: dict[str, str | None], *,
                 ghost: str = "", proposer: str = "") -> str:
    """The whole tooltip: ``head`` (step, source, id), then the explanation if the run made one.

    ``ghost``: the text of a rejected proposal the stream shows struck out; its explanation is
    that of the token that replaced the step's first rejected proposal."""
    parts = [f"<p style='white-space: pre'>{escape(head)}</p>"]
    if ghost and why is not None and ghost != why.proposed_text:
        parts.append(f"<p>Never compared: the proposal before it, {escape(shown(why.proposed_text))}, was "
                     f"rejected, so nothing after it could be kept.</p>")
        return "".join(parts)
    if why is None:
        if proposer:
            parts.append(f"<p>proposed by {escape(proposer_name(proposer))}</p>")
        parts.append("<p><i>This run did not record why (older trace, or a run that did not explain).</i></p>")
        return "".join(parts)
    parts.append(top_table(why, colours))
    if why.matched:
        parts.append(f"<p>{escape(proposer_name(why.proposer))} continued "
                     f"<code>{escape(shown(why.matched))}</code>, seen earlier</p>")
    parts.append(f"<p>{escape(verdict(why, rejected_ghost=bool(ghost)))}</p>")
    return "".join(parts)

"""A run as the window shows it: the user's text, the answer's coloured tokens and figures, and
the figures' one line. Qt-free: the stream's drawing of it is app/widgets/transcript.py."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Turn:
    """A run being shown: the user's text and the answer's coloured tokens and figures."""

    user: str
    chat: bool
    mode: str = "plain"
    # text, source, step, id, step acceptance, proposer (Auto's source of an accepted token, or ""),
    # why (the token's Explanation, or None)
    runs: list[tuple] = field(default_factory=list)
    stats: dict | None = None
    finish: str | None = None
    text: str = ""


def figures_line(mode: str, stats: dict, finish: str | None) -> str:
    """A run's figures in one line; a figure a saved message lacks is left out, never guessed."""
    parts = [mode, f"{stats['n_predict']} tokens"]
    if "tokens_per_second" in stats:
        parts.append(f"{stats['tokens_per_second']:.1f} tok/s")
    if "tokens_per_step" in stats:
        parts.append(f"{stats['tokens_per_step']:.2f} tokens/step")
    if stats.get("n_drafted"):
        parts.append(f"accepted {stats.get('n_accept', 0)}/{stats['n_drafted']}")
    if stats.get("n_prompt_reused") and "n_prompt" in stats:
        parts.append(f"prompt {stats['n_prompt']} ({stats['n_prompt_reused']} reused)")
    return "[" + " · ".join(p for p in parts if p) + (f" · {finish}]" if finish else "]")

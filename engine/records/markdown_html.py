"""Markdown rendered with each token's colour where its text lands, for the exported pages.

markdown-it-py (CommonMark, a maintained port of markdown-it) renders the answer, with raw HTML
off (an answer's ``<script>`` is text, never markup), images shown as their reference (an answer
never makes a page load a file) and GitHub's tables on. The rendered text is
the source without its markup, so each visible character is matched back to the source character
it shows (difflib's matching blocks, which never cross) and so to the token that wrote it; the app
maps its own Qt rendering onto tokens with the same functions.
"""

from __future__ import annotations

import difflib
import html
import re
from dataclasses import dataclass

import numpy as np

_TAG = re.compile(r"(<[^>]*>)")


@dataclass(frozen=True)
class Run:
    """Rendered characters [start, end) that show the text of token ``piece``."""

    start: int
    end: int
    piece: int


def source_owner(texts: list[str]) -> np.ndarray:
    """For each character of the joined texts, the index of the text it belongs to."""
    lengths = np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))
    return np.repeat(np.arange(len(texts), dtype=np.int64), lengths)


def rendered_owner(source: str, rendered: str, owner: np.ndarray) -> np.ndarray:
    """For each character of ``rendered``, the piece whose source character it shows (-1 for
    characters the renderer made up: list markers, block and table boundaries)."""
    out = np.full(len(rendered), -1, dtype=np.int64)
    matcher = difflib.SequenceMatcher(None, source, rendered, autojunk=False)
    for a, b, size in matcher.get_matching_blocks():
        if size:
            out[b:b + size] = owner[a:a + size]
    return out


def runs_of(owner: np.ndarray) -> list[Run]:
    """Maximal stretches of one owner (owners of -1 left out)."""
    return [Run(start, end, piece) for start, end, piece in _stretches(owner) if piece >= 0]


def render_coloured(texts: list[str], attributes: list[str]) -> str:
    """HTML of the joined ``texts`` rendered as Markdown, the visible characters of each text
    wrapped in ``<span ATTRIBUTES>`` (its ``attributes`` entry, already escaped; "" for none)."""
    from markdown_it import MarkdownIt

    source = "".join(texts)
    renderer = MarkdownIt("commonmark", {"html": False}).enable("table")
    renderer.add_render_rule("image", _image_as_text)
    rendered = renderer.render(source)
    parts = _TAG.split(rendered)  # tags at odd indexes, escaped text between them
    visible = [html.unescape(part) if i % 2 == 0 else "" for i, part in enumerate(parts)]
    owner = rendered_owner(source, "".join(visible), source_owner(texts))
    out, at = [], 0
    for i, part in enumerate(parts):
        if i % 2 == 1:
            out.append(part)
            continue
        text = visible[i]
        for start, end, piece in _stretches(owner[at:at + len(text)]):
            chunk = html.escape(text[start:end], quote=False)
            attrs = attributes[piece] if piece >= 0 else ""
            out.append(f"<span {attrs}>{chunk}</span>" if attrs else chunk)
        at += len(text)
    return "".join(out)


def image_reference(alt: str, src: str) -> str:
    """How an answer's image shows: as the reference it is, never loaded (the window does the same)."""
    return f"![{alt}]({src})"


def _image_as_text(_renderer, tokens, idx, _options, _env) -> str:
    token = tokens[idx]
    alt = "".join(child.content for child in token.children or ())
    return html.escape(image_reference(alt, str(token.attrGet("src") or "")), quote=False)


def _stretches(owner: np.ndarray) -> list[tuple[int, int, int]]:
    """Every maximal stretch of one owner, unowned ones (-1) included."""
    if owner.size == 0:
        return []
    edges = np.flatnonzero(np.diff(owner)) + 1
    starts = np.concatenate([[0], edges])
    ends = np.concatenate([edges, [owner.size]])
    return [(int(s), int(e), int(owner[s])) for s, e in zip(starts, ends)]

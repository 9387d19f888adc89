"""Markdown rendered with each token's colour where its text lands, for the exported pages.

markdown-it-py (CommonMark, a maintained port of markdown-it) renders the answer, with raw HTML
off (an answer's ``<script>`` is text, never markup), images shown as their reference (an answer
never makes a page load a file) and GitHub's tables on. The rendered text is
the source without its markup, so each visible character is matched back to the source character
it shows and so to the token that wrote it; the app maps its own Qt rendering onto tokens with the
same functions.

The matching walks both texts once, in order (:func:`rendered_owner`): a character that shows the
next source character takes its owner; otherwise the next few rendered characters decide whether
the renderer replaced a character (a line break shown as a space), made one up (a paragraph
boundary) or left markup out (``**``, a fence's first line, a link's target), which is skipped by
finding them in the next ``REACH`` source characters. Each step costs at most one bounded search,
so an answer costs time in proportion to its length: difflib's matching blocks, used before, grew
with the square of it (tests/bench/markdown_matching.py: 0.8-0.9 s for one 5,460-character answer,
against 1.6-1.8 ms, on every redraw).
"""

from __future__ import annotations

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


ANCHOR = 4  # rendered characters that must match for a jump over markup (or a made-up one) to count
STRIDE = 32  # characters of a matching stretch compared at once
REACH = 512  # source characters searched for them: longer than any markup a renderer drops at once
CELL_REACH = 160  # for an anchor a block or cell boundary cut short
NEAR = 16  # a shorter anchor is looked for this close only: short markup ("**", "`", "](") cut the long one
# what Qt's raw text puts between blocks, table cells and rows and for objects: never in a source
_MADE_UP = frozenset("\u2028\u2029\ufdd0\ufdd1\ufffc")


def rendered_owner(source: str, rendered: str, owner: np.ndarray) -> np.ndarray:
    """For each character of ``rendered``, the piece whose source character it shows (-1 for
    characters the renderer made up: list markers, block and table boundaries). Matches never
    cross: the source characters matched are in the rendered order."""
    out = np.full(len(rendered), -1, dtype=np.int64)
    n_source, n_rendered = len(source), len(rendered)
    i = j = 0  # the next source and rendered characters
    while i < n_source and j < n_rendered:
        c = rendered[j]
        if source[i] == c:  # a contiguous stretch, matched as one slice
            k = 1
            while source[i + k:i + k + STRIDE] == rendered[j + k:j + k + STRIDE] and i + k + STRIDE <= n_source:
                k += STRIDE  # compared STRIDE characters at a time, in C
            while i + k < n_source and j + k < n_rendered and source[i + k] == rendered[j + k]:
                k += 1
            out[j:j + k] = owner[i:i + k]
            i += k
            j += k
            continue
        if c in _MADE_UP:
            j += 1
            continue
        ahead = _anchor(rendered, j + 1)
        if ahead and source.startswith(ahead, i + 1):  # the character shown another way ("\n" as " ")
            i += 1
            j += 1
        elif ahead and source.startswith(ahead, i):  # a character the renderer made up
            j += 1
        else:
            here = _anchor(rendered, j)
            if len(here) == ANCHOR:
                found = source.find(here, i + 1, i + 1 + REACH)
            else:  # a short table cell or line: all of it, past the table's rule row at most
                found = source.find(here, i + 1, i + 1 + (CELL_REACH if len(here) > 1 else NEAR))
            if found < 0 and len(here) > 2:  # short markup may cut the anchor ("**0th** part"): nearer
                found = source.find(here[:3], i + 1, i + 1 + NEAR)
                if found < 0:
                    found = source.find(here[:2], i + 1, i + 1 + NEAR)
            if found >= 0:  # markup left out: the source goes on at ``found``
                i = found
            else:  # nothing near shows it: made up
                j += 1
    return out


def _anchor(rendered: str, j: int) -> str:
    """Up to ANCHOR rendered characters from ``j``, cut before the first made-up one."""
    ahead = rendered[j:j + ANCHOR]
    for k, c in enumerate(ahead):
        if c in _MADE_UP:
            return ahead[:k]
    return ahead


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

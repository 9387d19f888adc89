"""The README is the front door and docs/ the rest: every link between them resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path) -> set[str]:
    """GitHub's anchors for a page's headings: lower case, punctuation dropped, spaces as dashes."""
    found = set()
    for heading in re.findall(r"^#+ (.+)$", page.read_text(), flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        found.add(slug)
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_link_resolves(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        resolved = (page.parent / path).resolve() if path else page
        assert resolved.exists(), f"{page.name} links to {target}, which does not exist"
        if anchor:
            assert anchor in anchors(resolved), f"{page.name} links to #{anchor}, not a heading of {resolved.name}"


def test_the_readme_is_read_in_a_minute():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    assert "make run" in text and "make test" in text  # the two commands, first
    assert text.count("](resources/screenshots/") >= 3
    for page in ("user-guide", "cli", "tuning", "architecture", "packaging"):
        assert f"(docs/{page}.md)" in text

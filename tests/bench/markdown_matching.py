"""Matching a rendered answer's characters to its tokens: the bounded pass the window uses
(engine.records.markdown_html.rendered_owner) against difflib's matching blocks (what it used
before), on Markdown answers of 1, 4 and 10 sections (headings, links, lists, a table, code, a
quote, an image) rendered by Qt. Prints each one's time and how many owners the two agree on."""

from __future__ import annotations

import difflib
import os
import time

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

import _common  # noqa: E402,F401 - the checkout on the path, for the test's corpus
import numpy as np  # noqa: E402

from specdec_studio.app.qt import QtGui, QtWidgets  # noqa: E402
from specdec_studio.engine.records.markdown_html import rendered_owner, source_owner  # noqa: E402
from tests.app.test_long_chat import SECTION, _pieces  # noqa: E402


def difflib_owner(source: str, rendered: str, owner: np.ndarray) -> np.ndarray:
    out = np.full(len(rendered), -1, dtype=np.int64)
    for a, b, size in difflib.SequenceMatcher(None, source, rendered, autojunk=False).get_matching_blocks():
        out[b:b + size] = owner[a:a + size]
    return out


def main() -> None:
    _app = QtWidgets.QApplication([])
    features = QtGui.QTextDocument.MarkdownFeature
    for n_sections in (1, 4, 10):
        text = "".join(SECTION.format(n=n) for n in range(n_sections))
        owner = source_owner([piece[0] for piece in _pieces(text)])
        doc = QtGui.QTextDocument()
        doc.setMarkdown(text, features.MarkdownDialectGitHub | features.MarkdownNoHTML)
        rendered = doc.toRawText()
        t0 = time.perf_counter()
        before = difflib_owner(text, rendered, owner)
        t1 = time.perf_counter()
        ours = rendered_owner(text, rendered, owner)
        t2 = time.perf_counter()
        print(f"{len(text):6d} characters: difflib {1e3 * (t1 - t0):8.1f} ms, bounded pass {1e3 * (t2 - t1):6.2f} ms, "
              f"owners agree {np.mean(before == ours):.4f}")


if __name__ == "__main__":
    main()

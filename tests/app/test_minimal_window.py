"""The window streams a real plain completion from the engine thread."""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")

from app.main_window import MainWindow  # noqa: E402


@pytest.fixture
def window(qtbot):
    win = MainWindow("default")
    qtbot.addWidget(win)
    qtbot.waitUntil(lambda: win.model_loaded, timeout=30_000)
    yield win
    win.close()


def test_plain_run_streams_into_the_window(window, qtbot):
    window.chat_check.setChecked(False)
    window.prompt_edit.setPlainText("The capital of France is")
    window.max_tokens.setValue(24)
    window.start_run()
    qtbot.waitUntil(lambda: not window.running, timeout=30_000)
    text = window.stream.toPlainText()
    assert text.strip()
    assert "24 tokens" in window.figures_label.text()
    assert all(src == "sampled" for _, src in window.stream.sources_in_document())


def test_bad_model_shows_error_and_window_stays_usable(window, qtbot, tmp_path):
    bogus = tmp_path / "broken.gguf"
    bogus.write_bytes(b"GGUF" + b"\0" * 64)
    window.load_model(str(bogus))
    qtbot.waitUntil(lambda: "broken.gguf" in window.error_label.text(), timeout=30_000)
    window.load_model("default")
    qtbot.waitUntil(lambda: window.model_loaded, timeout=30_000)
    assert window.run_button.isEnabled()

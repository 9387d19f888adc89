"""Known models a click away: the model bar lists the ones not on disk with their sizes, a choice
asks for the download (then the load), a known target offers its paired draft, and Stop ends a
download keeping nothing. No test downloads: the pair is 1.6 GB (``-m pair`` runs on the real
files)."""

from __future__ import annotations

import threading

import pytest


@pytest.fixture
def empty_model_cache(tmp_path, monkeypatch):
    folder = tmp_path / "models"
    folder.mkdir()
    monkeypatch.setenv("SPECDEC_MODELS", str(folder))
    return folder


def test_the_model_bar_offers_every_known_model_not_on_disk(qtbot, empty_model_cache):
    from specdec_studio.app.widgets.model_picker import DOWNLOAD, ModelBar

    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.set_models([], [], None)
    labels = {bar.target.itemData(i): bar.target.itemText(i) for i in range(bar.target.count())}
    assert labels[DOWNLOAD + "coder"] == "Download coder (1.1 GB)"
    assert labels[DOWNLOAD + "coder-draft"] == "Download coder-draft (491 MB)"
    assert labels[DOWNLOAD + "default"] == "Download default (98 MB)"
    asked = []
    bar.download_requested.connect(lambda key, as_draft: asked.append((key, as_draft)))
    bar._target_chosen(bar.target.findData(DOWNLOAD + "coder"))
    assert asked == [("coder", False)]


def test_a_known_target_offers_its_draft_first(qtbot, empty_model_cache):
    from specdec_studio.app.widgets.model_picker import DOWNLOAD, ModelBar
    from specdec_studio.app.window_models import _suggested_draft

    coder = empty_model_cache / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"
    assert _suggested_draft(str(coder)) == ("coder-draft", None, 491_400_064)
    assert _suggested_draft(str(empty_model_cache / "SmolLM2-135M-Instruct.Q4_1.gguf")) is None  # no paired draft
    bar = ModelBar()
    qtbot.addWidget(bar)
    bar.set_draft_candidates([], None, _suggested_draft(str(coder)))
    assert bar.draft.itemText(1) == "Download coder-draft, its draft (491 MB)"
    assert bar.draft_candidates() == []  # a download is not a draft yet
    asked = []
    bar.download_requested.connect(lambda key, as_draft: asked.append((key, as_draft)))
    bar._draft_chosen(1)
    assert asked == [("coder-draft", True)]
    # once on disk it is listed first, named as the target's draft
    draft = empty_model_cache / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    draft.write_bytes(b"GGUF")
    bar.set_draft_candidates([("/elsewhere/other.gguf", None), (str(draft), None)], None, _suggested_draft(str(coder)))
    assert bar.draft.itemText(1).endswith("— its draft") and bar.draft.itemData(1) == str(draft)
    assert not any(bar.draft.itemData(i).startswith(DOWNLOAD) for i in range(bar.draft.count()))


def test_stop_ends_a_download_and_keeps_nothing(empty_model_cache):
    from specdec_studio.engine.models import catalog

    stop = threading.Event()
    stop.set()  # pressed before the first part: nothing is fetched, nothing is left
    with pytest.raises(catalog.FetchStopped, match="the download of coder was stopped; nothing was kept"):
        catalog.fetch("coder", log=lambda _m: None, cancel=stop)
    # no model and no partial file; the lock file the download took stays (unlinking a lock file
    # another process may be waiting on would let two downloads run)
    assert [p.name for p in empty_model_cache.iterdir()] in ([], [".qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.lock"])


def test_a_stopped_download_leaves_the_window_usable(window, qtbot, monkeypatch):
    from specdec_studio.engine.models import catalog

    def stopped(key, **_kwargs):
        raise catalog.FetchStopped(f"the download of {key} was stopped; nothing was kept")

    monkeypatch.setattr(catalog, "fetch", stopped)
    window.download_model("coder")
    assert window.loading and window.input.stop.isEnabled()
    qtbot.waitUntil(lambda: not window.loading, timeout=10_000)
    assert window.model_loaded  # the model loaded before stays
    assert window.error_label.text() == "the download of coder was stopped; nothing was kept"
    assert window.statusBar().currentMessage().startswith("Not downloaded — the previous model stays loaded")
    assert window.input.run.isEnabled()
    assert window.model_bar.target.currentData() == window.model_path  # not the entry that failed
    # a draft's download leaves the target usable meanwhile, and Stop is offered for it
    window.download_model("coder-draft", as_draft=True)
    assert not window.loading and window.input.stop.isEnabled()
    qtbot.waitUntil(lambda: window.downloading is None, timeout=10_000)
    assert window.model_loaded and window.draft_path is None and not window.input.stop.isEnabled()

